package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReasonExpired is the event reason of a finished run deleted when its
// ttlSecondsAfterFinished passed.
const ReasonExpired = "Expired"

// ttlOf is how long the run is kept after it ends, and whether it is
// deleted at all.
func (r *AgentRunReconciler) ttlOf(run *v1alpha1.AgentRun) (time.Duration, bool) {
	if t := run.Spec.TTLSecondsAfterFinished; t != nil {
		return time.Duration(*t) * time.Second, true
	}
	if r.DefaultTTLAfterFinished != nil {
		return *r.DefaultTTLAfterFinished, true
	}
	return 0, false
}

// expire deletes a finished run once its time to live has passed, or asks
// to be back then. What the operator made for the run goes with it: the
// transcript Secrets, tool Jobs and NetworkPolicies through their owner
// references (the garbage collector deletes them), and the re-run record
// (a ConfigMap that outlives runs by design, so it has no owner) here,
// when it records this run.
func (r *AgentRunReconciler) expire(ctx context.Context, run *v1alpha1.AgentRun) (ctrl.Result, error) {
	ttl, ok := r.ttlOf(run)
	if !ok || run.Status.CompletionTime == nil {
		return ctrl.Result{}, nil
	}
	at := run.Status.CompletionTime.Add(ttl)
	if wait := at.Sub(r.Clock()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	rec := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: recordName(run.Name)}, rec)
	switch {
	case err == nil && rec.Labels[v1alpha1.LabelSpecRecord] == "spec-hash" && rec.Data["uid"] == string(run.UID):
		if err := r.Delete(ctx, rec, client.Preconditions{UID: &rec.UID, ResourceVersion: &rec.ResourceVersion}); err != nil &&
			!apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return ctrl.Result{}, fmt.Errorf("deleting the re-run record %s of %s: %w", rec.Name, run.Name, err)
		}
	case err != nil && !apierrors.IsNotFound(err):
		return ctrl.Result{}, fmt.Errorf("reading the re-run record of %s: %w", run.Name, err)
	}
	if err := r.Delete(ctx, run, client.Preconditions{UID: &run.UID}, client.PropagationPolicy("Background")); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.event(run, corev1.EventTypeNormal, ReasonExpired, ReasonExpired, fmt.Sprintf(
		"Deleted %s: it ended at %s and its time to live after finishing (%s) has passed", run.Name,
		run.Status.CompletionTime.UTC().Format(time.RFC3339), ttl))
	return ctrl.Result{}, nil
}
