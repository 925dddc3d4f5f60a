package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// AgentBudget is a spending limit shared by the AgentRuns of one namespace
// that its selector matches: "the runs of team-a may spend $100 a day".
// Every step a selected run admits against its own ceilings is also
// covered by a lease in every AgentBudget that selects it, taken with a
// compare-and-swap on this object's status, so that concurrent runs can
// never together pass a hard limit. A limit named in spec.soft only warns.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=agentbudgets,singular=agentbudget,scope=Namespaced,shortName=ab,categories=agents
// +kubebuilder:printcolumn:name="Max Cost",type=string,JSONPath=`.spec.maxCostUSD`,description="The most the selected runs may spend in one window, in US dollars"
// +kubebuilder:printcolumn:name="Consumed",type=string,JSONPath=`.status.consumedCostUSD`,description="US dollars spent in this window"
// +kubebuilder:printcolumn:name="Reserved",type=string,JSONPath=`.status.reservedCostUSD`,description="US dollars leased to running runs and not yet spent"
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.activeRuns`,description="Runs holding a lease"
// +kubebuilder:printcolumn:name="Window",type=string,JSONPath=`.spec.window`,description="How long one window lasts"
// +kubebuilder:printcolumn:name="Exhausted",type=string,JSONPath=`.status.conditions[?(@.type=="Exhausted")].status`,description="Whether a hard limit refused a run in this window"
// +kubebuilder:printcolumn:name="Window Start",type=date,JSONPath=`.status.windowStart`,priority=1,description="When the current window began"
// +kubebuilder:printcolumn:name="Max Tokens",type=integer,JSONPath=`.spec.maxTokens`,priority=1
// +kubebuilder:printcolumn:name="Consumed Tokens",type=integer,JSONPath=`.status.consumedTokens`,priority=1
// +kubebuilder:printcolumn:name="Reserved Tokens",type=integer,JSONPath=`.status.reservedTokens`,priority=1
type AgentBudget struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the runs may spend.
	// +required
	Spec AgentBudgetSpec `json:"spec"`

	// status is the ledger: what was spent and leased in the current window.
	// +optional
	Status AgentBudgetStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// AgentBudgetList is a list of AgentBudgets.
type AgentBudgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentBudget `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentBudget{}, &AgentBudgetList{})
}

// BudgetLimit names one limit of an AgentBudget.
// +kubebuilder:validation:Enum=maxCostUSD;maxTokens;maxConcurrentRuns
type BudgetLimit string

// The limits of an AgentBudget.
const (
	LimitCost       BudgetLimit = "maxCostUSD"
	LimitTokens     BudgetLimit = "maxTokens"
	LimitConcurrent BudgetLimit = "maxConcurrentRuns"
)

// MaxBudgetReservations bounds status.reservations: an AgentBudget leases
// to at most this many runs at once. A run that would be one more waits
// (Pending, with a reason) as if maxConcurrentRuns were full.
const MaxBudgetReservations = 256

// AgentBudgetSpec is the limits of an AgentBudget. At least one limit is
// set; an unset limit does not apply. A limit set to zero means zero.
//
// +kubebuilder:validation:XValidation:rule=`has(self.maxCostUSD) || has(self.maxTokens) || has(self.maxConcurrentRuns) || self.?suspend.orValue(false)`,message="an AgentBudget needs at least one limit: set maxCostUSD, maxTokens or maxConcurrentRuns (or suspend: true)"
// +kubebuilder:validation:XValidation:rule=`!has(self.perRun) || !has(self.perRun.maxCostUSD) || has(self.maxCostUSD)`,message="perRun.maxCostUSD caps a run's share of maxCostUSD, which is not set: set maxCostUSD, or remove perRun.maxCostUSD",fieldPath=`.perRun.maxCostUSD`
// +kubebuilder:validation:XValidation:rule=`!has(self.maxCostUSD) || double(self.?perRun.maxCostUSD.orValue('0')) <= double(self.maxCostUSD)`,messageExpression=`'perRun.maxCostUSD ' + self.perRun.maxCostUSD + ' is more than the budget\'s maxCostUSD ' + self.maxCostUSD + ': one run cannot hold more than the whole budget'`,fieldPath=`.perRun.maxCostUSD`
// +kubebuilder:validation:XValidation:rule=`!has(self.perRun) || !has(self.perRun.maxTokens) || has(self.maxTokens)`,message="perRun.maxTokens caps a run's share of maxTokens, which is not set: set maxTokens, or remove perRun.maxTokens",fieldPath=`.perRun.maxTokens`
// +kubebuilder:validation:XValidation:rule=`!has(self.perRun) || !has(self.perRun.maxTokens) || !has(self.maxTokens) || self.perRun.maxTokens <= self.maxTokens`,message="perRun.maxTokens is more than the budget's maxTokens: one run cannot hold more than the whole budget",fieldPath=`.perRun.maxTokens`
// +kubebuilder:validation:XValidation:rule=`!has(self.soft) || !('maxCostUSD' in self.soft) || has(self.maxCostUSD)`,message="soft names maxCostUSD, which is not set: set it, or remove it from soft",fieldPath=`.soft`
// +kubebuilder:validation:XValidation:rule=`!has(self.soft) || !('maxTokens' in self.soft) || has(self.maxTokens)`,message="soft names maxTokens, which is not set: set it, or remove it from soft",fieldPath=`.soft`
// +kubebuilder:validation:XValidation:rule=`!has(self.soft) || !('maxConcurrentRuns' in self.soft) || has(self.maxConcurrentRuns)`,message="soft names maxConcurrentRuns, which is not set: set it, or remove it from soft",fieldPath=`.soft`
type AgentBudgetSpec struct {
	// selector picks the runs of this namespace the budget covers, by
	// label. Empty or unset: every run of the namespace. A run picks up a
	// budget at its next admitted step, so a budget created mid-run covers
	// what the run spends from then on.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// window is how long one accounting window lasts. Windows are fixed
	// and back to back: the first starts when the budget is first
	// reconciled, and each next one starts exactly one window later, when
	// consumed spend goes back to zero. Defaults to 24h; at least 1m.
	// +optional
	// +kubebuilder:default="24h0m0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1m')`,message="window must be a duration of at least 1m, such as 24h or 168h"
	Window *metav1.Duration `json:"window,omitempty"`

	// maxCostUSD is the most the selected runs may spend together in one
	// window, in US dollars, counted as the runs count their own cost
	// (model calls and tools' declared costs).
	// +optional
	MaxCostUSD USD `json:"maxCostUSD,omitempty"`

	// maxTokens is the most input plus output tokens the selected runs may
	// use together in one window.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxTokens *int64 `json:"maxTokens,omitempty"`

	// maxConcurrentRuns is the most selected runs that may be active at
	// once. A run beyond it waits before its first turn (phase Pending,
	// with a reason that names this budget) instead of failing.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=256
	MaxConcurrentRuns *int32 `json:"maxConcurrentRuns,omitempty"`

	// perRun caps the share of this budget one run may hold at once: the
	// part of its lease it has not spent yet. A step whose reservation
	// (what it may spend at most) fits the budget's room but not the cap
	// is refused, whatever the run's own ceilings are: a run with
	// maxCostUSD "100" under a budget of "10" is admitted, and never holds
	// more than its cap of the budget, so that one run cannot reserve what
	// the others of the namespace need. Unset, and for each limit perRun
	// leaves unset: fraction of the limit, which defaults to 0.25 (a run
	// may hold at most a quarter of maxCostUSD and of maxTokens). The cap
	// applies to the hard limits; a soft one never refuses.
	// +optional
	PerRun *BudgetPerRun `json:"perRun,omitempty"`

	// suspend: true is the kill switch for the runs the budget selects.
	// Each stops at once, as spec.cancel stops it (a model call in flight
	// is abandoned and charged its reservation, running tool calls finish
	// and are recorded), and ends ApprovalDenied with a reason that names
	// the budget, including runs that hold a lease and runs that have not
	// started. Runs created while it is set end the same way. Setting it
	// back to false lets new runs start; stopped runs stay stopped.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// soft lists the limits that only warn: reaching 80% and 100% of one
	// records an event, the condition SoftLimitReached and the metric
	// agentrun_budget_soft_limit_reached_total, and stops nothing. The
	// limits not listed are hard: a step that would pass one is refused
	// before anything is spent.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	Soft []BudgetLimit `json:"soft,omitempty"`
}

// BudgetPerRun caps what one run may hold of an AgentBudget at once: the
// part of its lease it has not spent yet (leased minus spent). What a run
// has spent is not held: it counts in consumed, as every run's spend does.
type BudgetPerRun struct {
	// maxCostUSD is the most US dollars one run may hold at once. At most
	// the budget's maxCostUSD, which must be set.
	// +optional
	MaxCostUSD USD `json:"maxCostUSD,omitempty"`

	// maxTokens is the most tokens one run may hold at once. At most the
	// budget's maxTokens, which must be set.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxTokens *int64 `json:"maxTokens,omitempty"`

	// fraction is the cap of each limit maxCostUSD and maxTokens here leave
	// unset, as a share of the budget's own limit: a decimal string
	// greater than 0 and at most 1, such as "0.25" (the default) or "1" (a
	// run may hold the whole budget).
	// +optional
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0\\.[0-9]{1,6}|1(\\.0{1,6})?)$') && double(self) > 0.0`,message="perRun.fraction must be a decimal string greater than 0 and at most 1, such as \"0.25\" (at most 6 decimals)"
	Fraction string `json:"fraction,omitempty"`
}

// AgentBudgetStatus is the ledger of the current window. consumed is what
// the selected runs spent (as each last reported it); reserved is what is
// leased to running runs and not yet spent. A step is admitted only if
// consumed + reserved + what it needs more fits every hard limit.
type AgentBudgetStatus struct {
	// observedGeneration is the spec generation the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// windowStart is when the current window began.
	// +optional
	WindowStart *metav1.Time `json:"windowStart,omitempty"`

	// consumedCostUSD is what the selected runs spent in this window:
	// settledCostUSD plus what the runs holding a lease have spent.
	// +optional
	ConsumedCostUSD USD `json:"consumedCostUSD,omitempty"`
	// reservedCostUSD is leased to runs and not yet spent.
	// +optional
	ReservedCostUSD USD `json:"reservedCostUSD,omitempty"`
	// settledCostUSD is the spend of the leases already closed in this
	// window (runs that ended, or were deleted and charged in full).
	// +optional
	SettledCostUSD USD `json:"settledCostUSD,omitempty"`

	// consumedTokens is the tokens used in this window.
	// +optional
	ConsumedTokens int64 `json:"consumedTokens,omitempty"`
	// reservedTokens is the tokens leased to runs and not yet used.
	// +optional
	ReservedTokens int64 `json:"reservedTokens,omitempty"`
	// settledTokens is the tokens of the leases already closed in this
	// window.
	// +optional
	SettledTokens int64 `json:"settledTokens,omitempty"`

	// activeRuns is how many runs hold a lease.
	// +optional
	ActiveRuns int32 `json:"activeRuns,omitempty"`

	// reservations are the leases of the runs that hold one, by run UID.
	// Bounded: a run that would be the 257th waits.
	// +optional
	// +listType=map
	// +listMapKey=uid
	// +kubebuilder:validation:MaxItems=256
	Reservations []BudgetReservation `json:"reservations,omitempty"`

	// warned lists the soft thresholds already announced in this window,
	// such as "maxCostUSD/80", so that each is announced once.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	Warned []string `json:"warned,omitempty"`

	// conditions: Ready, Exhausted, SoftLimitReached.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BudgetReservation is one run's lease in an AgentBudget. Amounts count
// the current window only: leased includes spent, and what the run counts
// as its own total spend is runBase plus spent.
type BudgetReservation struct {
	// uid is the run's UID.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	UID types.UID `json:"uid"`
	// run is the run's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Run string `json:"run"`

	// leasedCostUSD is the allowance the run holds in this window, spent
	// part included. The run draws its steps from it without writing this
	// object, and asks for more only when a step needs it.
	// +optional
	LeasedCostUSD USD `json:"leasedCostUSD,omitempty"`
	// spentCostUSD is what the run spent in this window, as it last
	// reported (at its last lease, and when it ends).
	// +optional
	SpentCostUSD USD `json:"spentCostUSD,omitempty"`
	// runBaseCostUSD is the run's own spend (status.usage.costUSD) when its
	// lease in this window began.
	// +optional
	RunBaseCostUSD USD `json:"runBaseCostUSD,omitempty"`

	// leasedTokens, spentTokens and runBaseTokens are the same for tokens.
	// +optional
	LeasedTokens int64 `json:"leasedTokens,omitempty"`
	// +optional
	SpentTokens int64 `json:"spentTokens,omitempty"`
	// +optional
	RunBaseTokens int64 `json:"runBaseTokens,omitempty"`

	// holdFor is the longest one call of the run may take (its model
	// timeout, or its slowest tool's timeout and grace): a lease of a run
	// found deleted keeps counting this long, since spend may still arrive.
	// +optional
	HoldFor *metav1.Duration `json:"holdFor,omitempty"`
	// expiresAt is set when the run is found deleted: the lease counts
	// until then, and is then charged in full (what the run really spent
	// went with it) and closed.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
}

// AgentBudget condition types.
const (
	// BudgetConditionReady is True once the operator keeps the budget's
	// ledger.
	BudgetConditionReady = "Ready"
	// BudgetConditionExhausted is True when a hard limit refused a run in
	// the current window (reason Refused) or consumed spend reached a hard
	// limit (reason LimitReached); False otherwise. A new window resets it.
	BudgetConditionExhausted = "Exhausted"
	// BudgetConditionSoftLimitReached is True when a soft limit reached
	// 80% of its value in the current window.
	BudgetConditionSoftLimitReached = "SoftLimitReached"
)

// AgentBudget condition reasons and event reasons.
const (
	// ReasonBudgetActive: the ledger is kept (Ready=True).
	ReasonBudgetActive = "Active"
	// ReasonBudgetWithinLimits: no hard limit is reached (Exhausted=False).
	ReasonBudgetWithinLimits = "WithinLimits"
	// ReasonBudgetRefused: a step of a run was refused by a hard limit
	// (Exhausted=True; also the event). The event also records a step
	// refused by the run's share (spec.perRun) or for a model without a
	// price, which leave Exhausted alone: the budget has room.
	ReasonBudgetRefused = "Refused"
	// ReasonBudgetLimitReached: consumed spend reached a hard limit
	// (Exhausted=True), or a soft one reached 100% (SoftLimitReached).
	ReasonBudgetLimitReached = "LimitReached"
	// ReasonBudgetSoftWarning: a soft limit reached 80%
	// (SoftLimitReached=True; also the event).
	ReasonBudgetSoftWarning = "SoftLimitWarning"
	// ReasonBudgetBelowSoftLimits: no soft limit reached 80%
	// (SoftLimitReached=False).
	ReasonBudgetBelowSoftLimits = "BelowSoftLimits"
	// ReasonBudgetLeased: a run took its first lease (event).
	ReasonBudgetLeased = "Leased"
	// ReasonBudgetReturned: a run's lease was closed, its spend settled and
	// the rest returned (event).
	ReasonBudgetReturned = "Returned"
	// ReasonBudgetExpired: the lease of a deleted run expired and was
	// charged in full (event).
	ReasonBudgetExpired = "Expired"
	// ReasonBudgetWindowReset: a new window began (event).
	ReasonBudgetWindowReset = "WindowReset"
	// ReasonBudgetUnavailable: an AgentBudget covering a run could not be
	// read or written (an event on the run). A budget with a hard limit
	// starts nothing of the run until it can; a soft one lets it go on.
	ReasonBudgetUnavailable = "BudgetUnavailable"
	// ReasonWaitingForBudget: a run waits before its first turn because an
	// AgentBudget's maxConcurrentRuns is full (AgentRun condition
	// Succeeded=Unknown, phase Pending).
	ReasonWaitingForBudget = "WaitingForBudget"
)
