package crd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// created creates the manifest as written and reads it back into obj as
// the API server stored it (defaults applied). Either failing fails the
// test.
func created[T client.Object](ctx context.Context, t *testing.T, manifest string, obj T) T {
	t.Helper()
	u, err := create(ctx, manifest)
	if err != nil {
		t.Fatalf("The API server rejected the manifest: %v", err)
	}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(u), obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// expectCreate creates the manifest. With no wantErr the API server must
// accept it; otherwise it must refuse it with an error that says every
// part of wantErr.
func expectCreate(ctx context.Context, t *testing.T, manifest string, wantErr []string) {
	t.Helper()
	_, err := create(ctx, manifest)
	switch {
	case len(wantErr) == 0 && err != nil:
		t.Fatalf("The API server rejected a valid manifest: %v", err)
	case len(wantErr) > 0 && err == nil:
		t.Fatalf("The API server accepted the manifest; want an error saying %q", wantErr)
	}
	for _, w := range wantErr {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("The error does not say %q:\n%v", w, err)
		}
	}
}

// columns reads one object of resource in the test's namespace as `kubectl
// get` does (a Table) and returns the cells of the columns of priority
// by the columns' names: 0 are the default columns, 1 those -o wide adds.
func columns(ctx context.Context, t *testing.T, resource, name string, priority int32) map[string]any {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	body, err := dc.RESTClient().Get().AbsPath("/apis/agents.agentrun.dev/v1alpha1/namespaces", namespaceOf(ctx), resource, name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil || len(table.Rows) != 1 {
		t.Fatalf("table %s: %v", body, err)
	}
	out := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		if c.Priority == priority {
			out[c.Name] = table.Rows[0].Cells[i]
		}
	}
	return out
}

// manifest is a manifest of kind named name whose spec is spec (YAML
// indented two spaces).
func manifest(kind, name, spec string) string {
	return `
apiVersion: agents.agentrun.dev/v1alpha1
kind: ` + kind + `
metadata: {name: ` + name + `}
spec:
` + spec
}

// namedRun is the head of an AgentRun manifest up to its spec; %s is
// its name. The manifests of the tests go on with the spec's lines.
const namedRun = `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: %s
spec:
`

// specCase is a run whose manifest takes spec, lines of its spec, and
// what the API server must say of it: wantErr are parts of the message
// a person should see; none means the manifest is valid.
type specCase struct {
	name    string
	spec    string
	wantErr []string
}

// expectCreates creates the run of each case in parallel, made from
// manifest (%s its name, prefix-i; %s the case's spec lines), and wants
// what the case says.
func expectCreates(t *testing.T, manifest, prefix string, cases []specCase) {
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			expectCreate(testContext(t), t, fmt.Sprintf(manifest, fmt.Sprintf("%s-%d", prefix, i), tc.spec), tc.wantErr)
		})
	}
}

// expectEditsRefused creates a run of manifest for each patch (%s its
// name, prefix-edit-i; %s the spec lines) and wants the patch refused as
// a change of the spec.
func expectEditsRefused(t *testing.T, manifest, prefix, lines string, patches ...string) {
	for i, patch := range patches {
		t.Run(patch, func(t *testing.T) {
			t.Parallel()
			expectPatchRefused(testContext(t), t, fmt.Sprintf(manifest, fmt.Sprintf("%s-edit-%d", prefix, i), lines), patch, specChangeRefused)
		})
	}
}

// specChangeRefused is what the API server says when a run's spec is
// edited after creation.
const specChangeRefused = "the spec of an AgentRun cannot change once created"

// expectPatchRefused creates the manifest, then applies a merge patch to
// it, which the API server must refuse with an error that says want.
func expectPatchRefused(ctx context.Context, t *testing.T, manifest, patch, want string) {
	t.Helper()
	obj, err := create(ctx, manifest)
	if err != nil {
		t.Fatalf("Cannot create the run to edit: %v", err)
	}
	err = k8sClient.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)))
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("The API server did not refuse %s: %v", patch, err)
	}
}
