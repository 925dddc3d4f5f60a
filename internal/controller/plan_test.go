package controller

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
)

// The seed's double-charge task as a plan: E2 and E3 both name E1's
// account id, so they run together once E1 has its result.
const doubleChargePlan = `{"steps":[
 {"id":"E1","tool":"identify_account","arguments":{"email":"r.okafor@northwind.example"}},
 {"id":"E2","tool":"find_invoices","arguments":{"account_id":"#E1.account_id","month":"2026-08"}},
 {"id":"E3","tool":"plan_changes","arguments":{"account_id":"#E1.account_id","month":"2026-08"}}]}`

// planExecute makes the run plan then execute, with maxReplans replans.
func (b *runBuilder) planExecute(maxReplans int32) *runBuilder {
	b.r.Spec.Strategy = v1alpha1.StrategyPlanExecute
	b.r.Spec.Plan = &v1alpha1.PlanSpec{MaxReplans: ptr.To(maxReplans)}
	return b
}

func (b *runBuilder) plan(steps string) *runBuilder { return b.calls(loop.PlanTool, steps) }

func billingTools(b *runBuilder) *runBuilder {
	return b.readTool("identify_account").readTool("find_invoices").readTool("plan_changes")
}

func billingToolbox() *tools {
	tb := newTools()
	tb.funcs["identify_account"] = func(context.Context, loop.Invocation) loop.Result {
		return loop.Result{Output: []byte(`{"account_id":"acct_4b71c9e20d8af315"}`)}
	}
	return tb
}

// together makes the named tools wait for each other: each call returns
// only once all of them have started (or fails after a bounded wait), so a
// run that completes ran them at the same time.
func together(tb *tools, names ...string) {
	var mu sync.Mutex
	left := len(names)
	all := make(chan struct{})
	for _, n := range names {
		tb.funcs[n] = func(ctx context.Context, inv loop.Invocation) loop.Result {
			mu.Lock()
			if left--; left == 0 {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
				return loop.Result{Output: []byte(`{"tool":"` + inv.Tool + `","args":` + string(inv.Arguments) + `}`)}
			case <-time.After(10 * time.Second):
				return loop.Failed(loop.FailTool, 0, inv.Tool+" ran alone: the other step never started")
			case <-ctx.Done():
				return loop.Failed(loop.FailUnknown, 0, "stopped")
			}
		}
	}
}

func TestPlan_threeStepsRunInTwoModelCallsTheIndependentTogether(t *testing.T) {
	ns := namespace(t)
	tb := billingToolbox()
	together(tb, "find_invoices", "plan_changes")
	startWith(t, &kits{tools: tb}, managerSetup{config: func(c *Config) { c.EventVerbosity = EventsPerCall }})
	run := billingTools(makeRun(ns, "planned")).planExecute(1).plan(doubleChargePlan).answer("Two separate charges.").create(t)

	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer")
	if done.Status.Usage.Turns != 2 || done.Status.Usage.ToolCalls != 3 {
		t.Fatalf("usage = %+v, want 2 model calls and 3 tool calls", done.Status.Usage)
	}
	want := map[string]int{"p1-E1:identify_account": 1, "p1-E2:find_invoices": 1, "p1-E3:plan_changes": 1}
	if diff := cmp.Diff(want, tb.counts()); diff != "" {
		t.Fatalf("executions (-want +got):\n%s", diff)
	}
	// The steps' results are in the transcript Secrets, substituted.
	msgs := readTranscript(t, done)
	var e2 string
	for _, m := range msgs {
		if m.CallID == "p1-E2" {
			e2 = m.Content
		}
	}
	if !strings.Contains(e2, `"account_id":"acct_4b71c9e20d8af315"`) {
		t.Fatalf("E2 ran without E1's account id: %q", e2)
	}
	NewWithT(t).Eventually(func() []string { return eventReasons(t, run.Namespace, run.Name) }, 10*time.Second, 50*time.Millisecond).
		Should(ContainElements("PlanSubmitted", "StepStarted", "StepFinished", "Solving", "Completed"))
}

func TestPlan_refusedStepTriggersOneReplan(t *testing.T) {
	ns := namespace(t)
	tb := billingToolbox()
	startManager(t, &kits{tools: tb})
	run := billingTools(makeRun(ns, "replanned")).readTool("export_all").planExecute(1).
		with(func(s *v1alpha1.AgentRunSpec) {
			s.Policy = &v1alpha1.PolicySpec{Rules: []v1alpha1.PolicyRule{{Tools: []string{"export_all"}, Decision: v1alpha1.PolicyDeny, Reason: "no bulk exports"}}}
		}).
		plan(`{"steps":[{"id":"E1","tool":"export_all","arguments":{}}]}`).
		plan(`{"steps":[{"id":"E1","tool":"identify_account","arguments":{"email":"a@b.example"}}]}`).
		answer("The account is acct_4b71c9e20d8af315.").create(t)

	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer")
	if diff := cmp.Diff(map[string]int{"p2-E1:identify_account": 1}, tb.counts()); diff != "" {
		t.Fatalf("executions (-want +got):\n%s", diff)
	}
	if done.Status.Usage.Turns != 3 {
		t.Fatalf("turns = %d, want 3", done.Status.Usage.Turns)
	}
	NewWithT(t).Eventually(func() []string { return eventReasons(t, run.Namespace, run.Name) }, 10*time.Second, 50*time.Millisecond).
		Should(ContainElements("PlanRefused", "Replanned"))
}

func TestPlan_askStepWaitsAndAnApprovalResumesThePlan(t *testing.T) {
	ns := namespace(t)
	tb := billingToolbox()
	startManager(t, &kits{tools: tb})
	run := billingTools(makeRun(ns, "asked")).writeTool("issue_refund", false).planExecute(1).
		plan(`{"steps":[{"id":"E1","tool":"identify_account","arguments":{"email":"a@b.example"}},
			{"id":"E2","tool":"issue_refund","arguments":{"account_id":"#E1.account_id","amount_minor":3600}}]}`).
		answer("Refunded 36.00.").create(t)

	cur := waitPending(t, run, 1)
	p := cur.Status.PendingApprovals[0]
	if p.CallID != "p1-E2" || p.Tool != "issue_refund" || p.Arguments != `{"account_id":"acct_4b71c9e20d8af315","amount_minor":3600}` {
		t.Fatalf("pending = %+v; a person approves the arguments after substitution", p)
	}
	if n := tb.counts()["p1-E2:issue_refund"]; n != 0 {
		t.Fatal("the step ran before its approval")
	}
	annotate(t, run, "p1-E2", "approve")
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer")
	if diff := cmp.Diff(map[string]int{"p1-E1:identify_account": 1, "p1-E2:issue_refund": 1}, tb.counts()); diff != "" {
		t.Fatalf("executions (-want +got):\n%s", diff)
	}
}

func TestPlan_failedStepWithNoReplansLeftEndsToolFailure(t *testing.T) {
	ns := namespace(t)
	tb := billingToolbox()
	tb.funcs["find_invoices"] = func(context.Context, loop.Invocation) loop.Result {
		return loop.Failed(loop.FailHTTP, 404, "no such account")
	}
	startManager(t, &kits{tools: tb})
	run := billingTools(makeRun(ns, "failed")).planExecute(0).plan(doubleChargePlan).answer("never").create(t)

	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeToolFailure, "plan 1 stopped: step E2 (find_invoices) failed")
	if !strings.Contains(done.Status.Reason, "no replan is left (plan.maxReplans is 0)") || done.Status.Usage.Turns != 1 {
		t.Fatalf("reason %q, turns %d", done.Status.Reason, done.Status.Usage.Turns)
	}
}

func TestPlan_restartInTheMiddleRepeatsNothing(t *testing.T) {
	ns := namespace(t)
	tb := billingToolbox()
	var refunds atomic.Int64
	tb.funcs["issue_refund"] = func(context.Context, loop.Invocation) loop.Result {
		refunds.Add(1)
		return loop.Result{Output: []byte(`{"refund":"re_1"}`)}
	}
	// The first operator dies while E3 runs, after the write E2 finished.
	started := make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	tb.funcs["find_invoices"] = func(ctx context.Context, inv loop.Invocation) loop.Result {
		if first.CompareAndSwap(true, false) {
			close(started)
			<-ctx.Done()
			return loop.Failed(loop.FailUnknown, 0, "stopped")
		}
		return loop.Result{Output: []byte(`{"invoices":[]}`)}
	}
	b := billingTools(makeRun(ns, "restarted")).writeTool("issue_refund", true).planExecute(1).
		plan(`{"steps":[{"id":"E1","tool":"identify_account","arguments":{"email":"a@b.example"}},
			{"id":"E2","tool":"issue_refund","arguments":{"account_id":"#E1.account_id"}},
			{"id":"E3","tool":"find_invoices","arguments":{"account_id":"#E1.account_id","refund":"#E2.refund"}}]}`).
		answer("Refunded; no invoices left open.")
	model := &countingModel{inner: &loop.Scripted{Entries: scriptOf(b)}}
	_, stop := startReconciler(t, &kits{tools: tb, model: model}, 0, nil)
	run := b.create(t)
	await(t, started, 30*time.Second, "step E3 never started")
	stop()

	startManager(t, &kits{tools: tb, model: model})
	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer")
	want := map[string]int{"p1-E1:identify_account": 1, "p1-E2:issue_refund": 1, "p1-E3:find_invoices": 2}
	if diff := cmp.Diff(want, tb.counts()); diff != "" {
		t.Fatalf("executions (-want +got): only the read in flight at the crash runs again\n%s", diff)
	}
	if refunds.Load() != 1 || model.calls.Load() != 2 {
		t.Fatalf("refunds %d, model calls %d; want 1 and 2", refunds.Load(), model.calls.Load())
	}
}
