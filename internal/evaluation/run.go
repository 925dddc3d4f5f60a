package evaluation

import (
	"strconv"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// RunName is the name of the run of case caseName's repeat of variant
// ("" for spec.templateRef) in the evaluation named evaluation: the same
// variant, case and repeat always give the same name, so that no run is
// made twice whoever creates it (a restarted operator, two replicas for a
// moment). The CRD bounds the parts so that it is at most 63 characters.
func RunName(evaluation, variant, caseName string, repeat int32) string {
	if variant == "" {
		return evaluation + "-" + caseName + "-" + strconv.Itoa(int(repeat))
	}
	return evaluation + "-" + variant + "-" + caseName + "-" + strconv.Itoa(int(repeat))
}

// ResultOf is the result of run, a case's run of repeat that has ended,
// scored with why (Score's answer: "" is a pass), for Record.
func ResultOf(repeat int32, run *v1alpha1.AgentRun, why string) v1alpha1.EvaluationRunResult {
	return v1alpha1.EvaluationRunResult{Repeat: repeat, Run: run.Name, Passed: why == "",
		CostUSD: v1alpha1.USD(CostOf(run).String()), Verified: Verified(run), TurnsToCompletion: TurnsToCompletion(run)}
}
