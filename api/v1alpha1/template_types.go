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

	// judge, when set, has a sample of the template's finished runs
	// judged with a rubric: each sampled run is scored once after it
	// ends, into its status.judgement and the metrics
	// agentrun_run_judge_score and agentrun_run_judgements.
	// +optional
	Judge *RunJudge `json:"judge,omitempty"`
}

// RunJudge is a rubric scored by a model, for a sample of finished runs.
//
// The judge is asked for a JSON object {"score": 1 to 5, "rationale":
// "..."} and nothing else; a reply that is not exactly that, a refusal or
// a failed call is recorded in status.judgement.failure, with the reason.
type RunJudge struct {
	// rubric says what a good answer is, for the judge to score the run's
	// answer against, from 1 (fails the rubric) to 5 (meets all of it).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	Rubric string `json:"rubric"`

	// minScore is the lowest score that agrees with a Completed outcome;
	// a run that ended otherwise agrees with a score below it. Defaults
	// to 4.
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	MinScore int32 `json:"minScore,omitempty"`

	// model is the judge's model, in the shape of a run's spec.model: any
	// provider, its key read as the namespace's default ServiceAccount
	// (scripted judges every run with model.script's first entry). One
	// call per sampled run, bounded by model.timeout and
	// model.maxOutputTokens; a failed call is not tried again
	// (model.retry and model.fallbacks are not read).
	// +required
	Model ModelSpec `json:"model"`

	// maxCostUSD is the most the judge's call about one run may spend, in
	// US dollars (model.pricing): a call that could pass it is not made,
	// and the run's judgement fails saying so. Unset is no cost ceiling.
	// +optional
	MaxCostUSD USD `json:"maxCostUSD,omitempty"`

	// maxTokens is the most tokens (input and output) the judge's call
	// about one run may use, held as maxCostUSD is.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxTokens *int64 `json:"maxTokens,omitempty"`

	// sample picks the finished runs that are judged.
	// +required
	Sample JudgeSample `json:"sample"`
}

// JudgeSample picks a fraction of the finished runs, by outcome. Whether
// a run is picked follows from its UID alone, so every operator replica
// and restart picks the same runs.
type JudgeSample struct {
	// fraction is the share of the runs with one of outcomes that are
	// judged, a decimal from "0" (none) to "1" (all), such as "0.1".
	// +required
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0(\\.[0-9]{1,6})?|1(\\.0{1,6})?)$')`,message="judge.sample.fraction must be a decimal string from \"0\" to \"1\", such as \"0.1\" (at most 6 decimals)"
	// +kubebuilder:validation:MaxLength=8
	Fraction string `json:"fraction"`

	// outcomes are the outcomes of the runs sampled; empty samples every
	// outcome.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	Outcomes []Outcome `json:"outcomes,omitempty"`
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
