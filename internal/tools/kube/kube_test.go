package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/testenv"
)

// These tests run against envtest: a real kube-apiserver (authorizing with
// RBAC) and etcd. The test's own client is an administrator; the tools
// impersonate service accounts that the tests grant narrow roles.
var (
	restCfg   *rest.Config
	k8sClient client.Client
	mapper    meta.RESTMapper
)

const ns = "billing"

func TestMain(m *testing.M) {
	// RBAC is what impersonated requests are judged by; the tests say so
	// rather than rely on envtest's default.
	os.Exit(testenv.Main(m, func(_ *envtest.Environment, cfg *rest.Config) (func() error, error) {
		restCfg = cfg
		var err error
		if k8sClient, err = client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme}); err != nil {
			return nil, err
		}
		if mapper, err = NewMapper(cfg); err != nil {
			return nil, err
		}
		if err := seed(context.Background()); err != nil {
			return nil, fmt.Errorf("seeding the namespace: %w", err)
		}
		return nil, nil
	}, "--authorization-mode=RBAC"))
}

// seed creates the namespace, its objects, and three service accounts:
// reader (get and list ConfigMaps only), watcher (list events) and
// keeper (get Secrets, which the tools refuse anyway).
func seed(ctx context.Context) error {
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "billing-settings", Namespace: ns,
				Labels: map[string]string{"app": "billing"},
				Annotations: map[string]string{
					lastApplied:     `{"apiVersion":"v1","kind":"ConfigMap","data":{"currency":"EUR"}}`,
					"owner.example": "payments-team",
				}},
			Data: map[string]string{"currency": "EUR"},
		},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns}, Data: map[string]string{"x": "y"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "stripe", Namespace: ns}, StringData: map[string]string{"key": "sk_live_do_not_leak"}},
		&corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "billing-settings.1", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Name: "billing-settings", Namespace: ns, APIVersion: "v1"},
			Reason:         "Updated", Message: "currency changed to EUR", Type: corev1.EventTypeNormal, Count: 2,
			FirstTimestamp: metav1.NewTime(time.Date(2025, 8, 1, 10, 0, 0, 0, time.UTC)),
			LastTimestamp:  metav1.NewTime(time.Date(2025, 8, 2, 10, 0, 0, 0, time.UTC)),
			Source:         corev1.EventSource{Component: "billing-operator"},
		},
		&corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "worker.1", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "worker", Namespace: ns, APIVersion: "v1"},
			Reason:         "BackOff", Message: "Back-off restarting failed container", Type: corev1.EventTypeWarning, Count: 7,
			FirstTimestamp: metav1.NewTime(time.Date(2025, 8, 3, 10, 0, 0, 0, time.UTC)),
			LastTimestamp:  metav1.NewTime(time.Date(2025, 8, 3, 11, 0, 0, 0, time.UTC)),
			Source:         corev1.EventSource{Component: "kubelet"},
		},
	}
	objs = append(objs, grant("reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}})...)
	objs = append(objs, grant("watcher", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}})...)
	objs = append(objs, grant("keeper", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}})...)
	for _, o := range objs {
		if err := k8sClient.Create(ctx, o); err != nil {
			return fmt.Errorf("%T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// grant makes a service account bound to a Role with one rule.
func grant(sa string, rule rbacv1.PolicyRule) []client.Object {
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}, Rules: []rbacv1.PolicyRule{rule}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: sa},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
		},
	}
}

func toolbox(t *testing.T, sa string) *Toolbox {
	t.Helper()
	tb, err := New(Config{Base: restCfg, Mapper: mapper, Namespace: ns, ServiceAccountName: sa, Tools: map[string]Builtin{
		"get_object": Get, "list_objects": List, "recent_events": Events,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func call(t *testing.T, tb *Toolbox, tool, args string) loop.Result {
	t.Helper()
	return tb.Execute(context.Background(), loop.Invocation{
		CallID: "t1-c1", Tool: tool, Arguments: json.RawMessage(args),
		Timeout: 10 * time.Second, MaxResultBytes: 16384,
	})
}

func TestGet_readsConfigMapCompactly(t *testing.T) {
	res := call(t, toolbox(t, "reader"), "get_object", `{"apiVersion":"v1","kind":"ConfigMap","name":"billing-settings"}`)
	if res.Failure != nil {
		t.Fatalf("failure: %+v", res.Failure)
	}
	var got struct {
		Kind     string
		Data     map[string]string
		Metadata map[string]any
	}
	if err := json.Unmarshal(res.Output, &got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != "ConfigMap" || got.Data["currency"] != "EUR" {
		t.Errorf("got %s with data %v, want the ConfigMap's data", got.Kind, got.Data)
	}
	if _, ok := got.Metadata["managedFields"]; ok {
		t.Error("metadata.managedFields was kept")
	}
	wantAnn := map[string]any{"owner.example": "payments-team"}
	if diff := cmp.Diff(wantAnn, got.Metadata["annotations"]); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if res.ContentType != "application/json" || res.Size != int64(len(res.Output)) || res.Truncated {
		t.Errorf("content type %q, size %d of %d bytes, truncated %v", res.ContentType, res.Size, len(res.Output), res.Truncated)
	}
}

func TestList_filtersByLabelAndAcceptsResourceNames(t *testing.T) {
	res := call(t, toolbox(t, "reader"), "list_objects", `{"apiVersion":"v1","kind":"configmaps","labelSelector":"app=billing"}`)
	if res.Failure != nil {
		t.Fatalf("failure: %+v", res.Failure)
	}
	var got struct {
		Kind  string
		Items []struct {
			Metadata struct {
				Name          string
				ManagedFields []any
			}
		}
	}
	if err := json.Unmarshal(res.Output, &got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != "ConfigMapList" || len(got.Items) != 1 || got.Items[0].Metadata.Name != "billing-settings" || got.Items[0].Metadata.ManagedFields != nil {
		t.Errorf("got %s", res.Output)
	}
}

func TestList_podsForbiddenForTheServiceAccount(t *testing.T) {
	res := call(t, toolbox(t, "reader"), "list_objects", `{"apiVersion":"v1","kind":"Pod"}`)
	want := &loop.Failure{Kind: loop.FailHTTP, Code: 403, Detail: "the service account reader may not list pods in billing"}
	if diff := cmp.Diff(want, res.Failure); diff != "" {
		t.Errorf("failure (-want +got):\n%s", diff)
	}
	if res.Output != nil {
		t.Errorf("output %q on a refused call", res.Output)
	}
}

func TestGet_secretRefusedEvenWhenRBACAllows(t *testing.T) {
	for _, args := range []string{
		`{"apiVersion":"v1","kind":"Secret","name":"stripe"}`,
		`{"apiVersion":"v1","kind":"secrets","name":"stripe"}`,
	} {
		res := call(t, toolbox(t, "keeper"), "get_object", args)
		if res.Failure == nil || res.Failure.Kind != loop.FailInvalid || !strings.Contains(res.Failure.Detail, "Secrets cannot be read") {
			t.Errorf("%s: failure %+v, want InvalidCall refusing Secrets", args, res.Failure)
		}
		if strings.Contains(string(res.Output), "sk_live") {
			t.Errorf("%s: the secret's value leaked: %s", args, res.Output)
		}
	}
	res := call(t, toolbox(t, "keeper"), "list_objects", `{"apiVersion":"v1","kind":"Secret"}`)
	if res.Failure == nil || res.Failure.Kind != loop.FailInvalid {
		t.Errorf("list Secrets: failure %+v, want InvalidCall", res.Failure)
	}
}

func TestEvents_aboutOneObjectAndForbiddenWithoutGrant(t *testing.T) {
	res := call(t, toolbox(t, "watcher"), "recent_events", `{"name":"billing-settings","kind":"ConfigMap"}`)
	if res.Failure != nil {
		t.Fatalf("failure: %+v", res.Failure)
	}
	want := `{"events":[{"time":"2025-08-02T10:00:00Z","type":"Normal","reason":"Updated","object":"ConfigMap/billing-settings","message":"currency changed to EUR","count":2}]}`
	if diff := cmp.Diff(want, string(res.Output)); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}

	all := call(t, toolbox(t, "watcher"), "recent_events", `{}`)
	var got struct{ Events []event }
	if err := json.Unmarshal(all.Output, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != 2 || got.Events[1].Reason != "BackOff" {
		t.Errorf("all events, oldest first: %s", all.Output)
	}

	denied := call(t, toolbox(t, "reader"), "recent_events", `{}`)
	if denied.Failure == nil || denied.Failure.Code != 403 || denied.Failure.Detail != "the service account reader may not list events in billing" {
		t.Errorf("failure %+v, want 403 for reader", denied.Failure)
	}
}

func TestExecute_invalidCalls(t *testing.T) {
	tb := toolbox(t, "reader")
	tests := []struct {
		name, tool, args string
		kind             loop.FailureKind
		code             int
		detail           string
	}{
		{"not found", "get_object", `{"apiVersion":"v1","kind":"ConfigMap","name":"nope"}`, loop.FailHTTP, 404, `configmaps "nope" not found in namespace billing`},
		{"cluster-scoped", "get_object", `{"apiVersion":"v1","kind":"Namespace","name":"billing"}`, loop.FailInvalid, 0, `Namespace is cluster-scoped; these tools read only the run's namespace "billing"`},
		{"unknown kind", "get_object", `{"apiVersion":"v1","kind":"Gizmo","name":"x"}`, loop.FailInvalid, 0, `the cluster serves no kind "Gizmo" in v1`},
		{"other namespace", "get_object", `{"apiVersion":"v1","kind":"ConfigMap","name":"x","namespace":"kube-system"}`, loop.FailInvalid, 0, `this tool reads only the run's namespace "billing"`},
		{"other namespace listed", "list_objects", `{"apiVersion":"v1","kind":"ConfigMap","namespace":"kube-system"}`, loop.FailInvalid, 0, `this tool reads only the run's namespace "billing"`},
		{"other namespace's events", "recent_events", `{"namespace":"kube-system"}`, loop.FailInvalid, 0, `this tool reads only the run's namespace "billing"`},
		{"missing name", "get_object", `{"apiVersion":"v1","kind":"ConfigMap"}`, loop.FailInvalid, 0, "name is required"},
		{"bad selector", "list_objects", `{"apiVersion":"v1","kind":"ConfigMap","labelSelector":"app in ("}`, loop.FailInvalid, 0, ""},
		{"unknown argument", "list_objects", `{"apiVersion":"v1","kind":"ConfigMap","fieldSelector":"x"}`, loop.FailInvalid, 0, ""},
		{"unknown tool", "delete_everything", `{}`, loop.FailInvalid, 0, `no builtin tool named "delete_everything"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := call(t, tb, tt.tool, tt.args)
			if res.Failure == nil {
				t.Fatalf("no failure; output %s", res.Output)
			}
			if res.Failure.Kind != tt.kind || res.Failure.Code != tt.code || (tt.detail != "" && res.Failure.Detail != tt.detail) {
				t.Errorf("failure %+v, want %s %d %q", res.Failure, tt.kind, tt.code, tt.detail)
			}
		})
	}
}

func TestExecute_boundsTheOutput(t *testing.T) {
	res := toolbox(t, "reader").Execute(context.Background(), loop.Invocation{
		CallID: "t1-c1", Tool: "list_objects", Arguments: json.RawMessage(`{"apiVersion":"v1","kind":"ConfigMap"}`),
		Timeout: 10 * time.Second, MaxResultBytes: 40,
	})
	if res.Failure != nil || len(res.Output) != 41 || !res.Truncated || res.Size <= 41 {
		t.Errorf("output %d bytes, size %d, truncated %v; want 41 bytes kept of more", len(res.Output), res.Size, res.Truncated)
	}
}
