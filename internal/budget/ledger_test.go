package budget

import (
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)

func makeBudget(maxCost string) *v1alpha1.AgentBudget {
	b := &v1alpha1.AgentBudget{}
	b.Name, b.Namespace = "team-daily", "team-a"
	b.Spec.MaxCostUSD = v1alpha1.USD(maxCost)
	b.Spec.Window = &metav1.Duration{Duration: 24 * time.Hour}
	Roll(b, t0)
	return b
}

func usdAmount(s string) Amount { return Amount{Cost: loop.MustMoney(s)} }

// The seed's race: $72 of $100 consumed, two runs each reserve $20. With
// the check and the reservation in one step of one object, the first is
// admitted and the second sees $8 and is refused, naming the arithmetic.
func TestLease_secondOfTwoConcurrentStepsIsRefusedWithTheArithmetic(t *testing.T) {
	b := makeBudget("100")
	b.Status.SettledCostUSD = "72"
	d := Lease(b, Request{UID: "a", Run: "a", Exposure: usdAmount("20")})
	if d.Refused != "" || !d.Changed || !d.New {
		t.Fatalf("first step: %+v", d)
	}
	if got := Sum(b).Exposure().Cost; got > loop.MustMoney("100") {
		t.Fatalf("exposure %s passes the limit", got)
	}
	d = Lease(b.DeepCopy(), Request{UID: "b", Run: "b", Exposure: usdAmount("20")})
	// The first lease took its $20 and a chunk of 1/64 of the limit.
	want := "AgentBudget team-daily: $72.0000 consumed + $21.5625 reserved + $20.0000 requested > $100.0000 (maxCostUSD)"
	if d.Refused != want {
		t.Fatalf("second step refused with %q, want %q", d.Refused, want)
	}
	// The first step finishes at $14: $14 becomes consumed, the rest returns.
	got, ok := Settle(b, "a", usdAmount("14"))
	if !ok || got.Cost != loop.MustMoney("14") {
		t.Fatalf("settled %v %v", got, ok)
	}
	if b.Status.ConsumedCostUSD != "86.0000" || b.Status.ReservedCostUSD != "0.0000" || b.Status.ActiveRuns != 0 {
		t.Fatalf("after settling: %+v", b.Status)
	}
	if _, ok := Settle(b, "a", usdAmount("14")); ok {
		t.Fatal("settling twice counted twice")
	}
}

// A lease covers several steps like the one asked for while the budget
// has room, and only the step's need when it is nearly spent.
func TestLease_chunksShrinkAsTheBudgetRunsOut(t *testing.T) {
	b := makeBudget("100")
	Lease(b, Request{UID: "a", Run: "a", Exposure: usdAmount("1")})
	r := Find(b, "a")
	if got := Leased(r).Cost; got != loop.MustMoney("2.5625") {
		t.Fatalf("leased %s, want the step and 1/64 of the limit ($2.5625)", got)
	}
	if !HardCovers(b, r, usdAmount("2.5625")) || HardCovers(b, r, usdAmount("2.57")) {
		t.Fatal("HardCovers disagrees with the lease")
	}
	b = makeBudget("1000")
	Lease(b, Request{UID: "a", Run: "a", Exposure: usdAmount("1")})
	if got := Leased(Find(b, "a")).Cost; got != loop.MustMoney("9") {
		t.Fatalf("leased %s, want the step and 8 more like it ($9)", got)
	}
	b = makeBudget("100")
	b.Status.SettledCostUSD = "99"
	Lease(b, Request{UID: "a", Run: "a", Exposure: usdAmount("0.5")})
	if got := Leased(Find(b, "a")).Cost; got != loop.MustMoney("0.75") {
		t.Fatalf("leased %s, want the step and half the room left ($0.75)", got)
	}
}

// A run that drew its steps from its lease reports its spend at the next
// lease; its reserved part is what it holds beyond that.
func TestLease_recordsSpendAndExtends(t *testing.T) {
	b := makeBudget("100")
	Lease(b, Request{UID: "a", Run: "a", Spent: usdAmount("2"), Exposure: usdAmount("3")}) // joined mid-run at $2
	r := Find(b, "a")
	if Base(r).Cost != loop.MustMoney("2") || Leased(r).Cost != loop.MustMoney("2.5625") {
		t.Fatalf("reservation %+v", r)
	}
	if d := Lease(b, Request{UID: "a", Run: "a", Spent: usdAmount("10"), Exposure: usdAmount("11")}); d.Refused != "" || !d.Changed {
		t.Fatalf("%+v", d)
	}
	r = Find(b, "a")
	if Spent(r).Cost != loop.MustMoney("8") || Ceiling(r).Cost < loop.MustMoney("11") {
		t.Fatalf("reservation %+v", r)
	}
	if b.Status.ConsumedCostUSD != "8.0000" {
		t.Fatalf("consumed %s", b.Status.ConsumedCostUSD)
	}
}

func TestLease_softLimitsNeverRefuse(t *testing.T) {
	b := makeBudget("1")
	b.Spec.Soft = []v1alpha1.BudgetLimit{v1alpha1.LimitCost}
	if d := Lease(b, Request{UID: "a", Run: "a", Exposure: usdAmount("5")}); d.Refused != "" || d.Wait != "" {
		t.Fatalf("%+v", d)
	}
	Settle(b, "a", usdAmount("0.9"))
	w := SoftWarnings(b)
	if len(w) != 1 || w[0].Percent != 80 || !strings.Contains(w[0].Message, "soft maxCostUSD") {
		t.Fatalf("warnings %+v", w)
	}
	if len(SoftWarnings(b)) != 0 {
		t.Fatal("a threshold was announced twice")
	}
}

func TestLease_tokensAreAHardDimensionOfTheirOwn(t *testing.T) {
	b := makeBudget("100")
	b.Spec.MaxTokens = ptr.To[int64](1000)
	d := Lease(b, Request{UID: "a", Run: "a", Exposure: Amount{Cost: 1, Tokens: 1200}})
	if !strings.Contains(d.Refused, "+ 1200 tokens requested > 1000 tokens (maxTokens)") {
		t.Fatalf("refused %q", d.Refused)
	}
}

func TestLease_fullConcurrencyMakesStartingRunsWait(t *testing.T) {
	b := makeBudget("100")
	b.Spec.MaxConcurrentRuns = ptr.To[int32](1)
	Lease(b, Request{UID: "a", Run: "a", Starting: true, Exposure: usdAmount("1")})
	d := Lease(b, Request{UID: "b", Run: "b", Starting: true, Exposure: usdAmount("1")})
	if d.Wait != "AgentBudget team-daily: 1 of maxConcurrentRuns 1 runs are active" || d.Changed {
		t.Fatalf("%+v", d)
	}
	Settle(b, "a", usdAmount("1"))
	if d := Lease(b, Request{UID: "b", Run: "b", Starting: true, Exposure: usdAmount("1")}); d.Wait != "" {
		t.Fatalf("%+v", d)
	}
}

// A deleted run's lease counts for its holdFor after it is found gone,
// then is charged in full.
func TestExpire_holdsThenChargesTheWholeLease(t *testing.T) {
	b := makeBudget("100")
	Lease(b, Request{UID: "a", Run: "a", Exposure: usdAmount("1"), HoldFor: time.Minute})
	changed, _, closed, next := Expire(b, "a", t0)
	if !changed || closed || next.Before(t0.Add(time.Minute)) {
		t.Fatalf("first look: changed %v closed %v next %v", changed, closed, next)
	}
	if _, _, closed, _ := Expire(b, "a", t0.Add(30*time.Second)); closed {
		t.Fatal("closed before the call's deadline")
	}
	_, charged, closed, _ := Expire(b, "a", next)
	if !closed || charged.Cost != loop.MustMoney("2.5625") || b.Status.ConsumedCostUSD != "2.5625" {
		t.Fatalf("charged %v closed %v status %+v", charged, closed, b.Status)
	}
}

// A new window forgets settled spend; an open lease keeps what it has not
// spent, and its ceiling in the run's own terms does not move.
func TestRoll_newWindowKeepsOpenLeases(t *testing.T) {
	b := makeBudget("100")
	b.Status.SettledCostUSD = "50"
	Lease(b, Request{UID: "a", Run: "a", Spent: usdAmount("0"), Exposure: usdAmount("1")})
	Lease(b, Request{UID: "a", Run: "a", Spent: usdAmount("4"), Exposure: usdAmount("5")})
	before := Ceiling(Find(b, "a"))
	if rolled, _ := Roll(b, t0.Add(23*time.Hour)); rolled {
		t.Fatal("rolled inside the window")
	}
	rolled, ends := Roll(b, t0.Add(49*time.Hour))
	if !rolled || !ends.Equal(t0.Add(72*time.Hour)) || !b.Status.WindowStart.Time.Equal(t0.Add(48*time.Hour)) {
		t.Fatalf("rolled %v ends %v start %v", rolled, ends, b.Status.WindowStart)
	}
	r := Find(b, "a")
	if Ceiling(r) != before || b.Status.ConsumedCostUSD != "0.0000" || Spent(r) != (Amount{}) {
		t.Fatalf("after the roll: ceiling %v (was %v), status %+v", Ceiling(r), before, b.Status)
	}
}

// Issue 42, finding 9: one run may hold at most its share of a budget
// (spec.perRun, a quarter of each hard limit by default), whatever its
// own ceilings. A step that fits the budget's room but not the share is
// refused as the share's (the budget is not exhausted); a step that fits
// is leased with a chunk that stays within the share.
func TestLease_oneRunHoldsAtMostItsShare(t *testing.T) {
	cases := []struct {
		name     string
		perRun   *v1alpha1.BudgetPerRun
		soft     bool
		spent    string
		exposure string
		// leased is the run's lease after the step ("" when refused).
		leased  string
		refused string
	}{
		{name: "a step of almost the whole budget is refused by the default share",
			exposure: "9.995", refused: "AgentBudget team-daily: this step may spend up to $9.9950, more than one run may hold of the budget at once " +
				"($2.5000, the default perRun.fraction 0.25 of maxCostUSD $10.0000): lower what one step of the run may spend " +
				"(model.maxOutputTokens, its tools' maxCostUSD), or raise the budget's perRun"},
		{name: "a step within the share is leased with a chunk",
			exposure: "2", leased: "2.15625"},
		{name: "the chunk stops at the share",
			exposure: "2.45", leased: "2.5"},
		{name: "a step of exactly the share is leased without a chunk",
			exposure: "2.5", leased: "2.5"},
		{name: "what the run spent is not held: the share caps what it holds unspent",
			spent: "6", exposure: "8.4", leased: "8.5"},
		{name: "perRun.maxCostUSD sets the share",
			perRun: &v1alpha1.BudgetPerRun{MaxCostUSD: "5"}, exposure: "4.9", leased: "5"},
		{name: "perRun.maxCostUSD refuses what passes it, naming it",
			perRun: &v1alpha1.BudgetPerRun{MaxCostUSD: "5"}, exposure: "5.01", refused: "($5.0000, perRun.maxCostUSD)"},
		{name: "perRun.fraction sets the share",
			perRun: &v1alpha1.BudgetPerRun{Fraction: "0.1"}, exposure: "1.01", refused: "($1.0000, perRun.fraction 0.1 of maxCostUSD $10.0000)"},
		{name: "fraction 1 lets one run hold the whole budget",
			perRun: &v1alpha1.BudgetPerRun{Fraction: "1"}, exposure: "9.995", leased: "9.9975"},
		{name: "a soft limit has no share",
			soft: true, exposure: "9.995", leased: "9.995"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := makeBudget("10")
			b.Spec.PerRun = tc.perRun
			if tc.soft {
				b.Spec.Soft = []v1alpha1.BudgetLimit{v1alpha1.LimitCost}
			}
			if tc.spent != "" {
				// The run leased its first step, then spent tc.spent.
				if d := Lease(b, Request{UID: "a", Run: "a", Exposure: usdAmount("2")}); d.Refused != "" {
					t.Fatalf("first step: %+v", d)
				}
			}
			spent := Amount{}
			if tc.spent != "" {
				spent = usdAmount(tc.spent)
			}
			work := b.DeepCopy()
			d := Lease(work, Request{UID: "a", Run: "a", Spent: spent, Exposure: usdAmount(tc.exposure)})
			if tc.refused != "" {
				if !d.Share || !strings.Contains(d.Refused, tc.refused) {
					t.Fatalf("decision %+v, want a refusal by the share containing %q", d, tc.refused)
				}
				return
			}
			if d.Refused != "" {
				t.Fatalf("refused: %s", d.Refused)
			}
			if got := Leased(Find(work, "a")).Cost; got != loop.MustMoney(tc.leased) {
				t.Fatalf("leased $%s, want $%s", got, tc.leased)
			}
		})
	}
}

// The reproduction: under a $10 budget, run A asks for $9.995 for one
// step (its own maxCostUSD is $100). It is refused by the share and holds
// nothing, and run B's steps are then admitted; a run that holds its full
// share leaves the others the rest.
func TestLease_aRunWithAHugeCeilingCannotStarveTheOthers(t *testing.T) {
	b := makeBudget("10")
	work := b.DeepCopy()
	if d := Lease(work, Request{UID: "a", Run: "a", Exposure: usdAmount("9.995")}); !d.Share {
		t.Fatalf("run A's $9.995 step: %+v", d)
	}
	if d := Lease(b, Request{UID: "a", Run: "a", Exposure: usdAmount("2.5")}); d.Refused != "" {
		t.Fatalf("run A's step of its whole share: %+v", d)
	}
	for i, run := range []types.UID{"b", "c", "d"} {
		if d := Lease(b, Request{UID: run, Run: string(run), Exposure: usdAmount("2.4")}); d.Refused != "" {
			t.Fatalf("run %s (%d): %+v", run, i, d)
		}
	}
	if got := Sum(b).Reserved.Cost; got > loop.MustMoney("10") {
		t.Fatalf("reserved $%s, over the limit", got)
	}
}

func TestLease_tokensHaveAShareOfTheirOwn(t *testing.T) {
	b := makeBudget("100")
	b.Spec.MaxTokens = ptr.To[int64](1000)
	d := Lease(b.DeepCopy(), Request{UID: "a", Run: "a", Exposure: Amount{Cost: 1, Tokens: 300}})
	want := "AgentBudget team-daily: this step may spend up to 300 tokens, more than one run may hold of the budget at once (250 tokens, the default perRun.fraction 0.25 of maxTokens 1000)"
	if !d.Share || !strings.HasPrefix(d.Refused, want) {
		t.Fatalf("decision %+v, want a refusal starting %q", d, want)
	}
	b.Spec.PerRun = &v1alpha1.BudgetPerRun{MaxTokens: ptr.To[int64](400)}
	if d := Lease(b, Request{UID: "a", Run: "a", Exposure: Amount{Cost: 1, Tokens: 300}}); d.Refused != "" {
		t.Fatalf("within perRun.maxTokens: %+v", d)
	}
	if got := Leased(Find(b, "a")).Tokens; got != 315 {
		t.Fatalf("leased %d tokens, want the step and 1/64 of the limit (315)", got)
	}
}

func TestPerRun_defaultsToAQuarterOfEachLimit(t *testing.T) {
	cases := []struct {
		name   string
		maxTok *int64
		perRun *v1alpha1.BudgetPerRun
		want   Share
	}{
		{"unset", ptr.To[int64](1001), nil, Share{Cap: Amount{Cost: loop.MustMoney("2.5"), Tokens: 250},
			CostFrom: "the default perRun.fraction 0.25 of maxCostUSD $10.0000", TokensFrom: "the default perRun.fraction 0.25 of maxTokens 1001"}},
		{"a fraction for both", ptr.To[int64](1000), &v1alpha1.BudgetPerRun{Fraction: "0.333333"}, Share{Cap: Amount{Cost: loop.MustMoney("3.33333"), Tokens: 333},
			CostFrom: "perRun.fraction 0.333333 of maxCostUSD $10.0000", TokensFrom: "perRun.fraction 0.333333 of maxTokens 1000"}},
		{"amounts, never more than the limits", ptr.To[int64](1000), &v1alpha1.BudgetPerRun{MaxCostUSD: "11", MaxTokens: ptr.To[int64](10)},
			Share{Cap: Amount{Cost: loop.MustMoney("10"), Tokens: 10}, CostFrom: "perRun.maxCostUSD", TokensFrom: "perRun.maxTokens"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := makeBudget("10")
			b.Spec.MaxTokens, b.Spec.PerRun = tc.maxTok, tc.perRun
			if diff := cmp.Diff(tc.want, PerRun(b)); diff != "" {
				t.Fatalf("PerRun (-want +got):\n%s", diff)
			}
		})
	}
}

// Under a hard maxCostUSD a model without a price is refused, saying how
// to price it; a price from the run or from the platform (both end in
// model.pricing) is enough, and a budget that does not limit dollars does
// not care.
func TestUnpriced_refusesAModelWithoutAPriceUnderADollarLimit(t *testing.T) {
	tokensOnly := makeBudget("")
	tokensOnly.Spec.MaxTokens = ptr.To[int64](1000)
	soft := makeBudget("10")
	soft.Spec.Soft = []v1alpha1.BudgetLimit{v1alpha1.LimitCost}
	cases := []struct {
		name  string
		b     *v1alpha1.AgentBudget
		model v1alpha1.ModelSpec
		want  string
	}{
		{"no pricing", makeBudget("10"), v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "gpt-x"}},
			`AgentBudget team-daily limits dollars (maxCostUSD $10.0000) and model "gpt-x" has no price, so its calls would count as $0: ` +
				`set the run's model.pricing (US dollars per million input and output tokens), or ask the platform team to price model "gpt-x" in an AgentRunPolicy (spec.pricing)`},
		{"pricing with only a cached price", makeBudget("10"), v1alpha1.ModelSpec{
			ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted, Pricing: &v1alpha1.ModelPricing{CachedInput: "1"}},
		}, "and the model of provider scripted has no price"},
		{"priced output", makeBudget("10"), v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted, Pricing: &v1alpha1.ModelPricing{Output: "0"}}}, ""},
		{"priced input", makeBudget("10"), v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted, Pricing: &v1alpha1.ModelPricing{Input: "1"}}}, ""},
		{"an unpriced fallback", makeBudget("10"), v1alpha1.ModelSpec{
			ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "gpt-x", Pricing: &v1alpha1.ModelPricing{Input: "1"}},
			Fallbacks:     []v1alpha1.ModelEndpoint{{Provider: v1alpha1.ProviderOpenAI, Name: "gpt-y"}}},
			`AgentBudget team-daily limits dollars (maxCostUSD $10.0000) and model "gpt-y" has no price, so its calls would count as $0: set the run's model.fallbacks[0].pricing`},
		{"a budget of tokens only", tokensOnly, v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted}}, ""},
		{"a soft dollar limit", soft, v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Unpriced(tc.b, &tc.model)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("Unpriced = %q, want %q", got, tc.want)
			}
		})
	}
}

// Issue 28: both writers count their accepted writes by kind, and the
// conflicts, through the one book. A conflict keeps our last write (a
// cache still at a version it replaced is behind it); a budget gone is
// forgotten.
func TestLedgers_countWritesAndConflicts(t *testing.T) {
	l := NewLedgers()
	b := makeBudget("10")
	b.ResourceVersion, b.Generation = "2", 1
	l.Wrote("lease", "1", b)
	l.Wrote("settle", "1", b)
	l.Wrote("lease", "1", b)
	read := b.DeepCopy()
	read.ResourceVersion = "1"
	if got := l.latest(read); got.ResourceVersion != "2" {
		t.Fatalf("latest is version %s, want our write, 2", got.ResourceVersion)
	}
	l.Conflicted()
	if got := l.latest(read); got.ResourceVersion != "2" {
		t.Fatalf("latest after a conflict is version %s, want our write, 2", got.ResourceVersion)
	}
	l.Forget(types.NamespacedName{Namespace: b.Namespace, Name: b.Name})
	if got := l.latest(read); got.ResourceVersion != "1" {
		t.Fatalf("latest once forgotten is version %s, want the read, 1", got.ResourceVersion)
	}
	const want = `
# HELP agentrun_budget_lease_conflicts_total Lease writes refused because the AgentBudget changed since it was read; each is retried on a fresh read.
# TYPE agentrun_budget_lease_conflicts_total counter
agentrun_budget_lease_conflicts_total 1
# HELP agentrun_budget_writes_total Status writes to AgentBudgets that the API server accepted, by what they did (lease: a run took or extended a lease; refused: a refusal was recorded; settle: the AgentBudget reconciler closed leases, expired them or rolled the window).
# TYPE agentrun_budget_writes_total counter
agentrun_budget_writes_total{kind="lease"} 2
agentrun_budget_writes_total{kind="settle"} 1
`
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(l.Collectors()...)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
