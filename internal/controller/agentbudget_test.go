package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// budgetWrites counts the status writes to AgentBudgets the operator
// makes: those the API server accepted, and those it refused (a conflict,
// mostly).
type budgetWrites struct{ accepted, failed atomic.Int64 }

func countBudgetWrites(w *budgetWrites) managerSetup {
	return managerSetup{workers: 8, wrap: func(c client.Client, _ func()) client.Client {
		return hookClient{Client: c, after: func(op string, obj client.Object, err error) {
			if _, ok := obj.(*v1alpha1.AgentBudget); !ok || op != "status" {
				return
			}
			if err == nil {
				w.accepted.Add(1)
			} else {
				w.failed.Add(1)
			}
		}}
	}}
}

// maxFailedBudgetWrites bounds the refused budget writes of 100 runs at
// once. The operator is the only writer of a budget's status and
// serialises its own writes (budget.Ledgers), each from the newest copy
// it knows, so none should conflict. A lease that works from a copy older
// than our own last write conflicts: 75-79 refused writes in the 300-turn
// test when leases read the budget before taking its lock (and 3-5 in the
// storm, too few to tell).
const maxFailedBudgetWrites = 5

func makeBudget(t *testing.T, ns, name string, f func(*v1alpha1.AgentBudgetSpec)) *v1alpha1.AgentBudget {
	t.Helper()
	b := &v1alpha1.AgentBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.AgentBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}}
	f(&b.Spec)
	if err := k8sClient.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

// pricedRun is a run of team a whose every model call costs a known
// amount: $10 per million tokens, 220 tokens a call ($0.0022), on a
// reservation of its estimated input plus 100 output tokens. Its script
// is two turns of tool calls and an answer.
func pricedRun(ns, name string) *runBuilder {
	usage := &v1alpha1.ScriptUsage{InputTokens: 200, OutputTokens: 20}
	b := makeRun(ns, name).maxTurns(5).readTool("lookup")
	for _, q := range []string{"a", "b"} {
		b.step(v1alpha1.ScriptStep{Usage: usage, ToolCalls: []v1alpha1.ScriptToolCall{{Name: "lookup",
			Arguments: rawJSON(`{"q":"` + q + `"}`)}}})
	}
	b.step(v1alpha1.ScriptStep{Content: "Done.", Usage: usage})
	b.r.Labels = map[string]string{"team": "a"}
	return b.with(func(s *v1alpha1.AgentRunSpec) {
		s.Model.MaxOutputTokens = ptr.To[int32](100)
		s.Model.Pricing = &v1alpha1.ModelPricing{Input: "10", Output: "10"}
	})
}

func spentBy(t *testing.T, run *v1alpha1.AgentRun) loop.Money {
	t.Helper()
	if run.Status.Usage == nil || run.Status.Usage.CostUSD == "" {
		return 0
	}
	return loop.MustMoney(string(run.Status.Usage.CostUSD))
}

// The shared ledger settles: no lease is left open, nothing is reserved,
// and what it counts as consumed is exactly what the runs say they spent.
func expectSettled(t *testing.T, b *v1alpha1.AgentBudget, runs []*v1alpha1.AgentRun, extra loop.Money) *v1alpha1.AgentBudget {
	t.Helper()
	var spent loop.Money
	for _, r := range runs {
		spent += spentBy(t, get(t, r))
	}
	want := (spent + extra).String()
	var cur *v1alpha1.AgentBudget
	NewWithT(t).Eventually(func() string {
		cur = get(t, b)
		return fmt.Sprintf("consumed %s reserved %s active %d leases %d", cur.Status.ConsumedCostUSD, cur.Status.ReservedCostUSD,
			cur.Status.ActiveRuns, len(cur.Status.Reservations))
	}, 30*time.Second, 50*time.Millisecond).Should(Equal(fmt.Sprintf("consumed %s reserved 0.0000 active 0 leases 0", want)), func() string {
		var open []string
		for _, res := range cur.Status.Reservations {
			r := &v1alpha1.AgentRun{}
			err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: b.Namespace, Name: res.Run}, r)
			open = append(open, fmt.Sprintf("%+v: run %s %v %v (%v)", res, r.Status.Outcome, r.Status.AgentBudgets, r.Status.Reason, err))
		}
		return "open leases:\n" + strings.Join(open, "\n")
	})
	return cur
}

// The storm: 100 runs share a budget whose hard maxCostUSD is far below
// what they would spend together. Whatever the interleaving, the runs
// never spend more than the limit, every refused run names the budget and
// its arithmetic, and once they have all ended nothing stays reserved.
func TestAgentBudget_stormOfRunsNeverOverspendsAHardLimit(t *testing.T) {
	ns := namespace(t)
	const limit = "0.10"
	b := makeBudget(t, ns, "storm", func(s *v1alpha1.AgentBudgetSpec) { s.MaxCostUSD = limit })
	var writes budgetWrites
	startWith(t, &kits{tools: newTools()}, countBudgetWrites(&writes))

	runs := make([]*v1alpha1.AgentRun, 100)
	var wg sync.WaitGroup
	for i := range runs {
		runs[i] = pricedRun(ns, fmt.Sprintf("storm-%03d", i)).r
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := k8sClient.Create(context.Background(), runs[i]); err != nil {
				t.Errorf("creating %s: %v", runs[i].Name, err)
			}
		}()
	}
	wg.Wait()

	var spent loop.Money
	turns, completed, refused := 0, 0, 0
	for _, r := range runs {
		r = waitOutcome(t, r, 60*time.Second)
		spent += spentBy(t, r)
		turns += int(r.Status.Usage.Turns)
		switch r.Status.Outcome {
		case v1alpha1.OutcomeCompleted:
			completed++
		case v1alpha1.OutcomeBudgetExhausted:
			refused++
			if !strings.HasPrefix(r.Status.Reason, "AgentBudget storm: $") || !strings.Contains(r.Status.Reason, " > $0.1000 (maxCostUSD)") {
				t.Errorf("%s was refused without naming the budget and its arithmetic: %q", r.Name, r.Status.Reason)
			}
		default:
			t.Errorf("%s ended %s: %s", r.Name, r.Status.Outcome, r.Status.Reason)
		}
	}
	if spent > loop.MustMoney(limit) {
		t.Errorf("the runs spent $%s together, over the hard limit of $%s", spent, limit)
	}
	if completed == 0 || refused == 0 {
		t.Errorf("%d runs completed and %d were refused: the storm should have both", completed, refused)
	}
	cur := expectSettled(t, b, runs, 0)
	c := apimeta.FindStatusCondition(cur.Status.Conditions, v1alpha1.BudgetConditionExhausted)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonBudgetRefused {
		t.Errorf("Exhausted condition %+v, want True, Refused", c)
	}
	t.Logf("100 runs: %d completed, %d refused, $%s spent of $%s, %d turns, %d AgentBudget writes (%.2f per turn), %d failed writes",
		completed, refused, spent, limit, turns, writes.accepted.Load(), float64(writes.accepted.Load())/float64(max(turns, 1)), writes.failed.Load())
	if n := writes.failed.Load(); n > maxFailedBudgetWrites {
		t.Errorf("%d AgentBudget writes were refused, want at most %d", n, maxFailedBudgetWrites)
	}
}

// With room to spare, a run draws most turns from the lease it holds: the
// budget is written far less than once per turn, even with 100 runs at
// once.
func TestAgentBudget_leasesInChunksKeepWritesBelowOnePerTurn(t *testing.T) {
	ns := namespace(t)
	b := makeBudget(t, ns, "roomy", func(s *v1alpha1.AgentBudgetSpec) { s.MaxCostUSD = "100" })
	var writes budgetWrites
	startWith(t, &kits{tools: newTools()}, countBudgetWrites(&writes))
	runs := make([]*v1alpha1.AgentRun, 100)
	for i := range runs {
		runs[i] = pricedRun(ns, fmt.Sprintf("roomy-%03d", i)).create(t)
	}
	turns := 0
	for _, r := range runs {
		r = waitOutcome(t, r, 60*time.Second)
		if r.Status.Outcome != v1alpha1.OutcomeCompleted {
			t.Fatalf("%s ended %s: %s", r.Name, r.Status.Outcome, r.Status.Reason)
		}
		turns += int(r.Status.Usage.Turns)
	}
	expectSettled(t, b, runs, 0)
	perTurn := float64(writes.accepted.Load()) / float64(turns)
	t.Logf("100 runs, %d turns, %d AgentBudget writes: %.2f per turn (%d failed writes)", turns, writes.accepted.Load(), perTurn, writes.failed.Load())
	if n := writes.failed.Load(); n > maxFailedBudgetWrites {
		t.Errorf("%d AgentBudget writes were refused, want at most %d", n, maxFailedBudgetWrites)
	}
	// One lease per run and one settlement write shared by the runs that
	// ended together: at most 2 writes per run of 3 turns.
	if perTurn > 0.67 {
		t.Errorf("%.2f AgentBudget writes per turn, want at most 0.67", perTurn)
	}
}

// gatedKits holds the model calls of runs labelled gate=<name> until the
// test opens that gate (or the operator stops).
type gatedKits struct {
	kits
	mu    sync.Mutex
	gates map[string]chan struct{}
	calls atomic.Int64
}

func newGatedKits() *gatedKits {
	return &gatedKits{kits: kits{tools: newTools()}, gates: map[string]chan struct{}{}}
}

func (g *gatedKits) gate(name string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates[name] == nil {
		g.gates[name] = make(chan struct{})
	}
	return g.gates[name]
}

func (g *gatedKits) open(name string) { close(g.gate(name)) }

func (g *gatedKits) Build(ctx context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error) {
	k, err := g.kits.Build(ctx, run, grant)
	if err != nil || run.Labels["gate"] == "" {
		return k, err
	}
	k.Model = gatedModel{inner: k.Model, gate: g.gate(run.Labels["gate"]), calls: &g.calls}
	return k, nil
}

type gatedModel struct {
	inner loop.Model
	gate  chan struct{}
	calls *atomic.Int64
}

func (m gatedModel) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	m.calls.Add(1)
	select {
	case <-m.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return m.inner.Complete(ctx, req)
}

func gated(b *runBuilder, gate string) *runBuilder {
	b.r.Labels["gate"] = gate
	return b
}

func leases(t *testing.T, b *v1alpha1.AgentBudget) int {
	return len(get(t, b).Status.Reservations)
}

// maxConcurrentRuns: a run beyond it waits in Pending, saying which
// budget it waits for, and starts once a slot is free; it does not fail.
func TestAgentBudget_fullConcurrencyKeepsRunsPendingUntilASlotFrees(t *testing.T) {
	ns := namespace(t)
	b := makeBudget(t, ns, "one-at-a-time", func(s *v1alpha1.AgentBudgetSpec) { s.MaxConcurrentRuns = ptr.To[int32](1) })
	g := newGatedKits()
	startWith(t, g, managerSetup{})
	first := gated(pricedRun(ns, "first"), "first").create(t)
	NewWithT(t).Eventually(func() int { return leases(t, b) }, 10*time.Second, 20*time.Millisecond).Should(Equal(1))
	second := pricedRun(ns, "second").create(t)
	NewWithT(t).Eventually(func() string { return get(t, second).Status.Reason }, 10*time.Second, 20*time.Millisecond).Should(
		Equal("waiting for a free run slot: AgentBudget one-at-a-time: 1 of maxConcurrentRuns 1 runs are active"))
	cur := get(t, second)
	c := apimeta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionSucceeded)
	if cur.Status.Phase != v1alpha1.PhasePending || c == nil || c.Reason != v1alpha1.ReasonWaitingForBudget || cur.Status.Outcome != "" {
		t.Fatalf("the waiting run: phase %s, outcome %q, condition %+v", cur.Status.Phase, cur.Status.Outcome, c)
	}
	g.open("first")
	if r := waitOutcome(t, first, 20*time.Second); r.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Fatalf("first ended %s: %s", r.Status.Outcome, r.Status.Reason)
	}
	if r := waitOutcome(t, second, 20*time.Second); r.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Fatalf("second ended %s: %s", r.Status.Outcome, r.Status.Reason)
	}
	expectSettled(t, b, []*v1alpha1.AgentRun{first, second}, 0)
}

// A budget deleted while a run holds a lease in it: once the operator has
// seen the deletion, the run's next step is refused, naming the budget (a
// hard limit fails closed). Until its watch delivers the delete, the
// operator's cache still holds the budget and the lease in it, as it did
// a moment before; the test waits for the cache, so that on a busy
// machine a late watch event does not let a second turn run.
func TestAgentBudget_deletedMidRunFailsClosed(t *testing.T) {
	ns := namespace(t)
	b := makeBudget(t, ns, "vanishing", func(s *v1alpha1.AgentBudgetSpec) { s.MaxCostUSD = "10" })
	g := newGatedKits()
	op, _ := startWith(t, g, managerSetup{})
	run := gated(pricedRun(ns, "orphan"), "orphan").create(t)
	NewWithT(t).Eventually(func() []string { return get(t, run).Status.AgentBudgets }, 10*time.Second, 20*time.Millisecond).Should(
		Equal([]string{"vanishing"}))
	if err := k8sClient.Delete(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() bool {
		return apierrors.IsNotFound(op.Get(context.Background(), client.ObjectKeyFromObject(b), &v1alpha1.AgentBudget{}))
	}, 10*time.Second, 20*time.Millisecond).Should(BeTrue(), "the operator's cache saw the deletion")
	g.open("orphan")
	r := waitOutcome(t, run, 20*time.Second)
	if r.Status.Outcome != v1alpha1.OutcomeBudgetExhausted || !strings.Contains(r.Status.Reason, "AgentBudget vanishing") ||
		!strings.Contains(r.Status.Reason, "fails closed") {
		t.Fatalf("ended %s: %q; want BudgetExhausted naming the deleted budget", r.Status.Outcome, r.Status.Reason)
	}
	if r.Status.Usage.Turns != 1 {
		t.Fatalf("%d turns were paid, want only the one admitted before the deletion", r.Status.Usage.Turns)
	}
}

// A soft limit warns (an event, the SoftLimitReached condition) at 80%
// and 100%, and stops nothing.
func TestAgentBudget_softLimitWarnsAndStopsNothing(t *testing.T) {
	ns := namespace(t)
	b := makeBudget(t, ns, "target", func(s *v1alpha1.AgentBudgetSpec) {
		s.MaxCostUSD = "0.001"
		s.Soft = []v1alpha1.BudgetLimit{v1alpha1.LimitCost}
	})
	startWith(t, &kits{tools: newTools()}, managerSetup{})
	run := pricedRun(ns, "over-target").create(t)
	if r := waitOutcome(t, run, 20*time.Second); r.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Fatalf("ended %s: %s", r.Status.Outcome, r.Status.Reason)
	}
	cur := expectSettled(t, b, []*v1alpha1.AgentRun{run}, 0)
	c := apimeta.FindStatusCondition(cur.Status.Conditions, v1alpha1.BudgetConditionSoftLimitReached)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "maxCostUSD/100%") {
		t.Fatalf("SoftLimitReached %+v", c)
	}
	NewWithT(t).Eventually(func() int { return len(budgetEvents(t, b, v1alpha1.ReasonBudgetSoftWarning)) }, 10*time.Second, 50*time.Millisecond).Should(Equal(2))
}

func budgetEvents(t *testing.T, b *v1alpha1.AgentBudget, reason string) []string {
	t.Helper()
	return eventNotes(t, b.Namespace, "AgentBudget", b.Name, "", reason)
}

// The crash: the operator stops while runs hold leases (their model calls
// in flight), and one of them is deleted while no operator runs. A new
// operator lets the others draw on the leases they hold and settles each
// once, and holds the deleted run's lease until no spend can arrive (its
// model timeout), then charges all of it. Nothing is lost, nothing is
// counted twice: consumed is exactly what the runs spent plus the
// deleted run's lease.
func TestAgentBudget_operatorCrashWhileRunsHoldLeasesNeitherLosesNorDoubleCounts(t *testing.T) {
	ns := namespace(t)
	b := makeBudget(t, ns, "durable", func(s *v1alpha1.AgentBudgetSpec) { s.MaxCostUSD = "10" })
	g := newGatedKits()
	_, stop := startWith(t, g, managerSetup{})
	var runs []*v1alpha1.AgentRun
	for i := range 5 {
		runs = append(runs, gated(pricedRun(ns, fmt.Sprintf("crash-%d", i)), "never").with(func(s *v1alpha1.AgentRunSpec) {
			s.Model.Timeout = &metav1.Duration{Duration: 2 * time.Second}
			s.Tools[0].Timeout = &metav1.Duration{Duration: 2 * time.Second}
		}).create(t))
	}
	NewWithT(t).Eventually(func() int64 { return g.calls.Load() }, 10*time.Second, 20*time.Millisecond).Should(BeNumerically("==", 5))
	held := get(t, b)
	if len(held.Status.Reservations) != 5 {
		t.Fatalf("%d leases before the crash, want 5", len(held.Status.Reservations))
	}
	stop()

	// While no operator runs, one run is deleted mid-call.
	var deletedLease loop.Money
	for _, res := range held.Status.Reservations {
		if res.Run == "crash-4" {
			deletedLease = loop.MustMoney(string(res.LeasedCostUSD))
		}
	}
	if err := k8sClient.Delete(context.Background(), runs[4]); err != nil {
		t.Fatal(err)
	}

	startWith(t, &kits{tools: newTools()}, managerSetup{})
	for _, r := range runs[:4] {
		if r := waitOutcome(t, r, 20*time.Second); r.Status.Outcome != v1alpha1.OutcomeCompleted {
			t.Fatalf("%s ended %s: %s", r.Name, r.Status.Outcome, r.Status.Reason)
		}
	}
	cur := expectSettled(t, b, runs[:4], deletedLease)
	// Events are sent by the recorder in the background: the settlement
	// can be read before its event is.
	NewWithT(t).Eventually(func() int { return len(budgetEvents(t, cur, v1alpha1.ReasonBudgetExpired)) }, 10*time.Second, 50*time.Millisecond).
		Should(Equal(1), "Expired events for the deleted run")
}

// A budget whose every limit is soft, deleted while a run holds a lease in
// it, stops nothing: the run is not refused and completes (only a hard
// limit fails closed).
func TestAgentBudget_deletedSoftBudgetStopsNothing(t *testing.T) {
	ns := namespace(t)
	b := makeBudget(t, ns, "advisory", func(s *v1alpha1.AgentBudgetSpec) {
		s.MaxCostUSD = "10"
		s.Soft = []v1alpha1.BudgetLimit{v1alpha1.LimitCost}
	})
	g := newGatedKits()
	startWith(t, g, managerSetup{})
	run := gated(pricedRun(ns, "advised"), "advised").create(t)
	NewWithT(t).Eventually(func() int { return leases(t, b) }, 10*time.Second, 20*time.Millisecond).Should(Equal(1))
	if err := k8sClient.Delete(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	g.open("advised")
	r := waitOutcome(t, run, 20*time.Second)
	if r.Status.Outcome != v1alpha1.OutcomeCompleted || r.Status.Usage.Turns != 3 {
		t.Fatalf("ended %s after %d turns: %q; want Completed after 3 (a soft budget never stops a run)", r.Status.Outcome, r.Status.Usage.Turns, r.Status.Reason)
	}
}

// warningsOn returns the Warning events of a run with this reason.
func warningsOn(t *testing.T, run *v1alpha1.AgentRun, reason string) []string {
	t.Helper()
	return eventNotes(t, run.Namespace, "AgentRun", run.Name, corev1.EventTypeWarning, reason)
}

func cancelRun(t *testing.T, run *v1alpha1.AgentRun) {
	t.Helper()
	if err := k8sClient.Patch(context.Background(), get(t, run), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancel":true}}`))); err != nil {
		t.Fatal(err)
	}
}

// The operator stops while a run holds a lease and a tool call with a
// declared cost is in flight; while no operator runs, the run is
// cancelled. The new operator ends the run charged that call (one call at
// the tool's maxCostUSD, its outcome unknown, never run again, a
// CallAbandoned warning), and the budget settles exactly that.
func TestAgentBudget_runCancelledWithAToolCallLostToARestartIsChargedTheCall(t *testing.T) {
	ns := namespace(t)
	b := makeBudget(t, ns, "cancelled", func(s *v1alpha1.AgentBudgetSpec) { s.MaxCostUSD = "10" })
	tb := newTools()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	tb.funcs["pay"] = func(ctx context.Context, inv loop.Invocation) loop.Result {
		once.Do(func() { close(entered) })
		select { // the operator stops first: this result is never read
		case <-release:
		case <-ctx.Done():
		}
		return loop.Result{Output: []byte("paid")}
	}
	usage := &v1alpha1.ScriptUsage{InputTokens: 200, OutputTokens: 20} // $0.0022 at $10 per million
	run := makeRun(ns, "pay-then-cancel").maxTurns(5).with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "pay", Mutates: ref(true), Reversible: ref(true), MaxCostUSD: "0.05",
			HTTP: &v1alpha1.HTTPTool{URL: "http://billing.invalid/pay", Method: "POST"}})
		s.Model.MaxOutputTokens = ptr.To[int32](100)
		s.Model.Pricing = &v1alpha1.ModelPricing{Input: "10", Output: "10"}
	}).step(v1alpha1.ScriptStep{Usage: usage, ToolCalls: []v1alpha1.ScriptToolCall{{Name: "pay", Arguments: rawJSON(`{"amount":1}`)}}}).
		step(v1alpha1.ScriptStep{Content: "Paid.", Usage: usage})
	run.r.Labels = map[string]string{"team": "a"}
	run.create(t)

	_, stop := startWith(t, &kits{tools: tb}, managerSetup{})
	awaitStarted(t, entered)
	stop()
	close(release)
	if held := get(t, b); len(held.Status.Reservations) != 1 {
		t.Fatalf("%d leases before the crash, want 1", len(held.Status.Reservations))
	}
	cancelRun(t, run.r)

	again := newTools()
	startWith(t, &kits{tools: again}, managerSetup{})
	done := waitOutcome(t, run.r, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeApprovalDenied, "cancelled")
	if got := spentBy(t, done); got != loop.MustMoney("0.0522") || done.Status.Usage.ToolCalls != 1 {
		t.Errorf("the run was charged $%s and %d tool calls; want $0.0522 (the model call, $0.0022, and the lost call's maxCostUSD, $0.05) and 1 call",
			got, done.Status.Usage.ToolCalls)
	}
	if n := again.counts()["t1-c1:pay"]; n != 0 {
		t.Errorf("the lost call ran %d more times after the restart", n)
	}
	cur := expectSettled(t, b, []*v1alpha1.AgentRun{done}, 0)
	if cur.Status.ConsumedCostUSD != "0.0522" {
		t.Errorf("the budget consumed $%s, want $0.0522", cur.Status.ConsumedCostUSD)
	}
	NewWithT(t).Eventually(func() []string { return warningsOn(t, done, string(loop.NoteCallAbandoned)) }, 10*time.Second, 50*time.Millisecond).
		Should(ConsistOf(ContainSubstring("t1-c1 pay was in flight when the run was cancelled")))
}

// The same with the model call in flight: the run is charged the whole
// call (its reservation: tokens and cost), and the budget settles that.
func TestAgentBudget_runCancelledWithAModelCallLostToARestartIsChargedTheWholeCall(t *testing.T) {
	ns := namespace(t)
	b := makeBudget(t, ns, "cancelled-mid-call", func(s *v1alpha1.AgentBudgetSpec) { s.MaxCostUSD = "10" })
	g := newGatedKits()
	_, stop := startWith(t, g, managerSetup{})
	run := gated(pricedRun(ns, "think-then-cancel"), "never").create(t)
	NewWithT(t).Eventually(func() int64 { return g.calls.Load() }, 10*time.Second, 20*time.Millisecond).Should(BeNumerically("==", 1))
	stop()
	held := get(t, run)
	if held.Status.Reserved == nil || held.Status.Reserved.CostUSD == "" {
		t.Fatalf("the stopped run holds no reservation: %+v", held.Status)
	}
	reserved := *held.Status.Reserved
	cancelRun(t, run)

	startWith(t, &kits{tools: newTools()}, managerSetup{})
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeApprovalDenied, "cancelled")
	u := done.Status.Usage
	if u.CostUSD != reserved.CostUSD || u.InputTokens+u.OutputTokens != reserved.InputTokens+reserved.OutputTokens || u.Turns != 1 {
		t.Errorf("charged $%s, %d tokens, %d turns; want the reservation: $%s, %d tokens, 1 turn", u.CostUSD, u.InputTokens+u.OutputTokens, u.Turns,
			reserved.CostUSD, reserved.InputTokens+reserved.OutputTokens)
	}
	cur := expectSettled(t, b, []*v1alpha1.AgentRun{done}, 0)
	if string(cur.Status.ConsumedCostUSD) != reserved.CostUSD {
		t.Errorf("the budget consumed $%s, want the reservation $%s", cur.Status.ConsumedCostUSD, reserved.CostUSD)
	}
	NewWithT(t).Eventually(func() []string { return warningsOn(t, done, string(loop.NoteCallAbandoned)) }, 10*time.Second, 50*time.Millisecond).
		Should(ConsistOf(ContainSubstring("The model call of turn 1 was in flight when the run was cancelled")))
}

// staleOnce serves, once it is armed, the first version it read of one
// run in place of the next read of that run: a reconcile then works from
// a stale copy, as after a lagging cache or a fail-over.
type staleOnce struct {
	client.Client
	name   string
	mu     sync.Mutex
	first  *v1alpha1.AgentRun
	armed  bool
	served chan struct{}
}

func (s *staleOnce) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := s.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	run, ok := obj.(*v1alpha1.AgentRun)
	if !ok || key.Name != s.name {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.first == nil:
		s.first = run.DeepCopy()
	case s.armed:
		s.armed = false
		s.first.DeepCopyInto(run)
		close(s.served)
	}
	return nil
}

func (s *staleOnce) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
}

// A run ends and its lease is settled; then a reconcile reads a stale
// copy of it, from before it started. That reconcile must not open a new
// lease: nothing would ever settle it against the run's usage but a
// second settlement of the whole run, which counts its spend twice.
func TestAgentBudget_aReconcileFromAStaleCopyOfAnEndedRunOpensNoLease(t *testing.T) {
	ns := namespace(t)
	b := makeBudget(t, ns, "stale", func(s *v1alpha1.AgentBudgetSpec) { s.MaxCostUSD = "10" })
	stale := &staleOnce{name: "ended", served: make(chan struct{})}
	startWith(t, &kits{tools: newTools()}, managerSetup{wrap: func(c client.Client, _ func()) client.Client {
		stale.Client = c
		return stale
	}})
	run := pricedRun(ns, "ended").create(t)
	if end := waitOutcome(t, run, 20*time.Second); end.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Fatalf("ended %s: %s", end.Status.Outcome, end.Status.Reason)
	}
	expectSettled(t, b, []*v1alpha1.AgentRun{run}, 0)

	stale.arm()
	cur := get(t, run)
	cur.Labels["poked"] = "yes" // any change makes the operator reconcile the run
	if err := k8sClient.Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	await(t, stale.served, 10*time.Second, "the operator did not read the run again")
	want := fmt.Sprintf("consumed %s leases 0", spentBy(t, get(t, run)))
	NewWithT(t).Consistently(func() string {
		cur := get(t, b)
		return fmt.Sprintf("consumed %s leases %d", cur.Status.ConsumedCostUSD, len(cur.Status.Reservations))
	}, 3*time.Second, 50*time.Millisecond).Should(Equal(want), "a lease opened from the stale copy, or the run settled twice")
}
