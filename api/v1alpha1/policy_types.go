package v1alpha1

// PolicyDecision is what policy decides for one proposed call.
// +kubebuilder:validation:Enum=allow;deny;ask
type PolicyDecision string

// The policy decisions.
const (
	// PolicyAllow lets the call run.
	PolicyAllow PolicyDecision = "allow"
	// PolicyDeny refuses the call; the model is told and may choose another
	// route. The run goes on.
	PolicyDeny PolicyDecision = "deny"
	// PolicyAsk holds the call, and the rest of its turn's batch, until a
	// person answers through an approval annotation.
	PolicyAsk PolicyDecision = "ask"
)

// PolicySpec decides, per proposed call, allow, deny or ask. The first rule
// that matches decides; when none does, default decides. Independently of
// the rules, a call of a tool that mutates and is not reversible asks a
// person unless grants names the tool.
type PolicySpec struct {
	// default is the decision for calls no rule matches. Defaults to allow.
	// +optional
	// +kubebuilder:default=allow
	Default PolicyDecision `json:"default,omitempty"`

	// rules are tried in order; the first that matches decides.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Rules []PolicyRule `json:"rules,omitempty"`

	// grants are tools whose irreversible-mutation ask is waived for this
	// run. Each is named explicitly: there is no wildcard.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	Grants []string `json:"grants,omitempty"`
}

// PolicyRule matches calls by tool name and, optionally, by a CEL condition
// over the call's arguments.
//
// +kubebuilder:validation:XValidation:rule=`!has(self.approvals) || self.decision == 'ask'`,message="approvals counts the people who must approve a call the rule asks about: set it only with decision ask"
type PolicyRule struct {
	// tools are the tool names the rule applies to; "*" matches every tool.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	Tools []string `json:"tools"`

	// when is a CEL expression over args, the call's arguments; the rule
	// matches only when it is true, for example "args.amount_minor > 5000".
	// A condition that cannot be evaluated for a call (a missing argument,
	// a wrong type) sends that call to a person, as ask.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	When string `json:"when,omitempty"`

	// decision is what the rule decides: allow, deny or ask.
	// +required
	Decision PolicyDecision `json:"decision"`

	// reason tells the model (on deny) or the person asked (on ask) why.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// mutating, when true, matches only calls of tools that mutate
	// (tools[].mutates, as an MCP server's hints may tighten it), for
	// example "every mutating tool asks".
	// +optional
	Mutating bool `json:"mutating,omitempty"`

	// name names the rule where a decision is shown (pendingApprovals[].rule,
	// events). Defaults to its place, policy.rules[i].
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name,omitempty"`

	// approvals is how many distinct people must approve a call this rule
	// asks about (decision ask) before it runs; defaults to 1. One denial
	// or stop is enough to refuse it. Each approver is counted once, by the
	// username the API server authenticated; the platform's selfApproval
	// applies to each.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Approvals *int32 `json:"approvals,omitempty"`
}

// GuardrailSeverity is what happens when a guardrail fires.
// +kubebuilder:validation:Enum=block;halt
type GuardrailSeverity string

// The guardrail severities.
const (
	// GuardrailBlock refuses the matching call only; the model is told why.
	GuardrailBlock GuardrailSeverity = "block"
	// GuardrailHalt ends the run as GuardrailStop before any call of the
	// batch runs.
	GuardrailHalt GuardrailSeverity = "halt"
)

// GuardrailTarget is what a guardrail looks at.
// +kubebuilder:validation:Enum=arguments;results;answer
type GuardrailTarget string

// The guardrail targets.
const (
	// GuardrailOnArguments: the arguments of each proposed call, before it
	// runs (block refuses the call).
	GuardrailOnArguments GuardrailTarget = "arguments"
	// GuardrailOnResults: each tool result, before the model, the status
	// or the transcript sees it (block redacts the matches).
	GuardrailOnResults GuardrailTarget = "results"
	// GuardrailOnAnswer: the model's final answer, before status.answer
	// holds it (block redacts the matches).
	GuardrailOnAnswer GuardrailTarget = "answer"
)

// GuardrailSpec is an RE2 pattern over a call's arguments, all of them
// (loopDetection.ignoreArguments included). It fires when it matches any
// string value as decoded text (no JSON escapes), or the compact JSON of
// the arguments (sorted keys, normalised numbers, no HTML escaping). With
// on, it also (or instead) looks at tool results and the final answer.
type GuardrailSpec struct {
	// name identifies the guardrail in status reasons and events.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// tools are the tool names the guardrail watches; "*" watches every
	// tool. Defaults to ["*"].
	// +optional
	// +kubebuilder:default={"*"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	Tools []string `json:"tools,omitempty"`

	// pattern is an RE2 regular expression, for example "\\b\\d{13,19}\\b".
	// It may compile to at most 1,000 RE2 instructions.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Pattern string `json:"pattern"`

	// severity is block (refuse this call only) or halt (stop the run
	// before any call of the batch runs). Defaults to block.
	// +optional
	// +kubebuilder:default=block
	Severity GuardrailSeverity `json:"severity,omitempty"`

	// reason says why the guardrail exists; it is shown to the model when a
	// call is blocked and in the run's reason when it halts.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// on is what the guardrail looks at: arguments (each proposed call's,
	// before it runs), results (each tool result, before anyone reads it)
	// and answer (the final answer). On results and the answer, block
	// replaces every match with "[redacted by guardrail NAME]" and halt
	// ends the run GuardrailStop, the match redacted too. Defaults to
	// ["arguments"].
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	On []GuardrailTarget `json:"on,omitempty"`
}
