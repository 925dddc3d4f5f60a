package controller

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// statusVerbs records how the operator writes the status of the AgentRuns
// of one namespace: "update" (the whole status under a resourceVersion)
// or "patch".
type statusVerbs struct {
	ns    string
	mu    sync.Mutex
	verbs map[string]int
}

func (v *statusVerbs) wrap(c client.Client, _ func()) client.Client {
	return verbClient{Client: c, v: v}
}

func (v *statusVerbs) count(verb string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.verbs[verb]
}

func (v *statusVerbs) note(o client.Object, verb string) {
	if _, ok := o.(*v1alpha1.AgentRun); !ok || o.GetNamespace() != v.ns {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.verbs == nil {
		v.verbs = map[string]int{}
	}
	v.verbs[verb]++
}

type verbClient struct {
	client.Client
	v *statusVerbs
}

func (c verbClient) Status() client.SubResourceWriter {
	return verbStatus{SubResourceWriter: c.Client.Status(), v: c.v}
}

type verbStatus struct {
	client.SubResourceWriter
	v *statusVerbs
}

func (s verbStatus) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	s.v.note(o, "patch")
	return s.SubResourceWriter.Patch(ctx, o, p, opts...)
}

func (s verbStatus) Update(ctx context.Context, o client.Object, opts ...client.SubResourceUpdateOption) error {
	s.v.note(o, "update")
	return s.SubResourceWriter.Update(ctx, o, opts...)
}

// A running run's status is written whole, under the resourceVersion the
// operator read (PUT agentruns/status), not as a merge patch the API
// server applies to the stored object: the same write for less of the API
// server's CPU (docs/scale.md). It keeps what another writer set meanwhile:
// an annotation made while the run waits on its model makes the next
// write a conflict, read again, and the annotation and its writer's
// managedFields entry stay; the operator's entry covers status alone.
func TestStatus_aWriteIsTheWholeStatusUnderTheVersionRead(t *testing.T) {
	ns := namespace(t)
	verbs := &statusVerbs{ns: ns}
	b := makeRun(ns, "put").readTool("lookup").
		calls("lookup", `{"q":1}`).calls("lookup", `{"q":2}`).answer("done")
	model := &blockingModel{Scripted: loop.Scripted{Entries: scriptOf(b)}, hold: 2, entered: make(chan struct{}), release: make(chan struct{})}
	startWith(t, &kits{tools: newTools(), model: model}, managerSetup{wrap: verbs.wrap, config: statusAtEverySave})
	run := b.create(t)
	await(t, model.entered, 20*time.Second, "turn 2 never started")
	body := []byte(`{"metadata":{"annotations":{"example.com/reviewed":"yes"}}}`)
	if err := k8sClient.Patch(context.Background(), run.DeepCopy(), client.RawPatch("application/merge-patch+json", body),
		client.FieldOwner("reviewer")); err != nil {
		t.Fatal(err)
	}
	close(model.release)
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")

	if n := verbs.count("patch"); n != 0 {
		t.Fatalf("%d status writes were merge patches; want every one a whole status under the version read", n)
	}
	if n := verbs.count("update"); n < 3 {
		t.Fatalf("%d status writes; want at least 3 (the start, the turns, the end)", n)
	}
	cur := &v1alpha1.AgentRun{}
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(run), cur); err != nil {
		t.Fatal(err)
	}
	if cur.Annotations["example.com/reviewed"] != "yes" {
		t.Fatalf("annotations %v: the reviewer's annotation is gone", cur.Annotations)
	}
	reviewer := false
	for _, m := range cur.ManagedFields {
		fields := ""
		if m.FieldsV1 != nil {
			fields = m.FieldsV1.GetRawString()
		}
		switch {
		case m.Manager == "reviewer":
			reviewer = strings.Contains(fields, "example.com/reviewed")
		case m.Subresource == "status" && (strings.Contains(fields, `"f:spec"`) || strings.Contains(fields, `"f:metadata"`)):
			t.Fatalf("the status writer %q claims more than status: %s", m.Manager, fields)
		}
	}
	if !reviewer {
		t.Fatalf("the reviewer's managedFields entry is gone: %+v", cur.ManagedFields)
	}
}
