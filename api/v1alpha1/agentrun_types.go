package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The fields an AgentRun list may be selected by on the API server
// (kubectl get agentruns --field-selector status.phase=AwaitingApproval):
// the CRD's selectableFields.
const (
	FieldPhase   = "status.phase"
	FieldOutcome = "status.outcome"
)

// AgentRun runs one LLM agent towards a goal: the model proposes tool calls,
// the harness vets them against budget, policy and guardrails, runs the
// allowed ones and feeds the results back, until the run ends with exactly one
// of eight outcomes.
//
// The spec cannot change once the run is created, except that spec.cancel may
// be set to true to stop the run at the next turn boundary, and
// spec.ttlSecondsAfterFinished may change at any time.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=agentruns,singular=agentrun,scope=Namespaced,shortName=ar,categories=agentrun;agents
// +kubebuilder:selectablefield:JSONPath=`.status.phase`
// +kubebuilder:selectablefield:JSONPath=`.status.outcome`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`,description="Where the run stands"
// +kubebuilder:printcolumn:name="Outcome",type=string,JSONPath=`.status.outcome`,description="How the run ended; empty while it runs"
// +kubebuilder:printcolumn:name="Turn",type=integer,JSONPath=`.status.turn`,description="The turn in progress or last finished"
// +kubebuilder:printcolumn:name="Cost",type=string,JSONPath=`.status.usage.costUSD`,description="US dollars spent so far"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Turns Left",type=string,JSONPath=`.status.convergence.headroom.turns`,priority=1,description="Fraction of budget.maxTurns still unused"
// +kubebuilder:printcolumn:name="Tokens Left",type=string,JSONPath=`.status.convergence.headroom.tokens`,priority=1,description="Fraction of budget.maxTokens still unused"
// +kubebuilder:printcolumn:name="Cost Left",type=string,JSONPath=`.status.convergence.headroom.cost`,priority=1,description="Fraction of budget.maxCostUSD still unused"
// +kubebuilder:printcolumn:name="Max Cost",type=string,JSONPath=`.status.limits.budget.maxCostUSD`,priority=1,description="The cost ceiling admission uses (template, platform policy and default applied)"
// +kubebuilder:printcolumn:name="Approvals",type=integer,JSONPath=`.status.pendingApprovalCount`,priority=1,description="Calls waiting for a person's answer"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1,description="Why the run ended, or what it waits for"
// +kubebuilder:printcolumn:name="Continues",type=string,JSONPath=`.status.continuedFrom.name`,priority=1,description="The run this follow-up continued (spec.continueFrom)"
type AgentRun struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the run: goal, model, budget, tools and the rules that
	// vet every proposed call.
	// +required
	Spec AgentRunSpec `json:"spec"`

	// status is what the operator observed and decided; users read it,
	// never write it.
	// +optional
	Status AgentRunStatus `json:"status,omitempty"`
}

// AgentRunList is a list of AgentRuns.
//
// +kubebuilder:object:root=true
type AgentRunList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the AgentRuns.
	Items []AgentRun `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentRun{}, &AgentRunList{})
}

// AgentRunSpec is the desired run: what runs (an AgentSpec written out, or
// a template that supplies it) and what belongs to the run itself. It is
// immutable once created, except for cancel and ttlSecondsAfterFinished.
//
// A run that names no template states what runs:
// +kubebuilder:validation:XValidation:rule=`has(self.templateRef) || has(self.goal)`,message="spec.goal is required (the task the agent works towards), unless spec.templateRef names an AgentRunTemplate to take it from",fieldPath=`.goal`,reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule=`has(self.templateRef) || has(self.model)`,message="spec.model is required (the model provider and model), unless spec.templateRef names an AgentRunTemplate to take it from",fieldPath=`.model`,reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule=`has(self.templateRef) || has(self.budget)`,message="spec.budget is required (the ceilings of the run, at least budget.maxTurns), unless spec.templateRef names an AgentRunTemplate to take it from",fieldPath=`.budget`,reason=FieldValueRequired
//
// A run made from a template takes what runs from it (policy, loopDetection
// and approvalTimeout, which the API server may default, are ignored):
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.goal) || has(self.continueFrom)`,message="a run made from a template (spec.templateRef) takes goal from the template, unless it is a follow-up (spec.continueFrom) asking its own: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.goal`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.instructions)`,message="a run made from a template (spec.templateRef) takes instructions from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.instructions`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.model)`,message="a run made from a template (spec.templateRef) takes model from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.model`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.budget)`,message="a run made from a template (spec.templateRef) takes budget from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.budget`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.tools)`,message="a run made from a template (spec.templateRef) takes tools from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.tools`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.guardrails)`,message="a run made from a template (spec.templateRef) takes guardrails from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.guardrails`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.verify)`,message="a run made from a template (spec.templateRef) takes verify from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.verify`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.strategy)`,message="a run made from a template (spec.templateRef) takes strategy from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.strategy`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.plan)`,message="a run made from a template (spec.templateRef) takes plan from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.plan`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.context)`,message="a run made from a template (spec.templateRef) takes context from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.context`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.output)`,message="a run made from a template (spec.templateRef) takes output from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.output`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.memory)`,message="a run made from a template (spec.templateRef) takes memory from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.memory`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.notify)`,message="a run made from a template (spec.templateRef) takes notify from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.notify`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.escalation)`,message="a run made from a template (spec.templateRef) takes escalation from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.escalation`
// +kubebuilder:validation:XValidation:rule=`!has(self.templateRef) || !has(self.serviceAccountName)`,message="a run made from a template (spec.templateRef) takes serviceAccountName from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished",fieldPath=`.serviceAccountName`
// +kubebuilder:validation:XValidation:rule=`!has(self.parameters) || has(self.templateRef)`,message="spec.parameters apply only to a run made from a template: set spec.templateRef too, or remove spec.parameters",fieldPath=`.parameters`
//
// Every field but cancel (only to true) and ttlSecondsAfterFinished is
// immutable. The ValidatingAdmissionPolicy agentrun-spec
// (config/admission/run-spec.yaml) says so, not a rule here: a CRD rule
// would compare the whole spec again at every status write.
type AgentRunSpec struct {
	// The run's goal, model, budget, tools and the rules that vet every
	// proposed call; from the template when templateRef is set.
	AgentSpec `json:",inline"`

	// cancel, when set to true, stops the run at the next turn boundary with
	// the outcome ApprovalDenied. It may be set after creation (as
	// ttlSecondsAfterFinished may change), and once true it stays true.
	// +optional
	Cancel bool `json:"cancel,omitempty"`

	// templateRef makes the run from an AgentRunTemplate in the run's
	// namespace: the template's spec.run, with its $(params.NAME)
	// placeholders replaced by the parameters, is what runs. The operator
	// resolves it once, before anything is spent, and keeps the resolved
	// spec with the run (status.template records the template's
	// resourceVersion and the digest of the result), so a later edit or
	// deletion of the template never changes a run already created. With
	// templateRef, the run sets no goal, model, budget, tools or other
	// field the template decides; policy, loopDetection and approvalTimeout
	// are the template's too (the run's own, which the API server fills
	// with defaults, are ignored).
	// +optional
	TemplateRef *TemplateRef `json:"templateRef,omitempty"`

	// parameters are the values of the template's parameters, by name.
	// Every required parameter must be given, every name must be one the
	// template declares, and a value must satisfy the parameter's enum or
	// pattern; otherwise the run ends Error with a reason that names the
	// parameter. Values are data: they are put into the strings where the
	// template placed a placeholder, and nowhere else.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Parameters []ParameterValue `json:"parameters,omitempty"`

	// continueFrom makes the run a follow-up of an earlier, finished run in
	// the same namespace: the run starts from that run's conversation (its
	// goal and transcript) followed by this run's goal as a new user
	// message. The earlier run may still exist or, once deleted, be read
	// from the operator's archive. The run is bounded by its own ceilings
	// alone (nothing of the earlier run's spending counts), and may not
	// be wider than the earlier run: no tool it did not have, the same
	// serviceAccountName, no policy rule or guardrail loosened (docs/api.md,
	// "Follow-up runs", says what stricter means). A follow-up that widens,
	// or whose earlier run has not finished or cannot be read, ends Error
	// (InvalidConfiguration) before any model call, with a reason that
	// names what is wrong. A template's run carries no continueFrom: a
	// template is offered to many runs, the run it follows is one run's
	// choice.
	// +optional
	ContinueFrom *ContinueFrom `json:"continueFrom,omitempty"`
}

// ContinueFrom names the run a follow-up continues.
type ContinueFrom struct {
	// name is the earlier AgentRun's name, in the follow-up's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')`,message="continueFrom.name must be the name of an AgentRun (lower-case letters, digits, '-' and '.')"
	Name string `json:"name"`
}

// AgentSpec is what runs: the goal, the model, the budget, the tools and
// the rules that vet every proposed call. An AgentRun's spec and an
// AgentRunTemplate's spec.run embed it; each states what it requires, and
// the rules here, which tie its fields together, hold for both.
//
// +kubebuilder:validation:XValidation:rule=`self.?model.provider.orValue('scripted') == 'scripted' || self.?budget.maxCostUSD.hasValue()`,messageExpression=`'budget.maxCostUSD is required with provider ' + self.model.provider + ': set the most this run may spend, for example "1.00"'`,fieldPath=`.budget.maxCostUSD`,reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule=`!self.?budget.perTool.hasValue() || has(self.tools)`,message="budget.perTool limits tools, and spec.tools declares none",fieldPath=`.budget.perTool`
// +kubebuilder:validation:XValidation:rule=`!self.?budget.perTool.hasValue() || !has(self.tools) || self.budget.perTool.all(n, n.contains('__') || self.tools.exists(t, t.name == n))`,messageExpression=`'budget.perTool names a tool that is not declared in spec.tools: ' + self.budget.perTool.filter(n, !n.contains('__') && !self.tools.exists(t, t.name == n))[0]`,fieldPath=`.budget.perTool`
// +kubebuilder:validation:XValidation:rule=`!self.?budget.perTool.hasValue() || self.budget.perTool.all(n, !n.contains('__') || (has(self.tools) && self.tools.exists(t, t.name == n || (t.?mcp.tools.hasValue() && n.startsWith(t.name)))))`,message="budget.perTool names a tool that is neither declared in spec.tools nor made by an entry's mcp.tools (<entry>__<tool>)",fieldPath=`.budget.perTool`
// +kubebuilder:validation:XValidation:rule=`!self.?policy.rules.hasValue() || self.policy.rules.all(r, r.tools.all(n, n == '*' || (has(self.tools) && self.tools.exists(t, t.name == n || (t.?mcp.tools.hasValue() && n.startsWith(t.name))))))`,message="policy.rules name a tool that is not declared in spec.tools (\"*\" means every tool)",fieldPath=`.policy.rules`
// +kubebuilder:validation:XValidation:rule=`!self.?policy.grants.hasValue() || has(self.tools)`,message="policy.grants names tools, and spec.tools declares none",fieldPath=`.policy.grants`
// +kubebuilder:validation:XValidation:rule=`!self.?policy.grants.hasValue() || !has(self.tools) || self.policy.grants.all(n, n.contains('__') || self.tools.exists(t, t.name == n))`,messageExpression=`'policy.grants names a tool not declared in spec.tools (no wildcards here): ' + self.policy.grants.filter(n, !n.contains('__') && !self.tools.exists(t, t.name == n))[0]`,fieldPath=`.policy.grants`
// +kubebuilder:validation:XValidation:rule=`!self.?policy.grants.hasValue() || self.policy.grants.all(n, !n.contains('__') || (has(self.tools) && self.tools.exists(t, t.name == n || (t.?mcp.tools.hasValue() && n.startsWith(t.name)))))`,message="policy.grants names a tool that is neither declared in spec.tools nor made by an entry's mcp.tools (<entry>__<tool>)",fieldPath=`.policy.grants`
// +kubebuilder:validation:XValidation:rule=`!has(self.guardrails) || self.guardrails.all(g, !has(g.tools) || g.tools.all(n, n == '*' || (has(self.tools) && self.tools.exists(t, t.name == n || (t.?mcp.tools.hasValue() && n.startsWith(t.name))))))`,message="guardrails name a tool that is not declared in spec.tools (\"*\" means every tool)",fieldPath=`.guardrails`
// +kubebuilder:validation:XValidation:rule=`!has(self.verify) || (has(self.tools) && self.tools.exists(t, t.name == self.verify.tool || (t.?mcp.tools.hasValue() && self.verify.tool.startsWith(t.name))))`,messageExpression=`'verify.tool must name a tool declared in spec.tools: ' + self.verify.tool + ' is not declared'`,fieldPath=`.verify.tool`
// +kubebuilder:validation:XValidation:rule=`has(self.memory) || !has(self.tools) || !self.tools.exists(t, has(t.builtin) && t.builtin in ['memory.remember', 'memory.recall'])`,message="the memory tools (builtin memory.remember and memory.recall) need spec.memory: set spec.memory {name} to say which memory they use",fieldPath=`.memory`
// +kubebuilder:validation:XValidation:rule=`!has(self.plan) || self.?strategy.orValue('react') == 'planExecute'`,message="spec.plan applies only to strategy planExecute: set spec.strategy to planExecute or remove spec.plan",fieldPath=`.plan`
type AgentSpec struct {
	// goal is the task, in plain words, that the model works towards. It is
	// the first user message of the conversation. Required: a template's
	// run sets it, and a run sets it unless made from a template.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	// +kubebuilder:validation:XValidation:rule=`self.trim().size() > 0`,message="goal must not be empty: say what the agent should achieve"
	Goal string `json:"goal,omitempty"`

	// instructions are added to the system prompt, for example the role the
	// model plays or house rules it must follow.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Instructions string `json:"instructions,omitempty"`

	// model selects the model provider and how each model call is made.
	// Required, as goal is.
	// +optional
	Model ModelSpec `json:"model,omitzero"`

	// budget holds the ceilings of the run. Every ceiling is always active:
	// those left unset take their documented defaults. Admitting a step that
	// would pass a hard ceiling ends the run as BudgetExhausted. Required,
	// as goal is.
	// +optional
	Budget BudgetSpec `json:"budget,omitzero"`

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

	// output makes the final answer typed: one JSON object that validates
	// against output.schema, which later steps (an Argo Workflows step, a
	// Tekton task) read from status.output. An answer that does not
	// validate is not the final answer: the model reads the validator's
	// message and answers again, and the turn counts. Only with strategy
	// react.
	// +optional
	Output *OutputSpec `json:"output,omitempty"`

	// memory is what the run's memory tools (builtin memory.remember and
	// memory.recall in spec.tools) read and write: entries that outlive
	// the run, shared with the namespace's other runs of the same memory
	// name. The operator keeps it in its archive's PostgreSQL; without
	// one, a run that sets memory is refused before its first model call.
	// +optional
	Memory *MemorySpec `json:"memory,omitempty"`

	// notify asks that the run's end be told to the operator's
	// notification webhook (docs/notifications.md) for these outcomes,
	// as an Escalated end and a call that waits for a person always are.
	// +optional
	Notify *NotifySpec `json:"notify,omitempty"`

	// escalation says who owns the run's escalation when it ends
	// Escalated (status.escalation): see docs/api.md, Hand-off.
	// +optional
	Escalation *EscalationSpec `json:"escalation,omitempty"`

	// ttlSecondsAfterFinished deletes the run this many seconds after it
	// ended (status.completionTime), with its transcript Secrets, its tool
	// Jobs and the other objects the operator made for it, as
	// ttlSecondsAfterFinished does for a Job; 0 deletes it as soon as it
	// ends. Unset: the operator's default (--default-ttl-seconds-after-finished,
	// chart runs.ttlSecondsAfterFinished), which keeps runs for ever unless
	// set. Unlike the rest of a run's spec, it may be changed at any time.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// TemplateRef names an AgentRunTemplate in the run's namespace.
type TemplateRef struct {
	// name is the AgentRunTemplate's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ParameterValue is the value of one template parameter.
type ParameterValue struct {
	// name is the parameter's name, as the template declares it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// value is the parameter's value, a string. It replaces every
	// $(params.NAME) of the template as it is, never read as YAML, JSON or
	// another placeholder.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Value string `json:"value"`
}

// LoopDetectionSpec configures the repeat and cycle detector. A call's
// signature is its tool name and canonical arguments, without call ids and
// without the arguments named in ignoreArguments. The depth of a signature
// is how many times it was proposed within the window; the run stops when
// one reaches threshold. An exact repeat reaches it on its threshold-th
// proposal, and a cycle (A,B,A,B,...) when its calls have come round
// threshold times.
//
// +kubebuilder:validation:XValidation:rule=`!has(self.window) || self.window >= self.?threshold.orValue(3) * self.?maxPeriod.orValue(3)`,message="loopDetection.window must be at least threshold x maxPeriod, as this manifest sets them (each is 3 when unset), so that a cycle of maxPeriod calls can repeat threshold times inside it; raise window, or leave it unset to get exactly that"
type LoopDetectionSpec struct {
	// threshold is the depth that stops the run as LoopDetected: how many
	// times the same signature may be proposed within the window (for a
	// cycle, how many times its calls have come round). Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=100
	Threshold *int32 `json:"threshold,omitempty"`

	// window is the number of most recent proposed calls the detector looks
	// at. It must be at least threshold x maxPeriod, which is its default
	// (9 with the defaults).
	// +optional
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=1000
	Window *int32 `json:"window,omitempty"`

	// maxPeriod is the longest cycle (A,B,A,B,... has period 2) the window
	// is sized for: a cycle of up to maxPeriod calls stops at the same
	// depth as an exact repeat. With 1 and the default window only exact
	// repeats are caught. Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	MaxPeriod *int32 `json:"maxPeriod,omitempty"`

	// ignoreArguments are names of volatile arguments (a request id, a
	// timestamp) left out of the signature, at any depth.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=128
	IgnoreArguments []string `json:"ignoreArguments,omitempty"`

	// similarity turns on the near-repeat detector: calls of one tool whose
	// arguments are at least this alike (a decimal from 0 to 1, such as
	// "0.9"; the Jaccard index of their character trigrams after
	// lowercasing and folding punctuation and spaces) count as repeats of
	// one intent toward threshold, so that a model rewording a call or
	// changing an irrelevant argument on every retry ends LoopDetected. Off
	// when unset: paging through a list (page=2, page=3) looks alike too.
	// +optional
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0(\\.[0-9]{1,3})?|1(\\.0{1,3})?)$') && double(self) > 0.0`,message="loopDetection.similarity must be a decimal above 0 and at most 1, such as \"0.9\""
	Similarity string `json:"similarity,omitempty"`
}

// USD is an amount of US dollars as a decimal string, such as "0.30" or
// "15": digits, optionally a point and at most 12 decimals. Never a float.
//
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule=`self.matches('^[0-9]+(\\.[0-9]{1,12})?$')`,message="must be an amount of US dollars written as a decimal string, such as \"0.50\" or \"12\" (no sign, no exponent, at most 12 decimals)"
type USD string

// SecretKeySelector names one key of a Secret in the AgentRun's namespace.
type SecretKeySelector struct {
	// name is the name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key is the key within the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// VerifySpec configures the verifier of a run's final answers.
//
// When the model gives a final answer (not a refusal, and neither cut off
// nor empty), the verifier tool is called with the JSON object
// {"answer": <the answer>, "trial": <N>, "goal": <spec.goal>} under the
// tool's own contract (a job tool gets it on standard input). Exit 0 (an
// HTTP tool: a 2xx) means verified: the run ends Completed and its output
// is the evidence. A non-zero exit (an HTTP 4xx, an MCP tool error) means
// not verified: its output is the feedback. Either way it may print a JSON
// object {"score": 0..1, "feedback": "..."}. The feedback becomes a
// reflection, and the next trial starts from the goal with the newest
// reflections, without the earlier trials' messages. The verifier is not
// offered to the model, and policy, guardrails, approvals and loop
// detection do not apply to its calls; its calls are charged against the
// budget like any tool call, and every trial's turns are too.
type VerifySpec struct {
	// tool is the verifier: the name of a tool declared in spec.tools. It
	// runs out of process like that tool, with the same isolation, timeout
	// and retries. If it cannot run (its dependency still down after its
	// retries), the run ends ToolFailure.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Tool string `json:"tool"`

	// maxTrials is the most final answers the verifier judges. When the
	// last is not verified, the run ends Escalated (handed to a person,
	// still open) with the last feedback in its reason. Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	MaxTrials *int32 `json:"maxTrials,omitempty"`

	// memory is how many reflections a new trial reads: the newest ones,
	// the oldest dropped first. Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Memory *int32 `json:"memory,omitempty"`

	// stallTrials ends the run Escalated early when the verifier's score
	// has not improved on its best for this many trials in a row (only
	// trials whose verifier printed a score count). Defaults to 2.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	StallTrials *int32 `json:"stallTrials,omitempty"`
}

// Strategy is how a run reaches its goal.
type Strategy string

// The strategies of spec.strategy.
const (
	// StrategyReAct interleaves model calls and tool calls (the default).
	StrategyReAct Strategy = "react"
	// StrategyPlanExecute plans the whole sequence in one model call, runs
	// it, and answers in one more (ReWOO).
	StrategyPlanExecute Strategy = "planExecute"
)

// ContextStrategy is how older turns are compacted.
// +kubebuilder:validation:Enum=clear;summarize
type ContextStrategy string

// The strategies of spec.context.strategy.
const (
	// ContextClear sends the results of older tool calls as a short marker
	// that names the call, its size, and that calling the tool again
	// returns it. It costs nothing.
	ContextClear ContextStrategy = "clear"
	// ContextSummarize has the model condense the older turns into one
	// message: one model call per compaction, reserved and priced like a
	// turn's, counted in usage and every budget, never counted as a turn.
	ContextSummarize ContextStrategy = "summarize"
)

// ContextSpec is a run's context policy.
// +kubebuilder:validation:XValidation:rule=`!has(self.summaryMaxOutputTokens) || (has(self.strategy) && self.strategy == 'summarize')`,message="context.summaryMaxOutputTokens applies to strategy summarize only"
type ContextSpec struct {
	// maxInputTokens is the largest request the run may send, in input
	// tokens as the operator estimates them (built on the provider's
	// count of the request before). Unset: the model's context window
	// less model.maxOutputTokens when the provider adapter knows the model
	// (status.context.source says model; a scripted model, which has no
	// window, 10000000), else 128000 (source default).
	// +optional
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=10000000
	MaxInputTokens *int64 `json:"maxInputTokens,omitempty"`

	// keepRecentTurns is how many of the newest turns always go verbatim.
	// Defaults to 4.
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	KeepRecentTurns *int32 `json:"keepRecentTurns,omitempty"`

	// strategy is how older turns are compacted: clear (the default)
	// replaces their tool results with a marker; summarize has the model
	// condense them into one message, at the price of one model call per
	// compaction.
	// +optional
	// +kubebuilder:default=clear
	// +kubebuilder:validation:MaxLength=16
	Strategy ContextStrategy `json:"strategy,omitempty"`

	// summaryMaxOutputTokens bounds the output of a summary call (strategy
	// summarize). Defaults to 1024.
	// +optional
	// +kubebuilder:validation:Minimum=64
	// +kubebuilder:validation:Maximum=32768
	SummaryMaxOutputTokens *int64 `json:"summaryMaxOutputTokens,omitempty"`
}

// PlanSpec bounds the plans of a planExecute run.
type PlanSpec struct {
	// maxSteps is the most steps one plan may hold. A longer plan is
	// refused and the planner is asked for another. Defaults to 8.
	// +optional
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	MaxSteps *int32 `json:"maxSteps,omitempty"`

	// maxReplans is how many times the planner may be asked for a new plan:
	// after a plan is refused (a step fails vetting or the plan does not fit
	// the budget), a step fails after its retries, or the solver reports
	// that the evidence is not enough. When none is left, the run ends with
	// the outcome the failure calls for. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=5
	MaxReplans *int32 `json:"maxReplans,omitempty"`
}
