package evaluation_test

import (
	"fmt"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/evaluation"
)

// Compare one variant's results with its baseline's: the pass rate went
// up, but the verifier accepted none of the answers.
func ExampleCompare() {
	margins, err := evaluation.MarginsOf(&v1alpha1.EvaluationBaseline{Evaluation: "before"}) // the defaults
	if err != nil {
		panic(err)
	}
	before := evaluation.Group{Name: "terse", Totals: &v1alpha1.EvaluationTotals{Passed: 1, Failed: 1, PassRate: "0.50",
		CostUSD: "0.02", VerifiedRate: "0.50"}}
	after := evaluation.Group{Name: "terse", Totals: &v1alpha1.EvaluationTotals{Passed: 2, PassRate: "1.00", CostUSD: "0.02"}}
	for _, r := range evaluation.Compare(before, after, margins) {
		fmt.Printf("%s: %s -> %s\n", r.What, r.Baseline, r.Value)
	}
	// Output: VerifiedRate: 0.50 -> 0.00
}
