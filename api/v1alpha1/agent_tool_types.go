package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The labels and annotations the operator puts on a run made by an agent
// tool's call (a child run), and on nothing else.
const (
	// LabelParent is the name of the run whose call made this run.
	LabelParent = "agents.agentrun.dev/parent"
	// LabelParentUID is the UID of that run.
	LabelParentUID = "agents.agentrun.dev/parent-uid"
	// LabelRoot is the name of the run at the top of the tree: the parent
	// of the parent's ..., the one no agent tool made.
	LabelRoot = "agents.agentrun.dev/root"
	// LabelDepth is how many parents the run has: 1 for a child of a run
	// no agent tool made.
	LabelDepth = "agents.agentrun.dev/depth"
	// AnnotationParentCall is the id of the parent's call that made the
	// run, and the tool's name: "call_1/investigate".
	AnnotationParentCall = "agents.agentrun.dev/parent-call"
	// AnnotationTraceParent is the W3C traceparent of the parent's call
	// span: the run's invoke_agent span is its child, in its trace.
	AnnotationTraceParent = "agents.agentrun.dev/traceparent"
)

// DefaultMaxDepth is the deepest a tree of runs may grow when neither the
// agent tool nor its run says: a run at depth 3 calls no agent tool.
const DefaultMaxDepth = 3

// DefaultMaxInFlight is how many children a run may have in flight at
// once when its agent tool sets no maxInFlight.
const DefaultMaxInFlight = 4

// AgentTool makes each call a child AgentRun from an AgentRunTemplate and
// returns what the child ended with: {"outcome", "reason", "output" or
// "answer", "usage"}. A child that does not complete is a result the
// model reads, not a failure of the call.
type AgentTool struct {
	// templateRef names the AgentRunTemplate, in the run's namespace, each
	// child is made from. It is read when the run starts.
	// +required
	TemplateRef TemplateRef `json:"templateRef"`

	// parameters are the template's parameter values. A value may take
	// the call's arguments: $(args.NAME) is replaced by the argument NAME
	// (a string as it is, any other value as its JSON). A call without an
	// argument a value names is refused and the model is told which.
	// Without tools[].parameters, the tool's schema is the template's
	// parameters (each a string, required when it has no default), and
	// every template parameter not listed here is taken from the argument
	// of its name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Parameters []ParameterValue `json:"parameters,omitempty"`

	// budget is each child's ceilings. A ceiling left out is the
	// template's; one set is capped by the template's. They are reserved
	// out of the calling run's budget before the child is made, and what
	// the child used is charged to it when the child ends.
	// +optional
	Budget *ChildBudget `json:"budget,omitempty"`

	// maxDepth is the deepest the tree may be for this tool's children: a
	// call whose child would have more than maxDepth parents is refused,
	// and the model told the limit. Defaults to 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	MaxDepth *int32 `json:"maxDepth,omitempty"`

	// maxInFlight is how many children the calling run may have in
	// flight at once when this tool's call makes one: a call past it is
	// refused, and the model told to call again once a child has ended.
	// Defaults to 4.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	MaxInFlight *int32 `json:"maxInFlight,omitempty"`
}

// ChildBudget is the five ceilings of a child run. See BudgetSpec for
// what each bounds.
type ChildBudget struct {
	// maxTurns is the most model calls the child may make.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxTurns *int32 `json:"maxTurns,omitempty"`

	// maxTokens is the most input plus output tokens the child may use.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxTokens *int64 `json:"maxTokens,omitempty"`

	// maxWallClock is how long the child may work.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="agent.budget.maxWallClock must be a positive duration such as 90s or 15m"
	MaxWallClock *metav1.Duration `json:"maxWallClock,omitempty"`

	// maxCostUSD is the most the child may spend, in US dollars.
	// +optional
	MaxCostUSD USD `json:"maxCostUSD,omitempty"`

	// maxToolCalls is the most tool calls the child may make.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	MaxToolCalls *int32 `json:"maxToolCalls,omitempty"`
}
