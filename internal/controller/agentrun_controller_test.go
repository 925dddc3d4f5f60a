package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/transcript"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func expectOutcome(t *testing.T, run *v1alpha1.AgentRun, want v1alpha1.Outcome, reason string) {
	t.Helper()
	expectEnded(t, run, want, string(want), reason)
}

// expectInvalid checks that the run ended Error because of its
// configuration: condition reason InvalidConfiguration.
func expectInvalid(t *testing.T, run *v1alpha1.AgentRun, reason string) {
	t.Helper()
	expectEnded(t, run, v1alpha1.OutcomeError, v1alpha1.ReasonInvalidConfiguration, reason)
}

func expectEnded(t *testing.T, run *v1alpha1.AgentRun, want v1alpha1.Outcome, condReason, reason string) {
	t.Helper()
	if run.Status.Outcome != want {
		t.Fatalf("outcome = %s (%s), want %s", run.Status.Outcome, run.Status.Reason, want)
	}
	if !strings.Contains(run.Status.Reason, reason) {
		t.Fatalf("reason %q does not contain %q", run.Status.Reason, reason)
	}
	c := apimeta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionSucceeded)
	wantStatus := metav1.ConditionFalse
	if want == v1alpha1.OutcomeCompleted {
		wantStatus = metav1.ConditionTrue
	}
	if c == nil || c.Status != wantStatus || c.Reason != condReason {
		t.Fatalf("Succeeded condition = %+v, want %s with reason %s", c, wantStatus, condReason)
	}
	if run.Status.CompletionTime == nil || run.Status.Reserved != nil || len(run.Status.PendingApprovals) != 0 {
		t.Fatalf("finished status is incomplete: %+v", run.Status)
	}
}

func TestRun_scriptedRunWithAReadToolCompletes(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	r, _ := startReconciler(t, &kits{tools: tb}, 0, nil)
	m := r.Metrics
	completedBefore := testutil.ToFloat64(m.runsFinished.WithLabelValues(nsLabel(m, ns), "scripted", "", "Completed", "Completed", ""))
	run := makeRun(ns, "double-charge").readTool("identify_account").readTool("find_invoices").
		calls("identify_account", `{"email":"r.okafor@northwind.example"}`).
		calls("find_invoices", `{"account_id":"acct_1"}`).
		answer("Two separate charges.").create(t)

	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer on turn 3")
	if done.Status.Answer != "Two separate charges." || done.Status.Turn != 3 || done.Status.Phase != v1alpha1.PhaseSucceeded {
		t.Fatalf("status = %+v", done.Status)
	}
	if diff := cmp.Diff(map[string]int{"t1-c1:identify_account": 1, "t2-c1:find_invoices": 1}, tb.counts()); diff != "" {
		t.Fatalf("tool executions (-want +got):\n%s", diff)
	}
	u := done.Status.Usage
	if u.Turns != 3 || u.InputTokens != 3200 || u.ToolCalls != 2 || u.PerTool["find_invoices"] != 1 {
		t.Fatalf("usage = %+v", u)
	}
	if *done.Status.Convergence.TurnsToCompletion != 3 || done.Status.ObservedGeneration != done.Generation {
		t.Fatalf("convergence %+v, observedGeneration %d", done.Status.Convergence, done.Status.ObservedGeneration)
	}

	// The outcome is counted once, in the domain metrics.
	NewWithT(t).Eventually(func() float64 {
		return testutil.ToFloat64(m.runsFinished.WithLabelValues(nsLabel(m, ns), "scripted", "", "Completed", "Completed", ""))
	},
		5*time.Second, 20*time.Millisecond).Should(Equal(completedBefore + 1))

	// The transcript lives in owned Secrets and reads back whole.
	msgs, err := transcript.Read(context.Background(), k8sClient, done)
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range msgs {
		roles = append(roles, string(m.Role))
	}
	if diff := cmp.Diff([]string{"assistant", "tool", "assistant", "tool", "assistant"}, roles); diff != "" {
		t.Fatalf("transcript roles (-want +got):\n%s", diff)
	}
	secrets := &corev1.SecretList{}
	if err := k8sClient.List(context.Background(), secrets, client.InNamespace(ns), client.MatchingLabels{transcript.LabelRun: run.Name}); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) == 0 || secrets.Items[0].OwnerReferences[0].UID != done.UID || !*secrets.Items[0].Immutable {
		t.Fatalf("transcript chunks are not immutable Secrets owned by the run: %+v", secrets.Items)
	}

	// kubectl describe tells the story: the model's answer on each turn,
	// and the outcome (at the default event verbosity).
	g := NewWithT(t)
	g.Eventually(func() []string { return eventReasons(t, ns, run.Name) }, 10*time.Second, 50*time.Millisecond).Should(ConsistOf("ModelAnswered", "ModelAnswered", "ModelAnswered", "Completed"))
}

func TestRun_askThenApproveByAnnotation(t *testing.T) {
	tb, run, cur := pendingRefund(t)
	p := cur.Status.PendingApprovals[0]
	if p.CallID != "t1-c1" || p.Tool != "issue_refund" || p.Rule != "tool.irreversible" || p.Arguments != `{"amount_minor":8240}` {
		t.Fatalf("pending = %+v", p)
	}
	if cur.Status.Phase != v1alpha1.PhaseAwaitingApproval || !apimeta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionAwaitingApproval) {
		t.Fatalf("phase %s, conditions %+v", cur.Status.Phase, cur.Status.Conditions)
	}
	if n := tb.counts()["t1-c1:issue_refund"]; n != 0 {
		t.Fatalf("the call ran before approval")
	}
	// An answer for a call that is not pending is recorded as stale, never applied.
	annotate(t, run, "t7-c1", "approve")
	annotate(t, run, "t1-c1", "approve")

	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer")
	if tb.counts()["t1-c1:issue_refund"] != 1 {
		t.Fatalf("executions = %v", tb.counts())
	}
	var got []string
	for _, a := range done.Status.Approvals {
		got = append(got, fmt.Sprintf("%s=%s stale=%v by=%s", a.CallID, a.Decision, a.Stale, a.By))
	}
	if diff := cmp.Diff([]string{"t7-c1=approve stale=true by=" + adminName, "t1-c1=approve stale=false by=" + adminName}, got); diff != "" {
		t.Fatalf("approvals (-want +got):\n%s", diff)
	}
	if _, still := done.Annotations[v1alpha1.ApprovalAnnotationPrefix+"t7-c1"]; still {
		t.Fatalf("the stale annotation was not removed")
	}
}

func TestRun_denyLetsTheModelRouteAround(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	startManager(t, &kits{tools: tb})
	run := makeRun(ns, "deny").writeTool("issue_refund", false).readTool("open_ticket").
		calls("issue_refund", `{"amount_minor":8240}`).
		calls("open_ticket", `{"summary":"refund declined"}`).
		answer("Opened a ticket instead.").create(t)
	g := NewWithT(t)
	g.Eventually(func() int { return len(get(t, run).Status.PendingApprovals) }, 10*time.Second, 20*time.Millisecond).Should(Equal(1))
	annotate(t, run, "t1-c1", "deny")
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 3")
	if diff := cmp.Diff(map[string]int{"t2-c1:open_ticket": 1}, tb.counts()); diff != "" {
		t.Fatalf("executions (-want +got):\n%s", diff)
	}
	msgs, err := transcript.Read(context.Background(), k8sClient, done)
	if err != nil {
		t.Fatal(err)
	}
	if msgs[1].Status != loop.ObsDeclined || !strings.Contains(msgs[1].Content, "A person declined") {
		t.Fatalf("the model was not told: %+v", msgs[1])
	}
}

func TestRun_stopEndsApprovalDenied(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	startManager(t, &kits{tools: tb})
	run := makeRun(ns, "stop").writeTool("drop_table", false).calls("drop_table", `{"name":"invoices"}`).answer("x").create(t)
	NewWithT(t).Eventually(func() int { return len(get(t, run).Status.PendingApprovals) }, 10*time.Second, 20*time.Millisecond).Should(Equal(1))
	annotate(t, run, "t1-c1", "stop")
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeApprovalDenied, "a person stopped the run when asked to approve t1-c1 (drop_table)")
	if len(tb.counts()) != 0 {
		t.Fatalf("a call ran: %v", tb.counts())
	}
}

func TestRun_unansweredAskEscalatesAfterApprovalTimeout(t *testing.T) {
	ns := namespace(t)
	startManager(t, &kits{tools: newTools()})
	run := makeRun(ns, "timeout").writeTool("drop_table", false).calls("drop_table", `{}`).
		with(func(s *v1alpha1.AgentRunSpec) { s.ApprovalTimeout = &metav1.Duration{Duration: time.Second} }).create(t)
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeEscalated, "waited more than approvalTimeout (1s)")
}

func TestRun_cancelEndsApprovalDenied(t *testing.T) {
	ns := namespace(t)
	startManager(t, &kits{tools: newTools()})
	run := makeRun(ns, "cancel").writeTool("drop_table", false).calls("drop_table", `{}`).create(t)
	NewWithT(t).Eventually(func() int { return len(get(t, run).Status.PendingApprovals) }, 10*time.Second, 20*time.Millisecond).Should(Equal(1))
	if err := k8sClient.Patch(context.Background(), get(t, run), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancel":true}}`))); err != nil {
		t.Fatal(err)
	}
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeApprovalDenied, "cancelled")

	// A finished run is never reopened: a later answer changes nothing.
	annotate(t, run, "t1-c1", "approve")
	NewWithT(t).Consistently(func() v1alpha1.Outcome { return get(t, run).Status.Outcome }, time.Second, 100*time.Millisecond).
		Should(Equal(v1alpha1.OutcomeApprovalDenied))
}

func TestRun_loopDetected(t *testing.T) {
	ns := namespace(t)
	startManager(t, &kits{tools: newTools()})
	b := makeRun(ns, "loop").readTool("fetch_dashboard").maxTurns(20)
	for range 5 {
		b.calls("fetch_dashboard", `{"deployment":"checkout"}`)
	}
	done := waitOutcome(t, b.create(t), 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeLoopDetected, `fetch_dashboard{"deployment":"checkout"}`)
	if done.Status.Convergence.RepeatedIntentDepth != 3 || done.Status.Turn != 3 {
		t.Fatalf("depth %d turn %d", done.Status.Convergence.RepeatedIntentDepth, done.Status.Turn)
	}
}

func TestRun_eachBudgetDimensionExhausted(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	tb.funcs["slow"] = func(ctx context.Context, inv loop.Invocation) loop.Result {
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-ctx.Done():
		}
		return loop.Result{Output: []byte("slow result")}
	}
	startManager(t, &kits{tools: tb})
	priced := func(s *v1alpha1.AgentRunSpec) {
		s.Model.Pricing = &v1alpha1.ModelPricing{Input: "3", Output: "15"}
	}
	cases := []struct {
		name   string
		b      *runBuilder
		reason string
	}{
		{"turns", makeRun(ns, "b-turns").readTool("a").maxTurns(2).calls("a", `{"n":1}`).calls("a", `{"n":2}`).answer("x"), "turns ceiling: 2 consumed + 1 reserved"},
		{"tokens", makeRun(ns, "b-tokens").readTool("a").budget(func(b *v1alpha1.BudgetSpec) { b.MaxTokens = ptr64(6000) }).
			calls("a", `{"n":1}`).calls("a", `{"n":2}`).answer("x"), "tokens ceiling"},
		{"wall clock", makeRun(ns, "b-wall").readTool("slow").budget(func(b *v1alpha1.BudgetSpec) { b.MaxWallClock = &metav1.Duration{Duration: 3 * time.Second} }).
			with(func(s *v1alpha1.AgentRunSpec) { s.Model.Timeout = &metav1.Duration{Duration: time.Second} }).
			calls("slow", `{"n":1}`).calls("slow", `{"n":2}`).answer("x"), "wallClock ceiling"},
		{"cost", makeRun(ns, "b-cost").readTool("a").with(priced).budget(func(b *v1alpha1.BudgetSpec) { b.MaxCostUSD = "0.05" }).
			calls("a", `{"n":1}`).answer("x"), "cost ceiling: $0.0000 consumed + $"},
		{"tool calls", makeRun(ns, "b-calls").readTool("a").budget(func(b *v1alpha1.BudgetSpec) { b.MaxToolCalls = ptr32(2) }).
			calls("a", `{"n":1}`, "a", `{"n":2}`).calls("a", `{"n":3}`).answer("x"), "toolCalls ceiling: 2 consumed + 1 reserved"},
		{"per tool", makeRun(ns, "b-pertool").readTool("a").budget(func(b *v1alpha1.BudgetSpec) { b.PerTool = map[string]int32{"a": 1} }).
			calls("a", `{"n":1}`).calls("a", `{"n":2}`).answer("x"), "per-tool limit of a"},
	}
	runs := map[string]*v1alpha1.AgentRun{}
	for _, tc := range cases {
		runs[tc.name] = tc.b.create(t)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			done := waitOutcome(t, runs[tc.name], 30*time.Second)
			expectOutcome(t, done, v1alpha1.OutcomeBudgetExhausted, tc.reason)
		})
	}
}

func ptr64(v int64) *int64 { return &v }
func ptr32(v int32) *int32 { return &v }

// blockingModel answers from a script but holds turn `holdTurn` until released.
type blockingModel struct {
	loop.Scripted
	hold    int
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (m *blockingModel) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	turn := turnOf(req)
	if turn == m.hold {
		m.once.Do(func() { close(m.entered) })
		select {
		case <-m.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return m.Scripted.Complete(ctx, req)
}

func TestRun_managerRestartedMidRunFinishesWithEveryCallExecutedOnce(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	b := makeRun(ns, "restart").readTool("lookup").writeTool("note", true).
		calls("lookup", `{"q":1}`).calls("note", `{"text":"a"}`).calls("lookup", `{"q":2}`).answer("done")
	run := b.create(t)
	first := &blockingModel{Scripted: loop.Scripted{Entries: scriptOf(b)}, hold: 3, entered: make(chan struct{}), release: make(chan struct{})}
	stop := startManager(t, &kits{tools: tb, model: first})
	await(t, first.entered, 20*time.Second, "turn 3 never started") // turn 3's model call is in flight: turns 1 and 2 ran their tools
	stop()
	before := get(t, run)
	if before.Status.Outcome != "" || before.Status.Reserved == nil {
		t.Fatalf("the stopped run should hold a reservation for its in-flight call: %+v", before.Status)
	}

	// A new operator resumes from status alone.
	startManager(t, &kits{tools: tb, model: &loop.Scripted{Entries: scriptOf(b)}})
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 4")
	want := map[string]int{"t1-c1:lookup": 1, "t2-c1:note": 1, "t3-c1:lookup": 1}
	if diff := cmp.Diff(want, tb.counts()); diff != "" {
		t.Fatalf("executions (-want +got):\n%s", diff)
	}
	// The lost call's reservation was charged: five model calls are paid for.
	if done.Status.Usage.Turns != 5 {
		t.Fatalf("turns paid = %d, want 5 (4 + the call lost in the restart)", done.Status.Usage.Turns)
	}
}

func TestRun_mutatingCallInFlightIsNeverRepeatedAfterARestart(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	tb.funcs["charge"] = func(ctx context.Context, inv loop.Invocation) loop.Result {
		once.Do(func() { close(entered) })
		select {
		case <-release:
		case <-ctx.Done():
		}
		return loop.Result{Output: []byte("charged")}
	}
	run := makeRun(ns, "no-repeat").with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "charge", Mutates: ref(true), Reversible: ref(true),
			HTTP: &v1alpha1.HTTPTool{URL: "http://billing.invalid/charge", Method: "POST"}})
	}).calls("charge", `{"amount":1}`).answer("checked").create(t)
	stop := startManager(t, &kits{tools: tb})
	awaitStarted(t, entered)
	stop()
	close(release)
	startManager(t, &kits{tools: tb})
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 2")
	if n := tb.counts()["t1-c1:charge"]; n != 1 {
		t.Fatalf("the mutating call ran %d times", n)
	}
	msgs, _ := transcript.Read(context.Background(), k8sClient, done)
	if !strings.Contains(msgs[1].Content, "whether it took effect is unknown") {
		t.Fatalf("observation = %q", msgs[1].Content)
	}
}

func ref[T any](v T) *T { return &v }

func scriptOf(b *runBuilder) []loop.ScriptEntry {
	var out []loop.ScriptEntry
	for _, s := range b.r.Spec.Model.Script {
		e := loop.ScriptEntry{Content: s.Content}
		if s.Usage != nil {
			e.Usage = loop.TokenUsage{InputTokens: s.Usage.InputTokens, OutputTokens: s.Usage.OutputTokens}
		}
		for _, c := range s.ToolCalls {
			e.ToolCalls = append(e.ToolCalls, loop.ToolCall{Name: c.Name, Arguments: json.RawMessage(c.Arguments.Raw)})
		}
		out = append(out, e)
	}
	return out
}

func TestRun_invalidManifestIsRejectedWithItsMessage(t *testing.T) {
	ns := namespace(t)
	run := makeRun(ns, "bad").maxTurns(0).r
	err := k8sClient.Create(context.Background(), run)
	if err == nil || !strings.Contains(err.Error(), "maxTurns") {
		t.Fatalf("err = %v", err)
	}
}

// A manifest the engine rejects is its author's mistake, not a defect:
// it ends Error with the reason InvalidConfiguration.
func TestRun_aManifestTheEngineRejectsEndsInvalidConfiguration(t *testing.T) {
	ns := namespace(t)
	startManager(t, &kits{tools: newTools()})
	run := makeRun(ns, "bad-cel").readTool("a").answer("x").with(func(s *v1alpha1.AgentRunSpec) {
		s.Policy = &v1alpha1.PolicySpec{Default: "allow", Rules: []v1alpha1.PolicyRule{{Tools: []string{"a"}, When: "args.amount >", Decision: "deny"}}}
	}).create(t)
	done := waitOutcome(t, run, 20*time.Second)
	expectInvalid(t, done, "policy.rules[0].when")
}

// turnsModel answers n turns with a fresh read call each, then a final answer.
type turnsModel struct{ n int }

func (m *turnsModel) Complete(_ context.Context, req *loop.Request) (*loop.Reply, error) {
	turn := turnOf(req)
	if turn > m.n {
		return &loop.Reply{Content: fmt.Sprintf("done after %d turns", m.n), Usage: loop.TokenUsage{InputTokens: 100, OutputTokens: 10}}, nil
	}
	args := fmt.Sprintf(`{"page":%d}`, turn)
	return &loop.Reply{ToolCalls: []loop.ToolCall{{Name: "page", Arguments: json.RawMessage(args)}}, Usage: loop.TokenUsage{InputTokens: 100, OutputTokens: 10}}, nil
}

func TestRun_aThousandTurnRunKeepsTheAgentRunSmall(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	const turns = 1000
	run := makeRun(ns, "long").readTool("page").maxTurns(turns + 1).answer("unused").
		budget(func(b *v1alpha1.BudgetSpec) {
			b.MaxTokens = ptr64(10_000_000)
			b.MaxToolCalls = ptr32(turns)
			b.DefaultToolLimit = ptr32(turns)
			b.MaxWallClock = &metav1.Duration{Duration: time.Hour}
		}).create(t)
	startManager(t, &kits{tools: tb, model: &turnsModel{n: turns}})
	largest := 0
	g := NewWithT(t)
	g.Eventually(func() v1alpha1.Outcome {
		cur := get(t, run)
		raw, _ := json.Marshal(cur)
		largest = max(largest, len(raw))
		return cur.Status.Outcome
	}, 5*time.Minute, 50*time.Millisecond).ShouldNot(BeEmpty())
	done := get(t, run)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, fmt.Sprintf("turn %d", turns+1))
	raw, _ := json.Marshal(done)
	t.Logf("AgentRun size: %d bytes at the end, %d at most while running; %d transcript chunks", len(raw), largest, done.Status.Transcript.Chunks)
	if len(raw) > 32<<10 || largest > 32<<10 {
		t.Fatalf("the AgentRun grew to %d bytes (largest seen %d), over 32 KiB", len(raw), largest)
	}
	msgs, err := transcript.Read(context.Background(), k8sClient, done)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2*turns+1 {
		t.Fatalf("transcript has %d messages, want %d", len(msgs), 2*turns+1)
	}
}

func TestRun_aSlowModelHoldsUpNoOtherRun(t *testing.T) {
	ns := namespace(t)
	// One worker only: if a model call held the worker, the quick run
	// would wait a minute for the slow one.
	startManagerWithWorkers(t, &kits{tools: newTools()}, 1)
	slow := makeRun(ns, "slow").step(v1alpha1.ScriptStep{Content: "late", Delay: &metav1.Duration{Duration: time.Minute}}).
		with(func(s *v1alpha1.AgentRunSpec) { s.Model.Timeout = &metav1.Duration{Duration: 2 * time.Minute} }).create(t)
	NewWithT(t).Eventually(func() int32 { return get(t, slow).Status.Turn }, 10*time.Second, 20*time.Millisecond).Should(Equal(int32(1)))
	quick := makeRun(ns, "quick").readTool("a").calls("a", `{}`).answer("done").create(t)
	done := waitOutcome(t, quick, 10*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 2")
	if o := get(t, slow).Status.Outcome; o != "" {
		t.Fatalf("the slow run ended (%s) before its model answered", o)
	}
}

// The watch event of our own status write enqueues nothing (a run used to
// reconcile once more for each of them, finding itself waiting); anyone
// else's write of the run, and a write of ours the watch delivered before
// the patch returned, still do.
func TestCaughtUp_skipsOnlyTheEventOfOurLastStatusWrite(t *testing.T) {
	r := NewAgentRunReconciler(Config{})
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run", UID: "uid-1", ResourceVersion: "10"}}
	enqueues := func(rv string) bool {
		cur := run.DeepCopy()
		cur.ResourceVersion = rv
		return !r.caughtUp(cur)
	}
	r.track(types.NamespacedName{Namespace: "ns", Name: "run"}, run.UID)

	if !enqueues("11") {
		t.Fatal("an update before any write of ours was skipped")
	}
	ours := run.DeepCopy()
	ours.ResourceVersion = "12"
	r.mem.remember("11", ours)
	if enqueues("12") {
		t.Error("the event of our own status write enqueued the run")
	}
	if !enqueues("12") {
		t.Error("a second event at that version was skipped too; only the first is ours to skip")
	}
	if !enqueues("13") {
		t.Error("someone else's write (an annotation, a cancel) was skipped")
	}
	r.mem.remember("13", &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run", UID: "uid-1", ResourceVersion: "14"}})
	r.forget(run.UID)
	if !enqueues("14") {
		t.Error("a run this process forgot (it ended) still had a write to skip")
	}
}
