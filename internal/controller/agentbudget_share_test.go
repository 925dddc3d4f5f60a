package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/budget"
	"github.com/agentrun/agentrun/internal/loop"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// hungryRun is a run of team a with ceilings far above a $10 budget
// (maxCostUSD $100, two million tokens) whose every model call reserves
// maxOutputTokens at $10 per million output tokens (input is free): each
// 100,000 output tokens reserve $1.
func hungryRun(ns, name string, maxOutputTokens int32) *runBuilder {
	return pricedRun(ns, name).with(func(s *v1alpha1.AgentRunSpec) {
		s.Model.MaxOutputTokens = ptr.To(maxOutputTokens)
		s.Model.Pricing = &v1alpha1.ModelPricing{Input: "0", Output: "10"}
		s.Budget.MaxCostUSD = "100"
		s.Budget.MaxTokens = ptr.To[int64](2_000_000)
	})
}

// notExhausted fails unless the budget's Exhausted condition is unset or
// False: a run refused its share does not exhaust the budget.
func notExhausted(t *testing.T, b *v1alpha1.AgentBudget) {
	t.Helper()
	c := apimeta.FindStatusCondition(get(t, b).Status.Conditions, v1alpha1.BudgetConditionExhausted)
	if c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("the budget is marked Exhausted (%s: %s), though it has room", c.Reason, c.Message)
	}
}

// Issue 42, finding 9, the reproduction: under a $10 budget, run A (its
// own maxCostUSD $100) asks for $9.99 for one model call that never
// answers. It must not hold the budget so that run B, which needs a
// fraction of a cent, ends BudgetExhausted: A is refused its step (more
// than one run may hold, a quarter of the budget by default) before any
// model call, and B completes.
func TestAgentBudget_aRunWithAHugeCeilingCannotStarveTheOthers(t *testing.T) {
	ns := namespace(t)
	b := makeBudget(t, ns, "shared", func(s *v1alpha1.AgentBudgetSpec) { s.MaxCostUSD = "10" })
	g := newGatedKits()
	startWith(t, g, managerSetup{})
	greedy := gated(hungryRun(ns, "greedy", 999_000), "never").create(t)
	// The old ledger leases A its $9.99 and lets its call hang.
	NewWithT(t).Eventually(func() bool { return get(t, greedy).Status.Outcome != "" || leases(t, b) > 0 }, 10*time.Second, 20*time.Millisecond).
		Should(BeTrue(), "run A neither ended nor took a lease")

	other := pricedRun(ns, "other").create(t)
	if r := waitOutcome(t, other, 20*time.Second); r.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Fatalf("run B ended %s: %s", r.Status.Outcome, r.Status.Reason)
	}
	a := waitOutcome(t, greedy, 20*time.Second)
	expectOutcome(t, a, v1alpha1.OutcomeBudgetExhausted, "AgentBudget shared: this step may spend up to $9.9900, more than one run may hold of the budget at once "+
		"($2.5000, the default perRun.fraction 0.25 of maxCostUSD $10.0000)")
	if n := g.calls.Load(); n != 0 || a.Status.Usage.Turns != 0 {
		t.Errorf("run A made %d model calls and was charged %d turns; want none (refused before it spends)", n, a.Status.Usage.Turns)
	}
	expectSettled(t, b, []*v1alpha1.AgentRun{greedy, other}, 0)
	notExhausted(t, b)
}

// The share when spec.perRun is unset: a run may hold a quarter of the
// budget. A run whose ceilings are far larger is admitted and leased no
// more than $2.50 (step and chunk) while its call hangs; a step of $3 is
// refused, naming the default; and perRun.maxCostUSD moves the cap.
func TestAgentBudget_oneRunHoldsAtMostAQuarterByDefault(t *testing.T) {
	ns := namespace(t)
	b := makeBudget(t, ns, "quarter", func(s *v1alpha1.AgentBudgetSpec) { s.MaxCostUSD = "10" })
	g := newGatedKits()
	startWith(t, g, managerSetup{})

	within := gated(hungryRun(ns, "within", 240_000), "never").create(t) // $2.40 a call
	NewWithT(t).Eventually(func() int64 { return g.calls.Load() }, 10*time.Second, 20*time.Millisecond).Should(BeNumerically("==", 1),
		"the run within its share did not call its model")
	res := budget.Find(get(t, b), get(t, within).UID)
	if res == nil {
		t.Fatal("the run within its share holds no lease")
	}
	if held := budget.Leased(res).Cost - budget.Spent(res).Cost; held < loop.MustMoney("2.40") || held > loop.MustMoney("2.50") {
		t.Errorf("the run holds $%s of the budget unspent; want its $2.40 step, and at most the default share of $2.50", held)
	}

	over := hungryRun(ns, "over", 300_000).create(t) // $3.00 a call
	expectOutcome(t, waitOutcome(t, over, 20*time.Second), v1alpha1.OutcomeBudgetExhausted,
		"this step may spend up to $3.0000, more than one run may hold of the budget at once ($2.5000, the default perRun.fraction 0.25 of maxCostUSD $10.0000): "+
			"lower what one step of the run may spend (model.maxOutputTokens, its tools' maxCostUSD), or raise the budget's perRun")
	notExhausted(t, b)

	cur := get(t, b)
	base := cur.DeepCopy()
	cur.Spec.PerRun = &v1alpha1.BudgetPerRun{MaxCostUSD: "4"}
	if err := k8sClient.Patch(t.Context(), cur, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	// The operator's cache may hold the old spec a moment longer: a run
	// created in that moment is refused, and a later one is not.
	attempt := 0
	NewWithT(t).Eventually(func() string {
		attempt++
		r := waitOutcome(t, hungryRun(ns, fmt.Sprintf("over-again-%d", attempt), 300_000).create(t), 20*time.Second)
		return fmt.Sprintf("%s: %s", r.Status.Outcome, r.Status.Reason)
	}, 30*time.Second, 100*time.Millisecond).Should(HavePrefix(string(v1alpha1.OutcomeCompleted)), "a $3 step was refused under perRun.maxCostUSD $4")
}

// Under a budget that limits dollars, a run whose model has no price
// would count $0: it is refused before its first model call, with a
// reason that says how to price it. A budget of tokens only does not
// care, and a price from the platform (AgentRunPolicy spec.pricing) is a
// price.
func TestAgentBudget_aRunWithoutAPriceIsRefusedUnderADollarLimit(t *testing.T) {
	unpriced := func(ns, name string) *runBuilder {
		return pricedRun(ns, name).with(func(s *v1alpha1.AgentRunSpec) { s.Model.Pricing = nil })
	}
	g := newGatedKits()
	g.open("free")

	dollars := namespace(t)
	b := makeBudget(t, dollars, "dollars", func(s *v1alpha1.AgentBudgetSpec) { s.MaxCostUSD = "10" })
	refused := gated(unpriced(dollars, "unpriced"), "free").create(t)

	tokens := namespace(t)
	makeBudget(t, tokens, "tokens", func(s *v1alpha1.AgentBudgetSpec) { s.MaxTokens = ptr.To[int64](1_000_000) })
	tokensOnly := unpriced(tokens, "unpriced").create(t)

	platform := namespace(t)
	makeBudget(t, platform, "dollars", func(s *v1alpha1.AgentBudgetSpec) { s.MaxCostUSD = "10" })
	pricedByPlatform := unpriced(platform, "unpriced").create(t)
	govern(t, platform, v1alpha1.AgentRunPolicySpec{
		Pricing: []v1alpha1.ModelPrice{{Model: "*", ModelPricing: v1alpha1.ModelPricing{Input: "10", Output: "10"}}}})

	startWith(t, g, managerSetup{})
	r := waitOutcome(t, refused, 20*time.Second)
	expectOutcome(t, r, v1alpha1.OutcomeBudgetExhausted, "AgentBudget dollars limits dollars (maxCostUSD $10.0000) and the model of provider scripted has no price, "+
		"so its calls would count as $0: set the run's model.pricing (US dollars per million input and output tokens), "+
		"or ask the platform team to price the model of provider scripted in an AgentRunPolicy (spec.pricing)")
	if n := g.calls.Load(); n != 0 || r.Status.Usage.Turns != 0 {
		t.Errorf("the unpriced run made %d model calls and was charged %d turns; want none", n, r.Status.Usage.Turns)
	}
	expectSettled(t, b, []*v1alpha1.AgentRun{refused}, 0)
	notExhausted(t, b)

	if r := waitOutcome(t, tokensOnly, 20*time.Second); r.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Errorf("under a budget of tokens only, the unpriced run ended %s: %s", r.Status.Outcome, r.Status.Reason)
	}
	if r := waitOutcome(t, pricedByPlatform, 20*time.Second); r.Status.Outcome != v1alpha1.OutcomeCompleted || spentBy(t, r) == 0 {
		t.Errorf("priced by the platform, the run ended %s (%s) having spent $%s; want Completed at the platform's prices",
			r.Status.Outcome, r.Status.Reason, spentBy(t, r))
	}
}
