package controller

import (
	"context"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/agentrun/agentrun/internal/runstatus"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Child runs: the runs an agent tool's call makes (labelled
// v1alpha1.LabelParentUID). The call waits on its child off the reconcile
// workers; the reconciler tells it of the child's changes, and cancels a
// parent's live children when the parent is cancelled or ends. Deleting
// a parent deletes its children (their owner reference).

// childChanged tells c of every change of a run that has a parent, and
// enqueues nothing (the run's own watch does).
func childChanged(c ChildRuns) handler.EventHandler {
	notify := func(o client.Object) {
		if _, ok := o.GetLabels()[v1alpha1.LabelParentUID]; ok {
			c.Notify(o.GetNamespace(), o.GetName())
		}
	}
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			notify(e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			notify(e.Object)
		},
	}
}

// mayHaveChildren reports whether a run may have made children: it
// declares an agent tool, or it is made from a template (whose tools are
// not read here).
func mayHaveChildren(run *v1alpha1.AgentRun) bool {
	if run.Spec.TemplateRef != nil {
		return true
	}
	for i := range run.Spec.Tools {
		if run.Spec.Tools[i].Agent != nil {
			return true
		}
	}
	return false
}

// cancelChildren sets spec.cancel on the run's children that have not
// ended, saying who did. It is the first of a finished run's phases, and
// runs when a cancelled run waits for its tools.
func (r *AgentRunReconciler) cancelChildren(ctx context.Context, run *v1alpha1.AgentRun) (ctrl.Result, error) {
	if !mayHaveChildren(run) {
		return ctrl.Result{}, nil
	}
	var children v1alpha1.AgentRunList
	if err := r.List(ctx, &children, client.InNamespace(run.Namespace), client.MatchingLabels{v1alpha1.LabelParentUID: string(run.UID)}); err != nil {
		return ctrl.Result{}, err
	}
	for i := range children.Items {
		c := &children.Items[i]
		if c.Spec.Cancel || runstatus.Finished(c) {
			continue
		}
		if err := r.Patch(ctx, c, runclient.CancelPatch("AgentRun/"+run.Name+" (its parent, which ended or was cancelled)")); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}
