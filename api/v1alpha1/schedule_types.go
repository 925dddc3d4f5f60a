package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelSchedule is set on every run an AgentSchedule creates, to the
// schedule's name; LabelRerunOf on a run created by kubectl agentrun rerun,
// to the name of the run it repeats.
const (
	LabelSchedule = "agents.agentrun.dev/schedule"
	LabelRerunOf  = "agents.agentrun.dev/rerun-of"
	// LabelContinuedFrom is set by the operator on a follow-up run
	// (spec.continueFrom), to the name of the run it continues (cut to
	// 63 characters, as a label value must be).
	LabelContinuedFrom = "agents.agentrun.dev/continued-from"
	// AnnotationScheduledTime is the scheduled time (RFC 3339) of a run an
	// AgentSchedule created.
	AnnotationScheduledTime = "agents.agentrun.dev/scheduled-at"
	// AnnotationCancelledBy says who set spec.cancel, for the run's
	// reason: an AgentSchedule with concurrencyPolicy Replace writes
	// "AgentSchedule/NAME".
	AnnotationCancelledBy = "agents.agentrun.dev/cancelled-by"
)

// AgentSchedule creates AgentRuns on a schedule, as a CronJob creates Jobs:
// the same schedule syntax, time zone, concurrency policy, starting
// deadline, suspension and history limits.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=agentschedules,singular=agentschedule,scope=Namespaced,shortName=ags,categories=agents
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Timezone",type=string,JSONPath=`.spec.timeZone`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.activeCount`
// +kubebuilder:printcolumn:name="Last Schedule",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:validation:XValidation:rule=`self.metadata.name.size() <= 52`,message="the name of an AgentSchedule is at most 52 characters: the runs it creates are named after it, with the scheduled minute appended"
type AgentSchedule struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is when to run and what.
	// +required
	Spec AgentScheduleSpec `json:"spec"`

	// status is what the operator scheduled.
	// +optional
	Status AgentScheduleStatus `json:"status,omitempty"`
}

// AgentScheduleList is a list of AgentSchedules.
//
// +kubebuilder:object:root=true
type AgentScheduleList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the AgentSchedules.
	Items []AgentSchedule `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentSchedule{}, &AgentScheduleList{})
}

// ConcurrencyPolicy says what a schedule does when its time comes while a
// run it created has not ended.
// +kubebuilder:validation:Enum=Allow;Forbid;Replace
type ConcurrencyPolicy string

// The concurrency policies, as CronJob's.
const (
	// AllowConcurrent creates the new run alongside those still running.
	AllowConcurrent ConcurrencyPolicy = "Allow"
	// ForbidConcurrent skips the new run while one is running.
	ForbidConcurrent ConcurrencyPolicy = "Forbid"
	// ReplaceConcurrent cancels the runs still running (outcome
	// ApprovalDenied, a reason that names the schedule) and creates the new
	// one.
	ReplaceConcurrent ConcurrencyPolicy = "Replace"
)

// AgentScheduleSpec is when a schedule creates runs, and which.
type AgentScheduleSpec struct {
	// schedule is a cron expression, as a CronJob's: five fields (minute,
	// hour, day of month, month, day of week) or a macro such as @hourly.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Schedule string `json:"schedule"`

	// timeZone is the IANA time zone the schedule is read in, such as
	// Europe/Berlin. Unset: the operator's local time zone (UTC in its
	// image).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone *string `json:"timeZone,omitempty"`

	// concurrencyPolicy says what to do when a run is due while one the
	// schedule created has not ended: Allow (the default) runs both,
	// Forbid skips the new one, Replace cancels the old one.
	// +optional
	// +kubebuilder:default=Allow
	ConcurrencyPolicy ConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`

	// startingDeadlineSeconds is how late a run may still be created after
	// its scheduled time (the operator was down, the schedule suspended);
	// a time missed by more is skipped and counted as missed. Unset: no
	// deadline, and after an outage only the latest missed time runs.
	// +optional
	// +kubebuilder:validation:Minimum=0
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`

	// suspend stops creating runs; runs already created go on. Times that
	// pass while suspended are missed. Defaults to false.
	// +optional
	// +kubebuilder:default=false
	Suspend *bool `json:"suspend,omitempty"`

	// successfulRunsHistoryLimit is how many runs that ended Completed
	// are kept; older ones are deleted with their transcripts. Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	SuccessfulRunsHistoryLimit *int32 `json:"successfulRunsHistoryLimit,omitempty"`

	// failedRunsHistoryLimit is how many runs that ended with another
	// outcome are kept; older ones are deleted with their transcripts.
	// Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	FailedRunsHistoryLimit *int32 `json:"failedRunsHistoryLimit,omitempty"`

	// runTemplate is the run to create each time.
	// +required
	RunTemplate ScheduledRun `json:"runTemplate"`
}

// ScheduledRun is the run a schedule creates: a template and its
// parameters, or a whole run spec.
//
// +kubebuilder:validation:XValidation:rule=`has(self.templateRef) != has(self.spec)`,message="runTemplate needs either templateRef (with parameters) or spec, not both"
// +kubebuilder:validation:XValidation:rule=`!has(self.parameters) || has(self.templateRef)`,message="runTemplate.parameters apply only with runTemplate.templateRef",fieldPath=`.parameters`
type ScheduledRun struct {
	// metadata holds the labels and annotations of the runs created.
	// +optional
	Metadata ScheduledRunMetadata `json:"metadata,omitempty"`

	// templateRef names the AgentRunTemplate each run is made from.
	// +optional
	TemplateRef *TemplateRef `json:"templateRef,omitempty"`

	// parameters are the template's parameters for each run.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Parameters []ParameterValue `json:"parameters,omitempty"`

	// spec is the whole spec of each run, when no template is named.
	// +optional
	Spec *TemplateRunSpec `json:"spec,omitempty"`
}

// ScheduledRunMetadata is the metadata a schedule gives its runs.
type ScheduledRunMetadata struct {
	// labels are added to each run.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Labels map[string]string `json:"labels,omitempty"`
	// annotations are added to each run. They may not name the run's
	// author (agents.agentrun.dev/created-by): a schedule's runs carry the
	// schedule's author, as the API server recorded it.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="!('agents.agentrun.dev/created-by' in self)",message="annotations may not set agents.agentrun.dev/created-by: a schedule's runs carry the schedule's author, as the API server recorded it when the AgentSchedule was created"
	Annotations map[string]string `json:"annotations,omitempty"`
}

// AgentScheduleStatus is what the operator scheduled.
type AgentScheduleStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// active are the runs the schedule created that have not ended.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	Active []corev1.ObjectReference `json:"active,omitempty"`

	// activeCount is the number of active runs, for kubectl get.
	// +optional
	ActiveCount int32 `json:"activeCount,omitempty"`

	// lastScheduleTime is the last time a run was created (its scheduled
	// time, not when it was created).
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// lastMissedTime is the latest scheduled time skipped because it was
	// older than startingDeadlineSeconds when the operator came to it;
	// times up to it are not looked at (nor counted as missed) again.
	// +optional
	LastMissedTime *metav1.Time `json:"lastMissedTime,omitempty"`

	// lastSuccessfulTime is when the last run that ended Completed ended.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`

	// conditions: Ready is True while the schedule is valid and creates
	// runs (reason Scheduled, or Suspended with status True), False when
	// its schedule or time zone cannot be read (reason InvalidSchedule)
	// or a run could not be created (reason CreateFailed); the message
	// says why. Stalled is True (reason InvalidSchedule) only while the
	// schedule cannot be read, which kstatus reports as Failed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// The AgentSchedule's condition reasons (its Ready condition; Stalled
// takes ReasonInvalidSchedule).
const (
	// ScheduleConditionReady is the schedule's Ready condition.
	ScheduleConditionReady = "Ready"
	// ReasonScheduled: the schedule is valid and creates runs.
	ReasonScheduled = "Scheduled"
	// ReasonScheduleSuspended: spec.suspend is true (Ready=True).
	ReasonScheduleSuspended = "Suspended"
	// ReasonInvalidSchedule: spec.schedule or spec.timeZone cannot be read.
	ReasonInvalidSchedule = "InvalidSchedule"
	// ReasonCreateFailed: the API server refused the run the schedule
	// created.
	ReasonCreateFailed = "CreateFailed"
)
