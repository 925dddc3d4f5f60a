package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/tools/job"
	"github.com/agentrun/agentrun/internal/transcript"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// hookClient lets a test act before and after each write the operator
// makes: inject a conflict, refuse a write, or crash the operator.
type hookClient struct {
	client.Client
	// before runs first; an error refuses the write.
	before func(ctx context.Context, op string, obj client.Object) error
	after  func(op string, obj client.Object, err error)
}

func (c hookClient) do(ctx context.Context, op string, obj client.Object, write func() error) error {
	if c.before != nil {
		if err := c.before(ctx, op, obj); err != nil {
			return err
		}
	}
	err := write()
	if c.after != nil {
		c.after(op, obj, err)
	}
	return err
}

func (c hookClient) Create(ctx context.Context, o client.Object, opts ...client.CreateOption) error {
	return c.do(ctx, "create", o, func() error { return c.Client.Create(ctx, o, opts...) })
}

func (c hookClient) Delete(ctx context.Context, o client.Object, opts ...client.DeleteOption) error {
	return c.do(ctx, "delete", o, func() error { return c.Client.Delete(ctx, o, opts...) })
}

func (c hookClient) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.PatchOption) error {
	return c.do(ctx, "patch", o, func() error { return c.Client.Patch(ctx, o, p, opts...) })
}

func (c hookClient) Update(ctx context.Context, o client.Object, opts ...client.UpdateOption) error {
	return c.do(ctx, "update", o, func() error { return c.Client.Update(ctx, o, opts...) })
}

func (c hookClient) Status() client.SubResourceWriter {
	return hookStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type hookStatus struct {
	client.SubResourceWriter
	c hookClient
}

func (s hookStatus) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.c.do(ctx, "status", o, func() error { return s.SubResourceWriter.Patch(ctx, o, p, opts...) })
}

func (s hookStatus) Update(ctx context.Context, o client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.c.do(ctx, "status", o, func() error { return s.SubResourceWriter.Update(ctx, o, opts...) })
}

// countingModel counts the model calls made and the tokens they used.
type countingModel struct {
	inner  loop.Model
	calls  atomic.Int64
	tokens atomic.Int64
}

func (m *countingModel) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err() // a stopped operator calls no model
	}
	m.calls.Add(1)
	r, err := m.inner.Complete(ctx, req)
	if r != nil {
		m.tokens.Add(r.Usage.InputTokens + r.Usage.OutputTokens)
	}
	return r, err
}

func toolMessages(msgs []loop.Message) (n, bytes int) {
	for _, m := range msgs {
		if m.Role == loop.RoleTool {
			n++
			bytes += len(m.Content)
		}
	}
	return n, bytes
}

func readTranscript(t *testing.T, run *v1alpha1.AgentRun) []loop.Message {
	t.Helper()
	msgs, err := transcript.Read(context.Background(), k8sClient, run)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// Issue 10.1: seven reads of 250 KB each used to be lost to a status write
// refused for size, and dispatched again for ever.
func TestPersist_anOversizedBatchIsCutAndEachReadRunsOnce(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	tb.funcs["dump"] = func(_ context.Context, inv loop.Invocation) loop.Result {
		return loop.Result{Output: []byte(strings.Repeat("x", 250_000))}
	}
	startManager(t, &kits{tools: tb})
	b := makeRun(ns, "oversized").budget(func(b *v1alpha1.BudgetSpec) { b.MaxTokens = ptr64(5_000_000) }).with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "dump", MaxResultBytes: ptr32(262144), Builtin: v1alpha1.BuiltinTool("kubernetes.get")})
	})
	var calls []string
	for i := range 7 {
		calls = append(calls, "dump", `{"part":`+string(rune('0'+i))+`}`)
	}
	run := b.calls(calls...).answer("summarised").create(t)
	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 2")
	for i := 1; i <= 7; i++ {
		if n := tb.counts()["t1-c"+string(rune('0'+i))+":dump"]; n != 1 {
			t.Fatalf("read %d ran %d times: %v", i, n, tb.counts())
		}
	}
	msgs := readTranscript(t, done)
	n, size := toolMessages(msgs)
	if n != 7 || size > maxBatchBytes+7*100 || !strings.Contains(msgs[1].Content, "[result cut at") {
		t.Fatalf("%d tool messages of %d bytes in all; first ends %q", n, size, msgs[1].Content[max(0, len(msgs[1].Content)-60):])
	}
	if done.Status.Usage.Turns != 2 {
		t.Fatalf("turns paid = %d", done.Status.Usage.Turns)
	}
}

// Issue 10.1: a status write refused for size is never answered by running
// the tools again: the run ends Error, with what it spent.
func TestPersist_aStatusWriteRefusedForSizeEndsTheRunWithoutRerunningTools(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	b := makeRun(ns, "too-large").readTool("lookup").calls("lookup", `{"q":1}`).answer("done")
	startWith(t, &kits{tools: tb}, managerSetup{config: statusAtEverySave, wrap: func(c client.Client, _ func()) client.Client {
		return hookClient{Client: c, before: func(_ context.Context, op string, obj client.Object) error {
			run, ok := obj.(*v1alpha1.AgentRun)
			if ok && op == "status" && run.Status.Outcome == "" && run.Status.Usage != nil && run.Status.Usage.ToolCalls > 0 {
				return apierrors.NewRequestEntityTooLargeError("limit is 3145728")
			}
			return nil
		}}
	}})
	run := b.create(t)
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeError, "the run's status cannot be saved")
	if diff := cmp.Diff(map[string]int{"t1-c1:lookup": 1}, tb.counts()); diff != "" {
		t.Fatalf("executions (-want +got):\n%s", diff)
	}
	if u := done.Status.Usage; u.Turns != 1 || u.ToolCalls != 1 {
		t.Fatalf("usage = %+v, want the model call and the read charged", u)
	}
}

// Issue 10.2: a run name over 63 characters, or results over 1 MiB once
// JSON-escaped, used to make every chunk write fail and every reconcile
// charge a "lost" model call that was never made.
func TestPersist_longNamesAndResultsThatGrowWhenEscapedAreSavedAndChargedOnce(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	tb.funcs["html"] = func(_ context.Context, inv loop.Invocation) loop.Result {
		return loop.Result{Output: []byte(strings.Repeat(`<"&>`, 60_000)), ContentType: "text/plain"}
	}
	model := &countingModel{}
	name := strings.Repeat("a-long-run-name-", 6) + "end"
	b := makeRun(ns, name).budget(func(b *v1alpha1.BudgetSpec) { b.MaxTokens = ptr64(5_000_000) }).with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "html", MaxResultBytes: ptr32(262144), Builtin: v1alpha1.BuiltinTool("kubernetes.get")})
	}).calls("html", `{"p":1}`, "html", `{"p":2}`, "html", `{"p":3}`, "html", `{"p":4}`).answer("done")
	model.inner = &loop.Scripted{Entries: scriptOf(b)}
	startManager(t, &kits{tools: tb, model: model})
	run := b.create(t)
	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 2")
	if done.Status.Usage.Turns != 2 || model.calls.Load() != 2 {
		t.Fatalf("turns paid = %d for %d model calls", done.Status.Usage.Turns, model.calls.Load())
	}
	if want := int64(1000 + 20 + 1200 + 30); done.Status.Usage.InputTokens+done.Status.Usage.OutputTokens != want {
		t.Fatalf("tokens paid = %d, want %d", done.Status.Usage.InputTokens+done.Status.Usage.OutputTokens, want)
	}
	msgs := readTranscript(t, done)
	if len(msgs) != 6 {
		t.Fatalf("transcript has %d messages", len(msgs))
	}
}

// Issue 10.2: a chunk write that fails is an error with a condition and an
// event, retried, and never charged as a lost call.
func TestPersist_aFailingChunkWriteChargesNothing(t *testing.T) {
	ns := namespace(t)
	var failing atomic.Bool
	failing.Store(true)
	model := &countingModel{}
	b := makeRun(ns, "flaky-secrets").readTool("lookup").calls("lookup", `{"q":1}`).calls("lookup", `{"q":2}`).answer("done")
	model.inner = &loop.Scripted{Entries: scriptOf(b)}
	_, _ = startReconciler(t, &kits{tools: newTools(), model: model}, 0, func(c client.Client, _ func()) client.Client {
		return hookClient{Client: c, before: func(_ context.Context, op string, obj client.Object) error {
			if _, ok := obj.(*corev1.Secret); ok && op == "create" && failing.Load() {
				return apierrors.NewServiceUnavailable("etcd is busy")
			}
			return nil
		}}
	})
	run := b.create(t)
	g := NewWithT(t)
	g.Eventually(func() string {
		c := apimeta.FindStatusCondition(get(t, run).Status.Conditions, v1alpha1.ConditionSaved)
		if c == nil {
			return ""
		}
		return string(c.Status) + " " + c.Reason + ": " + c.Message
	}, 10*time.Second, 20*time.Millisecond).Should(HavePrefix("False PersistFailed: Saving the transcript failed; retrying"))
	g.Eventually(func() []string { return eventReasons(t, ns, run.Name) }, 10*time.Second, 50*time.Millisecond).
		Should(ContainElement("PersistFailed"))
	failing.Store(false)
	done := waitOutcome(t, run, 60*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 3")
	if done.Status.Usage.Turns != 3 || model.calls.Load() != 3 {
		t.Fatalf("turns paid = %d for %d model calls", done.Status.Usage.Turns, model.calls.Load())
	}
	if len(readTranscript(t, done)) != 5 {
		t.Fatalf("the transcript is not whole")
	}
	if c := apimeta.FindStatusCondition(done.Status.Conditions, v1alpha1.ConditionSaved); c != nil {
		t.Fatalf("the Saved condition outlived the failure: %+v", c)
	}
}

// eventsAbout lists the events of ns about the object named name, of
// kind when kind is not empty.
func eventsAbout(t testing.TB, ns, kind, name string) []eventsv1.Event {
	t.Helper()
	evs := &eventsv1.EventList{}
	if err := k8sClient.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
		t.Logf("listing the events of %s: %v", ns, err)
		return nil // the callers poll
	}
	var out []eventsv1.Event
	for _, e := range evs.Items {
		if e.Regarding.Name == name && (kind == "" || e.Regarding.Kind == kind) {
			out = append(out, e)
		}
	}
	return out
}

// eventReasons are the reasons of the events about the object named name.
func eventReasons(t *testing.T, ns, name string) []string {
	t.Helper()
	var reasons []string
	for _, e := range eventsAbout(t, ns, "", name) {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// eventNotes are the notes of the events of type typ (any, when empty)
// and reason about the object of kind and name.
func eventNotes(t *testing.T, ns, kind, name, typ, reason string) []string {
	t.Helper()
	var out []string
	for _, e := range eventsAbout(t, ns, kind, name) {
		if e.Reason == reason && (typ == "" || e.Type == typ) {
			out = append(out, e.Note)
		}
	}
	return out
}

// conflictEveryOtherPatch makes every other status patch conflict: someone
// annotates the run just before it.
func conflictEveryOtherPatch(conflicts *atomic.Int64) func(client.Client, func()) client.Client {
	return func(c client.Client, _ func()) client.Client {
		var n atomic.Int64
		return hookClient{Client: c, before: func(ctx context.Context, op string, obj client.Object) error {
			run, ok := obj.(*v1alpha1.AgentRun)
			if op != "status" || !ok || n.Add(1)%2 == 0 {
				return nil
			}
			conflicts.Add(1)
			body := []byte(`{"metadata":{"annotations":{"example.com/touched":"` + time.Now().Format(time.RFC3339Nano) + `"}}}`)
			return k8sClient.Patch(ctx, &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: run.Namespace}},
				client.RawPatch("application/merge-patch+json", body))
		}}
	}
}

// Issue 10.3: a status patch that conflicts used to drop the finished model
// reply or tool results: the model was paid twice, a refund reported as
// unknown.
func TestPersist_aConflictingPatchKeepsTheFinishedWork(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	model := &countingModel{}
	b := makeRun(ns, "conflicts").readTool("lookup").with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "refund", Mutates: ref(true), Reversible: ref(true),
			HTTP: &v1alpha1.HTTPTool{URL: "http://billing.invalid/refund", Method: "POST"}})
	}).calls("lookup", `{"q":1}`).calls("refund", `{"amount":1}`).answer("refunded")
	model.inner = &loop.Scripted{Entries: scriptOf(b)}
	var conflicts atomic.Int64
	startWith(t, &kits{tools: tb, model: model}, managerSetup{config: statusAtEverySave, wrap: conflictEveryOtherPatch(&conflicts)})
	run := b.create(t)
	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 3")
	if conflicts.Load() < 3 {
		t.Fatalf("only %d conflicts were injected", conflicts.Load())
	}
	if done.Status.Usage.Turns != 3 || model.calls.Load() != 3 {
		t.Fatalf("turns paid = %d for %d model calls", done.Status.Usage.Turns, model.calls.Load())
	}
	if diff := cmp.Diff(map[string]int{"t1-c1:lookup": 1, "t2-c1:refund": 1}, tb.counts()); diff != "" {
		t.Fatalf("executions (-want +got):\n%s", diff)
	}
	for _, m := range readTranscript(t, done) {
		if strings.Contains(m.Content, "unknown") {
			t.Fatalf("the model was told an outcome is unknown: %q", m.Content)
		}
	}
}

// jobKits builds runs whose job tools are run by the real Job executor.
type jobKits struct {
	c     client.Client
	model loop.Model
	// wakeups and poll are the executor's Wakeups and PollInterval (50ms
	// when zero).
	wakeups *job.Wakeups
	poll    time.Duration
}

func (k *jobKits) Build(_ context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error) {
	cfg, err := kit.Config(&run.Spec)
	if err != nil {
		return nil, err
	}
	eng, err := loop.New(cfg)
	if err != nil {
		return nil, err
	}
	var tools []job.Tool
	for _, ts := range cfg.Tools {
		tools = append(tools, job.Tool{Name: ts.Name, Image: "example.com/tools:1", Command: []string{ts.Name}, Mutates: ts.Mutates})
	}
	poll := k.poll
	if poll == 0 {
		poll = 50 * time.Millisecond
	}
	ex, err := job.New(job.Config{Client: k.c, Pods: k8sClient, OperatorImage: "example.com/agentrun:1", PollInterval: poll, Wakeups: k.wakeups},
		job.Run{Namespace: run.Namespace, Owner: *metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind("AgentRun"))}, tools)
	if err != nil {
		return nil, err
	}
	return &Kit{Engine: eng, Model: k.model, Tools: ex}, nil
}

// Issue 10.4: a mutating Job tool whose Job is gone after a restart (its
// TTL passed while the operator was down, or a person deleted it) used to
// get a second Job: the refund ran twice.
func TestPersist_aMutatingJobThatIsGoneIsNeverCreatedAgain(t *testing.T) {
	ns := namespace(t)
	b := makeRun(ns, "refund-job").writeTool("refund", true).calls("refund", `{"amount":1}`).answer("checked")
	// Attempts, not successes, are counted: stop() can cancel a create
	// whose Job the API server has already stored, and such a create
	// returns an error although the Job exists.
	var attempts [2]atomic.Int64
	countJobs := func(jk *jobKits, phase int) func(client.Client, func()) client.Client {
		return func(c client.Client, _ func()) client.Client {
			jk.c = hookClient{Client: c, before: func(_ context.Context, op string, obj client.Object) error {
				if _, ok := obj.(*batchv1.Job); ok && op == "create" {
					attempts[phase].Add(1)
				}
				return nil
			}}
			return jk.c
		}
	}
	jk := &jobKits{model: &loop.Scripted{Entries: scriptOf(b)}}
	_, stop := startReconciler(t, jk, 0, countJobs(jk, 0))
	run := b.create(t)
	var jobs batchv1.JobList
	g := NewWithT(t)
	g.Eventually(func() int {
		_ = k8sClient.List(context.Background(), &jobs, client.InNamespace(ns))
		return len(jobs.Items)
	}, 20*time.Second, 20*time.Millisecond).Should(Equal(1))
	if jobs.Items[0].Spec.TTLSecondsAfterFinished != nil {
		t.Fatalf("a mutating call's Job has a TTL: it could vanish before its result is saved")
	}
	stop()
	// The operator was down for longer than any TTL: the Job is gone.
	if err := k8sClient.Delete(context.Background(), &jobs.Items[0], client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	jk2 := &jobKits{model: &loop.Scripted{Entries: scriptOf(b)}}
	startReconciler(t, jk2, 0, countJobs(jk2, 1))
	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 2")
	if n := attempts[0].Load(); n != 1 {
		t.Fatalf("the first operator tried to create %d Jobs for one mutating call", n)
	}
	if n := attempts[1].Load(); n != 0 {
		t.Fatalf("the restarted operator tried to create the gone Job %d more times", n)
	}
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
		t.Fatalf("after the restart: %d Jobs (err %v), want none", len(jobs.Items), err)
	}
	msgs := readTranscript(t, done)
	if !strings.Contains(msgs[1].Content, "whether it took effect is unknown") || !strings.Contains(msgs[1].Content, "not run again") {
		t.Fatalf("observation = %q", msgs[1].Content)
	}
}

// Issue 10.5: a transcript chunk deleted while the operator was down used
// to leave the run AwaitingApproval for ever.
func TestPersist_aDeletedChunkEndsTheRunErrorNamingIt(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	run := makeRun(ns, "lost-chunk").readTool("lookup").writeTool("drop_table", false).
		calls("lookup", `{"q":1}`).calls("drop_table", `{"name":"x"}`).answer("x").create(t)
	stop := startManager(t, &kits{tools: tb})
	NewWithT(t).Eventually(func() int { return len(get(t, run).Status.PendingApprovals) }, 20*time.Second, 20*time.Millisecond).Should(Equal(1))
	stop()
	cur := get(t, run)
	victim := transcript.ChunkName(cur.UID, 0)
	if err := k8sClient.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: victim, Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	startManager(t, &kits{tools: tb})
	done := waitOutcome(t, run, 10*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeError, victim+" (1 of")
	if tb.counts()["t2-c1:drop_table"] != 0 {
		t.Fatalf("the write ran")
	}
}

// clashKits puts a Secret of its own where the run's first chunk would go.
type clashKits struct{ kits }

func (k *clashKits) Build(ctx context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: transcript.ChunkName(run.UID, 0), Namespace: run.Namespace},
		Data: map[string][]byte{"key": []byte("tenant")}}
	if err := k8sClient.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	return k.kits.Build(ctx, run, grant)
}

// Issue 10.6: a run named payments used to replace a tenant's Secret named
// payments-transcript-0000.
func TestPersist_secretsTheRunDoesNotOwnAreLeftAlone(t *testing.T) {
	ns := namespace(t)
	tenant := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "payments-transcript-0000", Namespace: ns},
		Data: map[string][]byte{"key": []byte("tenant")}}
	if err := k8sClient.Create(context.Background(), tenant); err != nil {
		t.Fatal(err)
	}
	stop := startManager(t, &kits{tools: newTools()})
	done := waitOutcome(t, makeRun(ns, "payments").readTool("a").calls("a", `{}`).answer("ok").create(t), 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 2")
	got := &corev1.Secret{}
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tenant), got); err != nil ||
		string(got.Data["key"]) != "tenant" || len(got.OwnerReferences) != 0 {
		t.Fatalf("the tenant's Secret was changed: %+v, %v", got, err)
	}

	stop()
	// A Secret in the way of a chunk is an error; it is never replaced.
	ns2 := namespace(t)
	startManager(t, &clashKits{kits{tools: newTools()}})
	done = waitOutcome(t, makeRun(ns2, "clash").readTool("a").calls("a", `{}`).answer("ok").create(t), 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeError, "does not belong to this run")
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns2, Name: transcript.ChunkName(done.UID, 0)}, got); err != nil ||
		string(got.Data["key"]) != "tenant" {
		t.Fatalf("the Secret in the way was changed: %+v, %v", got, err)
	}
	if done.Status.Usage.Turns != 1 {
		t.Fatalf("the model call that was made is not charged: %+v", done.Status.Usage)
	}
}

// Issue 10.7: runs deleted in the middle of a call used to leave their kit,
// cached transcript and work in the operator.
func TestPersist_deletedAndFinishedRunsAreForgotten(t *testing.T) {
	ns := namespace(t)
	model := &holdAll{entered: make(chan string, 16), release: make(chan struct{})}
	r, _ := startReconciler(t, &kits{tools: newTools(), model: model}, 0, nil)
	var runs []*v1alpha1.AgentRun
	for _, name := range []string{"gone-1", "gone-2", "gone-3", "gone-4", "gone-5"} {
		runs = append(runs, makeRun(ns, name).readTool("a").calls("a", `{}`).answer("x").create(t))
	}
	for range runs {
		await(t, model.entered, 20*time.Second, "not every run reached its model call")
	}
	held := func() map[string]int { return heldFor(r, runs) }
	if h := held(); h["kits"] != 5 || h["work"] != 5 || h["names"] != 5 {
		t.Fatalf("held while calling: %v", h)
	}
	for _, run := range runs {
		if err := k8sClient.Delete(context.Background(), run); err != nil {
			t.Fatal(err)
		}
	}
	empty := map[string]int{"kits": 0, "transcripts": 0, "writes": 0, "names": 0, "work": 0}
	NewWithT(t).Eventually(held, 10*time.Second, 20*time.Millisecond).Should(Equal(empty))

	// A run that finishes is forgotten too.
	close(model.release)
	runs = []*v1alpha1.AgentRun{makeRun(ns, "finishes").readTool("a").calls("a", `{}`).answer("x").create(t)}
	done := waitOutcome(t, runs[0], 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 2")
	NewWithT(t).Eventually(held, 10*time.Second, 20*time.Millisecond).Should(Equal(empty))
}

// heldFor counts what the reconciler holds for these runs, by kind.
func heldFor(r *AgentRunReconciler, runs []*v1alpha1.AgentRun) map[string]int {
	out := map[string]int{"kits": 0, "transcripts": 0, "writes": 0, "names": 0, "work": 0}
	m := r.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	r.work.mu.Lock()
	defer r.work.mu.Unlock()
	for _, run := range runs {
		uid := run.UID
		for kind, ok := range map[string]bool{"kits": m.kits[uid] != nil, "transcripts": m.saves[uid] != nil,
			"writes": m.writes.Has(uid), "work": r.work.items[uid] != nil} {
			if ok {
				out[kind]++
			}
		}
		for _, v := range m.names {
			if v == uid {
				out["names"]++
			}
		}
	}
	return out
}

// holdAll holds every first model call until released.
type holdAll struct {
	entered chan string
	release chan struct{}
}

func (m *holdAll) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	turn := turnOf(req)
	if turn == 1 {
		m.entered <- "in"
		select {
		case <-m.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &loop.Reply{ToolCalls: []loop.ToolCall{{Name: "a", Arguments: json.RawMessage(`{}`)}}, Usage: loop.TokenUsage{InputTokens: 10}}, nil
	}
	return &loop.Reply{Content: "x", Usage: loop.TokenUsage{InputTokens: 10}}, nil
}

// Issue 10.8: tool results and model text used to sit in status.checkpoint,
// readable by anyone allowed to get AgentRuns.
func TestPersist_statusHoldsNoToolResultNorModelText(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	tb.funcs["lookup"] = func(_ context.Context, _ loop.Invocation) loop.Result {
		return loop.Result{Output: []byte(`{"card":"CUSTOMER-4242-PRIVATE"}`)}
	}
	startManager(t, &kits{tools: tb})
	run := makeRun(ns, "private").readTool("lookup").writeTool("refund", false).
		step(v1alpha1.ScriptStep{Content: "MODEL-THINKING-PRIVATE", ToolCalls: []v1alpha1.ScriptToolCall{{Name: "lookup", Arguments: rawJSON(`{"q":1}`)}}}).
		step(v1alpha1.ScriptStep{Content: "MODEL-THINKING-PRIVATE-2", ToolCalls: []v1alpha1.ScriptToolCall{
			{Name: "lookup", Arguments: rawJSON(`{"q":2}`)}, {Name: "refund", Arguments: rawJSON(`{"amount":1}`)}}}).
		answer("Refunded.").create(t)
	leaks := func(r *v1alpha1.AgentRun) string {
		raw, _ := json.Marshal(r.Status)
		for _, secret := range []string{"CUSTOMER-4242", "MODEL-THINKING"} {
			if strings.Contains(string(raw), secret) {
				return secret
			}
		}
		return ""
	}
	g := NewWithT(t)
	g.Eventually(func() string {
		cur := get(t, run)
		if l := leaks(cur); l != "" {
			return "leaked " + l
		}
		return string(cur.Status.Phase)
	}, 20*time.Second, 10*time.Millisecond).Should(Equal(string(v1alpha1.PhaseAwaitingApproval)))
	// The write waits while the turn's read has its result: it is saved,
	// but not in status.
	if l := leaks(get(t, run)); l != "" {
		t.Fatalf("status holds %s", l)
	}
	annotate(t, run, "t2-c2", "approve")
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 3")
	if l := leaks(done); l != "" {
		t.Fatalf("status holds %s", l)
	}
	msgs := readTranscript(t, done)
	all, _ := json.Marshal(msgs)
	if !strings.Contains(string(all), "CUSTOMER-4242-PRIVATE") || !strings.Contains(string(all), "MODEL-THINKING-PRIVATE-2") {
		t.Fatalf("the transcript lacks what status must not hold: %s", all)
	}
}

func rawJSON(s string) *runtime.RawExtension { return &runtime.RawExtension{Raw: []byte(s)} }

func TestBoundResults_aGroupOverTheLimitIsCutToFairSharesOnRuneBoundaries(t *testing.T) {
	small := loop.Result{CallID: "a", Output: []byte("short")}
	big := loop.Result{CallID: "b", Output: []byte(strings.Repeat("é<", 400))}
	bigger := loop.Result{CallID: "c", Output: []byte(strings.Repeat("\"x", 900))}
	const limit = 1000
	got := boundResults([]loop.Result{small, big, bigger}, limit)
	total := 0
	for _, r := range got {
		raw, err := json.Marshal(string(r.Output))
		if err != nil {
			t.Fatal(err)
		}
		total += len(raw) - 2
		if !utf8.Valid(r.Output) {
			t.Errorf("%s: cut inside a rune", r.CallID)
		}
	}
	if total > limit {
		t.Fatalf("the group takes %d bytes as JSON, over the limit of %d", total, limit)
	}
	if string(got[0].Output) != "short" || got[0].Truncated {
		t.Fatalf("a result under its share was cut: %+v", got[0])
	}
	for _, r := range got[1:] {
		if !r.Truncated || r.Size == 0 {
			t.Fatalf("%s: a cut result must say so with its full size: %+v", r.CallID, r)
		}
	}
}

func TestBoundResults_aGroupUnderTheLimitIsKeptWhole(t *testing.T) {
	in := []loop.Result{{CallID: "a", Output: []byte("one")}, {CallID: "b", Output: []byte("two")}}
	got := boundResults(in, 100)
	if string(got[0].Output) != "one" || string(got[1].Output) != "two" || got[0].Truncated || got[1].Truncated {
		t.Fatalf("results under the limit changed: %+v", got)
	}
}

// statusWrites counts the status writes of the AgentRuns of one namespace.
type statusWrites struct{ n atomic.Int64 }

func (w *statusWrites) wrap(ns string) func(client.Client, func()) client.Client {
	return func(c client.Client, _ func()) client.Client {
		return hookClient{Client: c, before: func(_ context.Context, op string, obj client.Object) error {
			if _, ok := obj.(*v1alpha1.AgentRun); ok && op == "status" && obj.GetNamespace() == ns {
				w.n.Add(1)
			}
			return nil
		}}
	}
}

func statusEvery(d time.Duration) func(*Config) {
	return func(c *Config) { c.StatusInterval = d }
}

// Issue 13: a save that changes only a run's progress (its turn, usage and
// checkpoint) puts the checkpoint in its transcript chunk and writes no
// status; status is written when the phase changes. Every save used to be
// a status write: two a turn.
func TestStatus_aRunThatOnlyProgressesWritesStatusWhenItsPhaseChanges(t *testing.T) {
	const turns = 8
	ns := namespace(t)
	var writes statusWrites
	startWith(t, &kits{tools: newTools(), model: lookupModel{n: turns}}, managerSetup{wrap: writes.wrap(ns), config: statusEvery(time.Hour)})
	run := makeRun(ns, "quiet").readTool("lookup").maxTurns(turns).answer("unused").budget(func(b *v1alpha1.BudgetSpec) {
		b.MaxToolCalls = ptr.To(int32(turns))
		b.DefaultToolLimit = ptr.To(int32(turns))
	}).create(t)
	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
	if done.Status.Usage.Turns != turns || done.Status.Usage.ToolCalls != turns-1 {
		t.Fatalf("usage %+v, want %d turns and %d tool calls", done.Status.Usage, turns, turns-1)
	}
	// Pending to Running, and the end (and a retry of either, at most).
	if n := writes.n.Load(); n > 3 {
		t.Fatalf("%d status writes for %d turns, want at most 3: a save that only progresses writes none", n, turns)
	}
	msgs, err := transcript.Read(context.Background(), k8sClient, done)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2*(turns-1)+1 {
		t.Fatalf("transcript has %d messages, want %d", len(msgs), 2*(turns-1)+1)
	}
	var secrets corev1.SecretList
	if err := k8sClient.List(context.Background(), &secrets, client.InNamespace(ns), client.MatchingLabels{transcript.LabelRunUID: string(run.UID)}); err != nil {
		t.Fatal(err)
	}
	if int(done.Status.Transcript.Chunks) != len(secrets.Items) {
		t.Fatalf("status counts %d chunks, %d exist", done.Status.Transcript.Chunks, len(secrets.Items))
	}
}

// While a run waits for its model, the progress its saves left out of
// status reaches status once the interval has passed, with nothing else
// waking the run.
func TestStatus_progressReachesStatusWithinTheInterval(t *testing.T) {
	ns := namespace(t)
	b := makeRun(ns, "catch-up").readTool("lookup").
		calls("lookup", `{"q":1}`).calls("lookup", `{"q":2}`).calls("lookup", `{"q":3}`).answer("done")
	model := &blockingModel{Scripted: loop.Scripted{Entries: scriptOf(b)}, hold: 4, entered: make(chan struct{}), release: make(chan struct{})}
	startWith(t, &kits{tools: newTools(), model: model}, managerSetup{config: statusEvery(300 * time.Millisecond)})
	run := b.create(t)
	await(t, model.entered, 20*time.Second, "turn 4 never started")
	NewWithT(t).Eventually(func() string {
		st := get(t, run).Status
		return fmt.Sprintf("turn %d, %d tool calls", st.Turn, st.Usage.ToolCalls)
	}, 10*time.Second, 20*time.Millisecond).Should(Equal("turn 4, 3 tool calls"))
	close(model.release)
	expectOutcome(t, waitOutcome(t, run, 20*time.Second), v1alpha1.OutcomeCompleted, "turn 4")
}

// An operator that stops while its run's status is turns behind (every
// save since was a chunk with a checkpoint) is followed by one that resumes
// from the newest checkpoint: no tool runs again, only the model call that
// was in flight is made again, and the transcript is whole.
func TestStatus_aRestartResumesFromTheSavesPastTheStoredStatus(t *testing.T) {
	b, tb := threeToolTurns(t, "resume")
	first := heldAtTurn4(b)
	_, stop := startWith(t, &kits{tools: tb, model: first}, managerSetup{config: statusEvery(time.Hour)})
	run := b.create(t)
	await(t, first.entered, 20*time.Second, "turn 4 never started")
	if st := get(t, run).Status; st.Turn != 1 || st.Phase != v1alpha1.PhaseRunning {
		t.Fatalf("status says %s, turn %d, with turn 4 in flight; want Running, turn 1 (the saves since are in chunks)", st.Phase, st.Turn)
	}
	stop()

	second := &countingModel{inner: &loop.Scripted{Entries: scriptOf(b)}}
	startWith(t, &kits{tools: tb, model: second}, managerSetup{config: statusEvery(time.Hour)})
	expectEachCallOnce(t, run, tb, 5) // 4 turns and the call lost in the restart
	if n := second.calls.Load(); n != 1 {
		t.Fatalf("the second operator made %d model calls, want 1 (turn 4's, lost in the restart)", n)
	}
}

// Another write of the run while status is behind its saves (here an
// annotation; a cancel or a status edit is the same) makes the operator
// resume from the saves it reads back, not from its memory of them: the
// run goes on where it was, no tool runs again, spend is counted once.
func TestStatus_aWriteOfTheRunWhileStatusIsBehindLosesNoSave(t *testing.T) {
	b, tb := threeToolTurns(t, "touched")
	model := heldAtTurn4(b)
	startWith(t, &kits{tools: tb, model: model}, managerSetup{config: statusEvery(time.Hour)})
	run := b.create(t)
	await(t, model.entered, 20*time.Second, "turn 4 never started")
	if st := get(t, run).Status; st.Turn != 1 {
		t.Fatalf("status says turn %d with turn 4 in flight; want 1", st.Turn)
	}
	body := []byte(`{"metadata":{"annotations":{"example.com/touched":"yes"}}}`)
	if err := k8sClient.Patch(context.Background(), run.DeepCopy(), client.RawPatch("application/merge-patch+json", body)); err != nil {
		t.Fatal(err)
	}
	close(model.release)
	expectEachCallOnce(t, run, tb, 4)
}

// threeToolTurns is a run of three tool turns (a read, a reversible write,
// a read) and an answer on turn 4, and the tools it calls.
func threeToolTurns(t *testing.T, name string) (*runBuilder, *tools) {
	t.Helper()
	return makeRun(namespace(t), name).readTool("lookup").writeTool("note", true).
		calls("lookup", `{"q":1}`).calls("note", `{"text":"a"}`).calls("lookup", `{"q":2}`).answer("done"), newTools()
}

// heldAtTurn4 is b's scripted model, holding turn 4 until released.
func heldAtTurn4(b *runBuilder) *blockingModel {
	return &blockingModel{Scripted: loop.Scripted{Entries: scriptOf(b)}, hold: 4, entered: make(chan struct{}), release: make(chan struct{})}
}

// expectEachCallOnce waits for a run of threeToolTurns to complete on
// turn 4 and checks that each tool call ran once, that turns model calls
// were paid for, and that the transcript is whole.
func expectEachCallOnce(t *testing.T, run *v1alpha1.AgentRun, tb *tools, turns int32) {
	t.Helper()
	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 4")
	if diff := cmp.Diff(map[string]int{"t1-c1:lookup": 1, "t2-c1:note": 1, "t3-c1:lookup": 1}, tb.counts()); diff != "" {
		t.Fatalf("executions (-want +got):\n%s", diff)
	}
	if u := done.Status.Usage; u.Turns != turns || u.ToolCalls != 3 {
		t.Fatalf("usage %+v, want %d turns and 3 tool calls", u, turns)
	}
	msgs, err := transcript.Read(context.Background(), k8sClient, done)
	if err != nil || len(msgs) != 7 {
		t.Fatalf("transcript: %d messages, %v; want 7", len(msgs), err)
	}
}

// A run cancelled by an AgentSchedule (concurrencyPolicy Replace: the
// schedule sets spec.cancel and the cancelled-by annotation, as
// agentschedule's TestSchedule_replaceCancelsTheActiveRun checks) ends
// ApprovalDenied with a reason that names the schedule.
func TestCancel_byAScheduleNamesItInTheReason(t *testing.T) {
	_, run, _ := pendingRefund(t)
	body, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationCancelledBy: "AgentSchedule/replace"}},
		"spec":     map[string]any{"cancel": true},
	})
	if err := k8sClient.Patch(context.Background(), get(t, run), client.RawPatch("application/merge-patch+json", body)); err != nil {
		t.Fatal(err)
	}
	ended := waitOutcome(t, run, 30*time.Second)
	if ended.Status.Outcome != v1alpha1.OutcomeApprovalDenied || !strings.Contains(ended.Status.Reason, "AgentSchedule/replace") ||
		!strings.Contains(ended.Status.Reason, "concurrencyPolicy Replace") {
		t.Fatalf("the cancelled run ended %s: %q, want ApprovalDenied naming AgentSchedule/replace", ended.Status.Outcome, ended.Status.Reason)
	}
}

// The cancelled-by annotation is anyone's to write: the reason quotes a
// bounded part of it.
func TestCancelReason_isBounded(t *testing.T) {
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		v1alpha1.AnnotationCancelledBy: "AgentSchedule/" + strings.Repeat("x", 10000)}}}
	why := cancelReason(run)
	if !strings.Contains(why, "AgentSchedule/xxx") || len(why) > maxCancelledBy+200 {
		t.Fatalf("reason of %d bytes: %.300q", len(why), why)
	}
	if cancelReason(&v1alpha1.AgentRun{}) != "" {
		t.Fatal("a run without the annotation must keep the default reason")
	}
}
