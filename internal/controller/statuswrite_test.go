package controller

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
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

// A catch-up write yields to a run whose model answered: a run that waits
// on its model asks to be back, when its deferred status is due, below
// every other reconcile, so a run whose answer came in after that status
// was due is still reconciled first. A catch-up due when something else
// brings the run back at a set time keeps that return's priority.
func TestCatchUp_yieldsToARunWhoseModelAnswered(t *testing.T) {
	r := &AgentRunReconciler{Config: Config{StatusInterval: time.Second}}
	now := time.Now()
	due := r.catchUp(ctrl.Result{}, &deferred{since: now.Add(-2 * time.Second)}, now)
	if due.Priority == nil || *due.Priority != handler.LowPriority || due.RequeueAfter != time.Millisecond {
		t.Fatalf("a catch-up already due returns %+v; want back at once, at low priority", due)
	}
	if later := r.catchUp(ctrl.Result{}, &deferred{since: now}, now); later.RequeueAfter != time.Second || later.Priority == nil {
		t.Fatalf("a catch-up due in 1 s returns %+v; want back in 1 s, at low priority", later)
	}
	timed := r.catchUp(ctrl.Result{RequeueAfter: 30 * time.Second}, &deferred{since: now}, now)
	if timed.Priority != nil || timed.RequeueAfter != time.Second {
		t.Fatalf("a catch-up before a retry due in 30 s returns %+v; want back in 1 s, at the reconcile's priority", timed)
	}

	// What the controller does with those results, in the queue it uses.
	q := priorityqueue.New[reconcile.Request]("catch-up-test")
	defer q.ShutDown()
	waiting := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "waits-on-its-model"}}
	answered := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "its-model-answered"}}
	q.AddWithOpts(priorityqueue.AddOpts{After: due.RequeueAfter, Priority: due.Priority}, waiting)
	NewWithT(t).Eventually(q.Len, 5*time.Second, time.Millisecond).Should(Equal(1)) // the catch-up is due
	q.Add(answered)                                                                 // the tracker's wake-up
	if first, _ := q.Get(); first != answered {
		t.Fatalf("the worker took %s first; want the run whose model answered", first.Name)
	}
}

// A status the API server spells otherwise (a raw checkpoint with its keys
// in another order) is the same status, and keeps its number; a status
// with anything changed is not.
func TestSameStatus_comparesStatusAsJSONKeyOrderAside(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC))
	base := v1alpha1.AgentRunStatus{Phase: v1alpha1.PhaseRunning, Turn: 3, StartTime: &at,
		Checkpoint: &runtime.RawExtension{Raw: []byte(`{"turn":3,"calls":[{"id":"t3-c1","name":"lookup"}]}`)}}
	respelled := *base.DeepCopy()
	respelled.Checkpoint = &runtime.RawExtension{Raw: []byte(`{"calls":[{"name":"lookup","id":"t3-c1"}],"turn":3}`)}
	nanos := *base.DeepCopy()
	nanos.StartTime = &metav1.Time{Time: at.Add(123 * time.Millisecond)} // JSON keeps seconds
	if !sameStatus(&base, &respelled) {
		t.Error("a checkpoint with its keys in another order counts as a change")
	}
	if !sameStatus(&base, &nanos) {
		t.Error("a start time that differs below the second, which JSON does not write, counts as a change")
	}
	for name, change := range map[string]func(*v1alpha1.AgentRunStatus){
		"turn":       func(s *v1alpha1.AgentRunStatus) { s.Turn = 4 },
		"checkpoint": func(s *v1alpha1.AgentRunStatus) { s.Checkpoint.Raw = []byte(`{"turn":4,"calls":[]}`) },
		"phase":      func(s *v1alpha1.AgentRunStatus) { s.Phase = v1alpha1.PhaseSucceeded },
	} {
		changed := *base.DeepCopy()
		change(&changed)
		if sameStatus(&base, &changed) {
			t.Errorf("a status with another %s counts as the same", name)
		}
	}
}
