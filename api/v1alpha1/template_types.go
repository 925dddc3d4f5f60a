package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AgentRunTemplate is an agent offered for others to run: a run spec with
// parameters. An AgentRun with spec.templateRef naming it, and values for
// its parameters, runs the template's spec.run with every $(params.NAME)
// replaced by the value of NAME. A platform team writes the template once
// (goal, model, pricing, budgets, tools, policy) and the teams that use it
// choose only what the template leaves open to them.
//
// Editing or deleting a template never changes a run already made from it:
// the operator resolves a run's template once and keeps the result.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=agentruntemplates,singular=agentruntemplate,scope=Namespaced,shortName=art,categories=agents
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.run.model.provider`,description="The model provider the runs use"
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.run.model.name`,description="The model the runs use"
// +kubebuilder:printcolumn:name="Parameters",type=integer,JSONPath=`.status.parameterCount`,description="How many parameters the template declares"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Whether runs can be made from the template"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
type AgentRunTemplate struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the template: its parameters and the run they complete.
	// +required
	Spec AgentRunTemplateSpec `json:"spec"`

	// status says whether the template is usable.
	// +optional
	Status AgentRunTemplateStatus `json:"status,omitempty"`
}

// AgentRunTemplateList is a list of AgentRunTemplates.
//
// +kubebuilder:object:root=true
type AgentRunTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the AgentRunTemplates.
	Items []AgentRunTemplate `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentRunTemplate{}, &AgentRunTemplateList{})
}

// AgentRunTemplateSpec is a run spec with parameters.
type AgentRunTemplateSpec struct {
	// parameters are the values a run made from the template provides.
	// Parameter names are unique.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Parameters []TemplateParameter `json:"parameters,omitempty"`

	// run is the spec of the runs made from the template. Its string
	// fields (the goal, the instructions, a tool's arguments or image, a
	// model's name) may say $(params.NAME), which a run's parameter value
	// replaces; every NAME must be a declared parameter. A field with a
	// fixed vocabulary or format (the provider, a duration, an amount of
	// dollars) takes no placeholder: the API server checks it here.
	// +required
	Run TemplateRunSpec `json:"run"`
}

// TemplateParameter is one value a run made from the template provides.
//
// +kubebuilder:validation:XValidation:rule=`!(self.?required.orValue(false) && has(self.default))`,message="a required parameter takes no default: remove default, or set required to false",fieldPath=`.default`
// +kubebuilder:validation:XValidation:rule=`!has(self.default) || !has(self.enum) || self.default in self.enum`,message="the default of a parameter must be one of its enum values",fieldPath=`.default`
type TemplateParameter struct {
	// name is how the template's placeholders and a run's parameters
	// refer to the parameter: a letter, then letters, digits, '_' or '-'.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_-]*$`
	Name string `json:"name"`

	// description tells the people who run the template what the value
	// means; kubectl agentrun run shows it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`

	// default is the value of a run that gives none. A parameter with
	// neither a default nor required: true is the empty string when a run
	// gives none.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Default *string `json:"default,omitempty"`

	// required refuses a run that gives no value for the parameter.
	// +optional
	Required bool `json:"required,omitempty"`

	// enum lists the only values a run may give.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1024
	Enum []string `json:"enum,omitempty"`

	// pattern is a regular expression (RE2 syntax, as Go and CEL read it)
	// every value must match; anchor it with ^ and $ to match the whole
	// value.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule=`''.matches(self) == ''.matches(self)`,message="pattern must be a valid regular expression (RE2 syntax)"
	Pattern string `json:"pattern,omitempty"`
}

// AgentRunTemplateStatus is what the operator found checking the template.
type AgentRunTemplateStatus struct {
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// parameterCount is how many parameters the template declares.
	// +optional
	ParameterCount int32 `json:"parameterCount,omitempty"`

	// conditions: Ready is True when runs can be made from the template,
	// False (reason InvalidTemplate) when a placeholder names no declared
	// parameter or a default breaks its own enum or pattern; the message
	// names it. Stalled is True with the same reason and message then, as
	// kstatus reads a failure.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TemplateStatus records the template a run was made from, as it was when
// the operator resolved it.
type TemplateStatus struct {
	// name is the AgentRunTemplate's name.
	// +optional
	Name string `json:"name,omitempty"`
	// resourceVersion is the template's resourceVersion when it was read.
	// +optional
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// digest is "sha256:" and the hex SHA-256 of the resolved spec's JSON,
	// as kept with the run.
	// +optional
	Digest string `json:"digest,omitempty"`
	// goal is the resolved spec's goal, every placeholder replaced: what
	// the model was given. A copy for people to read (kubectl agentrun
	// transcript, the console); the operator runs from the resolved spec
	// kept with the run, never from this field.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Goal string `json:"goal,omitempty"`
}

// Goal is the goal the run works towards: spec.goal, or for a run made
// from a template, the goal the operator resolved (status.template.goal),
// empty until it has.
func (r *AgentRun) Goal() string {
	if r.Spec.Goal == "" && r.Status.Template != nil {
		return r.Status.Template.Goal
	}
	return r.Spec.Goal
}

// TemplateRunSpec is the spec of the runs a template makes (and of an
// AgentSchedule's runs written out in full): what runs, without what
// belongs to one run (cancel, templateRef, parameters). Unlike a run's
// spec, it may be edited.
//
// +kubebuilder:validation:XValidation:rule=`has(self.goal)`,message="goal is required: the task, in plain words, that the agent works towards",fieldPath=`.goal`,reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule=`has(self.model)`,message="model is required: the model provider and model the runs use",fieldPath=`.model`,reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule=`has(self.budget)`,message="budget is required: the ceilings of the runs, at least budget.maxTurns",fieldPath=`.budget`,reason=FieldValueRequired
type TemplateRunSpec struct {
	// What the runs run.
	AgentSpec `json:",inline"`
}
