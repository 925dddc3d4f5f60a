package evaluation

import (
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A scored run's result holds its name, verdict, cost and, when it
// Completed, its turns to completion.
func TestResultOf(t *testing.T) {
	run := ended(v1alpha1.OutcomeCompleted, "ok", "", "0.0200", 2)
	run.ObjectMeta = metav1.ObjectMeta{Name: RunName("ev", "", "c", 3)}
	run.Status.Convergence = &v1alpha1.ConvergenceStatus{TurnsToCompletion: ptr.To[int32](2)}
	got := []v1alpha1.EvaluationRunResult{ResultOf(3, run, ""), ResultOf(3, ended(v1alpha1.OutcomeEscalated, "", "", "", 1), "outcome")}
	want := []v1alpha1.EvaluationRunResult{
		{Repeat: 3, Run: "ev-c-3", Passed: true, CostUSD: "0.0200", TurnsToCompletion: ptr.To[int32](2)},
		{Repeat: 3, CostUSD: "0.0000"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if n := RunName("ev", "terse", "c", 3); n != "ev-terse-c-3" {
		t.Errorf("a variant's run is named %q, want ev-terse-c-3", n)
	}
}

// A result keeps the run's repeated-intent depth and, when it Completed,
// the least headroom it left of any ceiling; the totals keep the deepest
// and the median headroom.
func TestResultOf_convergenceMeasures(t *testing.T) {
	conv := func(depth int32, headroom map[string]string) *v1alpha1.ConvergenceStatus {
		return &v1alpha1.ConvergenceStatus{RepeatedIntentDepth: depth, Headroom: headroom}
	}
	runs := []*v1alpha1.AgentRun{
		ended(v1alpha1.OutcomeCompleted, "ok", "", "", 2),
		ended(v1alpha1.OutcomeCompleted, "ok", "", "", 2),
		ended(v1alpha1.OutcomeCompleted, "ok", "", "", 2),
		ended(v1alpha1.OutcomeLoopDetected, "", "", "", 5),
	}
	runs[0].Status.Convergence = conv(1, map[string]string{"turns": "0.50", "cost": "0.98", "tokens": "0.90"})
	runs[1].Status.Convergence = conv(2, map[string]string{"turns": "0.75", "cost": "0.10"})
	runs[2].Status.Convergence = conv(1, map[string]string{"turns": "1.00", "wallClock": "bad"})
	runs[3].Status.Convergence = conv(3, map[string]string{"turns": "0.00"})
	e := &v1alpha1.AgentEvaluation{Spec: v1alpha1.AgentEvaluationSpec{Repeats: 4, Cases: []v1alpha1.EvaluationCase{{Name: "c"}}}}
	var got []string
	for i, run := range runs {
		res := ResultOf(int32(i+1), run, "")
		got = append(got, res.Headroom)
		Record(CaseStatus(&e.Status, "c"), res, "")
	}
	SetStatus(e, nil, metav1.Now())
	tot := e.Status.Totals
	if diff := cmp.Diff([]any{"0.50", "0.10", "1.00", "", int32(3), "0.50"}, []any{got[0], got[1], got[2], got[3], tot.RepeatedIntentDepthMax, tot.HeadroomP50}); diff != "" {
		t.Errorf("headroom by run, deepest, median (-want +got):\n%s", diff)
	}
}
