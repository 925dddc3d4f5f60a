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
