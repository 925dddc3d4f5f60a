// Package scoped runs the operator installed for one namespace only, as
// the chart's watchNamespaces installs it: its ServiceAccount holds the
// generated rules (config/rbac/role.yaml) as a Role in that namespace, and
// cluster-wide only the reads of AgentRunPolicies and namespaces
// (config/rbac/platform_reader_role.yaml); it runs with --watch-namespaces.
package scoped

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/operator"
	"github.com/agentrun/agentrun/internal/testenv"
)

func TestNamespaceScopedOperator_drivesItsNamespaceWithRolesOnly(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	g := NewWithT(t)
	env, cfg, err := testenv.Start("--authorization-mode=RBAC")
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// The generated rules, granted as a Role in team-a only.
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var generated rbacv1.ClusterRole
	if err := yaml.Unmarshal(raw, &generated); err != nil {
		t.Fatal(err)
	}
	// The platform policies' reader, as the chart grants it in every mode.
	readerObjs, err := testenv.ReadObjects(filepath.Join(root, "config", "rbac", "platform_reader_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var reader rbacv1.ClusterRole
	for _, o := range readerObjs {
		if o.GetKind() == "ClusterRole" {
			raw, _ := o.MarshalJSON()
			if err := yaml.Unmarshal(raw, &reader); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(reader.Rules) == 0 {
		t.Fatal("config/rbac/platform_reader_role.yaml has no ClusterRole rules")
	}
	reader.ObjectMeta = metav1.ObjectMeta{Name: "agentrun-platform-reader"}
	for _, o := range []client.Object{
		&reader,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agentrun-platform-reader"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "agentrun-platform-reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "agentrun", Namespace: "agentrun-system"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agentrun-system"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "agentrun-manager", Namespace: "team-a"}, Rules: generated.Rules},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agentrun-manager", Namespace: "team-a"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "agentrun-manager"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "agentrun", Namespace: "agentrun-system"}}},
		// The keys that seal runs' state, in the operator's own namespace,
		// as the chart's state-keys Role grants them.
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "agentrun-state-keys", Namespace: "agentrun-system"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"agentrun-state-keys"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"agentrun-state-keys-public"}, Verbs: []string{"get", "update"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agentrun-state-keys", Namespace: "agentrun-system"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "agentrun-state-keys"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "agentrun", Namespace: "agentrun-system"}}},
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	// The operator acts as its ServiceAccount.
	opCfg := rest.CopyConfig(cfg)
	opCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:agentrun-system:agentrun"}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- operator.Run(runCtx, opCfg, operator.Options{OperatorImage: "example.com/agentrun:test", Workers: 2,
			MetricsAddr: "0", ProbeAddr: "0", WatchNamespaces: []string{"team-a"}, KeysSecret: "agentrun-system/agentrun-state-keys"})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	})

	run := func(ns string) *v1alpha1.AgentRun {
		r := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hello"}, Spec: v1alpha1.AgentRunSpec{
			AgentSpec: v1alpha1.AgentSpec{
				Goal: "Say hello.", Budget: v1alpha1.BudgetSpec{MaxTurns: 2},
				Model: v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted}, Script: []v1alpha1.ScriptStep{{Content: "hello"}}},
			},
		}}
		if err := admin.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	outcome := func(r *v1alpha1.AgentRun) func() string {
		return func() string {
			got := &v1alpha1.AgentRun{}
			if err := admin.Get(ctx, client.ObjectKeyFromObject(r), got); err != nil {
				return fmt.Sprint(err)
			}
			return string(got.Status.Outcome) + got.Status.Reason
		}
	}
	other := run("team-b")
	mine := run("team-a")
	g.Eventually(outcome(mine), 30*time.Second, 50*time.Millisecond).Should(HavePrefix(string(v1alpha1.OutcomeCompleted)),
		"the run in the watched namespace, driven with the Role's rights only")
	// The operator has finished a run in team-a; the one in team-b, created
	// before it, is not its to drive.
	g.Consistently(outcome(other), 2*time.Second, 100*time.Millisecond).Should(BeEmpty(), "a run outside the watched namespaces")
	// With the state-keys Role alone it publishes its public keys there.
	g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: "agentrun-system", Name: "agentrun-state-keys-public"}, &corev1.ConfigMap{})).
		To(Succeed(), "the operator's public keys, published with the state-keys Role's rights")
}
