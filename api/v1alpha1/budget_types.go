package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The budget's types in one place: the ceilings a run sets (BudgetSpec),
// the names budget.soft gives them (BudgetDimension), the highest a
// platform allows (PlatformLimits), what admission uses (LimitsStatus) and
// what a run consumed or reserved (UsageStatus). Each ceiling is a row of
// the engine's table (loop.Ceilings); a new ceiling's fields are all here.

// BudgetSpec is the vector of ceilings of a run. Defaults: maxTokens 100000,
// maxWallClock 15m, maxCostUSD "1.00", maxToolCalls 50, defaultToolLimit 10.
// maxTurns has no default. An unset ceiling takes its default; a ceiling set
// to zero means zero where zero is a limit (maxCostUSD, maxToolCalls,
// perTool, defaultToolLimit) and is refused where it could only stop every
// run at once (maxTurns, maxTokens, maxWallClock). A ceiling never fails
// open.
type BudgetSpec struct {
	// maxTurns is the most model calls the run may make. Required.
	// +required
	// +kubebuilder:validation:Maximum=10000
	// +kubebuilder:validation:XValidation:rule=`self >= 1`,message="budget.maxTurns must be at least 1"
	MaxTurns int32 `json:"maxTurns"`

	// maxTokens is the most input plus output tokens the run may use, over
	// all its model calls. Defaults to 100000; 0 is refused.
	// +optional
	// +kubebuilder:validation:XValidation:rule=`self >= 1`,message="budget.maxTokens must be at least 1: a run with no tokens cannot call the model"
	MaxTokens *int64 `json:"maxTokens,omitempty"`

	// maxWallClock is how long the run may work. Time spent waiting for a
	// person does not count (approvalTimeout bounds that). Defaults to 15m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="budget.maxWallClock must be a positive duration such as 90s or 15m"
	MaxWallClock *metav1.Duration `json:"maxWallClock,omitempty"`

	// maxCostUSD is the most the run may spend, in US dollars, on model
	// calls and tools' declared costs together. Required with the openai and
	// anthropic providers; otherwise it defaults to "1.00". The default is
	// applied by the operator, not stored in the object, so that a real
	// provider can never run on a ceiling nobody chose. "0" means zero:
	// nothing that costs money may run (a priced model call, a tool with a
	// maxCostUSD).
	// +optional
	MaxCostUSD USD `json:"maxCostUSD,omitempty"`

	// maxToolCalls is the most tool calls the run may make in total.
	// Defaults to 50. 0 means no tool may be called: the first batch the
	// model proposes ends the run BudgetExhausted.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	MaxToolCalls *int32 `json:"maxToolCalls,omitempty"`

	// perTool limits the calls of single tools, by tool name. Every name
	// must be a tool declared in spec.tools. 0 means the tool may not be
	// called.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule=`self.all(n, self[n] >= 0)`,message="budget.perTool limits cannot be negative"
	PerTool map[string]int32 `json:"perTool,omitempty"`

	// defaultToolLimit is the per-tool call limit of tools not named in
	// perTool. Defaults to 10. 0 means only the tools named in perTool may
	// be called.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	DefaultToolLimit *int32 `json:"defaultToolLimit,omitempty"`

	// soft names ceilings that only warn (an event and a status reason at
	// 80% and at 100%) instead of ending the run.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=5
	Soft []BudgetDimension `json:"soft,omitempty"`
}

// BudgetDimension names one budget ceiling.
// +kubebuilder:validation:Enum=turns;tokens;wallClock;cost;toolCalls
type BudgetDimension string

// The budget ceilings that budget.soft can name.
const (
	// BudgetTurns is budget.maxTurns.
	BudgetTurns BudgetDimension = "turns"
	// BudgetTokens is budget.maxTokens.
	BudgetTokens BudgetDimension = "tokens"
	// BudgetWallClock is budget.maxWallClock.
	BudgetWallClock BudgetDimension = "wallClock"
	// BudgetCost is budget.maxCostUSD.
	BudgetCost BudgetDimension = "cost"
	// BudgetToolCalls is budget.maxToolCalls.
	BudgetToolCalls BudgetDimension = "toolCalls"
)

// PlatformLimits are the highest ceilings and timeouts a run may have.
type PlatformLimits struct {
	// maxTurns is the highest budget.maxTurns.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxTurns *int32 `json:"maxTurns,omitempty"`

	// maxTokens is the highest budget.maxTokens.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxTokens *int64 `json:"maxTokens,omitempty"`

	// maxCostUSD is the highest budget.maxCostUSD, in US dollars.
	// +optional
	MaxCostUSD USD `json:"maxCostUSD,omitempty"`

	// maxToolCalls is the highest budget.maxToolCalls.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxToolCalls *int32 `json:"maxToolCalls,omitempty"`

	// maxWallClock is the highest budget.maxWallClock.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="limits.maxWallClock must be a positive duration such as 1h"
	MaxWallClock *metav1.Duration `json:"maxWallClock,omitempty"`

	// maxApprovalTimeout is the highest approvalTimeout.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="limits.maxApprovalTimeout must be a positive duration such as 24h"
	MaxApprovalTimeout *metav1.Duration `json:"maxApprovalTimeout,omitempty"`

	// maxToolTimeout is the highest tools[].timeout.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="limits.maxToolTimeout must be a positive duration such as 5m"
	MaxToolTimeout *metav1.Duration `json:"maxToolTimeout,omitempty"`
}

// LimitsStatus is what a run's steps are admitted by.
type LimitsStatus struct {
	// budget is the run's ceilings, every one filled: the spec.budget the
	// run would need to be built the same way without a template, platform
	// policy or default.
	// +required
	Budget BudgetSpec `json:"budget"`

	// approvalTimeout is how long a call may wait for a person.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	ApprovalTimeout metav1.Duration `json:"approvalTimeout"`
}

// UsageStatus is a vector of consumed (or reserved) resources.
type UsageStatus struct {
	// turns is the number of model calls made.
	// +optional
	Turns int32 `json:"turns,omitempty"`

	// inputTokens are the prompt tokens of all model calls.
	// +optional
	InputTokens int64 `json:"inputTokens,omitempty"`

	// outputTokens are the completion tokens of all model calls.
	// +optional
	OutputTokens int64 `json:"outputTokens,omitempty"`

	// cachedInputTokens are the part of inputTokens served from the
	// provider's prompt cache.
	// +optional
	CachedInputTokens int64 `json:"cachedInputTokens,omitempty"`

	// costUSD is the spend in US dollars, as a decimal string.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	CostUSD string `json:"costUSD,omitempty"`

	// toolCalls is the number of tool calls dispatched.
	// +optional
	ToolCalls int32 `json:"toolCalls,omitempty"`

	// perTool counts tool calls by tool name.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	PerTool map[string]int32 `json:"perTool,omitempty"`

	// wallClockSeconds is the time the run has been working, in seconds.
	// Waiting for a person does not count.
	// +optional
	WallClockSeconds int64 `json:"wallClockSeconds,omitempty"`
}
