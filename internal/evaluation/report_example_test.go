package evaluation_test

import (
	"os"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/evaluation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Each ended run is scored against its case, recorded, and the status
// summed; the report prints it.
func ExampleWriteTable() {
	e := &v1alpha1.AgentEvaluation{ObjectMeta: metav1.ObjectMeta{Name: "refund-check"}, Spec: v1alpha1.AgentEvaluationSpec{
		Cases: []v1alpha1.EvaluationCase{{Name: "double-charge", Expect: v1alpha1.EvaluationExpectation{Answer: []v1alpha1.RE2Pattern{`refunded`}}}}}}
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: evaluation.RunName(e.Name, "", "double-charge", 1)},
		Status: v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted, Answer: "We are sorry.", Usage: &v1alpha1.UsageStatus{CostUSD: "0.0036", Turns: 1}}}
	c := &e.Spec.Cases[0]
	why := evaluation.Score(&c.Expect, run)
	evaluation.Record(evaluation.CaseStatus(&e.Status, c.Name), evaluation.ResultOf(1, run, why), why)
	evaluation.SetStatus(e, nil, metav1.Now())
	_ = evaluation.WriteTable(os.Stdout, e)
	// Output:
	// CASE           RUNS  PASSED  FAILED  COST     TURNS  DEPTH  HEADROOM  JUDGE  REASON
	// double-charge  1     0       1       $0.0036  -      -      -         -      answer[0]: expected a match for "refunded", the answer was "We are sorry."
	// TOTAL          1     0       1       $0.0036  -      -      -         -
	//
	// Failed: 0 of 1 runs passed (pass rate 0.00)
}
