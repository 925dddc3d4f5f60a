package controller

import (
	"context"
	"fmt"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/budget"
	"github.com/agentrun/agentrun/internal/platform"
	"github.com/agentrun/agentrun/internal/runstatus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// suspension names what stops the run now, the kill switches: an
// AgentBudget that selects it, or an AgentRunPolicy that governs its
// namespace, with suspend: true. It is "" when nothing does. It reads the
// cache, at every reconcile of a run that has not ended.
func (r *AgentRunReconciler) suspension(ctx context.Context, run *v1alpha1.AgentRun) (string, error) {
	var budgets v1alpha1.AgentBudgetList
	if err := r.List(ctx, &budgets, client.InNamespace(run.Namespace)); err != nil {
		return "", err
	}
	for i := range budgets.Items {
		if b := &budgets.Items[i]; b.Spec.Suspend && budget.Selects(b, run) {
			return fmt.Sprintf("the run was stopped: AgentBudget %s, which covers it, is suspended (spec.suspend: true)", b.Name), nil
		}
	}
	var pols v1alpha1.AgentRunPolicyList
	if err := r.List(ctx, &pols); err != nil {
		return "", err
	}
	var suspending []v1alpha1.AgentRunPolicy
	for _, p := range pols.Items {
		if p.Spec.Suspend {
			suspending = append(suspending, p)
		}
	}
	if len(suspending) == 0 {
		return "", nil
	}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, client.ObjectKey{Name: run.Namespace}, ns); err != nil {
		return "", err
	}
	if sel := platform.Select(suspending, ns.Labels); len(sel) > 0 {
		return fmt.Sprintf("the run was stopped: AgentRunPolicy %s suspends the runs of namespace %s (spec.suspend: true)", sel[0].Name, run.Namespace), nil
	}
	return "", nil
}

// wakeSuspended enqueues the runs a kill switch that was just set stops,
// so that each stops now rather than at its next step: an AgentBudget's
// selected runs, or, for an AgentRunPolicy, every run that has not ended
// (the reconcile decides which the policy governs).
func (r *AgentRunReconciler) wakeSuspended() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var opts []client.ListOption
		var b *v1alpha1.AgentBudget
		switch x := o.(type) {
		case *v1alpha1.AgentBudget:
			if !x.Spec.Suspend {
				return nil
			}
			b = x
			opts = append(opts, client.InNamespace(x.Namespace))
		case *v1alpha1.AgentRunPolicy:
			if !x.Spec.Suspend {
				return nil
			}
		default:
			return nil
		}
		var runs v1alpha1.AgentRunList
		if err := r.List(ctx, &runs, opts...); err != nil {
			return nil
		}
		var out []reconcile.Request
		for i := range runs.Items {
			run := &runs.Items[i]
			if runstatus.Finished(run) || (b != nil && !budget.Selects(b, run)) {
				continue
			}
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(run)})
		}
		return out
	})
}
