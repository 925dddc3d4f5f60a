package agentbudget

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller/controllertest"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/testenv"
)

// t0 is the time the tests' clocks start at.
var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// ledgerKeeper is a budget reconciler the test calls itself, against the
// API server directly (no cache), at the time *now says.
func ledgerKeeper(now *time.Time) (*Reconciler, *events.FakeRecorder) {
	rec := events.NewFakeRecorder(100)
	return NewReconciler(Config{Base: reconcilers.Base{Client: cluster.Client, Recorder: rec,
		Clock: func() time.Time { return *now }}}), rec
}

// settle reconciles b once, failing the test on an error, and returns
// the result and the budget as the API server then has it.
func settle(t *testing.T, r *Reconciler, b *v1alpha1.AgentBudget) (ctrl.Result, *v1alpha1.AgentBudget) {
	t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)})
	if err != nil {
		t.Fatalf("reconciling %s: %v", b.Name, err)
	}
	return res, testenv.Get(t, cluster.Client, b.DeepCopy())
}

// budgetWith creates an AgentBudget of $10 in ns whose ledger, begun at
// windowStart, holds these leases.
func budgetWith(t *testing.T, ns string, windowStart time.Time, window time.Duration, leases ...v1alpha1.BudgetReservation) *v1alpha1.AgentBudget {
	t.Helper()
	b := &v1alpha1.AgentBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team"},
		Spec: v1alpha1.AgentBudgetSpec{MaxCostUSD: "10"}}
	if window > 0 {
		b.Spec.Window = &metav1.Duration{Duration: window}
	}
	ctx := context.Background()
	if err := cluster.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Status.WindowStart = &metav1.Time{Time: windowStart}
	b.Status.Reservations = leases
	if err := cluster.Client.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// newRun creates a run in ns; with usage, it has ended Completed having
// spent usage, of which children spent children.
func newRun(t *testing.T, ns, name string, usage, children *v1alpha1.UsageStatus) *v1alpha1.AgentRun {
	t.Helper()
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := yaml.UnmarshalStrict([]byte(`
goal: Look it up.
model: {provider: scripted, script: [{content: done}]}
budget: {maxTurns: 3}
`), &run.Spec); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := cluster.Client.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	if usage == nil {
		return run
	}
	controllertest.EndRun(t, cluster.Client, run, loop.State{Turn: 1, Phase: loop.PhaseDone, Outcome: loop.Completed, Reason: "done"}, loop.Convergence{}, t0,
		func(st *v1alpha1.AgentRunStatus) { st.Usage, st.ChildUsage = usage, children })
	return run
}

func lease(run string, uid types.UID, leased, spent v1alpha1.USD) v1alpha1.BudgetReservation {
	return v1alpha1.BudgetReservation{Run: run, UID: uid, LeasedCostUSD: leased, SpentCostUSD: spent,
		HoldFor: &metav1.Duration{Duration: 30 * time.Second}}
}

// expectEvents fails the test unless rec recorded exactly want, in order
// (each "type reason note").
func expectEvents(t *testing.T, rec *events.FakeRecorder, want ...string) {
	t.Helper()
	got := strings.Split(strings.TrimSpace(testenv.Drain(rec)), "\n")
	if len(want) == 0 {
		want = []string{""}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A run that ended is settled at its own spend, its children's left out
// (they hold leases of their own); the rest of its lease goes back, and a
// second reconcile changes nothing.
func TestReconcile_settlesAnEndedRunAtItsOwnSpend(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	now := t0
	r, rec := ledgerKeeper(&now)
	run := newRun(t, ns, "triage", &v1alpha1.UsageStatus{CostUSD: "0.3", InputTokens: 900, OutputTokens: 100},
		&v1alpha1.UsageStatus{CostUSD: "0.1", InputTokens: 300})
	b := budgetWith(t, ns, t0, 0, lease(run.Name, run.UID, "1", "0.05"))

	_, b = settle(t, r, b)
	st := b.Status
	if len(st.Reservations) != 0 || st.SettledCostUSD != "0.2000" || st.SettledTokens != 700 || st.ReservedCostUSD != "0.0000" || st.ActiveRuns != 0 {
		t.Errorf("ledger: settled $%s and %d tokens, reserved $%s, %d active, leases %+v; want $0.2 and 700 tokens settled and no lease",
			st.SettledCostUSD, st.SettledTokens, st.ReservedCostUSD, st.ActiveRuns, st.Reservations)
	}
	expectEvents(t, rec, "Normal "+v1alpha1.ReasonBudgetReturned+" Run triage ended Completed: settled $0.2000 and 700 tokens, returned $0.8000 and 0 tokens")

	_, again := settle(t, r, b)
	if again.ResourceVersion != b.ResourceVersion {
		t.Errorf("a second reconcile wrote the budget again: %+v", again.Status)
	}
	expectEvents(t, rec)
}

// The lease of a run that is gone keeps counting for its holdFor (a call
// started before the deletion may still spend), then is charged in full.
func TestReconcile_chargesADeletedRunsWholeLeaseOnceItsHoldPasses(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	now := t0
	r, rec := ledgerKeeper(&now)
	b := budgetWith(t, ns, t0, 0, lease("gone", "0d7e3c1a-uid-of-a-deleted-run", "1.5", "0.2"))

	res, b := settle(t, r, b)
	l := b.Status.Reservations
	if len(l) != 1 || l[0].ExpiresAt == nil || !l[0].ExpiresAt.Equal(&metav1.Time{Time: t0.Add(31 * time.Second)}) {
		t.Fatalf("leases %+v: want the lease kept, expiring at %s", l, t0.Add(31*time.Second))
	}
	if res.RequeueAfter != 31*time.Second {
		t.Errorf("requeue after %s: want 31s, when the lease expires", res.RequeueAfter)
	}
	expectEvents(t, rec)

	now = t0.Add(20 * time.Second)
	if res, _ = settle(t, r, b); res.RequeueAfter != 11*time.Second {
		t.Errorf("before expiry: requeue after %s, want 11s", res.RequeueAfter)
	}

	now = t0.Add(31 * time.Second)
	_, b = settle(t, r, b)
	if st := b.Status; len(st.Reservations) != 0 || st.SettledCostUSD != "1.5000" || st.ConsumedCostUSD != "1.5000" {
		t.Errorf("after expiry: settled $%s, consumed $%s, leases %+v; want the whole lease, $1.5, charged", st.SettledCostUSD, st.ConsumedCostUSD, st.Reservations)
	}
	expectEvents(t, rec, "Warning "+v1alpha1.ReasonBudgetExpired+" Run gone was deleted; no spend can arrive after "+t0.Add(31*time.Second).Format(time.RFC3339)+
		", and its whole lease, $1.5000 and 0 tokens, is charged (what it really spent went with it)")
}

// A lease whose run was not found once (and so began to expire) but is
// found again, still running, holds its lease again.
func TestReconcile_aRunFoundAgainHoldsItsLease(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	now := t0
	r, rec := ledgerKeeper(&now)
	run := newRun(t, ns, "slow", nil, nil)
	l := lease(run.Name, run.UID, "1", "0.4")
	l.ExpiresAt = &metav1.Time{Time: t0.Add(5 * time.Second)}
	b := budgetWith(t, ns, t0, 0, l)

	now = t0.Add(time.Minute)
	res, b := settle(t, r, b)
	if got := b.Status.Reservations; len(got) != 1 || got[0].ExpiresAt != nil || b.Status.SettledCostUSD != "" {
		t.Errorf("leases %+v, settled $%s: want the lease open again, not expiring, nothing charged", got, b.Status.SettledCostUSD)
	}
	if res.RequeueAfter != budgetRecheck {
		t.Errorf("requeue after %s: want the recheck of a budget with open leases, %s", res.RequeueAfter, budgetRecheck)
	}
	expectEvents(t, rec)
}

// A new window sets settled spend back to zero; an open lease keeps what
// it has not spent, its spend so far moving into its base.
func TestReconcile_aNewWindowStartsFromNothing(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	now := t0
	r, rec := ledgerKeeper(&now)
	run := newRun(t, ns, "long", nil, nil)
	b := budgetWith(t, ns, t0.Add(-150*time.Minute), time.Hour, lease(run.Name, run.UID, "1", "0.4"))
	b.Status.SettledCostUSD = "3"
	if err := cluster.Client.Status().Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}

	_, b = settle(t, r, b)
	st := b.Status
	if start := t0.Add(-30 * time.Minute); st.WindowStart == nil || !st.WindowStart.Time.Equal(start) {
		t.Errorf("window start %v, want %s", st.WindowStart, start)
	}
	if st.SettledCostUSD != "" || len(st.Reservations) != 1 {
		t.Fatalf("settled $%s, leases %+v: want nothing settled in the new window and the lease open", st.SettledCostUSD, st.Reservations)
	}
	if l := st.Reservations[0]; l.RunBaseCostUSD != "0.4000" || l.LeasedCostUSD != "0.6000" || l.SpentCostUSD != "0.0000" {
		t.Errorf("lease base $%s, leased $%s, spent $%s: want 0.4, 0.6 and 0", l.RunBaseCostUSD, l.LeasedCostUSD, l.SpentCostUSD)
	}
	expectEvents(t, rec, corev1.EventTypeNormal+" "+v1alpha1.ReasonBudgetWindowReset+" A new window began at "+t0.Add(-30*time.Minute).Format(time.RFC3339))
}
