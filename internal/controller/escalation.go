package controller

import (
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// escalationOwner is who owns run's escalation: its label
// agents.agentrun.dev/owner, else spec.escalation.owner of spec (the spec
// the run is built from: its template's where it names one, with the
// governing AgentRunPolicy's escalationOwner filled in where it names
// none, platform.Apply), else "" (no owner).
func escalationOwner(run *v1alpha1.AgentRun, spec *v1alpha1.AgentRunSpec) string {
	if o := run.Labels[v1alpha1.LabelOwner]; o != "" {
		return o
	}
	if spec != nil && spec.Escalation != nil {
		return spec.Escalation.Owner
	}
	return ""
}

// ownerOf is the escalation owner of the run a reconcile drives, from
// the spec its kit was built from (resolved and governed), or its own
// before the kit is built.
func ownerOf(sc *scope) string {
	return escalationOwner(sc.run, sc.builtSpec())
}

// escalate records the hand-off of a run that has just ended Escalated:
// its owner, and since when it waits for a person (its completion time).
// A status that holds one keeps it.
func escalate(st *v1alpha1.AgentRunStatus, owner string, now metav1.Time) {
	if st.Outcome != v1alpha1.OutcomeEscalated || st.Escalation != nil {
		return
	}
	since := now
	if st.CompletionTime != nil {
		since = *st.CompletionTime
	}
	st.Escalation = &v1alpha1.EscalationStatus{Owner: owner, Since: since}
}

// ackFrom reads the run's acknowledgement annotation: its value, read
// with v1alpha1.ParseEscalationAck, and who set it, as the admission
// policy agentrun-approver-identity stamped it (v1alpha1.AnnotationAckBy;
// agentrun-approval refuses clients that write it themselves). set is
// false when the run carries none.
func ackFrom(run *v1alpha1.AgentRun) (a v1alpha1.EscalationAck, by string, set bool, err error) {
	v, set := run.Annotations[v1alpha1.AnnotationAck]
	if !set {
		return a, "", false, nil
	}
	a, err = v1alpha1.ParseEscalationAck(v)
	return a, run.Annotations[v1alpha1.AnnotationAckBy], true, err
}

// handoff is what one acknowledgement changed of an escalation: it was
// acknowledged, resolved, or both, after waiting this long for the first
// person (firstResponse) and for the decision.
type handoff struct {
	acknowledged, resolved  bool
	firstResponse, decision time.Duration
}

// acknowledge applies a to e, by by at now: the first acknowledgement
// (or a resolution, which acknowledges too) records who and when; a
// resolution records who resolved it, once. An acknowledgement of an
// escalation taken before changes nothing; the note of the one applied,
// when it gives one, replaces the note.
func acknowledge(e *v1alpha1.EscalationStatus, a v1alpha1.EscalationAck, by string, now metav1.Time) handoff {
	var h handoff
	if e.AcknowledgedAt == nil {
		e.AcknowledgedBy, e.AcknowledgedAt = by, &now
		h.acknowledged, h.firstResponse = true, now.Sub(e.Since.Time)
	}
	if a.Resolve && e.ResolvedAt == nil {
		e.ResolvedBy, e.ResolvedAt = by, &now
		h.resolved, h.decision = true, now.Sub(e.Since.Time)
	}
	if (h.acknowledged || h.resolved) && a.Note != "" {
		e.Note = a.Note
	}
	return h
}
