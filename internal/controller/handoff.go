package controller

import (
	"context"
	"fmt"

	"github.com/agentrun/agentrun/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
)

// handOff is a finished phase: a person's acknowledgement of an escalated
// run (the annotation agents.agentrun.dev/ack, ackFrom) recorded in
// status.escalation, who and when, with a Normal event
// EscalationAcknowledged or EscalationResolved and the time-to-human
// metrics, each once: after the status write that records it, which the
// next reconcile finds. An acknowledgement the operator does not take (a
// value it does not read, a run that did not escalate, no author recorded)
// is a Warning event AckNotApplied, and changes nothing.
func (r *AgentRunReconciler) handOff(ctx context.Context, run *v1alpha1.AgentRun) (ctrl.Result, error) {
	if !run.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	a, by, set, err := ackFrom(run)
	if !set {
		return ctrl.Result{}, nil
	}
	e := run.Status.Escalation
	why := ""
	switch {
	case err != nil:
		why = err.Error()
	case run.Status.Outcome != v1alpha1.OutcomeEscalated || e == nil:
		why = fmt.Sprintf("the run ended %s, not Escalated: there is no escalation to acknowledge", run.Status.Outcome)
	case by == "" && !r.AcceptUnstampedAnswers:
		why = "the API server did not record who gave it (no " + v1alpha1.AnnotationAckBy + " annotation: the admission policy " +
			"agentrun-approver-identity is not installed), and the operator applies only acknowledgements whose author it knows"
	}
	if why != "" {
		r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonAckNotApplied, v1alpha1.ReasonAckNotApplied,
			"The acknowledgement "+v1alpha1.AnnotationAck+"="+run.Annotations[v1alpha1.AnnotationAck]+" is not applied: "+why)
		return ctrl.Result{}, nil
	}
	base := run.DeepCopy()
	h := acknowledge(run.Status.Escalation, a, by, metav1.NewTime(r.Clock()))
	if !h.acknowledged && !h.resolved {
		return ctrl.Result{}, nil
	}
	switch err := r.writeStatus(ctx, run, base, true); {
	case apierrors.IsConflict(err):
		return ctrl.Result{}, errConflict
	case apierrors.IsNotFound(err):
		return ctrl.Result{}, errGone
	case err != nil:
		return ctrl.Result{}, err
	}
	e = run.Status.Escalation
	owner := ""
	if e.Owner != "" {
		owner = " (owner: " + e.Owner + ")"
	}
	if h.acknowledged {
		r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonEscalationAcknowledged, v1alpha1.ReasonEscalationAcknowledged,
			fmt.Sprintf("%s acknowledged the escalation%s, %s after the run escalated", someone(e.AcknowledgedBy), owner, h.firstResponse.Round(1e9)))
	}
	if h.resolved {
		r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonEscalationResolved, v1alpha1.ReasonEscalationResolved,
			fmt.Sprintf("%s resolved the escalation%s, %s after the run escalated", someone(e.ResolvedBy), owner, h.decision.Round(1e9)))
	}
	r.Metrics.handedOff(run, h)
	return ctrl.Result{}, nil
}

// someone is who, or "someone" when the API server recorded no one.
func someone(who string) string {
	if who == "" {
		return "someone"
	}
	return who
}
