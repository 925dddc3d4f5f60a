package evaluation

import (
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// totals are the totals of passed and failed runs that cost cost
// together, verified of them verified ("" none), taking p50 turns.
func totals(passed, failed int32, cost string, verifiedRate string, p50 int32) *v1alpha1.EvaluationTotals {
	n := passed + failed
	return &v1alpha1.EvaluationTotals{Runs: n, Passed: passed, Failed: failed, PassRate: passRate(passed, n),
		CostUSD: v1alpha1.USD(cost), VerifiedRate: verifiedRate, TurnsToCompletionP50: ptr.To(p50)}
}

func caseOf(name string, passed, failed int32, why string) v1alpha1.EvaluationCaseStatus {
	return v1alpha1.EvaluationCaseStatus{Name: name, Runs: passed + failed, Passed: passed, Failed: failed, FailureReason: why}
}

// Each measure regresses only past its margin; a case regresses when it
// passed every run in the baseline and fails one now.
func TestCompare_regressesOnlyPastTheMargins(t *testing.T) {
	defaults, err := MarginsOf(&v1alpha1.EvaluationBaseline{Evaluation: "before"})
	if err != nil {
		t.Fatal(err)
	}
	loose, err := MarginsOf(&v1alpha1.EvaluationBaseline{Evaluation: "before", MaxPassRateDrop: "0.5", MaxCostIncrease: "1", MaxTurnsIncrease: 2})
	if err != nil {
		t.Fatal(err)
	}
	base := Group{Totals: totals(3, 1, "0.0400", "0.75", 2),
		Cases: []v1alpha1.EvaluationCaseStatus{caseOf("a", 2, 0, ""), caseOf("b", 1, 1, "x")}}
	cases := []struct {
		name    string
		got     Group
		margins Margins
		want    []v1alpha1.EvaluationRegression
	}{
		{"the same", base, defaults, nil},
		{"better everywhere", Group{Totals: totals(4, 0, "0.0200", "1.00", 1)}, defaults, nil},
		{"the pass rate within the margin (0.75 to 0.75) and cost within 20%",
			Group{Totals: totals(3, 1, "0.0480", "0.75", 2)}, defaults, nil},
		{"the pass rate down by more than 0.05", Group{Totals: totals(2, 2, "0.0400", "0.50", 2)}, defaults,
			[]v1alpha1.EvaluationRegression{{What: v1alpha1.RegressionPassRate, Baseline: "0.75", Value: "0.50",
				Message: "the pass rate fell from 0.75 to 0.50, more than 0.05"}, {What: v1alpha1.RegressionVerifiedRate, Baseline: "0.75", Value: "0.50",
				Message: "the verified rate fell from 0.75 to 0.50, more than 0.05: fewer answers were accepted by a verifier, whatever the pass rate"}}},
		{"the pass rate down within a loose margin", Group{Totals: totals(2, 2, "0.0400", "0.50", 2)}, loose, nil},
		{"no run verified although the pass rate went up", Group{Totals: totals(4, 0, "0.0400", "", 2)}, defaults,
			[]v1alpha1.EvaluationRegression{{What: v1alpha1.RegressionVerifiedRate, Baseline: "0.75", Value: "0.00",
				Message: "the verified rate fell from 0.75 to 0.00, more than 0.05: fewer answers were accepted by a verifier, whatever the pass rate"}}},
		{"a run costs more than 20% more", Group{Totals: totals(3, 1, "0.0484", "0.75", 2)}, defaults,
			[]v1alpha1.EvaluationRegression{{What: v1alpha1.RegressionCostPerRun, Baseline: "0.0100", Value: "0.0121",
				Message: "a run cost 0.0121 US dollars on average, more than 0.20 above the baseline's 0.0100"}}},
		{"twice the cost within a margin of 1", Group{Totals: totals(3, 1, "0.0800", "0.75", 2)}, loose, nil},
		{"more turns", Group{Totals: totals(3, 1, "0.0400", "0.75", 3)}, defaults,
			[]v1alpha1.EvaluationRegression{{What: v1alpha1.RegressionTurns, Baseline: "2", Value: "3",
				Message: "the median turns to completion rose from 2 to 3, more than 0"}}},
		{"more turns within the margin", Group{Totals: totals(3, 1, "0.0400", "0.75", 4)}, loose, nil},
		{"a case that passed fails; one that failed still fails", Group{Name: "b", Totals: totals(3, 1, "0.0400", "0.75", 2),
			Cases: []v1alpha1.EvaluationCaseStatus{caseOf("a", 1, 1, "outcome: expected Completed"), caseOf("b", 1, 1, "x")}}, defaults,
			[]v1alpha1.EvaluationRegression{{Variant: "b", What: v1alpha1.RegressionCase, Case: "a", Baseline: "2/2 passed", Value: "1/2 passed",
				Message: "variant b: case a passed every run in the baseline and now fails 1: outcome: expected Completed"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Compare(base, tc.got, tc.margins), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("regressions (-want +got):\n%s", diff)
			}
		})
	}
}

// evalWith is a complete evaluation whose status has groups: one named
// "" is status.totals and status.cases, others are variants.
func evalWith(name string, baseline string, groups ...Group) *v1alpha1.AgentEvaluation {
	e := &v1alpha1.AgentEvaluation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	if baseline != "" {
		e.Spec.Baseline = &v1alpha1.EvaluationBaseline{Evaluation: baseline}
	}
	for _, g := range groups {
		if g.Name == "" {
			e.Status.Totals, e.Status.Cases = g.Totals, g.Cases
			continue
		}
		e.Status.Variants = append(e.Status.Variants, v1alpha1.EvaluationVariantStatus{Name: g.Name, Totals: g.Totals, Cases: g.Cases})
	}
	e.Status.Conditions = []metav1.Condition{{Type: v1alpha1.EvaluationConditionComplete, Status: metav1.ConditionTrue}}
	return e
}

// The gate matches variants by name, says why it could not compare, and
// puts the totals before the cases.
func TestGate_matchesVariantsByNameAndSaysWhyNot(t *testing.T) {
	good := Group{Totals: totals(2, 0, "0.02", "", 2), Cases: []v1alpha1.EvaluationCaseStatus{caseOf("a", 2, 0, "")}}
	worse := Group{Totals: totals(0, 2, "0.02", "", 2), Cases: []v1alpha1.EvaluationCaseStatus{caseOf("a", 0, 2, "no")}}
	named := func(n string, g Group) Group { g.Name = n; return g }
	running := evalWith("before", "", good)
	running.Status.Conditions = nil
	cases := []struct {
		name       string
		e, base    *v1alpha1.AgentEvaluation
		wantWhat   []v1alpha1.RegressionKind
		wantReason string
		wantMsg    string
	}{
		{"no baseline", evalWith("after", "before", good), nil, nil, v1alpha1.ReasonBaselineNotFound,
			"the baseline evaluation before does not exist in namespace ns: nothing was compared"},
		{"a baseline still running", evalWith("after", "before", good), running, nil, v1alpha1.ReasonBaselineNotComplete,
			"the baseline evaluation before had not scored all its runs when this one completed: nothing was compared; name a complete evaluation"},
		{"one template against one", evalWith("after", "before", good), evalWith("before", "", good), nil, v1alpha1.ReasonNoRegressions,
			"compared the template (spec.templateRef) with before: nothing regressed"},
		{"variants against one template", evalWith("after", "before", named("x", good), named("y", good)), evalWith("before", "", good), nil,
			v1alpha1.ReasonBaselineMismatch, "nothing to compare: this evaluation has variant x, variant y, the baseline before has the template (spec.templateRef); variants are compared by name"},
		{"variants by name, one new", evalWith("after", "before", named("x", good), named("y", worse), named("z", worse)),
			evalWith("before", "", named("y", good), named("x", good)),
			[]v1alpha1.RegressionKind{v1alpha1.RegressionPassRate, v1alpha1.RegressionCase}, v1alpha1.ReasonEvaluationRegressed,
			"compared variant x, variant y with before: 2 regressed; variant y: the pass rate fell from 1.00 to 0.00, more than 0.05; not in the baseline, not compared: variant z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			regs, reason, msg := Gate(tc.e, tc.base)
			var what []v1alpha1.RegressionKind
			for _, r := range regs {
				what = append(what, r.What)
			}
			if diff := cmp.Diff([]any{tc.wantWhat, tc.wantReason, tc.wantMsg}, []any{what, reason, msg}); diff != "" {
				t.Errorf("(regressions, reason, message) (-want +got):\n%s", diff)
			}
		})
	}
}

// An evaluation with a baseline ends Regressed, with the regressions in
// status, when a variant regressed; an evaluation whose baseline is gone
// ends as its runs say, the condition saying why nothing was compared.
func TestSetStatusAgainst_endsRegressedOrSaysWhyNotCompared(t *testing.T) {
	spec := v1alpha1.AgentEvaluationSpec{Cases: []v1alpha1.EvaluationCase{{Name: "a"}},
		Variants: []v1alpha1.EvaluationVariant{{Name: "x"}, {Name: "y"}},
		Baseline: &v1alpha1.EvaluationBaseline{Evaluation: "before"}}
	result := func(passed, verified bool) v1alpha1.EvaluationRunResult {
		return v1alpha1.EvaluationRunResult{Repeat: 1, Run: "r", Passed: passed, Verified: verified, CostUSD: "0.01", TurnsToCompletion: ptr.To[int32](2)}
	}
	base := &v1alpha1.AgentEvaluation{ObjectMeta: metav1.ObjectMeta{Name: "before"}, Spec: spec}
	base.Spec.Baseline = nil
	VariantCaseStatus(&base.Status, "x", "a").Results = []v1alpha1.EvaluationRunResult{result(true, true)}
	VariantCaseStatus(&base.Status, "y", "a").Results = []v1alpha1.EvaluationRunResult{result(false, false)}
	now := metav1.Now()
	SetStatus(base, nil, now)
	if base.Status.Phase != v1alpha1.EvaluationFailed || base.Status.Variants[0].Totals.VerifiedRate != "1.00" {
		t.Fatalf("baseline: phase %s, variant x %+v; want Failed, verified rate 1.00", base.Status.Phase, base.Status.Variants[0].Totals)
	}

	// Variant x passes without verifying; y now passes (and verifies).
	e := &v1alpha1.AgentEvaluation{ObjectMeta: metav1.ObjectMeta{Name: "after"}, Spec: spec}
	VariantCaseStatus(&e.Status, "x", "a").Results = []v1alpha1.EvaluationRunResult{result(true, false)}
	VariantCaseStatus(&e.Status, "y", "a").Results = []v1alpha1.EvaluationRunResult{result(true, true)}
	gone := e.DeepCopy()
	SetStatusAgainst(e, base, nil, now)
	got := []any{e.Status.Phase, len(e.Status.Regressions), condition(e, v1alpha1.EvaluationConditionBaselineCompared),
		condition(e, v1alpha1.EvaluationConditionComplete)}
	want := []any{v1alpha1.EvaluationRegressed, 1,
		"True/Regressed: compared variant x, variant y with before: 1 regressed; variant x: the verified rate fell from 1.00 to 0.00, more than 0.05: fewer answers were accepted by a verifier, whatever the pass rate",
		"True/Regressed: 1 regressed against before: variant x: the verified rate fell from 1.00 to 0.00, more than 0.05: fewer answers were accepted by a verifier, whatever the pass rate; 2 of 2 runs passed"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(phase, regressions, BaselineCompared, Complete) (-want +got):\n%s", diff)
	}

	SetStatusAgainst(gone, nil, nil, now)
	got = []any{gone.Status.Phase, len(gone.Status.Regressions), condition(gone, v1alpha1.EvaluationConditionBaselineCompared)}
	want = []any{v1alpha1.EvaluationPassed, 0,
		"False/BaselineNotFound: the baseline evaluation before does not exist in namespace : nothing was compared"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(phase, regressions, BaselineCompared) without the baseline (-want +got):\n%s", diff)
	}
}

func condition(e *v1alpha1.AgentEvaluation, typ string) string {
	for _, c := range e.Status.Conditions {
		if c.Type == typ {
			return string(c.Status) + "/" + c.Reason + ": " + c.Message
		}
	}
	return ""
}
