package agentevaluation

import (
	"context"
	"fmt"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/budget"
	"github.com/agentrun/agentrun/internal/evaluation"
	"github.com/agentrun/agentrun/internal/loop"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The evaluation's budget (spec.budgetRef). Its runs are charged to it
// as every run its selector selects is: each leases from it (the AgentRun
// reconciler) and is settled when it ends (the AgentBudget reconciler).
// The evaluation makes no run the budget would not select. Its judge
// holds a lease of its own for each call: the call's worst case is leased
// before the call, through the same compare-and-swap and the same book of
// the operator's writes (budget.Ledgers) as a run's lease, and what the
// call spent is settled after it. A lease left open (the operator stopped
// during the call) belongs to no run: the AgentBudget reconciler expires
// it after its holdFor, the judge's timeout, and charges it in full.

// budgetRetry is how often an evaluation whose budget is missing, or does
// not select its runs, looks again.
const budgetRetry = 30 * time.Second

// readBudget reads spec.budgetRef's AgentBudget and checks that it
// selects every run the evaluation makes; s.budgeted says what it found.
func (r *Reconciler) readBudget(ctx context.Context, s *scope) error {
	e := s.eval
	if e.Spec.BudgetRef == nil {
		return nil
	}
	b := &v1alpha1.AgentBudget{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: e.Spec.BudgetRef.Name}, b)
	switch {
	case apierrors.IsNotFound(err):
		s.budgeted = &condition{reason: v1alpha1.ReasonEvaluationBudgetNotFound,
			message: fmt.Sprintf("AgentBudget %s does not exist in namespace %s: no run is made until it does", e.Spec.BudgetRef.Name, e.Namespace)}
		return nil
	case err != nil:
		s.runs = nil // nothing is written from a half-read
		return fmt.Errorf("reading the AgentBudget %s of %s: %w", e.Spec.BudgetRef.Name, e.Name, err)
	}
	for _, v := range evaluation.Variants(e) {
		cases := evaluation.Cases(e)
		for i := range cases {
			c := &cases[i]
			run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Labels: runLabels(e, v, c)}}
			if !budget.Selects(b, run) {
				s.budgeted = &condition{reason: v1alpha1.ReasonBudgetDoesNotSelectRuns, message: fmt.Sprintf(
					"AgentBudget %s does not select the runs of case %s (labels %v), which it would not charge: add %s: %s to its selector; no run is made until it selects them",
					b.Name, c.Name, run.Labels, v1alpha1.LabelEvaluation, e.Name)}
				return nil
			}
		}
	}
	s.budgeted = &condition{ok: true, reason: v1alpha1.ReasonBudgetSelectsRuns,
		message: fmt.Sprintf("AgentBudget %s selects the evaluation's runs; the judge's calls lease from it too", b.Name)}
	return nil
}

// condition is what a phase found that a condition tells: whether the
// evaluation may go on, and why.
type condition struct {
	ok              bool
	reason, message string
}

// judgeLease is the judge's Lease in the evaluation's budget: each call
// is a lease of its own, named after the evaluation.
func (r *Reconciler) judgeLease(e *v1alpha1.AgentEvaluation) func(context.Context, int64, loop.Money) (func(int64, loop.Money), string, error) {
	key := client.ObjectKey{Namespace: e.Namespace, Name: e.Spec.BudgetRef.Name}
	hold := evaluation.JudgeTimeout(e.Spec.Judge)
	return func(ctx context.Context, tokens int64, cost loop.Money) (func(int64, loop.Money), string, error) {
		// A lease of its own per call: one left open by a stopped
		// operator is never extended again, and expires.
		uid := types.UID(fmt.Sprintf("%s-judge-%d", e.UID, r.Clock().UnixNano()))
		req := budget.Request{UID: uid, Run: e.Name + ".judge", Exposure: budget.Amount{Cost: cost, Tokens: tokens}, HoldFor: hold}
		refused, err := r.writeBudget(ctx, key, "lease", func(b *v1alpha1.AgentBudget) (bool, string) {
			// A judge without a price would count as $0 against a dollar
			// limit, as a run's model would (its fallbacks are not called).
			if why := budget.Unpriced(b, &v1alpha1.ModelSpec{ModelEndpoint: e.Spec.Judge.Model.ModelEndpoint}); why != "" {
				return false, "judge.model: " + why
			}
			d := budget.Lease(b, req)
			if d.Wait != "" {
				return false, d.Wait
			}
			return d.Changed, d.Refused
		})
		if err != nil || refused != "" {
			return nil, refused, err
		}
		return func(tokens int64, cost loop.Money) {
			_, err := r.writeBudget(ctx, key, "settle", func(b *v1alpha1.AgentBudget) (bool, string) {
				_, ok := budget.Settle(b, uid, budget.Amount{Cost: cost, Tokens: tokens})
				return ok, ""
			})
			if err != nil {
				// The lease stays open and is charged in full when it
				// expires: more than was spent, never less.
				ctrl.LoggerFrom(ctx).Info("Could not settle the judge's lease; it is charged in full when it expires", "budget", key.Name, "error", err.Error())
			}
		}, "", nil
	}
}

// writeBudget applies change to the budget and writes its status
// (budget.Ledgers.Write). change reports whether it changed the budget, or
// why it refuses (then nothing is written). A budget that does not exist
// is a refusal too: a shared limit fails closed.
func (r *Reconciler) writeBudget(ctx context.Context, key client.ObjectKey, kind string, change func(*v1alpha1.AgentBudget) (bool, string)) (string, error) {
	defer r.Ledgers.Lock(key)()
	read := &v1alpha1.AgentBudget{}
	var why string
	err := r.APIReader.Get(ctx, key, read)
	if err != nil {
		err = fmt.Errorf("reading AgentBudget %s: %w", key.Name, err)
	} else {
		// Read from the API server, under the lock: as new as it gets
		// (this reconciler keeps no cache of budgets, so not Open).
		_, err = r.Ledgers.Write(ctx, r.Client, r.APIReader, read, kind, r.Clock, func(_, work *v1alpha1.AgentBudget, rolled bool) (bool, error) {
			var changed bool
			changed, why = change(work)
			return why == "" && (changed || rolled), nil
		})
	}
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("AgentBudget %s does not exist: its limits cannot be checked (a shared limit fails closed)", key.Name), nil
	case err != nil:
		return "", err
	}
	return why, nil
}
