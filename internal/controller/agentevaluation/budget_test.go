package agentevaluation

import (
	"context"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/budget"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// makeBudget creates an AgentBudget of maxCostUSD that selects the runs
// labelled selects, whose runs have already spent settled (as the
// AgentBudget reconciler settles them), and which one lease may hold
// whole.
func makeBudget(t *testing.T, ns, name, maxCost, settled string, selects map[string]string) *v1alpha1.AgentBudget {
	t.Helper()
	b := &v1alpha1.AgentBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.AgentBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: selects}, MaxCostUSD: v1alpha1.USD(maxCost),
			PerRun: &v1alpha1.BudgetPerRun{Fraction: "1"}}}
	if err := cluster.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	b.Status.WindowStart, b.Status.SettledCostUSD, b.Status.ConsumedCostUSD = &now, v1alpha1.USD(settled), v1alpha1.USD(settled)
	if err := cluster.Client.Status().Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

// Issue 48: the evaluation's spend stays inside its budget, judge
// included. The runs lease from the budget as every run it selects does;
// each judge call leases its worst case from the same budget first and
// settles what it spent: with $0.01 of $0.015 spent by the runs, two
// calls ($0.0012 each, at most some $0.0027) fit and the third does not,
// so it is not made and its run fails saying why. The budget ends with
// exactly the runs' and the judge's spend settled and no lease open.
func TestEvaluation_spendStaysInsideItsBudgetJudgeIncluded(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	b := makeBudget(t, ns, "eval-budget", "0.015", "0.01", map[string]string{v1alpha1.LabelEvaluation: "budgeted"})
	usage := &v1alpha1.ScriptUsage{InputTokens: 1000, OutputTokens: 100}
	verdict := v1alpha1.ScriptStep{Content: `{"score": 5, "rationale": "Names the refund."}`, Usage: usage}
	eb := makeEval(ns, "budgeted").concurrency(3).answering("one", "82").answering("two", "82").answering("three", "82").
		judged(4, verdict, verdict, verdict)
	eb.e.Spec.Judge.Model.MaxOutputTokens = ptr.To[int32](1000)
	eb.e.Spec.BudgetRef = &v1alpha1.BudgetRef{Name: b.Name}
	e := eb.create(t)
	var calls int
	r := NewReconciler(Config{Base: reconcilers.Base{Client: cluster.Client, APIReader: cluster.Client}, Judges: countedJudges(&calls)})
	reconcileOnce(t, r, e)
	runs := runsOf(t, e)
	if len(runs) != 3 {
		t.Fatalf("%d runs made; want 3", len(runs))
	}
	for i := range runs {
		if !budget.Selects(get(t, b), &runs[i]) {
			t.Errorf("run %s is not selected by the budget: it would not be charged", runs[i].Name)
		}
		finish(t, &runs[i], "Refunded 82.40.")
	}
	reconcileOnce(t, r, e)

	st := get(t, e).Status
	var whys []string
	for _, cs := range st.Cases {
		whys = append(whys, cs.FailureReason)
	}
	if want := "judge: not called: AgentBudget eval-budget"; whys[0] != "" || whys[1] != "" || !strings.HasPrefix(whys[2], want) || calls != 2 {
		t.Errorf("reasons %q after %d calls; want two passes, then one starting %q, and 2 calls", whys, calls, want)
	}
	got := get(t, b).Status
	spent, limit := budget.Money(got.ConsumedCostUSD)+budget.Money(got.ReservedCostUSD), loop.MustMoney("0.015")
	if diff := cmp.Diff([]any{v1alpha1.USD("0.0124"), 0, v1alpha1.USD("0.0024")},
		[]any{got.SettledCostUSD, len(got.Reservations), st.Totals.JudgeCostUSD}); diff != "" || spent > limit {
		t.Errorf("budget settled, leases open, judge cost (-want +got):\n%s\nconsumed and reserved $%s of $%s", diff, spent, limit)
	}
	if c := findCondition(st.Conditions, v1alpha1.EvaluationConditionBudgeted); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Budgeted condition %+v; want True", c)
	}
}

// A budget that does not exist, or does not select the evaluation's runs
// (which it would not charge), holds every run back, and the Budgeted
// condition says why.
func TestEvaluation_noRunWithoutABudgetThatSelectsThem(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	makeBudget(t, ns, "other-team", "1", "", map[string]string{"team": "b"})
	tests := []struct {
		eval, budget, reason, message string
	}{
		{"missing", "nowhere", v1alpha1.ReasonEvaluationBudgetNotFound, "AgentBudget nowhere does not exist in namespace " + ns},
		{"unselected", "other-team", v1alpha1.ReasonBudgetDoesNotSelectRuns,
			"AgentBudget other-team does not select the runs of case one (labels map[agents.agentrun.dev/case:one agents.agentrun.dev/evaluation:unselected]), which it would not charge"},
	}
	for _, tt := range tests {
		eb := makeEval(ns, tt.eval).answering("one", "ok")
		eb.e.Spec.BudgetRef = &v1alpha1.BudgetRef{Name: tt.budget}
		e := eb.create(t)
		reconcileOnce(t, directReconciler(), e)
		c := findCondition(get(t, e).Status.Conditions, v1alpha1.EvaluationConditionBudgeted)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tt.reason || !strings.HasPrefix(c.Message, tt.message) {
			t.Errorf("%s: Budgeted %+v; want False, %s, a message starting %q", tt.eval, c, tt.reason, tt.message)
		}
		if runs := runsOf(t, e); len(runs) != 0 {
			t.Errorf("%s: %d runs made; want none", tt.eval, len(runs))
		}
	}
}

// A judge without a price under a budget that limits dollars would count
// as $0: its call is refused before it is made, as a run's would be.
func TestEvaluation_anUnpricedJudgeIsRefusedByADollarBudget(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	b := makeBudget(t, ns, "dollars", "1", "", map[string]string{v1alpha1.LabelEvaluation: "unpriced"})
	eb := makeEval(ns, "unpriced").answering("one", "82").judged(4, v1alpha1.ScriptStep{Content: `{"score": 5, "rationale": "ok"}`})
	eb.e.Spec.Judge.Model.Pricing = nil
	eb.e.Spec.BudgetRef = &v1alpha1.BudgetRef{Name: b.Name}
	e := eb.create(t)
	var calls int
	r := NewReconciler(Config{Base: reconcilers.Base{Client: cluster.Client, APIReader: cluster.Client}, Judges: countedJudges(&calls)})
	reconcileOnce(t, r, e)
	finish(t, &runsOf(t, e)[0], "Refunded 82.40.")
	reconcileOnce(t, r, e)
	why := get(t, e).Status.Cases[0].FailureReason
	if want := "judge: not called: judge.model: AgentBudget dollars limits dollars"; !strings.HasPrefix(why, want) || calls != 0 {
		t.Errorf("reason %q after %d calls; want one starting %q and no call", why, calls, want)
	}
}
