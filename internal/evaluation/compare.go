package evaluation

import (
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// maxRegressions bounds status.regressions.
const maxRegressions = 64

// Margins are how much worse than its baseline an evaluation may do
// before it has regressed (spec.baseline).
type Margins struct {
	// PassRateDrop is how far the pass rate and the verified rate may fall.
	PassRateDrop *big.Rat
	// CostIncrease is how much more a run may cost on average, as a
	// fraction of the baseline's average.
	CostIncrease *big.Rat
	// TurnsIncrease is how many more turns to completion (the median) the
	// runs may take.
	TurnsIncrease int32
}

// MarginsOf reads spec.baseline's margins. An empty fraction is the
// CRD's default, for an evaluation the API server has not defaulted (a
// local one).
func MarginsOf(b *v1alpha1.EvaluationBaseline) (Margins, error) {
	drop, err := fraction("maxPassRateDrop", b.MaxPassRateDrop, "0.05")
	if err != nil {
		return Margins{}, err
	}
	cost, err := fraction("maxCostIncrease", b.MaxCostIncrease, "0.20")
	if err != nil {
		return Margins{}, err
	}
	return Margins{PassRateDrop: drop, CostIncrease: cost, TurnsIncrease: b.MaxTurnsIncrease}, nil
}

func fraction(field string, f v1alpha1.Fraction, def string) (*big.Rat, error) {
	s := string(f)
	if s == "" {
		s = def
	}
	r, ok := decimal(s)
	if !ok || r.Sign() < 0 {
		return nil, fmt.Errorf("spec.baseline.%s: %q is not a non-negative decimal such as \"0.05\"", field, s)
	}
	return r, nil
}

// decimal reads a decimal string ("0.75", "0.0400"); "" and anything
// else is not one.
func decimal(s string) (*big.Rat, bool) {
	if s == "" || strings.ContainsAny(s, "/eE") {
		return nil, false
	}
	return new(big.Rat).SetString(s)
}

// Group is one variant's results: its totals and its cases. Name is ""
// for an evaluation with spec.templateRef.
type Group struct {
	Name   string
	Totals *v1alpha1.EvaluationTotals
	Cases  []v1alpha1.EvaluationCaseStatus
}

// Groups are the results of st by variant: status.variants, or one
// group named "" of status.totals and status.cases.
func Groups(st *v1alpha1.AgentEvaluationStatus) []Group {
	if len(st.Variants) == 0 {
		return []Group{{Totals: st.Totals, Cases: st.Cases}}
	}
	out := make([]Group, 0, len(st.Variants))
	for _, v := range st.Variants {
		out = append(out, Group{Name: v.Name, Totals: v.Totals, Cases: v.Cases})
	}
	return out
}

// Compare returns what regressed in got against base, its counterpart in
// the baseline: the pass rate or the verified rate fell by more than
// m.PassRateDrop (an unset verified rate is none verified), the average
// cost of a run rose by more than m.CostIncrease of the baseline's, the
// median turns to completion rose by more than m.TurnsIncrease, and then
// each case whose every run passed in the baseline and that now has a
// failed run.
func Compare(base, got Group, m Margins) []v1alpha1.EvaluationRegression {
	var regs []v1alpha1.EvaluationRegression
	add := func(what v1alpha1.RegressionKind, caseName, was, is, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if got.Name != "" {
			msg = "variant " + got.Name + ": " + msg
		}
		regs = append(regs, v1alpha1.EvaluationRegression{Variant: got.Name, What: what, Case: caseName,
			Baseline: was, Value: is, Message: clipTo(msg, 1024)})
	}
	bt, gt := orEmpty(base.Totals), orEmpty(got.Totals)
	if was, ok := decimal(bt.PassRate); ok {
		if is, ok := decimal(gt.PassRate); ok && fell(was, is, m.PassRateDrop) {
			add(v1alpha1.RegressionPassRate, "", bt.PassRate, gt.PassRate,
				"the pass rate fell from %s to %s, more than %s", bt.PassRate, gt.PassRate, m.PassRateDrop.FloatString(2))
		}
	}
	if bt.VerifiedRate != "" && gt.PassRate != "" {
		was, _ := decimal(bt.VerifiedRate)
		isS := gt.VerifiedRate
		if isS == "" {
			isS = "0.00" // scored, and none verified
		}
		if is, ok := decimal(isS); ok && was != nil && fell(was, is, m.PassRateDrop) {
			add(v1alpha1.RegressionVerifiedRate, "", bt.VerifiedRate, isS,
				"the verified rate fell from %s to %s, more than %s: fewer answers were accepted by a verifier, whatever the pass rate",
				bt.VerifiedRate, isS, m.PassRateDrop.FloatString(2))
		}
	}
	if was, ok := perRun(bt); ok {
		if is, ok := perRun(gt); ok {
			ceiling := new(big.Rat).Mul(was, new(big.Rat).Add(big.NewRat(1, 1), m.CostIncrease))
			if is.Cmp(ceiling) > 0 {
				add(v1alpha1.RegressionCostPerRun, "", was.FloatString(4), is.FloatString(4),
					"a run cost %s US dollars on average, more than %s above the baseline's %s",
					is.FloatString(4), m.CostIncrease.FloatString(2), was.FloatString(4))
			}
		}
	}
	if was, is := bt.TurnsToCompletionP50, gt.TurnsToCompletionP50; was != nil && is != nil && *is > *was+m.TurnsIncrease {
		add(v1alpha1.RegressionTurns, "", strconv.Itoa(int(*was)), strconv.Itoa(int(*is)),
			"the median turns to completion rose from %d to %d, more than %d", *was, *is, m.TurnsIncrease)
	}
	for _, c := range got.Cases {
		i := slices.IndexFunc(base.Cases, func(b v1alpha1.EvaluationCaseStatus) bool { return b.Name == c.Name })
		if i < 0 || c.Failed == 0 {
			continue
		}
		b := base.Cases[i]
		if b.Failed > 0 || b.Passed == 0 {
			continue
		}
		add(v1alpha1.RegressionCase, c.Name, fmt.Sprintf("%d/%d passed", b.Passed, b.Passed), fmt.Sprintf("%d/%d passed", c.Passed, c.Passed+c.Failed),
			"case %s passed every run in the baseline and now fails %d: %s", c.Name, c.Failed, excerpt(c.FailureReason))
	}
	return regs
}

// fell reports whether is is below was by more than margin.
func fell(was, is, margin *big.Rat) bool {
	return new(big.Rat).Sub(was, is).Cmp(margin) > 0
}

// perRun is the average cost of a scored run.
func perRun(t *v1alpha1.EvaluationTotals) (*big.Rat, bool) {
	n := t.Passed + t.Failed
	cost, ok := decimal(string(t.CostUSD))
	if n == 0 || !ok {
		return nil, false
	}
	return cost.Quo(cost, big.NewRat(int64(n), 1)), true
}

func orEmpty(t *v1alpha1.EvaluationTotals) *v1alpha1.EvaluationTotals {
	if t == nil {
		return &v1alpha1.EvaluationTotals{}
	}
	return t
}

// Gate compares e, every run scored, with baseline, the evaluation its
// spec.baseline names (nil when it does not exist): each variant with the
// baseline's of the same name (an evaluation with spec.templateRef with
// a baseline with one). It returns the regressions (at most 64, the
// totals before the cases), the BaselineCompared condition's reason
// (Regressed, NoRegressions, BaselineNotFound, BaselineNotComplete,
// BaselineMismatch or BaselineInvalid) and a message that says what was compared.
func Gate(e, baseline *v1alpha1.AgentEvaluation) (regs []v1alpha1.EvaluationRegression, reason, msg string) {
	name := e.Spec.Baseline.Evaluation
	switch {
	case baseline == nil:
		return nil, v1alpha1.ReasonBaselineNotFound, fmt.Sprintf(
			"the baseline evaluation %s does not exist in namespace %s: nothing was compared", name, e.Namespace)
	case !Complete(baseline):
		return nil, v1alpha1.ReasonBaselineNotComplete, fmt.Sprintf(
			"the baseline evaluation %s had not scored all its runs when this one completed: nothing was compared; name a complete evaluation", name)
	}
	m, err := MarginsOf(e.Spec.Baseline)
	if err != nil {
		return nil, v1alpha1.ReasonBaselineInvalid, err.Error()
	}
	base := Groups(&baseline.Status)
	var compared, alone []string
	for _, g := range Groups(&e.Status) {
		i := slices.IndexFunc(base, func(b Group) bool { return b.Name == g.Name })
		if i < 0 {
			alone = append(alone, describe(g.Name))
			continue
		}
		compared = append(compared, describe(g.Name))
		regs = append(regs, Compare(base[i], g, m)...)
	}
	if len(compared) == 0 {
		var theirs []string
		for _, b := range base {
			theirs = append(theirs, describe(b.Name))
		}
		return nil, v1alpha1.ReasonBaselineMismatch, fmt.Sprintf(
			"nothing to compare: this evaluation has %s, the baseline %s has %s; variants are compared by name",
			strings.Join(alone, ", "), name, strings.Join(theirs, ", "))
	}
	slices.SortStableFunc(regs, func(a, b v1alpha1.EvaluationRegression) int {
		return boolInt(a.What == v1alpha1.RegressionCase) - boolInt(b.What == v1alpha1.RegressionCase)
	})
	if len(regs) > maxRegressions {
		regs = regs[:maxRegressions]
	}
	reason, msg = v1alpha1.ReasonNoRegressions, fmt.Sprintf("compared %s with %s: nothing regressed", strings.Join(compared, ", "), name)
	if len(regs) > 0 {
		reason, msg = v1alpha1.ReasonEvaluationRegressed, fmt.Sprintf("compared %s with %s: %d regressed; %s",
			strings.Join(compared, ", "), name, len(regs), regs[0].Message)
	}
	if len(alone) > 0 {
		msg += "; not in the baseline, not compared: " + strings.Join(alone, ", ")
	}
	return regs, reason, msg
}

// describe names a variant in a message.
func describe(variant string) string {
	if variant == "" {
		return "the template (spec.templateRef)"
	}
	return "variant " + variant
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
