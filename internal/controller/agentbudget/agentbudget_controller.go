// Package agentbudget is the AgentBudget reconciler: it settles the
// leases that runs took in a budget's ledger once they ended, and keeps
// the budget's window, conditions and soft-limit warnings. Runs take and
// extend their leases themselves (internal/controller, agentrun_budgets.go),
// through the same budget.Ledgers.
package agentbudget

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/budget"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/runstatus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Config is what a Reconciler is built from. Its APIReader confirms that
// a run is gone before its lease starts to expire.
type Config struct {
	reconcilers.Base
	// Ledgers is the book both reconcilers write budgets through; give
	// both the same one (a new one when nil).
	Ledgers *budget.Ledgers
	// Metrics counts the soft limits reached and reports the budgets'
	// gauges (the Ledgers count the writes). Nil counts nothing.
	Metrics *Metrics
}

// Reconciler keeps the ledger of AgentBudgets: it settles the
// leases of runs that ended (their spend becomes consumed, the rest is
// returned), expires the leases of runs that were deleted once no spend
// can still arrive, rolls the window over, and sets the conditions and
// soft-limit warnings. Runs take and extend their leases themselves
// (internal/controller). Build it with NewReconciler.
type Reconciler struct {
	Config
}

// NewReconciler builds the reconciler, defaults applied.
func NewReconciler(cfg Config) *Reconciler {
	cfg.Base = cfg.Defaulted()
	if cfg.Ledgers == nil {
		cfg.Ledgers = budget.NewLedgers()
	}
	return &Reconciler{Config: cfg}
}

// The ledger is kept in the AgentBudget's status; runs write their leases
// there too (the AgentRun reconciler, same service account).
//
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentbudgets,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentbudgets/status,verbs=get;update

// SetupWithManager registers the reconciler: it wakes for a budget's spec
// changes, and for the runs that hold a lease in it when they end or are
// deleted.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Metrics.watchBudgets(mgr.GetCache())
	ended := predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return runstatus.Finished(e.Object.(*v1alpha1.AgentRun)) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return runstatus.Finished(e.ObjectNew.(*v1alpha1.AgentRun)) },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.AgentBudget{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.AgentRun{}, handler.EnqueueRequestsFromMapFunc(r.budgetsOfRun), builder.WithPredicates(ended)).
		Named("agentbudget").
		Complete(r)
}

// budgetsOfRun maps a run to the budgets it holds a lease in: those its
// status names (the budgets with a hard limit) and those of its namespace
// whose ledger (in the cache) shows a lease of it.
func (r *Reconciler) budgetsOfRun(ctx context.Context, obj client.Object) []reconcile.Request {
	run, ok := obj.(*v1alpha1.AgentRun)
	if !ok {
		return nil
	}
	names := slices.Clone(run.Status.AgentBudgets)
	var all v1alpha1.AgentBudgetList
	if err := r.List(ctx, &all, client.InNamespace(run.Namespace)); err == nil {
		for i := range all.Items {
			if budget.Find(&all.Items[i], run.UID) != nil && !slices.Contains(names, all.Items[i].Name) {
				names = append(names, all.Items[i].Name)
			}
		}
	}
	out := make([]reconcile.Request, 0, len(names))
	for _, n := range names {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: run.Namespace, Name: n}})
	}
	return out
}

// Reconcile brings one budget's ledger up to date. A write that conflicts
// with a run's lease is redone on a fresh read.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b, unlock, err := r.Ledgers.Open(ctx, r.Client, req.NamespacedName)
	defer unlock()
	if err != nil {
		if apierrors.IsNotFound(err) {
			r.Ledgers.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := r.Clock()
	var evs []budgetEvent
	var next time.Time
	var open int
	written, err := r.Ledgers.Write(ctx, r.Client, r.APIReader, b, "settle", func() time.Time { return now },
		func(fresh, work *v1alpha1.AgentBudget, rolled bool) (bool, error) {
			var err error
			evs, next, err = r.settle(ctx, fresh, work, rolled, now)
			open = len(work.Status.Reservations)
			return err == nil && !equality.Semantic.DeepEqual(fresh.Status, work.Status), err
		})
	switch {
	case apierrors.IsNotFound(err):
		r.Ledgers.Forget(req.NamespacedName)
		return ctrl.Result{}, nil
	case errors.Is(err, budget.ErrContended):
		// The runs' leases keep it busy: settle a moment later.
		return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	if written != nil && r.Recorder != nil {
		for _, e := range evs {
			r.Recorder.Eventf(written, nil, e.typ, e.reason, e.action, "%s", clip.Cut(e.msg, 1024, runstatus.CutMark))
		}
	}
	if open > 0 && now.Add(budgetRecheck).Before(next) {
		next = now.Add(budgetRecheck)
	}
	return ctrl.Result{RequeueAfter: max(time.Second, next.Sub(now))}, nil
}

type budgetEvent struct{ typ, reason, action, msg string }

// settle brings work, a copy of fresh rolled into the window current at
// now, up to date: the leases of runs that ended are settled, those of
// runs deleted long enough are expired, the conditions and soft-limit
// warnings are set. It returns the events to record once work is
// written, and when the budget next needs a look.
func (r *Reconciler) settle(ctx context.Context, fresh, work *v1alpha1.AgentBudget, rolled bool, now time.Time) ([]budgetEvent, time.Time, error) {
	var evs []budgetEvent
	_, next := budget.Roll(work, now) // rolled already: when the window ends
	if rolled {
		evs = append(evs, budgetEvent{corev1.EventTypeNormal, v1alpha1.ReasonBudgetWindowReset, "Roll",
			"A new window began at " + work.Status.WindowStart.UTC().Format(time.RFC3339)})
	}
	for _, res := range fresh.Status.Reservations {
		ev, at, err := r.closeIfDone(ctx, work, res, now)
		if err != nil {
			return nil, next, err
		}
		if ev != nil {
			evs = append(evs, *ev)
		}
		if !at.IsZero() && at.Before(next) {
			next = at
		}
	}
	for _, th := range budget.SoftWarnings(work) {
		r.Metrics.softLimit(string(th.Limit), fmt.Sprint(th.Percent))
		// One action per threshold: the recorder folds events of the same
		// reason and action into one series.
		evs = append(evs, budgetEvent{corev1.EventTypeWarning, v1alpha1.ReasonBudgetSoftWarning, fmt.Sprintf("Warn %s %d%%", th.Limit, th.Percent), th.Message})
	}
	budget.SetConditions(work, now)
	work.Status.ObservedGeneration = work.Generation
	return evs, next, nil
}

// budgetRecheck is how often a budget with open leases is looked at even
// when no event says one of its runs ended: a safety net for an event
// missed (or a run that never recorded the budget), so that no lease of an
// ended run stays open for long.
const budgetRecheck = time.Minute

// closeIfDone settles the lease of a run that ended, and expires the lease
// of a run that is gone. It returns the event to record and when to look
// at the lease again (zero: no need).
func (r *Reconciler) closeIfDone(ctx context.Context, b *v1alpha1.AgentBudget, res v1alpha1.BudgetReservation, now time.Time) (*budgetEvent, time.Time, error) {
	key := client.ObjectKey{Namespace: b.Namespace, Name: res.Run}
	run := &v1alpha1.AgentRun{}
	err := r.Get(ctx, key, run)
	if (err == nil && run.UID != res.UID) || apierrors.IsNotFound(err) {
		// The cache may not have seen a run that was just created: ask
		// the API server before starting the clock on its lease.
		run = &v1alpha1.AgentRun{}
		err = r.APIReader.Get(ctx, key, run)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, time.Time{}, err
	}
	if err == nil && run.UID == res.UID {
		if !runstatus.Finished(run) {
			if r := budget.Find(b, res.UID); r != nil && r.ExpiresAt != nil {
				r.ExpiresAt = nil // found again: it holds its lease
			}
			return nil, time.Time{}, nil
		}
		// A child is settled in a lease of its own.
		final, children := usageAmount(run.Status.Usage), usageAmount(run.Status.ChildUsage)
		final = budget.Amount{Cost: max(final.Cost-children.Cost, 0), Tokens: max(final.Tokens-children.Tokens, 0)}
		leased := budget.Leased(&res)
		spent, _ := budget.Settle(b, res.UID, final)
		back := budget.Amount{Cost: max(leased.Cost-spent.Cost, 0), Tokens: max(leased.Tokens-spent.Tokens, 0)}
		return &budgetEvent{corev1.EventTypeNormal, v1alpha1.ReasonBudgetReturned, "Settle " + res.Run, fmt.Sprintf(
			"Run %s ended %s: settled $%s and %d tokens, returned $%s and %d tokens", res.Run, run.Status.Outcome,
			spent.Cost, spent.Tokens, back.Cost, back.Tokens)}, time.Time{}, nil
	}
	_, charged, closed, at := budget.Expire(b, res.UID, now)
	if closed {
		return &budgetEvent{corev1.EventTypeWarning, v1alpha1.ReasonBudgetExpired, "Expire " + res.Run, fmt.Sprintf(
			"Run %s was deleted; no spend can arrive after %s, and its whole lease, $%s and %d tokens, is charged (what it really spent went with it)",
			res.Run, res.ExpiresAt.UTC().Format(time.RFC3339), charged.Cost, charged.Tokens)}, time.Time{}, nil
	}
	return nil, at, nil
}

// usageAmount reads a run's spend from its status.
func usageAmount(u *v1alpha1.UsageStatus) budget.Amount {
	if u == nil {
		return budget.Amount{}
	}
	used := limits.Usage(u)
	return budget.Amount{Cost: used.Cost, Tokens: used.Tokens()}
}
