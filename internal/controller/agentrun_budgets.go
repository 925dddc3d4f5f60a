package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/budget"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Shared budgets (AgentBudget). After the engine admitted a step against
// the run's own ceilings, and before that step is saved and started,
// every AgentBudget that selects the run must cover the run's new total
// exposure (what it spent plus the step's reservation). A run holds one
// lease per budget, in the budget's status; a lease is extended in chunks
// with a compare-and-swap (an Update carrying the resourceVersion read),
// so most steps are covered by the lease already held and write nothing.
// A hard limit that cannot cover the step ends the run BudgetExhausted
// before anything is spent, and so does a step that would have the run
// hold more than its share of a budget (spec.perRun), or a model without
// a price under a budget that limits dollars; a full maxConcurrentRuns
// holds a run that has not started in Pending. The AgentBudget reconciler
// settles the lease once the run has ended (internal/controller/agentbudget).

// budgetWaitRetry is how often a run waiting for a budget's concurrency
// slot looks again.
const budgetWaitRetry = 2 * time.Second

// coverBudgets is the phase after advance.
func (r *AgentRunReconciler) coverBudgets(ctx context.Context, sc *scope) (ctrl.Result, error) {
	s := sc.state
	if s == nil || sc.kit == nil || s.Done() || !spends(sc.effect) {
		return ctrl.Result{}, nil
	}
	run := sc.run
	// A child run holds its own lease: its part is not the parent's.
	used, reserved := s.Own()
	req := budget.Request{UID: run.UID, Run: run.Name,
		Spent:    budget.Amount{Cost: used.Cost, Tokens: used.Tokens()},
		Exposure: budget.Amount{Cost: used.Cost + reserved.Cost, Tokens: used.Tokens() + reserved.Tokens()},
		Starting: sc.stored.run().Status.Turn == 0 && sc.consumed == "",
		HoldFor:  holdFor(sc.kit.Engine.Config()),
	}
	list, gone, err := r.budgetsOf(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	if gone != "" {
		r.refuseStep(sc, fmt.Sprintf("AgentBudget %s, in which this run holds a lease, no longer exists: its limits cannot be checked, so the step is refused (a shared limit fails closed)", gone))
		return ctrl.Result{}, nil
	}
	model := &sc.builtSpec().Model // as the platform's policies priced it
	for i := range list {
		// A call of a model without a price would count $0 against a
		// dollar limit: refused before anything is leased or spent.
		if why := budget.Unpriced(&list[i], model); why != "" {
			r.budgetRefusedEvent(&list[i], req, why)
			r.refuseStep(sc, why)
			return ctrl.Result{}, nil
		}
	}
	for i := range list {
		b := &list[i]
		hard := budget.Hard(b)
		o := r.lease(ctx, b, req, func() error { return r.confirmCurrent(ctx, sc) })
		if o.holds && hard && !slices.Contains(run.Status.AgentBudgets, b.Name) && len(run.Status.AgentBudgets) < 16 {
			// Recorded even when this step is refused: the lease was
			// taken by an earlier attempt. A budget named here that
			// disappears refuses the run's next step, so only budgets
			// with a hard limit are named: a soft one never stops a run.
			run.Status.AgentBudgets = append(run.Status.AgentBudgets, b.Name)
			sort.Strings(run.Status.AgentBudgets)
		}
		switch {
		case errors.Is(o.err, errConflict):
			return ctrl.Result{}, o.err // the run is read again
		case o.err != nil && !hard:
			// A budget that only warns never stops a run: its ledger
			// misses this step, and the run goes on.
			ctrl.LoggerFrom(ctx).Info("A soft AgentBudget could not record a lease; the run goes on", "budget", b.Name, "error", o.err.Error())
			r.budgetUnavailable(sc, b.Name, o.err, "the budget only warns, so the run goes on")
			continue
		case o.err != nil:
			// Nothing of the step is saved or started: the reconcile
			// fails and is retried with backoff (a hard limit fails
			// closed), and the run says why in an event.
			r.budgetUnavailable(sc, b.Name, o.err, "nothing is started until it can be checked")
			return ctrl.Result{}, o.err
		case o.refused != "":
			r.refuseStep(sc, o.refused)
			return ctrl.Result{}, nil
		case o.wait != "" && req.Starting:
			r.waitForBudget(sc, o.wait)
			return ctrl.Result{RequeueAfter: budgetWaitRetry}, nil
		case o.wait != "":
			r.refuseStep(sc, o.wait)
			return ctrl.Result{}, nil
		}
	}
	return ctrl.Result{}, nil
}

// confirmCurrent reports errConflict unless the run as this reconcile
// read it is the latest version on the API server (read uncached).
func (r *AgentRunReconciler) confirmCurrent(ctx context.Context, sc *scope) error {
	cur := &v1alpha1.AgentRun{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(sc.run), cur); err != nil {
		if apierrors.IsNotFound(err) {
			return errConflict
		}
		return err
	}
	if cur.UID != sc.stored.server().UID || cur.ResourceVersion != sc.stored.server().ResourceVersion {
		return errConflict
	}
	return nil
}

// budgetUnavailable records on the run (an event) that a budget covering
// it could not be read or written.
func (r *AgentRunReconciler) budgetUnavailable(sc *scope, name string, err error, then string) {
	r.event(sc.run, corev1.EventTypeWarning, v1alpha1.ReasonBudgetUnavailable, "Lease "+name,
		fmt.Sprintf("AgentBudget %s could not be checked (%v): %s", name, err, then))
}

// spends reports whether the effect starts work that may cost money.
func spends(eff loop.Effect) bool {
	return eff.Kind == loop.EffectCallModel || (eff.Kind == loop.EffectRunTools && len(eff.Calls) > 0)
}

// holdFor is the longest one call of the run may take: spend may still
// arrive this long after the run was last seen.
func holdFor(cfg *loop.Config) time.Duration {
	d := cfg.Model.Timeout
	for i := range cfg.Tools {
		d = max(d, cfg.Tools[i].MaxDuration())
	}
	return d
}

// budgetsOf returns the AgentBudgets that cover the run, by name: those
// that select it, and those it already holds a lease in. gone names one
// it holds a lease in that no longer exists.
func (r *AgentRunReconciler) budgetsOf(ctx context.Context, run *v1alpha1.AgentRun) (out []v1alpha1.AgentBudget, gone string, err error) {
	var all v1alpha1.AgentBudgetList
	if err := r.List(ctx, &all, client.InNamespace(run.Namespace)); err != nil {
		return nil, "", err
	}
	for _, b := range all.Items {
		if budget.Selects(&b, run) || slices.Contains(run.Status.AgentBudgets, b.Name) {
			out = append(out, b)
		}
	}
	for _, name := range run.Status.AgentBudgets {
		if slices.ContainsFunc(out, func(b v1alpha1.AgentBudget) bool { return b.Name == name }) {
			continue
		}
		// Not in the cache: ask the API server before failing closed.
		b := v1alpha1.AgentBudget{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: name}, &b)
		if apierrors.IsNotFound(err) {
			return nil, name, nil
		}
		if err != nil {
			return nil, "", err
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, "", nil
}

type leaseOutcome struct {
	refused, wait string
	err           error
	// holds: the run holds a lease in the budget (taken now or before).
	holds bool
}

// lease makes b cover req: nothing to write when the lease the (cached)
// budget shows already covers it, else a compare-and-swap, retried on a
// fresh read after each conflict.
//
// A first lease is taken only after confirm says the run as this
// reconcile read it is the run's latest version: a reconcile working from
// a stale copy of a run that has already ended (and whose lease was
// settled) must not open a lease that would then never be settled, or be
// settled a second time.
func (r *AgentRunReconciler) lease(ctx context.Context, b *v1alpha1.AgentBudget, req budget.Request, confirm func() error) leaseOutcome {
	confirmed := false
	if res := budget.Find(b, req.UID); res != nil && budget.HardCovers(b, res, req.Exposure) {
		return leaseOutcome{holds: true}
	}
	// b was listed before the lock, and other runs may have leased since:
	// Open reads it again under the lock.
	fresh, unlock, err := r.Ledgers.Open(ctx, r.Client, client.ObjectKeyFromObject(b))
	defer unlock()
	switch {
	case apierrors.IsNotFound(err):
		return leaseOutcome{refused: deletedWhileLeasing(b.Name)}
	case err != nil:
		return leaseOutcome{err: fmt.Errorf("reading AgentBudget %s: %w", b.Name, err)}
	}
	if res := budget.Find(fresh, req.UID); res != nil && budget.HardCovers(fresh, res, req.Exposure) {
		return leaseOutcome{holds: true} // a lease taken since the cache was read
	}
	var out *leaseOutcome
	var d budget.Decision
	var rolled bool
	written, err := r.Ledgers.Write(ctx, r.Client, r.APIReader, fresh, "lease", r.Clock, func(fresh, work *v1alpha1.AgentBudget, roll bool) (bool, error) {
		if !confirmed && budget.Find(fresh, req.UID) == nil {
			if err := confirm(); err != nil {
				return false, err
			}
			confirmed = true
		}
		d, rolled = budget.Lease(work, req), roll
		held := budget.Find(fresh, req.UID) != nil
		switch {
		case d.Refused != "" && d.Share:
			// The budget has room: only this run's share is full.
			r.budgetRefusedEvent(fresh, req, d.Refused)
			out = &leaseOutcome{refused: d.Refused, holds: held}
		case d.Refused != "":
			r.markRefused(ctx, fresh, req, d.Refused)
			out = &leaseOutcome{refused: d.Refused, holds: held}
		case d.Wait != "":
			out = &leaseOutcome{wait: d.Wait, holds: held}
		case !d.Changed && !rolled:
			out = &leaseOutcome{holds: true}
		}
		return out == nil, nil
	})
	switch {
	case apierrors.IsNotFound(err):
		return leaseOutcome{refused: deletedWhileLeasing(b.Name)}
	case err != nil:
		return leaseOutcome{err: err}
	case out != nil:
		return *out
	}
	if r.Recorder != nil {
		if rolled {
			r.Recorder.Eventf(written, nil, corev1.EventTypeNormal, v1alpha1.ReasonBudgetWindowReset, "Roll",
				"A new window began at %s", written.Status.WindowStart.UTC().Format(time.RFC3339))
		}
		if d.New {
			res := budget.Find(written, req.UID)
			r.Recorder.Eventf(written, nil, corev1.EventTypeNormal, v1alpha1.ReasonBudgetLeased, "Lease",
				"Run %s took a lease of $%s and %d tokens", req.Run, budget.Leased(res).Cost, budget.Leased(res).Tokens)
		}
	}
	return leaseOutcome{holds: true}
}

// deletedWhileLeasing is the refusal of a step whose budget went while
// the run leased from it.
func deletedWhileLeasing(name string) string {
	return fmt.Sprintf("AgentBudget %s was deleted while this run leased from it: its limits cannot be checked, so the step is refused (a shared limit fails closed)", name)
}

// markRefused records the refusal on the budget (Exhausted=True, once per
// window; best effort: the run's own reason is what must not be lost) and
// as an event.
func (r *AgentRunReconciler) markRefused(ctx context.Context, b *v1alpha1.AgentBudget, req budget.Request, reason string) {
	work := b.DeepCopy()
	if budget.MarkRefused(work, reason, r.Clock()) {
		if err := r.Status().Update(ctx, work); err == nil {
			r.Ledgers.Wrote("refused", b.ResourceVersion, work)
		} else {
			ctrl.LoggerFrom(ctx).V(4).Info("Could not mark the AgentBudget exhausted", "budget", b.Name, "error", err.Error())
		}
	}
	r.budgetRefusedEvent(b, req, reason)
}

// budgetRefusedEvent records on the budget that it refused a step of a
// run, and why.
func (r *AgentRunReconciler) budgetRefusedEvent(b *v1alpha1.AgentBudget, req budget.Request, reason string) {
	if r.Recorder != nil {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, v1alpha1.ReasonBudgetRefused, "Refuse "+req.Run, "Run %s: %s", req.Run, reason)
	}
}

// refuseStep ends the run BudgetExhausted in place of the step the engine
// admitted.
func (r *AgentRunReconciler) refuseStep(sc *scope, reason string) {
	if sc.effect.Kind == loop.EffectCallModel {
		// The turn the engine announced never starts.
		for i := len(sc.notes) - 1; i >= 0; i-- {
			if sc.notes[i].Kind == loop.NoteTurnStarted {
				sc.notes = slices.Delete(sc.notes, i, i+1)
				break
			}
		}
	}
	eff := sc.kit.Engine.Refuse(sc.state, sc.effect, reason)
	sc.notes = append(sc.notes, eff.Notes...)
	sc.effect = eff
}

// waitForBudget drops the step the engine took (nothing of it is saved or
// started) and keeps the run Pending, saying which budget it waits for.
func (r *AgentRunReconciler) waitForBudget(sc *scope, msg string) {
	st := &sc.run.Status
	sc.state, sc.effect = nil, loop.Effect{}
	msg = "waiting for a free run slot: " + msg
	if st.Reason != msg {
		st.Phase, st.Reason = v1alpha1.PhasePending, clip.Cut(msg, 8192, runstatus.CutMark)
		runstatus.SetCondition(st, v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, v1alpha1.ReasonWaitingForBudget, msg, metav1.NewTime(sc.now))
		sc.notes = append(sc.notes, loop.Note{Kind: v1alpha1.ReasonWaitingForBudget, Message: msg})
	}
}
