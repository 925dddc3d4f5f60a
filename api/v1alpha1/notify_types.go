package v1alpha1

// AnnotationNotified lists the notifications of a run that a webhook
// accepted (comma-separated, each EVENT or EVENT/CALLID), so that the
// operator sends none of them again, also after a restart. The operator
// writes it; a person who removes an entry has that message sent again.
const AnnotationNotified = "agents.agentrun.dev/notified"

// NotifySpec says which ends of a run are told to the notification
// webhook, besides the calls that wait for a person and an Escalated end,
// which always are.
type NotifySpec struct {
	// outcomes are the outcomes whose end is told, such as
	// BudgetExhausted, ToolFailure and Error for a scheduled run that no
	// one watches.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	Outcomes []Outcome `json:"outcomes,omitempty"`
}
