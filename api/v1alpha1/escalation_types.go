package v1alpha1

import (
	"fmt"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelOwner names who owns the run's escalation: a team or a person, as
// the alerts and notifications route it. It comes first in the order the
// operator resolves an escalation's owner (EscalationStatus.Owner): this
// label, then spec.escalation.owner (the run's, or its template's), then
// the escalationOwner of the AgentRunPolicy that governs the namespace.
const LabelOwner = "agents.agentrun.dev/owner"

// AnnotationAck is the annotation a person sets to acknowledge an
// escalated run (to take it), and to resolve it: ack or resolve,
// optionally followed by ":" and a note (EscalationAck reads and writes
// it). Setting it needs the verb "approve" on the run, as answering an
// approval does, and the run must have ended Escalated (the admission
// policy agentrun-approval).
const AnnotationAck = "agents.agentrun.dev/ack"

// AnnotationAckBy is the annotation the API server's admission
// (config/admission/approver-identity.yaml) writes when AnnotationAck is
// set or changed: the authenticated username of who set it. The operator
// records that name in status.escalation; no client may write it.
const AnnotationAckBy = "agents.agentrun.dev/ack-by"

// MaxAckNote bounds the note given with an acknowledgement, in characters,
// as MaxApprovalReason bounds a reason: the admission policy
// agentrun-approval and ParseEscalationAck refuse a longer one, and
// status.escalation.note has the same maxLength.
const MaxAckNote = 1024

// Event reasons of an escalation's hand-off.
const (
	// ReasonEscalationAcknowledged is the Normal event recorded when a
	// person acknowledged an escalated run (status.escalation.acknowledgedBy).
	ReasonEscalationAcknowledged = "EscalationAcknowledged"
	// ReasonEscalationResolved is the Normal event recorded when a person
	// resolved an escalated run (status.escalation.resolvedBy).
	ReasonEscalationResolved = "EscalationResolved"
	// ReasonAckNotApplied is the Warning event recorded for an
	// acknowledgement the operator does not take (its value does not read,
	// the run did not escalate, or no one is recorded as its author).
	ReasonAckNotApplied = "AckNotApplied"
)

// EscalationSpec is what a run says about its escalation.
type EscalationSpec struct {
	// owner is who owns the run's escalation, when it ends Escalated: a
	// team or a person (a name an alert or a webhook receiver routes by).
	// The label agents.agentrun.dev/owner on the run takes precedence;
	// left out, the escalationOwner of the AgentRunPolicy that governs the
	// namespace applies.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Owner string `json:"owner,omitempty"`
}

// EscalationStatus is an escalated run's hand-off to people: who owns it,
// since when, and who took and resolved it.
type EscalationStatus struct {
	// owner is who owns the escalation, resolved when the run ended
	// Escalated: the run's label agents.agentrun.dev/owner, else
	// spec.escalation.owner (the run's or its template's), else the
	// escalationOwner of the AgentRunPolicy that governs the namespace.
	// Empty when none says.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Owner string `json:"owner,omitempty"`

	// since is when the run escalated.
	// +required
	Since metav1.Time `json:"since"`

	// acknowledgedBy is who acknowledged (took) the escalation: the
	// username the API server authenticated when the annotation
	// agents.agentrun.dev/ack was set, as the admission policy stamped it
	// into agents.agentrun.dev/ack-by (no client can choose it);
	// acknowledgedAt is when the operator saw it.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	AcknowledgedBy string `json:"acknowledgedBy,omitempty"`
	// +optional
	AcknowledgedAt *metav1.Time `json:"acknowledgedAt,omitempty"`

	// resolvedBy is who resolved the escalation (ack annotation resolve),
	// authenticated as acknowledgedBy is; resolvedAt is when the operator
	// saw it. Resolving acknowledges too, when no one had.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ResolvedBy string `json:"resolvedBy,omitempty"`
	// +optional
	ResolvedAt *metav1.Time `json:"resolvedAt,omitempty"`

	// note is the note given with the latest acknowledgement or
	// resolution that had one.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Note string `json:"note,omitempty"`
}

// Acknowledged reports whether someone acknowledged (or resolved) the
// escalation.
func (e *EscalationStatus) Acknowledged() bool { return e != nil && e.AcknowledgedAt != nil }

// EscalationAck is the value of the annotation AnnotationAck:
//
//	ack[:NOTE]  or  resolve[:NOTE]
//
// ParseEscalationAck reads it and String writes it; the admission policy
// agentrun-approval reads it the same way in CEL.
//
// +kubebuilder:object:generate=false
type EscalationAck struct {
	// Resolve is true for resolve: the person resolved the escalation
	// (and so acknowledged it).
	Resolve bool
	// Note is what the person says, space around it removed; at most
	// MaxAckNote characters.
	Note string
}

// The words of an EscalationAck.
const (
	ackWord     = "ack"
	resolveWord = "resolve"
)

// ParseEscalationAck reads the value of the ack annotation. Space around
// the value and the note is ignored; the word's ASCII case is not
// significant.
func ParseEscalationAck(value string) (EscalationAck, error) {
	word, note, _ := strings.Cut(strings.TrimSpace(value), ":")
	a := EscalationAck{Note: strings.TrimSpace(note)}
	switch lowerASCII(strings.TrimSpace(word)) {
	case ackWord:
	case resolveWord:
		a.Resolve = true
	default:
		return EscalationAck{}, fmt.Errorf("%q is not an acknowledgement: %s holds ack or resolve, optionally followed by a colon and a note (ack:NOTE)",
			value, AnnotationAck)
	}
	if n := utf8.RuneCountInString(a.Note); n > MaxAckNote {
		return EscalationAck{}, fmt.Errorf("the note given with %s is %d characters long; a note may have at most %d: say it shorter", word, n, MaxAckNote)
	}
	return a, nil
}

// String is the annotation value: ack or resolve, and ":" and the note when
// there is one.
func (a EscalationAck) String() string {
	w := ackWord
	if a.Resolve {
		w = resolveWord
	}
	if a.Note != "" {
		return w + ":" + a.Note
	}
	return w
}
