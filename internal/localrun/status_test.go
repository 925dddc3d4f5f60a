package localrun

import (
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStatus_endedRunIsFailedWithTheOutcomeAsConditionReason(t *testing.T) {
	start := time.Date(2026, 8, 14, 9, 0, 0, 0, time.UTC)
	end := start.Add(90 * time.Second)
	s := &loop.State{Phase: loop.PhaseDone, Turn: 3, StartedAt: &start, Outcome: loop.BudgetExhausted, Reason: "turns: 3 of 3",
		Usage: loop.Usage{Turns: 3, InputTokens: 10, OutputTokens: 5, ToolCalls: 2, PerTool: map[string]int{"echo": 2, "idle": 0},
			WallClock: 1500 * time.Millisecond}}
	got := Status(s, loop.Convergence{RepeatedIntentDepth: 2, Headroom: map[loop.Dimension]string{loop.DimTurns: "0.00"}}, end)

	at := metav1.NewTime(end)
	want := v1alpha1.AgentRunStatus{
		Phase: v1alpha1.PhaseFailed, Outcome: v1alpha1.OutcomeBudgetExhausted, Reason: "turns: 3 of 3", Turn: 3,
		Usage: &v1alpha1.UsageStatus{Turns: 3, InputTokens: 10, OutputTokens: 5, CostUSD: "0.0000", ToolCalls: 2,
			PerTool: map[string]int32{"echo": 2}, WallClockSeconds: 2},
		Convergence: &v1alpha1.ConvergenceStatus{RepeatedIntentDepth: 2, Headroom: map[string]string{"turns": "0.00"}},
		Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionFalse, Reason: "BudgetExhausted", Message: "turns: 3 of 3", LastTransitionTime: at},
			{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "BudgetExhausted", Message: "turns: 3 of 3", LastTransitionTime: at},
			{Type: v1alpha1.ConditionReconciling, Status: metav1.ConditionFalse, Reason: "BudgetExhausted", Message: "turns: 3 of 3", LastTransitionTime: at},
			{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "BudgetExhausted", Message: "turns: 3 of 3", LastTransitionTime: at},
			{Type: v1alpha1.ConditionAwaitingApproval, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNoApprovalPending,
				Message: "no call waits for a person", LastTransitionTime: at},
		},
		StartTime:      &metav1.Time{Time: start},
		CompletionTime: &at,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("status (-want +got):\n%s", d)
	}
}

func TestFailedStatus_clipsTheReason(t *testing.T) {
	st := FailedStatus(loop.ToolFailure, strings.Repeat("x", 9000), time.Now())
	if st.Phase != v1alpha1.PhaseFailed || st.Outcome != v1alpha1.OutcomeToolFailure || len(st.Reason) > 8192 || !strings.HasSuffix(st.Reason, "[cut]") {
		t.Errorf("status = %s %s, reason of %d bytes", st.Phase, st.Outcome, len(st.Reason))
	}
	if len(st.Conditions[0].Message) > 1024 {
		t.Errorf("condition message of %d bytes, want at most 1024", len(st.Conditions[0].Message))
	}
}

func TestExitCode_isDistinctPerOutcome(t *testing.T) {
	seen := map[int]loop.Outcome{ExitUsage: "usage"}
	for _, o := range loop.Outcomes {
		c := ExitCode(o)
		if prev, dup := seen[c]; dup {
			t.Errorf("%s and %s share exit status %d", o, prev, c)
		}
		seen[c] = o
	}
	if ExitCode(loop.Completed) != 0 {
		t.Errorf("Completed exits %d, want 0", ExitCode(loop.Completed))
	}
}
