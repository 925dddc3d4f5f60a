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
	return VariantCaseStatus(st, "", name)
}

// VariantCaseStatus is the status of case name of variant ("" for an
// evaluation with spec.templateRef: status.cases), added if missing.
func VariantCaseStatus(st *v1alpha1.AgentEvaluationStatus, variant, name string) *v1alpha1.EvaluationCaseStatus {
	cases := casesOf(st, variant)
	for i := range *cases {
		if (*cases)[i].Name == name {
			return &(*cases)[i]
		}
	}
	*cases = append(*cases, v1alpha1.EvaluationCaseStatus{Name: name})
	return &(*cases)[len(*cases)-1]
}

// casesOf is the case statuses of variant: status.cases for "", else the
// variant's, the variant added if missing.
func casesOf(st *v1alpha1.AgentEvaluationStatus, variant string) *[]v1alpha1.EvaluationCaseStatus {
	if variant == "" {
		return &st.Cases
	}
	for i := range st.Variants {
		if st.Variants[i].Name == variant {
			return &st.Variants[i].Cases
		}
	}
	st.Variants = append(st.Variants, v1alpha1.EvaluationVariantStatus{Name: variant})
	return &st.Variants[len(st.Variants)-1].Cases
}

// Variants are the templates e runs: spec.variants, or one variant named
// "" of spec.templateRef.
func Variants(e *v1alpha1.AgentEvaluation) []v1alpha1.EvaluationVariant {
	if len(e.Spec.Variants) > 0 {
		return e.Spec.Variants
	}
	var ref v1alpha1.TemplateRef
	if e.Spec.TemplateRef != nil {
		ref = *e.Spec.TemplateRef
	}
	return []v1alpha1.EvaluationVariant{{TemplateRef: ref}}
}

// Verified reports whether the run's verifier accepted its answer.
func Verified(run *v1alpha1.AgentRun) bool {
	v := run.Status.Verification
	return v != nil && v.LastVerdict == v1alpha1.VerdictVerified
}

// tally adds up scored results.
type tally struct {
	runs, passed, failed, verified int32
	cost                           loop.Money
	turns                          []int32
	// the deepest repeated intent, the Completed runs' headroom in
	// hundredths.
	depth    int32
	headroom []int32
	// judged runs, the sum of their scores, and the judge's use.
	judged, judgeScores int32
	judgeCost           loop.Money
	judgeTokens         int64
}

func (t *tally) add(r v1alpha1.EvaluationRunResult) {
	if r.Passed {
		t.passed++
	} else {
		t.failed++
	}
	if r.Verified {
		t.verified++
	}
	m, _ := limits.Money("costUSD", r.CostUSD) // written by record from a parsed amount
	t.cost += m
	if r.TurnsToCompletion != nil {
		t.turns = append(t.turns, *r.TurnsToCompletion)
	}
	t.depth = max(t.depth, r.RepeatedIntentDepth)
	if h, ok := hundredths(r.Headroom); ok {
		t.headroom = append(t.headroom, int32(h))
	}
	if r.JudgeScore != nil {
		t.judged++
		t.judgeScores += *r.JudgeScore
	}
	jm, _ := limits.Money("judgeCostUSD", r.JudgeCostUSD) // written from a priced amount
	t.judgeCost += jm
	t.judgeTokens += r.JudgeTokens
}

func (t *tally) merge(o tally) {
	t.runs += o.runs
	t.passed += o.passed
	t.failed += o.failed
	t.verified += o.verified
	t.cost += o.cost
	t.turns = append(t.turns, o.turns...)
	t.depth = max(t.depth, o.depth)
	t.headroom = append(t.headroom, o.headroom...)
	t.judged += o.judged
	t.judgeScores += o.judgeScores
	t.judgeCost += o.judgeCost
	t.judgeTokens += o.judgeTokens
}

func (t *tally) totals() *v1alpha1.EvaluationTotals {
	tot := v1alpha1.EvaluationTotals{Runs: t.runs, Passed: t.passed, Failed: t.failed, Verified: t.verified}
	if n := t.passed + t.failed; n > 0 {
		tot.PassRate = passRate(t.passed, n)
		tot.CostUSD = v1alpha1.USD(t.cost.String())
		if t.verified > 0 {
			tot.VerifiedRate = passRate(t.verified, n)
		}
	}
	tot.TurnsToCompletionP50, tot.TurnsToCompletionP95 = percentile(t.turns, 50), percentile(t.turns, 95)
	tot.RepeatedIntentDepthMax = t.depth
	if h := percentile(t.headroom, 50); h != nil {
		tot.HeadroomP50 = fmt.Sprintf("%d.%02d", *h/100, *h%100)
	}
	if t.judged > 0 {
		tot.Judged = t.judged
		tot.JudgeMeanScore = passRate(t.judgeScores, t.judged) // a mean of whole scores, written as a rate is
	}
	if t.judgeCost > 0 {
		tot.JudgeCostUSD = v1alpha1.USD(t.judgeCost.String())
	}
	tot.JudgeTokens = t.judgeTokens
	return &tot
}

// SetStatus computes everything in status that derives from the cases'
// results: the counts, the totals, the conditions and the phase. pending
// counts, by case, the runs that exist and have not been scored. It is
// SetStatusAgainst without a baseline: an evaluation with spec.baseline
// completes with its baseline not found.
func SetStatus(e *v1alpha1.AgentEvaluation, pending map[string]int32, now metav1.Time) {
	SetStatusAgainst(e, nil, pending, now)
}

// PendingKey is the key of pending (SetStatusAgainst) for the runs of
// case of variant ("" for spec.templateRef's: the case's name alone).
func PendingKey(variant, caseName string) string {
	if variant == "" {
		return caseName
	}
	return variant + "/" + caseName
}

// SetStatusAgainst is SetStatus, and once every run is scored, the
// comparison with baseline, the evaluation spec.baseline names (nil when
// it was not found; ignored without spec.baseline): status.regressions,
// the BaselineCompared condition, and the phase Regressed when something
// regressed. pending is keyed by PendingKey.
func SetStatusAgainst(e, baseline *v1alpha1.AgentEvaluation, pending map[string]int32, now metav1.Time) {
	SetStatusAgainstFrom(e, baseline, "", pending, now)
}

// SetStatusAgainstFrom is SetStatusAgainst, the BaselineCompared
// condition saying where the baseline was found: from is what was
// compared with ("archived evaluation X finished at T"), or, baseline
// nil, where it was looked for ("in namespace N or in the archive"); ""
// says neither.
func SetStatusAgainstFrom(e, baseline *v1alpha1.AgentEvaluation, from string, pending map[string]int32, now metav1.Time) {
	st := &e.Status
	repeats := max(e.Spec.Repeats, 1)
	var all tally
	done := true
	cases := Cases(e)
	variants := Variants(e)
	vstatus := make([]v1alpha1.EvaluationVariantStatus, 0, len(e.Spec.Variants))
	for _, v := range variants {
		cstatus := make([]v1alpha1.EvaluationCaseStatus, 0, len(cases))
		vt := tally{runs: int32(len(cases)) * repeats}
		for _, c := range cases {
			cs := *VariantCaseStatus(st, v.Name, c.Name)
			var ct tally
			for _, r := range cs.Results {
				ct.add(r)
			}
			cs.Passed, cs.Failed = ct.passed, ct.failed
			cs.Runs = int32(len(cs.Results)) + pending[PendingKey(v.Name, c.Name)]
			done = done && int32(len(cs.Results)) >= repeats
			vt.merge(ct)
			cstatus = append(cstatus, cs)
		}
		all.merge(vt)
		if v.Name == "" {
			st.Cases = cstatus
			continue
		}
		vstatus = append(vstatus, v1alpha1.EvaluationVariantStatus{Name: v.Name, Cases: cstatus, Totals: vt.totals()})
	}
	if len(e.Spec.Variants) > 0 {
		st.Variants = vstatus
	}
	tot := *all.totals()
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
		if e.Spec.Baseline != nil {
			set(v1alpha1.EvaluationConditionBaselineCompared, metav1.ConditionUnknown, v1alpha1.ReasonEvaluationRunning,
				"compared with "+e.Spec.Baseline.Evaluation+" once every run is scored")
		}
		st.Phase = v1alpha1.EvaluationRunning
		return
	}
	reason, phase := v1alpha1.ReasonEvaluationPassed, v1alpha1.EvaluationPassed
	if tot.Failed > 0 {
		reason, phase = v1alpha1.ReasonEvaluationFailed, v1alpha1.EvaluationFailed
	}
	msg := fmt.Sprintf("%d of %d runs passed", tot.Passed, tot.Runs)
	if tot.Failed > 0 {
		msg += firstFailure(st)
	}
	if e.Spec.Baseline != nil {
		if !Complete(e) {
			// Compared once, as the evaluation completes: a complete
			// evaluation is a record, whatever becomes of its baseline.
			regs, condReason, condMsg := Gate(e, baseline)
			switch {
			case from == "":
			case baseline == nil:
				condMsg = fmt.Sprintf("the baseline evaluation %s is not %s: nothing was compared", e.Spec.Baseline.Evaluation, from)
			default:
				condMsg = "against the " + from + ": " + condMsg
			}
			st.Regressions = regs
			status := metav1.ConditionFalse
			if condReason == v1alpha1.ReasonEvaluationRegressed || condReason == v1alpha1.ReasonNoRegressions {
				status = metav1.ConditionTrue
			}
			set(v1alpha1.EvaluationConditionBaselineCompared, status, condReason, clipReason(condMsg))
		}
		if c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.EvaluationConditionBaselineCompared); c != nil && c.Status == metav1.ConditionFalse {
			msg += "; not compared with the baseline: " + c.Message
		}
		if regs := st.Regressions; len(regs) > 0 {
			reason, phase = v1alpha1.ReasonEvaluationRegressed, v1alpha1.EvaluationRegressed
			msg = fmt.Sprintf("%d regressed against %s: %s; %s", len(regs), e.Spec.Baseline.Evaluation, regs[0].Message, msg)
		}
	}
	set(v1alpha1.EvaluationConditionRunning, metav1.ConditionFalse, reason, msg)
	set(v1alpha1.EvaluationConditionComplete, metav1.ConditionTrue, reason, clipReason(msg))
	st.Phase = phase
	if st.CompletionTime == nil {
		st.CompletionTime = &now
	}
}

// SetCondition sets one of the conditions the reconciler's phases find
// (Budgeted, CasesRead): True when ok, else False.
func SetCondition(e *v1alpha1.AgentEvaluation, typ string, ok bool, reason, msg string, now metav1.Time) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	apimeta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: typ, Status: status,
		Reason: reason, Message: clipReason(msg), ObservedGeneration: e.Generation, LastTransitionTime: now})
}

// firstFailure is "; case NAME failed N: REASON" for the first failing
// case (of the first variant with one), or "".
func firstFailure(st *v1alpha1.AgentEvaluationStatus) string {
	for _, cs := range st.Cases {
		if cs.Failed > 0 {
			return fmt.Sprintf("; case %s failed %d: %s", cs.Name, cs.Failed, cs.FailureReason)
		}
	}
	for _, v := range st.Variants {
		for _, cs := range v.Cases {
			if cs.Failed > 0 {
				return fmt.Sprintf("; variant %s case %s failed %d: %s", v.Name, cs.Name, cs.Failed, cs.FailureReason)
			}
		}
	}
	return ""
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
