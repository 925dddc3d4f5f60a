package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runstatus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// MaxPanics is how many reconciles of one run may panic before the run
// ends Error: a defect that fails every time must end the run, not retry
// it for ever, and one that fails once (a race) deserves another try.
const MaxPanics = 3

// panicked counts a run's panic and, at its MaxPanics-th, ends it Error
// with a status write of its own: the reconcile that panicked may have
// left this process's memory of the run half-updated, so that memory is
// dropped and the status is written from the stored run (or from this
// process's saves since, which its chunks already hold).
func (r *AgentRunReconciler) panicked(ctx context.Context, key types.NamespacedName, cause error) (ctrl.Result, error) {
	run := &v1alpha1.AgentRun{}
	if err := r.APIReader.Get(ctx, key, run); err != nil {
		return ctrl.Result{}, errors.Join(cause, client.IgnoreNotFound(err))
	}
	if runstatus.Finished(run) {
		return ctrl.Result{}, cause
	}
	n := r.mem.panicked(run.UID)
	if n < MaxPanics {
		return ctrl.Result{}, cause // retried with the workqueue's back-off
	}
	reason := fmt.Sprintf("the operator failed on this run %d times (%v); the operator's log has the stack of each", n, cause)
	for attempt := 1; ; attempt++ {
		if d := r.deferredOf(run); d != nil {
			run.Status = *d.status.DeepCopy()
		}
		runstatus.SetFailed(&run.Status, v1alpha1.OutcomeError, reason, metav1.NewTime(r.Clock()))
		run.Status.Checkpoint = nil
		err := r.writeStatus(ctx, run, nil, false)
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || attempt == 3 {
			// The next panic tries again.
			return ctrl.Result{}, errors.Join(cause, err)
		}
		// The run changed under us: read it again, unless it ended.
		run = &v1alpha1.AgentRun{}
		if err := r.APIReader.Get(ctx, key, run); err != nil {
			return ctrl.Result{}, errors.Join(cause, client.IgnoreNotFound(err))
		}
		if runstatus.Finished(run) {
			r.forget(run.UID)
			return ctrl.Result{}, nil
		}
	}
	r.forget(run.UID)
	func() {
		defer func() { _ = recover() }() // the recorder may be what panicked
		r.event(run, corev1.EventTypeWarning, "RunFinished", "RunFinished", fmt.Sprintf("%s: %s", v1alpha1.OutcomeError, reason))
	}()
	r.Metrics.endedError(run)
	return ctrl.Result{}, nil
}
