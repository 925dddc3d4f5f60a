package evaluation

import (
	"strconv"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// RunName is the name of the run of case caseName's repeat in the
// evaluation named evaluation, as the evaluation's runs are named: the
// same case and repeat always give the same name. The CRD bounds the
// parts so that it is at most 63 characters.
func RunName(evaluation, caseName string, repeat int32) string {
	return evaluation + "-" + caseName + "-" + strconv.Itoa(int(repeat))
}

// ResultOf is the result of run, a case's run of repeat that has ended,
// scored with why (Score's answer: "" is a pass), for Record.
func ResultOf(repeat int32, run *v1alpha1.AgentRun, why string) v1alpha1.EvaluationRunResult {
	return v1alpha1.EvaluationRunResult{Repeat: repeat, Run: run.Name, Passed: why == "",
		CostUSD: v1alpha1.USD(CostOf(run).String()), TurnsToCompletion: TurnsToCompletion(run)}
}
