package controller

import (
	"context"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kstatusOf reads the run from the API server, as generic tools do, and
// computes its kstatus.
func kstatusOf(t *testing.T, run *v1alpha1.AgentRun) status.Status {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("AgentRun"))
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(run), u); err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// Every phase and outcome, as the status setters write it, read back from
// the API server: only a completed run is Current, every other outcome is
// Failed, and a run that works or waits for a person is InProgress.
func TestKstatus_everyPhaseAndOutcomeAsWritten(t *testing.T) {
	ns := namespace(t)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	asked := now.Time
	done := func(o loop.Outcome) loop.State {
		return loop.State{Turn: 2, Phase: loop.PhaseDone, Outcome: o, Reason: "ended " + string(o)}
	}
	cases := []struct {
		name  string
		state loop.State
		want  status.Status
	}{
		{"pending", loop.State{}, status.InProgressStatus},
		{"running", loop.State{Turn: 2, Phase: loop.PhaseModel}, status.InProgressStatus},
		{"awaiting-approval", loop.State{Turn: 1, Phase: loop.PhaseApproval, Calls: []loop.Call{{ToolCall: loop.ToolCall{ID: "t1-c1", Name: "refund"},
			Verdict: loop.Ask, State: loop.CallProposed, RequestedAt: &asked}}}, status.InProgressStatus},
		{"completed", done(loop.Completed), status.CurrentStatus},
		{"budget-exhausted", done(loop.BudgetExhausted), status.FailedStatus},
		{"guardrail-stop", done(loop.GuardrailStop), status.FailedStatus},
		{"loop-detected", done(loop.LoopDetected), status.FailedStatus},
		{"approval-denied", done(loop.ApprovalDenied), status.FailedStatus},
		{"escalated", done(loop.Escalated), status.FailedStatus},
		{"tool-failure", done(loop.ToolFailure), status.FailedStatus},
		{"error", done(loop.Error), status.FailedStatus},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := makeRun(ns, tc.name).answer("x").create(t)
			runstatus.SetFromState(&run.Status, &tc.state, loop.Convergence{}, now)
			run.Status.ObservedGeneration = run.Generation
			if err := k8sClient.Status().Update(context.Background(), run); err != nil {
				t.Fatal(err)
			}
			if got := kstatusOf(t, run); got != tc.want {
				t.Fatalf("kstatus = %s, want %s (conditions %+v)", got, tc.want, get(t, run).Status.Conditions)
			}
		})
	}
	t.Run("failed-to-start", func(t *testing.T) {
		run := failedToStart(t, ns, now)
		if got := kstatusOf(t, run); got != status.FailedStatus {
			t.Fatalf("kstatus = %s, want Failed", got)
		}
	})
}

// Runs driven by the operator: InProgress while waiting for a person,
// Current once completed, Failed once stopped; and setting spec.cancel on
// a run that already ended does not leave it InProgress for ever.
func TestKstatus_liveRunsAndCancelAfterTheEnd(t *testing.T) {
	ns := namespace(t)
	startManager(t, &kits{tools: newTools()})
	g := NewWithT(t)

	asking := makeRun(ns, "asking").writeTool("drop_table", false).calls("drop_table", `{}`).create(t)
	g.Eventually(func() int { return len(get(t, asking).Status.PendingApprovals) }, 10*time.Second, 20*time.Millisecond).Should(Equal(1))
	g.Expect(kstatusOf(t, asking)).To(Equal(status.InProgressStatus))
	annotate(t, asking, "t1-c1", "stop")
	expectOutcome(t, waitOutcome(t, asking, 20*time.Second), v1alpha1.OutcomeApprovalDenied, "stopped")
	g.Eventually(func() status.Status { return kstatusOf(t, asking) }, 10*time.Second, 20*time.Millisecond).Should(Equal(status.FailedStatus))

	completed := makeRun(ns, "completed").readTool("get_pod").calls("get_pod", `{"name":"web-0"}`).answer("All good.").create(t)
	expectOutcome(t, waitOutcome(t, completed, 20*time.Second), v1alpha1.OutcomeCompleted, "final answer")
	g.Eventually(func() status.Status { return kstatusOf(t, completed) }, 10*time.Second, 20*time.Millisecond).Should(Equal(status.CurrentStatus))

	// spec.cancel on an ended run bumps the generation; the operator
	// observes it and the run reads Current again, still Completed.
	if err := k8sClient.Patch(context.Background(), get(t, completed), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancel":true}}`))); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func() []int64 {
		cur := get(t, completed)
		return []int64{cur.Generation, cur.Status.ObservedGeneration}
	}, 10*time.Second, 20*time.Millisecond).Should(Equal([]int64{2, 2}))
	g.Expect(kstatusOf(t, completed)).To(Equal(status.CurrentStatus))
	g.Expect(get(t, completed).Status.Outcome).To(Equal(v1alpha1.OutcomeCompleted))
}

// failedToStart is a run that ended Error before its first turn, as a run
// the operator cannot start ends: its status written as the operator
// writes it, at now.
func failedToStart(t *testing.T, ns string, now metav1.Time) *v1alpha1.AgentRun {
	t.Helper()
	run := makeRun(ns, "failed-to-start").answer("x").create(t)
	runstatus.SetFailed(&run.Status, v1alpha1.OutcomeError, "the run cannot start", now)
	run.Status.ObservedGeneration = run.Generation
	if err := k8sClient.Status().Update(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	return run
}
