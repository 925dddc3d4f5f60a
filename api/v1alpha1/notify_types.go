package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// NotifyRule picks the ends of runs an AgentRunPolicy has told to the
// notification webhook: a run of the policy's namespaces that ends with
// one of outcomes, whose labels runSelector matches (when set), and that
// one of schedules created (when set).
// +kubebuilder:validation:XValidation:rule=`size(self.outcomes) > 0`,message="notify[].outcomes is empty: name at least one outcome, such as BudgetExhausted, ToolFailure or Error",fieldPath=`.outcomes`
type NotifyRule struct {
	// outcomes are the outcomes whose end is told, such as
	// BudgetExhausted, ToolFailure and Error.
	// +required
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	Outcomes []Outcome `json:"outcomes"`

	// runSelector picks the runs by their labels (team=billing), as a
	// label selector does. Unset: every run of the policy's namespaces.
	// +optional
	RunSelector *RunSelector `json:"runSelector,omitempty"`

	// schedules picks the runs that one of these AgentSchedules, of the
	// run's namespace, created, by the label agents.agentrun.dev/schedule
	// every run of a schedule has. Unset: runs made by any schedule or by
	// none.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	Schedules []string `json:"schedules,omitempty"`
}

// RunSelector is a label selector (metav1.LabelSelector, the same fields)
// with bounds, so that the API server can check every key and value of
// it when the policy is written.
type RunSelector struct {
	// matchLabels are labels the run has, each with this value.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule=`self.all(k, !format.qualifiedName().validate(k).hasValue())`,message="runSelector.matchLabels keys must be label keys, such as team or example.com/team"
	MatchLabels map[string]LabelValue `json:"matchLabels,omitempty"`

	// matchExpressions are requirements the run's labels meet, each.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	MatchExpressions []RunSelectorRequirement `json:"matchExpressions,omitempty"`
}

// RunSelectorRequirement is one requirement of a RunSelector, as
// metav1.LabelSelectorRequirement.
// +kubebuilder:validation:XValidation:rule=`(self.operator in ['In', 'NotIn']) == (size(self.?values.orValue([])) > 0)`,message="runSelector.matchExpressions[]: In and NotIn need values, Exists and DoesNotExist take none"
type RunSelectorRequirement struct {
	// key is the label's key.
	// +required
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule=`!format.qualifiedName().validate(self).hasValue()`,message="runSelector.matchExpressions[].key must be a label key, such as team or example.com/team"
	Key string `json:"key"`

	// operator is In, NotIn, Exists or DoesNotExist.
	// +required
	// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist
	Operator metav1.LabelSelectorOperator `json:"operator"`

	// values are the label's values for In and NotIn.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	Values []string `json:"values,omitempty"`
}

// LabelValue is the value of a label: at most 63 letters, digits, '-',
// '_' or '.', beginning and ending with a letter or digit, or empty.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:XValidation:rule=`!format.labelValue().validate(self).hasValue()`,message="a label value is at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
type LabelValue string
