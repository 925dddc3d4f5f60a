package evaluation

import (
	"fmt"
	"slices"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/loop"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Record adds a scored run to its case's results, once: the first failed
// run (the lowest repeat) gives the case's failure reason.
func Record(cs *v1alpha1.EvaluationCaseStatus, res v1alpha1.EvaluationRunResult, why string) {
	if slices.ContainsFunc(cs.Results, func(r v1alpha1.EvaluationRunResult) bool { return r.Repeat == res.Repeat }) {
		return
	}
	cs.Results = append(cs.Results, res)
	slices.SortFunc(cs.Results, func(a, b v1alpha1.EvaluationRunResult) int { return int(a.Repeat - b.Repeat) })
	if res.Passed {
		return
	}
	first := slices.IndexFunc(cs.Results, func(r v1alpha1.EvaluationRunResult) bool { return !r.Passed })
	if cs.Results[first].Repeat == res.Repeat {
		cs.FailedRun, cs.FailureReason = res.Run, clipReason(why)
	}
}

// Scored reports whether the case's run of repeat has been scored.
func Scored(cs *v1alpha1.EvaluationCaseStatus, repeat int32) bool {
	return slices.ContainsFunc(cs.Results, func(r v1alpha1.EvaluationRunResult) bool { return r.Repeat == repeat })
}

// CaseStatus is the status of case name, added in spec order if missing.
func CaseStatus(st *v1alpha1.AgentEvaluationStatus, name string) *v1alpha1.EvaluationCaseStatus {
	for i := range st.Cases {
		if st.Cases[i].Name == name {
			return &st.Cases[i]
		}
	}
	st.Cases = append(st.Cases, v1alpha1.EvaluationCaseStatus{Name: name})
	return &st.Cases[len(st.Cases)-1]
}

// SetStatus computes everything in status that derives from the cases'
// results: the counts, the totals, the conditions and the phase. pending
// counts, by case, the runs that exist and have not been scored.
func SetStatus(e *v1alpha1.AgentEvaluation, pending map[string]int32, now metav1.Time) {
	st := &e.Status
	repeats := max(e.Spec.Repeats, 1)
	cases := make([]v1alpha1.EvaluationCaseStatus, 0, len(e.Spec.Cases))
	tot := v1alpha1.EvaluationTotals{Runs: int32(len(e.Spec.Cases)) * repeats}
	var cost loop.Money
	var turns []int32
	done := true
	for _, c := range e.Spec.Cases {
		cs := *CaseStatus(st, c.Name)
		cs.Passed, cs.Failed = 0, 0
		for _, r := range cs.Results {
			if r.Passed {
				cs.Passed++
			} else {
				cs.Failed++
			}
			m, _ := limits.Money("costUSD", r.CostUSD) // written by record from a parsed amount
			cost += m
			if r.TurnsToCompletion != nil {
				turns = append(turns, *r.TurnsToCompletion)
			}
		}
		cs.Runs = int32(len(cs.Results)) + pending[c.Name]
		tot.Passed += cs.Passed
		tot.Failed += cs.Failed
		done = done && int32(len(cs.Results)) >= repeats
		cases = append(cases, cs)
	}
	st.Cases = cases
	if n := tot.Passed + tot.Failed; n > 0 {
		tot.PassRate = passRate(tot.Passed, n)
		tot.CostUSD = v1alpha1.USD(cost.String())
	}
	tot.TurnsToCompletionP50, tot.TurnsToCompletionP95 = percentile(turns, 50), percentile(turns, 95)
	st.Totals = &tot
	st.ObservedGeneration = e.Generation

	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
			Message: msg, ObservedGeneration: e.Generation, LastTransitionTime: now})
	}
	if !done {
		msg := fmt.Sprintf("%d of %d runs scored, %d passed", tot.Passed+tot.Failed, tot.Runs, tot.Passed)
		set(v1alpha1.EvaluationConditionRunning, metav1.ConditionTrue, v1alpha1.ReasonEvaluationRunning, msg)
		set(v1alpha1.EvaluationConditionComplete, metav1.ConditionFalse, v1alpha1.ReasonEvaluationRunning, msg)
		st.Phase = v1alpha1.EvaluationRunning
		return
	}
	reason, phase := v1alpha1.ReasonEvaluationPassed, v1alpha1.EvaluationPassed
	if tot.Failed > 0 {
		reason, phase = v1alpha1.ReasonEvaluationFailed, v1alpha1.EvaluationFailed
	}
	msg := fmt.Sprintf("%d of %d runs passed", tot.Passed, tot.Runs)
	if tot.Failed > 0 {
		for _, cs := range st.Cases {
			if cs.Failed > 0 {
				msg += fmt.Sprintf("; case %s failed %d: %s", cs.Name, cs.Failed, cs.FailureReason)
				break
			}
		}
	}
	set(v1alpha1.EvaluationConditionRunning, metav1.ConditionFalse, reason, msg)
	set(v1alpha1.EvaluationConditionComplete, metav1.ConditionTrue, reason, clipReason(msg))
	st.Phase = phase
	if st.CompletionTime == nil {
		st.CompletionTime = &now
	}
}

// Complete reports whether every run of e has been scored.
func Complete(e *v1alpha1.AgentEvaluation) bool {
	return apimeta.IsStatusConditionTrue(e.Status.Conditions, v1alpha1.EvaluationConditionComplete)
}

// passRate is passed over n as a decimal string with two places, rounded
// down: "0.66" for 2 of 3, "1.00" only when every run passed.
func passRate(passed, n int32) string {
	hundredths := int64(passed) * 100 / int64(n)
	return fmt.Sprintf("%d.%02d", hundredths/100, hundredths%100)
}

// percentile is the p-th percentile of xs by nearest rank (the smallest
// value at least p% of xs are at or below), nil for no values.
func percentile(xs []int32, p int) *int32 {
	if len(xs) == 0 {
		return nil
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100 // ceil(p/100 * n)
	v := s[max(rank, 1)-1]
	return &v
}

// clipReason bounds a reason to status.cases[].failureReason's length.
func clipReason(s string) string { return clipTo(s, 2048) }
