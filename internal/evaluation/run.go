package evaluation

import (
	"fmt"
	"strconv"
	"strings"

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
	res := v1alpha1.EvaluationRunResult{Repeat: repeat, Run: run.Name, Passed: why == "",
		CostUSD: v1alpha1.USD(CostOf(run).String()), Verified: Verified(run), TurnsToCompletion: TurnsToCompletion(run)}
	if c := run.Status.Convergence; c != nil {
		res.RepeatedIntentDepth = c.RepeatedIntentDepth
		if run.Status.Outcome == v1alpha1.OutcomeCompleted {
			res.Headroom = leastHeadroom(c.Headroom)
		}
	}
	return res
}

// leastHeadroom is the smallest of a run's headroom fractions, "" when
// it records none readable.
func leastHeadroom(h map[string]string) string {
	least := -1
	for _, v := range h {
		if n, ok := hundredths(v); ok && (least < 0 || n < least) {
			least = n
		}
	}
	if least < 0 {
		return ""
	}
	return fmt.Sprintf("%d.%02d", least/100, least%100)
}

// hundredths reads a fraction written "0.00" to "1.00" as hundredths.
func hundredths(s string) (int, bool) {
	whole, frac, ok := strings.Cut(s, ".")
	if !ok || len(frac) != 2 {
		return 0, false
	}
	w, err1 := strconv.Atoi(whole)
	f, err2 := strconv.Atoi(frac)
	if err1 != nil || err2 != nil || w < 0 || f < 0 {
		return 0, false
	}
	return w*100 + f, true
}
