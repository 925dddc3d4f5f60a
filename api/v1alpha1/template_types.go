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
}

// TemplateRunSpec is the spec of the runs a template makes: the fields of
// an AgentRunSpec that say what runs (not cancel, templateRef or
// parameters). Unlike a run's spec, it may be edited.
//
// +kubebuilder:validation:XValidation:rule=`!has(self.model) || self.model.provider == 'scripted' || (has(self.budget) && has(self.budget.maxCostUSD))`,message="budget.maxCostUSD is required with a real model provider (openai, anthropic, bedrock, vertex, azure): set the most this run may spend, for example \"1.00\"",messageExpression=`'budget.maxCostUSD is required with provider ' + self.model.provider + ': set the most this run may spend, for example "1.00"'`,fieldPath=`.budget.maxCostUSD`,reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule=`!has(self.budget) || !has(self.budget.perTool) || self.budget.perTool.all(n, (has(self.tools) && self.tools.exists(t, t.name == n)))`,message="budget.perTool names a tool that is not declared in spec.tools",messageExpression=`'budget.perTool names a tool that is not declared in spec.tools: ' + self.budget.perTool.filter(n, !(has(self.tools) && self.tools.exists(t, t.name == n)))[0]`,fieldPath=`.budget.perTool`
// +kubebuilder:validation:XValidation:rule=`!has(self.policy) || !has(self.policy.rules) || self.policy.rules.all(r, r.tools.all(n, n == '*' || (has(self.tools) && self.tools.exists(t, t.name == n))))`,message="policy.rules name a tool that is not declared in spec.tools (\"*\" means every tool)",messageExpression=`'policy.rules name a tool that is not declared in spec.tools ("*" means every tool): ' + self.policy.rules.filter(r, r.tools.exists(n, n != '*' && !(has(self.tools) && self.tools.exists(t, t.name == n))))[0].tools.filter(n, n != '*' && !(has(self.tools) && self.tools.exists(t, t.name == n)))[0]`,fieldPath=`.policy.rules`
// +kubebuilder:validation:XValidation:rule=`!has(self.policy) || !has(self.policy.grants) || self.policy.grants.all(n, (has(self.tools) && self.tools.exists(t, t.name == n)))`,message="policy.grants names a tool that is not declared in spec.tools (grants take no wildcard)",messageExpression=`'policy.grants names a tool that is not declared in spec.tools (grants take no wildcard): ' + self.policy.grants.filter(n, !(has(self.tools) && self.tools.exists(t, t.name == n)))[0]`,fieldPath=`.policy.grants`
// +kubebuilder:validation:XValidation:rule=`!has(self.guardrails) || self.guardrails.all(g, !has(g.tools) || g.tools.all(n, n == '*' || (has(self.tools) && self.tools.exists(t, t.name == n))))`,message="guardrails name a tool that is not declared in spec.tools (\"*\" means every tool)",messageExpression=`'guardrails name a tool that is not declared in spec.tools ("*" means every tool): ' + self.guardrails.filter(g, has(g.tools) && g.tools.exists(n, n != '*' && !(has(self.tools) && self.tools.exists(t, t.name == n))))[0].tools.filter(n, n != '*' && !(has(self.tools) && self.tools.exists(t, t.name == n)))[0]`,fieldPath=`.guardrails`
// +kubebuilder:validation:XValidation:rule=`!has(self.verify) || (has(self.tools) && self.tools.exists(t, t.name == self.verify.tool))`,message="verify.tool must name a tool declared in spec.tools",messageExpression=`'verify.tool must name a tool declared in spec.tools: ' + self.verify.tool + ' is not declared'`,fieldPath=`.verify.tool`
// +kubebuilder:validation:XValidation:rule=`!has(self.plan) || self.?strategy.orValue('react') == 'planExecute'`,message="spec.plan applies only to strategy planExecute: set spec.strategy to planExecute or remove spec.plan",fieldPath=`.plan`
type TemplateRunSpec struct {
	// goal is the task, in plain words, that the model works towards. It is
	// the first user message of the conversation.
	// +required
	// +kubebuilder:validation:MaxLength=32768
	// +kubebuilder:validation:XValidation:rule=`self.trim().size() > 0`,message="goal must not be empty: say what the agent should achieve"
	Goal string `json:"goal"`

	// instructions are added to the system prompt, for example the role the
	// model plays or house rules it must follow.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Instructions string `json:"instructions,omitempty"`

	// model selects the model provider and how each model call is made.
	// +required
	Model ModelSpec `json:"model"`

	// budget holds the ceilings of the run. Every ceiling is always active:
	// those left unset take their documented defaults. Admitting a step that
	// would pass a hard ceiling ends the run as BudgetExhausted.
	// +required
	Budget BudgetSpec `json:"budget"`

	// loopDetection stops a run that keeps proposing the same call, or
	// cycles through a few calls, as LoopDetected.
	// +optional
	// +kubebuilder:default={}
	LoopDetection *LoopDetectionSpec `json:"loopDetection,omitempty"`

	// tools are the tools the model may call. Tool names are unique.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule=`self.all(t, self.exists_one(u, u.name == t.name))`,message="tool names must be unique",messageExpression=`'tool names must be unique: %s is declared more than once'.format([self.filter(t, !self.exists_one(u, u.name == t.name))[0].name])`
	Tools []ToolSpec `json:"tools,omitempty"`

	// policy decides, per proposed call, whether it runs (allow), is refused
	// (deny; the model is told) or waits for a person (ask).
	// +optional
	// +kubebuilder:default={}
	Policy *PolicySpec `json:"policy,omitempty"`

	// guardrails are patterns over a call's canonical arguments that block
	// the call or halt the run.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule=`self.all(g, self.exists_one(h, h.name == g.name))`,message="guardrail names must be unique",messageExpression=`'guardrail names must be unique: %s is declared more than once'.format([self.filter(g, !self.exists_one(h, h.name == g.name))[0].name])`
	Guardrails []GuardrailSpec `json:"guardrails,omitempty"`

	// approvalTimeout is how long a call may wait for a person's answer.
	// An ask left unanswered this long ends the run as Escalated.
	// Defaults to 1h.
	// +optional
	// +kubebuilder:default="1h0m0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="approvalTimeout must be a positive duration such as 30m or 1h"
	ApprovalTimeout *metav1.Duration `json:"approvalTimeout,omitempty"`

	// serviceAccountName is the identity the tools act as: job tools run as
	// this ServiceAccount and builtin tools impersonate it. Defaults to the
	// namespace's default ServiceAccount.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// verify makes an external verifier judge every final answer, so that
	// Completed means verified and not only the model's word. An answer the
	// verifier does not accept starts another trial, which reads the
	// verifier's feedback as reflections (Reflexion).
	// +optional
	Verify *VerifySpec `json:"verify,omitempty"`

	// strategy is how the run reaches its goal. react (the default)
	// interleaves: the model sees every result before it chooses the next
	// call. planExecute plans first: one model call writes the whole plan
	// (a submit_plan call whose steps may name earlier steps' results as
	// placeholders), the steps run without the model, independent reads
	// together, and one more model call answers from the goal and the
	// evidence. Budgets, policy, guardrails, approvals and idempotency keys
	// apply to every step as to any call.
	// +optional
	// +kubebuilder:validation:Enum=react;planExecute
	// +kubebuilder:validation:MaxLength=16
	Strategy Strategy `json:"strategy,omitempty"`

	// plan bounds the plans of a planExecute run. Only with strategy
	// planExecute; its fields take their defaults when it is left out.
	// +optional
	Plan *PlanSpec `json:"plan,omitempty"`

	// context bounds what one model request may hold. When the next
	// request would pass maxInputTokens, the turns older than the newest
	// keepRecentTurns are compacted first (strategy clear or summarize);
	// a request that still does not fit ends the run BudgetExhausted and
	// is never sent. Compaction changes what is sent, never what the
	// transcript keeps. Left out, every field takes its default.
	// +optional
	Context *ContextSpec `json:"context,omitempty"`

	// ttlSecondsAfterFinished deletes the run this many seconds after it
	// ended (status.completionTime), with its transcript Secrets, its tool
	// Jobs and the other objects the operator made for it, as
	// ttlSecondsAfterFinished does for a Job; 0 deletes it as soon as it
	// ends. Unset: the operator's default (--default-ttl-seconds-after-finished,
	// chart runs.ttlSecondsAfterFinished), which keeps runs for ever unless
	// set. Unlike the rest of the spec, it may be changed at any time.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}
