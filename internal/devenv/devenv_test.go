package devenv

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kubescheme"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// startEnv starts the local control plane and operator of make dev for
// one test, stopped when the test ends (a failure to stop fails it), and
// returns it with a client of its admin.
func startEnv(t *testing.T) (*Env, client.Client) {
	t.Helper()
	env, err := Start(filepath.Join(t.TempDir(), "kubeconfig"), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping: %v", err)
		}
	})
	c, err := client.New(env.Config, client.Options{Scheme: kubescheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return env, c
}

// expectChartPolicies checks, on a running local control plane, what
// issue 27 (item 7) asked of make dev: it had the CRDs but not the
// admission policies and roles the chart installs, so anyone with patch
// approved. It has them now: an editor's approval is refused as in a
// cluster. (The demo test calls it: one process runs one operator.)
func expectChartPolicies(t *testing.T, env *Env) {
	t.Helper()
	ctx := context.Background()
	admin, err := client.New(env.Config, client.Options{Scheme: kubescheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "pat-edits", Namespace: "default"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "agentrun-editor"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "pat"}}}
	if err := admin.Create(ctx, rb); err != nil {
		t.Fatalf("the agentrun-editor role is not installed: %v", err)
	}
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "dev-approval", Namespace: "default"},
		Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{
			Goal: "g", Model: v1alpha1.ModelSpec{
				ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
				Script:        []v1alpha1.ScriptStep{{Content: "done"}},
			}, Budget: v1alpha1.BudgetSpec{MaxTurns: 1},
		}}}
	// The CRD may not be served yet right after the start.
	NewWithT(t).Eventually(func() error { return admin.Create(ctx, run) }, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "pat"}
	pat, err := client.New(cfg, client.Options{Scheme: kubescheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The API server enforces a new policy within moments of its create;
	// each try answers another call, so that none repeats an answer an
	// earlier try set before the policy was enforced.
	try := 0
	NewWithT(t).Eventually(func() string {
		try++
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			v1alpha1.ApprovalAnnotationPrefix + fmt.Sprintf("t%d-c1", try): "approve"}}})
		err := pat.Patch(ctx, run.DeepCopy(), client.RawPatch("application/merge-patch+json", body))
		if err == nil {
			return "admitted"
		}
		return err.Error()
	}, 30*time.Second, 100*time.Millisecond).Should(ContainSubstring(`needs the verb "approve"`))
}
