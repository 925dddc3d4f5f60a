// Package budget is the arithmetic of the AgentBudget ledger: leasing
// allowance to a run, settling what it spent, charging the lease of a run
// that vanished, and rolling the window over. Every function changes an
// AgentBudget's status in memory and says whether it changed; the caller
// writes it with a compare-and-swap (an Update carrying the
// resourceVersion it read) and, on a conflict, reads again and repeats the
// same function. No client calls, no clock: time is passed in.
//
// Amounts in a reservation count the current window. What the run itself
// counts (its status.usage) is cumulative; runBase is the run's own total
// when its lease in this window began, so the run's spend in this window is
// its total minus runBase. The window's exposure of one lease is
// max(leased, spent): a run that spent more than it leased (a provider
// that reported more than the estimate) counts what it spent.
//
// Ledgers (ledgers.go) is the one piece with state: the book of the
// operator's own writes, which both writers (the AgentRun reconciler
// leasing, the AgentBudget reconciler settling) go through.
package budget

import (
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// DefaultWindow is the window of a budget whose spec has none (the CRD
// defaults it; this is for objects built in code).
const DefaultWindow = 24 * time.Hour

// DefaultPerRunFraction is the share of each hard limit one run may hold
// at once when the budget's perRun does not set it (spec.perRun).
const DefaultPerRunFraction = "0.25"

// Amount is a vector of what the ledger counts: US dollars and tokens.
type Amount struct {
	Cost   loop.Money
	Tokens int64
}

func (a Amount) sub(b Amount) Amount { return Amount{a.Cost - b.Cost, a.Tokens - b.Tokens} }
func (a Amount) add(b Amount) Amount { return Amount{a.Cost + b.Cost, a.Tokens + b.Tokens} }
func maxAmount(a, b Amount) Amount   { return Amount{max(a.Cost, b.Cost), max(a.Tokens, b.Tokens)} }
func (a Amount) floor() Amount       { return Amount{max(a.Cost, 0), max(a.Tokens, 0)} }

// Money reads a USD field; the CRD admits only decimal strings, and an
// empty (or unreadable) field is zero.
func Money(s v1alpha1.USD) loop.Money {
	if s == "" {
		return 0
	}
	m, err := loop.ParseMoney(string(s))
	if err != nil {
		return 0
	}
	return m
}

func usd(m loop.Money) v1alpha1.USD { return v1alpha1.USD(m.String()) }

// Leased, Spent and Base read a reservation's amounts.
func Leased(r *v1alpha1.BudgetReservation) Amount {
	return Amount{Money(r.LeasedCostUSD), r.LeasedTokens}
}

// Spent is what the run spent in this window, as it last reported.
func Spent(r *v1alpha1.BudgetReservation) Amount {
	return Amount{Money(r.SpentCostUSD), r.SpentTokens}
}

// Base is the run's own total when its lease in this window began.
func Base(r *v1alpha1.BudgetReservation) Amount {
	return Amount{Money(r.RunBaseCostUSD), r.RunBaseTokens}
}

func setLeased(r *v1alpha1.BudgetReservation, a Amount) {
	r.LeasedCostUSD, r.LeasedTokens = usd(a.Cost), a.Tokens
}
func setSpent(r *v1alpha1.BudgetReservation, a Amount) {
	r.SpentCostUSD, r.SpentTokens = usd(a.Cost), a.Tokens
}
func setBase(r *v1alpha1.BudgetReservation, a Amount) {
	r.RunBaseCostUSD, r.RunBaseTokens = usd(a.Cost), a.Tokens
}

// Ceiling is the most the run's own total may reach under its lease:
// runBase + max(leased, spent). It never decreases while the lease is
// open (a window roll-over moves spend into runBase), so a copy of the
// budget read from a cache that says a step is covered is never wrong.
func Ceiling(r *v1alpha1.BudgetReservation) Amount {
	return Base(r).add(maxAmount(Leased(r), Spent(r)))
}

// Find returns the run's reservation, or nil.
func Find(b *v1alpha1.AgentBudget, uid types.UID) *v1alpha1.BudgetReservation {
	for i := range b.Status.Reservations {
		if b.Status.Reservations[i].UID == uid {
			return &b.Status.Reservations[i]
		}
	}
	return nil
}

// Selects reports whether the budget covers the run: same namespace, and
// its selector (empty: everything) matches the run's labels. A selector
// that does not parse selects nothing (the API server validates it).
func Selects(b *v1alpha1.AgentBudget, run *v1alpha1.AgentRun) bool {
	if b.Namespace != run.Namespace {
		return false
	}
	if b.Spec.Selector == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
	if err != nil {
		return false
	}
	return sel.Matches(labels.Set(run.Labels))
}

// Soft reports whether the limit only warns.
func Soft(b *v1alpha1.AgentBudget, l v1alpha1.BudgetLimit) bool {
	return slices.Contains(b.Spec.Soft, l)
}

// Hard reports whether the budget has a hard limit (one that is set and
// not named in soft). A budget without one only warns: it never stops or
// holds a run, not even when it cannot be read or was deleted.
func Hard(b *v1alpha1.AgentBudget) bool {
	_, hasCost, hasTokens := limits(b)
	return (hasCost && !Soft(b, v1alpha1.LimitCost)) || (hasTokens && !Soft(b, v1alpha1.LimitTokens)) ||
		(b.Spec.MaxConcurrentRuns != nil && !Soft(b, v1alpha1.LimitConcurrent))
}

// limits are the budget's cost and token limits; has says which are set.
func limits(b *v1alpha1.AgentBudget) (lim Amount, hasCost, hasTokens bool) {
	if b.Spec.MaxCostUSD != "" {
		lim.Cost, hasCost = Money(b.Spec.MaxCostUSD), true
	}
	if b.Spec.MaxTokens != nil {
		lim.Tokens, hasTokens = *b.Spec.MaxTokens, true
	}
	return lim, hasCost, hasTokens
}

// LimitsDollars reports whether the budget has a hard maxCostUSD.
func LimitsDollars(b *v1alpha1.AgentBudget) bool {
	_, hasCost, _ := limits(b)
	return hasCost && !Soft(b, v1alpha1.LimitCost)
}

// Share is the most of a budget one run may hold at once: the part of its
// lease it has not spent (leased minus spent). CostFrom and TokensFrom say
// where each cap comes from, for a refusal's reason.
type Share struct {
	Cap                  Amount
	CostFrom, TokensFrom string
}

// PerRun is the budget's cap on what one run may hold: perRun.maxCostUSD
// and perRun.maxTokens where set (never more than the limit), else
// perRun.fraction of the limit (DefaultPerRunFraction when unset),
// rounded down.
func PerRun(b *v1alpha1.AgentBudget) Share {
	lim, _, _ := limits(b)
	p := b.Spec.PerRun
	if p == nil {
		p = &v1alpha1.BudgetPerRun{}
	}
	frac, how := p.Fraction, "perRun.fraction"
	f, ok := new(big.Rat).SetString(frac)
	if frac == "" || !ok || f.Sign() <= 0 || f.Cmp(big.NewRat(1, 1)) > 0 {
		// The CRD admits only a decimal in (0, 1].
		frac, how = DefaultPerRunFraction, "the default perRun.fraction"
		f, _ = new(big.Rat).SetString(frac)
	}
	part := func(limit int64) int64 {
		r := new(big.Rat).Mul(new(big.Rat).SetInt64(limit), f)
		return new(big.Int).Quo(r.Num(), r.Denom()).Int64()
	}
	var s Share
	if p.MaxCostUSD != "" {
		s.Cap.Cost, s.CostFrom = min(Money(p.MaxCostUSD), lim.Cost), "perRun.maxCostUSD"
	} else {
		s.Cap.Cost = loop.Money(part(int64(lim.Cost)))
		s.CostFrom = fmt.Sprintf("%s %s of maxCostUSD $%s", how, frac, lim.Cost)
	}
	if p.MaxTokens != nil {
		s.Cap.Tokens, s.TokensFrom = min(*p.MaxTokens, lim.Tokens), "perRun.maxTokens"
	} else {
		s.Cap.Tokens = part(lim.Tokens)
		s.TokensFrom = fmt.Sprintf("%s %s of maxTokens %d", how, frac, lim.Tokens)
	}
	return s
}

// Unpriced says why the budget refuses a run whose model, or one of its
// fallbacks, has no price (pricing unset after the platform's policies
// applied theirs): a hard maxCostUSD would count its calls as $0. It is
// empty when the budget does not limit dollars or every model has a
// price.
func Unpriced(b *v1alpha1.AgentBudget, m *v1alpha1.ModelSpec) string {
	if !LimitsDollars(b) {
		return ""
	}
	for i, e := range append([]v1alpha1.ModelEndpoint{m.ModelEndpoint}, m.Fallbacks...) {
		if e.Pricing != nil && (e.Pricing.Input != "" || e.Pricing.Output != "") {
			continue
		}
		model := fmt.Sprintf("model %q", e.Name)
		if e.Name == "" {
			model = fmt.Sprintf("the model of provider %s", e.Provider)
		}
		field := "model.pricing"
		if i > 0 {
			field = fmt.Sprintf("model.fallbacks[%d].pricing", i-1)
		}
		return fmt.Sprintf("AgentBudget %s limits dollars (maxCostUSD $%s) and %s has no price, so its calls would count as $0: "+
			"set the run's %s (US dollars per million input and output tokens), or ask the platform team to price %s in an AgentRunPolicy (spec.pricing)",
			b.Name, Money(b.Spec.MaxCostUSD), model, field, model)
	}
	return ""
}

// HardCovers reports whether the run's lease already covers a total of
// exposure in every hard dimension, so the step needs no write.
func HardCovers(b *v1alpha1.AgentBudget, r *v1alpha1.BudgetReservation, exposure Amount) bool {
	if r == nil {
		return false
	}
	_, hasCost, hasTokens := limits(b)
	c := Ceiling(r)
	if hasCost && !Soft(b, v1alpha1.LimitCost) && exposure.Cost > c.Cost {
		return false
	}
	if hasTokens && !Soft(b, v1alpha1.LimitTokens) && exposure.Tokens > c.Tokens {
		return false
	}
	return true
}

// Totals is the window's ledger: consumed is settled plus what every open
// lease spent; reserved is what open leases hold beyond what they spent.
type Totals struct {
	Consumed, Reserved Amount
}

// Exposure is consumed + reserved: what the window may already have cost.
func (t Totals) Exposure() Amount { return t.Consumed.add(t.Reserved) }

// Sum adds up the ledger.
func Sum(b *v1alpha1.AgentBudget) Totals {
	t := Totals{Consumed: Amount{Money(b.Status.SettledCostUSD), b.Status.SettledTokens}}
	for i := range b.Status.Reservations {
		r := &b.Status.Reservations[i]
		sp := Spent(r)
		t.Consumed = t.Consumed.add(sp)
		t.Reserved = t.Reserved.add(Leased(r).sub(sp).floor())
	}
	return t
}

// recount rewrites the status totals from the reservations.
func recount(b *v1alpha1.AgentBudget) {
	t := Sum(b)
	st := &b.Status
	st.ConsumedCostUSD, st.ConsumedTokens = usd(t.Consumed.Cost), t.Consumed.Tokens
	st.ReservedCostUSD, st.ReservedTokens = usd(t.Reserved.Cost), t.Reserved.Tokens
	st.ActiveRuns = int32(len(st.Reservations))
}

// Request is one run's ask of a budget: cover a total exposure of its
// own (what it spent plus what the step it admits may spend).
type Request struct {
	UID types.UID
	Run string
	// Spent is the run's own total spend (status.usage); Exposure is Spent
	// plus the reservation of the step it is about to take.
	Spent, Exposure Amount
	// Starting: the run has not started its first turn, so a full
	// maxConcurrentRuns makes it wait rather than join.
	Starting bool
	// HoldFor is the longest one call of the run may take.
	HoldFor time.Duration
}

// Decision is what Lease did.
type Decision struct {
	// Changed: the status changed and must be written.
	Changed bool
	// New: the run took its first lease in this budget.
	New bool
	// Refused is set when a hard limit does not admit the step: the
	// reason names the budget and the arithmetic. Nothing changed.
	Refused string
	// Share: the refusal is the per-run cap's (spec.perRun), not the
	// limit's: the budget has room for the step, and is not exhausted.
	Share bool
	// Wait is set when the run may not start yet (maxConcurrentRuns, or
	// the ledger holds MaxBudgetReservations leases). Nothing changed.
	Wait string
}

// chunkSteps is how many steps like the current one a lease covers
// beyond the step itself, when the budget has room: a run writes the
// budget about once per chunkSteps+1 steps instead of every step.
const chunkSteps = 8

// chunkCap bounds a chunk to 1/chunkCap of the limit, so that the first
// runs of a burst cannot hold most of a budget the others then find
// reserved.
const chunkCap = 64

// Lease covers the run's exposure in the budget: it records what the run
// has spent, and extends its lease when the step needs more than it
// holds. The extension is the step's need plus a chunk of up to
// chunkSteps more steps, but never more than 1/64 of the limit, nor a
// fair share of what is left (the room after the step, divided among the
// open leases plus one), nor what would take the run past its per-run cap
// (PerRun: what it holds and has not spent), so that chunks shrink as the
// budget runs out and never crowd out a step that fits. A hard limit that
// cannot cover the need refuses the step, and so does the per-run cap
// when the run would hold more than it; Lease may then have changed b,
// which the caller must discard (work on a copy).
func Lease(b *v1alpha1.AgentBudget, req Request) Decision {
	var d Decision
	r := Find(b, req.UID)
	if r == nil {
		n := int32(len(b.Status.Reservations))
		if m := b.Spec.MaxConcurrentRuns; m != nil && req.Starting && !Soft(b, v1alpha1.LimitConcurrent) && n >= *m {
			d.Wait = fmt.Sprintf("AgentBudget %s: %d of maxConcurrentRuns %d runs are active", b.Name, n, *m)
			return d
		}
		if n >= v1alpha1.MaxBudgetReservations {
			d.Wait = fmt.Sprintf("AgentBudget %s: its ledger holds the most leases it can (%d)", b.Name, v1alpha1.MaxBudgetReservations)
			return d
		}
		b.Status.Reservations = append(b.Status.Reservations, v1alpha1.BudgetReservation{UID: req.UID, Run: req.Run})
		r = &b.Status.Reservations[len(b.Status.Reservations)-1]
		setBase(r, req.Spent)
		d.New, d.Changed = true, true
	}
	base := Base(r)
	spent := req.Spent.sub(base).floor()
	if spent != Spent(r) {
		setSpent(r, spent)
		d.Changed = true
	}
	if req.HoldFor > 0 && (r.HoldFor == nil || r.HoldFor.Duration != req.HoldFor) {
		r.HoldFor = &metav1.Duration{Duration: req.HoldFor}
		d.Changed = true
	}
	held := maxAmount(Leased(r), spent)
	need := req.Exposure.sub(base).sub(held).floor()
	step := req.Exposure.sub(req.Spent).floor()

	lim, hasCost, hasTokens := limits(b)
	total := Sum(b)
	exp := total.Exposure()
	if need.Cost > 0 && hasCost && !Soft(b, v1alpha1.LimitCost) && exp.Cost+need.Cost > lim.Cost {
		return refuse(b, total, need, func(a Amount) string { return "$" + a.Cost.String() }, "maxCostUSD", "$"+lim.Cost.String())
	}
	if need.Tokens > 0 && hasTokens && !Soft(b, v1alpha1.LimitTokens) && exp.Tokens+need.Tokens > lim.Tokens {
		return refuse(b, total, need, func(a Amount) string { return fmt.Sprintf("%d tokens", a.Tokens) }, "maxTokens", fmt.Sprintf("%d tokens", lim.Tokens))
	}
	if need == (Amount{}) {
		if d.Changed {
			recount(b)
		}
		return d
	}
	// What the run would hold, unspent, once the step is covered: at least
	// the step's reservation, and never more than the per-run cap.
	per := PerRun(b)
	hold := held.add(need).sub(spent)
	if need.Cost > 0 && hasCost && !Soft(b, v1alpha1.LimitCost) && hold.Cost > per.Cap.Cost {
		return refuseShare(b, "$"+hold.Cost.String(), "$"+per.Cap.Cost.String(), per.CostFrom)
	}
	if need.Tokens > 0 && hasTokens && !Soft(b, v1alpha1.LimitTokens) && hold.Tokens > per.Cap.Tokens {
		return refuseShare(b, fmt.Sprintf("%d tokens", hold.Tokens), fmt.Sprintf("%d tokens", per.Cap.Tokens), per.TokensFrom)
	}
	// The room left after this step, shared fairly among the open leases,
	// and within what the run may still hold.
	share := int64(len(b.Status.Reservations)) + 1
	grant := need
	if hasCost && !Soft(b, v1alpha1.LimitCost) {
		room := lim.Cost - exp.Cost - need.Cost
		grant.Cost += max(0, min(step.Cost*chunkSteps, room/loop.Money(share), lim.Cost/chunkCap, per.Cap.Cost-hold.Cost))
	}
	if hasTokens && !Soft(b, v1alpha1.LimitTokens) {
		room := lim.Tokens - exp.Tokens - need.Tokens
		grant.Tokens += max(0, min(step.Tokens*chunkSteps, room/share, lim.Tokens/chunkCap, per.Cap.Tokens-hold.Tokens))
	}
	setLeased(r, held.add(grant))
	d.Changed = true
	recount(b)
	return d
}

// refuse says why the step does not fit. The caller discards the copy of
// the budget Lease worked on: a refusal changes nothing.
func refuse(b *v1alpha1.AgentBudget, t Totals, need Amount, show func(Amount) string, limit, max string) Decision {
	return Decision{Refused: fmt.Sprintf("AgentBudget %s: %s consumed + %s reserved + %s requested > %s (%s)",
		b.Name, show(t.Consumed), show(t.Reserved), show(need), max, limit)}
}

// refuseShare says why the step does not fit the run's per-run cap. What
// the run would hold unspent once a step is covered is that step's own
// reservation: the lease covers the step exactly, and a chunk only within
// the cap.
func refuseShare(b *v1alpha1.AgentBudget, hold, cap, from string) Decision {
	return Decision{Share: true, Refused: fmt.Sprintf("AgentBudget %s: this step may spend up to %s, more than one run may hold of the budget at once (%s, %s): "+
		"lower what one step of the run may spend (model.maxOutputTokens, its tools' maxCostUSD), or raise the budget's perRun",
		b.Name, hold, cap, from)}
}

// Settle closes a run's lease with its final total: what it spent in the
// window becomes settled, the rest of the lease is returned. It reports
// what was settled, and false when the run holds no lease (already
// settled: settling twice is a no-op, so a crash between the run's last
// write and this one neither loses nor double-counts).
func Settle(b *v1alpha1.AgentBudget, uid types.UID, final Amount) (Amount, bool) {
	r := Find(b, uid)
	if r == nil {
		return Amount{}, false
	}
	spent := final.sub(Base(r)).floor()
	closeLease(b, uid, spent)
	return spent, true
}

// Expire handles the lease of a run that no longer exists. The first call
// starts the clock: the lease keeps counting for its holdFor (a call
// started just before the deletion may still spend). Once expiresAt has
// passed, the whole lease is charged (what the run really spent went with
// it; charging the lease never under-counts) and closed. It reports
// whether the status changed and when to look again.
func Expire(b *v1alpha1.AgentBudget, uid types.UID, now time.Time) (changed bool, charged Amount, closed bool, next time.Time) {
	r := Find(b, uid)
	if r == nil {
		return false, Amount{}, false, time.Time{}
	}
	if r.ExpiresAt == nil {
		hold := time.Duration(0)
		if r.HoldFor != nil {
			hold = r.HoldFor.Duration
		}
		t := metav1.NewTime(now.Add(hold).Truncate(time.Second).Add(time.Second))
		r.ExpiresAt = &t
		return true, Amount{}, false, t.Time
	}
	if now.Before(r.ExpiresAt.Time) {
		return false, Amount{}, false, r.ExpiresAt.Time
	}
	charged = maxAmount(Leased(r), Spent(r))
	closeLease(b, uid, charged)
	return true, charged, true, time.Time{}
}

func closeLease(b *v1alpha1.AgentBudget, uid types.UID, spent Amount) {
	st := &b.Status
	st.SettledCostUSD = usd(Money(st.SettledCostUSD) + spent.Cost)
	st.SettledTokens += spent.Tokens
	st.Reservations = slices.DeleteFunc(st.Reservations, func(x v1alpha1.BudgetReservation) bool { return x.UID == uid })
	recount(b)
}

// Window returns the budget's window length.
func Window(b *v1alpha1.AgentBudget) time.Duration {
	if b.Spec.Window == nil || b.Spec.Window.Duration <= 0 {
		return DefaultWindow
	}
	return b.Spec.Window.Duration
}

// Roll starts the first window, or moves to the window that holds now:
// settled spend goes back to zero, and each open lease keeps what it has
// not spent (its spend so far moves into its runBase). It reports whether
// a new window began (false for the first one) and when the current one
// ends.
func Roll(b *v1alpha1.AgentBudget, now time.Time) (rolled bool, ends time.Time) {
	w := Window(b)
	st := &b.Status
	if st.WindowStart == nil {
		t := metav1.NewTime(now.Truncate(time.Second))
		st.WindowStart = &t
		recount(b)
		return false, t.Add(w)
	}
	start := st.WindowStart.Time
	if now.Before(start.Add(w)) {
		return false, start.Add(w)
	}
	n := now.Sub(start) / w
	t := metav1.NewTime(start.Add(n * w))
	st.WindowStart = &t
	st.SettledCostUSD, st.SettledTokens = "", 0
	for i := range st.Reservations {
		r := &st.Reservations[i]
		sp := Spent(r)
		setBase(r, Base(r).add(sp))
		setLeased(r, Leased(r).sub(sp).floor())
		setSpent(r, Amount{})
	}
	st.Warned = nil
	apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.BudgetConditionExhausted)
	recount(b)
	return true, t.Add(w)
}

// Threshold is a soft limit's announcement: the limit and the percentage
// (80 or 100) its consumption reached.
type Threshold struct {
	Limit   v1alpha1.BudgetLimit
	Percent int
	Message string
}

func (t Threshold) key() string { return fmt.Sprintf("%s/%d", t.Limit, t.Percent) }

// SoftWarnings returns the soft thresholds reached and not yet announced
// in this window, and marks them announced.
func SoftWarnings(b *v1alpha1.AgentBudget) []Threshold {
	lim, hasCost, hasTokens := limits(b)
	t := Sum(b)
	var reached []Threshold
	check := func(l v1alpha1.BudgetLimit, has bool, used, max int64, show func(int64) string) {
		if !has || !Soft(b, l) {
			return
		}
		for _, p := range []int{80, 100} {
			if used*100 >= max*int64(p) && (max > 0 || used > 0 || p == 100) {
				reached = append(reached, Threshold{Limit: l, Percent: p, Message: fmt.Sprintf(
					"AgentBudget %s: %s consumed is %d%% or more of the soft %s %s", b.Name, show(used), p, l, show(max))})
			}
		}
	}
	check(v1alpha1.LimitCost, hasCost, int64(t.Consumed.Cost), int64(lim.Cost), func(v int64) string { return "$" + loop.Money(v).String() })
	check(v1alpha1.LimitTokens, hasTokens, t.Consumed.Tokens, lim.Tokens, func(v int64) string { return fmt.Sprintf("%d tokens", v) })
	if m := b.Spec.MaxConcurrentRuns; m != nil {
		check(v1alpha1.LimitConcurrent, true, int64(len(b.Status.Reservations)), int64(*m), func(v int64) string { return fmt.Sprintf("%d runs", v) })
	}
	var fresh []Threshold
	for _, th := range reached {
		if !slices.Contains(b.Status.Warned, th.key()) {
			b.Status.Warned = append(b.Status.Warned, th.key())
			fresh = append(fresh, th)
		}
	}
	return fresh
}

// SetConditions derives Ready, Exhausted and SoftLimitReached from the
// ledger. A refusal recorded in this window (Exhausted=True, Refused)
// stays until the window rolls over.
func SetConditions(b *v1alpha1.AgentBudget, now time.Time) {
	st := &b.Status
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
			Message: msg, ObservedGeneration: b.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	set(v1alpha1.BudgetConditionReady, metav1.ConditionTrue, v1alpha1.ReasonBudgetActive, "the operator keeps this budget's ledger")
	lim, hasCost, hasTokens := limits(b)
	t := Sum(b)
	var full []string
	if hasCost && !Soft(b, v1alpha1.LimitCost) && t.Consumed.Cost >= lim.Cost {
		full = append(full, fmt.Sprintf("$%s consumed of maxCostUSD $%s", t.Consumed.Cost, lim.Cost))
	}
	if hasTokens && !Soft(b, v1alpha1.LimitTokens) && t.Consumed.Tokens >= lim.Tokens {
		full = append(full, fmt.Sprintf("%d tokens consumed of maxTokens %d", t.Consumed.Tokens, lim.Tokens))
	}
	if c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.BudgetConditionExhausted); c == nil || c.Reason != v1alpha1.ReasonBudgetRefused {
		if len(full) > 0 {
			set(v1alpha1.BudgetConditionExhausted, metav1.ConditionTrue, v1alpha1.ReasonBudgetLimitReached, strings.Join(full, "; "))
		} else {
			set(v1alpha1.BudgetConditionExhausted, metav1.ConditionFalse, v1alpha1.ReasonBudgetWithinLimits, "every hard limit has room in this window")
		}
	}
	if len(b.Spec.Soft) > 0 {
		var warned []string
		for _, w := range st.Warned {
			warned = append(warned, w+"%")
		}
		if len(warned) > 0 {
			set(v1alpha1.BudgetConditionSoftLimitReached, metav1.ConditionTrue, v1alpha1.ReasonBudgetSoftWarning, "soft limits reached in this window: "+strings.Join(warned, ", "))
		} else {
			set(v1alpha1.BudgetConditionSoftLimitReached, metav1.ConditionFalse, v1alpha1.ReasonBudgetBelowSoftLimits, "no soft limit reached 80% in this window")
		}
	} else {
		apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.BudgetConditionSoftLimitReached)
	}
}

// MarkRefused records a refusal: Exhausted=True with reason Refused until
// the window rolls over. It reports whether the condition changed.
func MarkRefused(b *v1alpha1.AgentBudget, msg string, now time.Time) bool {
	c := apimeta.FindStatusCondition(b.Status.Conditions, v1alpha1.BudgetConditionExhausted)
	if c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonBudgetRefused {
		return false
	}
	apimeta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: v1alpha1.BudgetConditionExhausted, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonBudgetRefused, Message: msg, ObservedGeneration: b.Generation, LastTransitionTime: metav1.NewTime(now)})
	return true
}
