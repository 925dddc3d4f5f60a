package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CreatedByAnnotation holds the authenticated username of who created an
// AgentRun or an AgentSchedule. The API server writes it at creation
// (config/admission/approver-identity.yaml) and refuses any change to it
// afterwards; the operator copies a schedule's onto the runs it creates
// for it, and reads a run's to apply an AgentRunPolicy's
// approval.selfApproval.
const CreatedByAnnotation = "agents.agentrun.dev/created-by"

// AgentRunPolicy is the platform's rules for the AgentRuns of the
// namespaces it selects: the rules a run's author cannot relax. It is
// cluster-scoped, so only a cluster administrator writes it; the shipped
// roles (agentrun-editor, agentrun-approver, and admin, edit and view by
// aggregation) grant nothing on it.
//
// Where several policies select a namespace, each of them applies: a run
// must pass every one, the smallest maximum wins, the highest price wins,
// and the required rules of all of them are tried, in the order of the
// policies' names, before the run's own.
//
// The API server enforces it when a run is created or answered (the
// ValidatingAdmissionPolicy agentrun-platform, config/admission), and the
// operator again when it builds the run, for runs created before the
// policy or without the admission policies installed.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=agentrunpolicies,singular=agentrunpolicy,scope=Cluster,shortName=arp,categories=agents
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`,description="Whether the runs the policy selects are stopped"
// +kubebuilder:printcolumn:name="Self Approval",type=string,JSONPath=`.spec.approval.selfApproval`,description="Whether a run's author may answer its approvals"
// +kubebuilder:printcolumn:name="Required Rules",type=integer,JSONPath=`.spec.rules.length()`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentRunPolicy struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the platform's rules.
	// +required
	Spec AgentRunPolicySpec `json:"spec"`
}

// +kubebuilder:object:root=true

// AgentRunPolicyList is a list of AgentRunPolicies.
type AgentRunPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentRunPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentRunPolicy{}, &AgentRunPolicyList{})
}

// AgentRunPolicySpec is what a platform requires of the runs it selects.
// Every field is optional; an unset field requires nothing.
type AgentRunPolicySpec struct {
	// namespaceSelector picks the namespaces whose runs the policy governs,
	// by the namespaces' labels. Empty or unset: every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// models restricts where a shared API key may be sent: a model of a
	// run (model, or one of model.fallbacks) whose apiKeySecretRef names
	// one of these Secrets must use one of its providers, and a baseURL
	// among its baseURLs (or none: the provider's own endpoint). A run may
	// name such a Secret nowhere else: not in a tool's header or env, nor
	// in a caBundleRef. Secrets not listed are not restricted here.
	// +optional
	// +listType=map
	// +listMapKey=apiKeySecret
	// +kubebuilder:validation:MaxItems=64
	Models []ModelAllowance `json:"models,omitempty"`

	// pricing is the price list every run's cost is counted in, for its
	// own ceilings and every AgentBudget: a run's own model.pricing may
	// raise a price, never lower one. An entry named "*" prices the models
	// no other entry names.
	// +optional
	// +listType=map
	// +listMapKey=model
	// +kubebuilder:validation:MaxItems=256
	Pricing []ModelPrice `json:"pricing,omitempty"`

	// limits are the highest ceilings and timeouts a run may have. A run
	// that sets a higher one is refused at creation; a run that sets none
	// gets the maximum (the operator lowers, and never raises, what a run
	// created before the policy has).
	// +optional
	Limits *PlatformLimits `json:"limits,omitempty"`

	// rules are policy rules tried before the run's own policy.rules: the
	// first that matches decides, so a run cannot allow what they ask or
	// deny. In pendingApprovals[].rule and events they are named
	// AgentRunPolicy/<name>.rules[i] (or by their name).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Rules []PlatformRule `json:"rules,omitempty"`

	// readOnlyTools are the tools the platform counts as read-only, picked
	// by what a run's author cannot misstate: the tool's kind, its image,
	// its HTTP method and URL, its MCP server and what the server
	// annotates. When it is set, every tool of a governed run that no
	// entry matches is mutating, whatever its mutates says, so a rule with
	// mutating: true matches it; a tool an entry matches keeps its own
	// mutates (its author may still declare it mutating). Unset or empty:
	// a tool is what its mutates says.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	ReadOnlyTools []ReadOnlyTool `json:"readOnlyTools,omitempty"`

	// requireToolCosts: true refuses a run any of whose tools does not
	// declare maxCostUSD ("0" declares it): an undeclared tool's calls
	// count $0 against budget.maxCostUSD and every AgentBudget.
	// +optional
	RequireToolCosts bool `json:"requireToolCosts,omitempty"`

	// maxAgentDepth lowers the maxDepth of every agent tool of the runs
	// the policy governs (tools[].agent.maxDepth, default 3), so that no
	// tree of runs grows deeper. Unset: the tools' own.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	MaxAgentDepth *int32 `json:"maxAgentDepth,omitempty"`

	// maxAgentInFlight lowers the maxInFlight of every agent tool of the
	// runs the policy governs (tools[].agent.maxInFlight, default 4): how
	// many children a run may have in flight at once. Unset: the tools'
	// own.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	MaxAgentInFlight *int32 `json:"maxAgentInFlight,omitempty"`

	// escalationOwner owns the escalations of the runs the policy governs
	// that name no owner of their own (the label agents.agentrun.dev/owner,
	// or spec.escalation.owner of the run or its template). Where several
	// policies govern a namespace, the first by name that sets it applies.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	EscalationOwner string `json:"escalationOwner,omitempty"`

	// serviceAccountNames are the ServiceAccounts a run may act as
	// (spec.serviceAccountName; "default" when unset). Unset: any.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	ServiceAccountNames []string `json:"serviceAccountNames,omitempty"`

	// approval says who may answer the runs' approvals, beyond the verb
	// "approve" that the API server checks.
	// +optional
	Approval *PlatformApproval `json:"approval,omitempty"`

	// egress opens addresses to the requests the operator sends for the
	// runs of the selected namespaces (their model calls, HTTP tools and
	// MCP tools), on top of what the operator opens for every namespace
	// (--egress-allow-cidrs, --egress-allow-private). It never opens the
	// cloud metadata addresses nor the Kubernetes API server: only the
	// operator's own flags do. Where several policies select a namespace,
	// its runs may reach what any of them opens.
	// +optional
	Egress *PlatformEgress `json:"egress,omitempty"`

	// notify tells the notification webhook (docs/notifications.md) of
	// the ends of governed runs that no run asks for itself: a run that
	// ends with an outcome a rule lists, and that the rule's runSelector
	// and schedules pick, is told as if its own spec.notify named the
	// outcome (one Finished message, however many rules and policies name
	// it). Rules are read when a run ends and at every rescan of the
	// undelivered messages, and tell of the runs that end after the
	// policy was created, whenever they started.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Notify []NotifyRule `json:"notify,omitempty"`

	// memory says whether the runs may use spec.memory, and caps its
	// bounds.
	// +optional
	Memory *PlatformMemory `json:"memory,omitempty"`

	// suspend: true is the platform's kill switch, for an incident: every
	// run of the namespaces the policy selects stops at once, as
	// spec.cancel stops it, and ends ApprovalDenied with a reason that
	// names the policy; runs created while it is set end the same way.
	// (With no namespaceSelector it stops every run of the cluster.)
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// ModelAllowance is where runs may send one API-key Secret.
type ModelAllowance struct {
	// apiKeySecret is the name of the Secret (in the run's namespace) that
	// holds the shared key.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIKeySecret string `json:"apiKeySecret"`

	// providers are the providers the key may be used with.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	Providers []ModelProvider `json:"providers"`

	// baseURLs are the endpoints the key may be sent to besides the
	// provider's own (a run without model.baseURL), compared exactly,
	// without a trailing slash. With provider azure the endpoint is
	// model.azure.endpoint, which must be listed here.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=2048
	BaseURLs []string `json:"baseURLs,omitempty"`
}

// ModelPrice is the platform's price of one model, in US dollars per
// million tokens.
type ModelPrice struct {
	// model is the model's name as runs write it in model.name, or "*"
	// for every model no other entry names.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Model string `json:"model"`

	// input, output and cachedInput are the prices, as model.pricing
	// writes them.
	ModelPricing `json:",inline"`
}

// PlatformRule is a policy rule an AgentRunPolicy requires. Besides by
// name, it can pick its tools by what their executor is, which the run's
// author cannot misstate.
type PlatformRule struct {
	// tools, when, decision, reason, mutating and name are as in a run's
	// policy.rules.
	PolicyRule `json:",inline"`

	// match, when set, narrows the rule to the tools (among those tools
	// names) that one of these selectors matches: "every POST to the
	// billing API asks" holds whatever the run calls the tool.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Match []ToolSelector `json:"match,omitempty"`
}

// ToolKind is a tool's executor.
// +kubebuilder:validation:Enum=http;job;mcp;builtin;agent
type ToolKind string

// The tool kinds, one per executor of tools[].
const (
	ToolKindHTTP    ToolKind = "http"
	ToolKindJob     ToolKind = "job"
	ToolKindMCP     ToolKind = "mcp"
	ToolKindBuiltin ToolKind = "builtin"
	ToolKindAgent   ToolKind = "agent"
)

// ToolSelector picks a run's tools by their executor, which the run's
// author cannot misstate. Every field that is set must match, each by
// any of its entries; an empty selector matches every tool. A pattern
// (images, urls) is compared exactly, or, ending in "*", as a prefix.
type ToolSelector struct {
	// kinds are the executors: http, job, mcp or builtin.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=4
	Kinds []ToolKind `json:"kinds,omitempty"`

	// images are job tools' images, for example
	// registry.example.com/readers/*. Only job tools match a selector that
	// sets images.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	Images []string `json:"images,omitempty"`

	// methods are http tools' methods. Only http tools match a selector
	// that sets methods.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=5
	Methods []HTTPMethod `json:"methods,omitempty"`

	// urls are http tools' and MCP servers' URLs, for example
	// https://billing.example.com/v1/*. An http tool's url is a template,
	// compared before a call's arguments fill it in: end a prefix after
	// the host's "/" so that no argument chooses the host. Only http and
	// mcp tools match a selector that sets urls.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=2048
	URLs []string `json:"urls,omitempty"`
}

// ReadOnlyTool is tools the platform counts as read-only.
type ReadOnlyTool struct {
	// kinds, images, methods and urls pick the tools.
	ToolSelector `json:",inline"`

	// readOnlyHint: true counts an mcp tool as read-only only if its
	// server annotates it readOnlyHint: true. Servers send annotations
	// when a run starts, so the operator checks them then (a tool the
	// server does not annotate read-only is mutating); the admission
	// policy cannot see them. Only mcp tools match an entry that sets it.
	// +optional
	ReadOnlyHint bool `json:"readOnlyHint,omitempty"`
}

// PlatformEgress is what the operator's own requests for the runs of a
// policy's namespaces may reach although the operator refuses the kind of
// address (loopback, link-local, private, multicast, reserved).
type PlatformEgress struct {
	// allowCIDRs are CIDRs (10.96.0.0/12) or single addresses (192.0.2.7)
	// the requests may reach whatever the address's kind. The cloud
	// metadata addresses and the API server stay refused even when listed.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) || isIP(self)",message="egress.allowCIDRs entries must be a CIDR such as 10.96.0.0/12 or an IP address such as 192.0.2.7"
	AllowCIDRs []string `json:"allowCIDRs,omitempty"`

	// allowPrivate opens the private ranges (10.0.0.0/8, 172.16.0.0/12,
	// 192.168.0.0/16, 100.64.0.0/10, fc00::/7); the metadata addresses and
	// the API server in them stay refused.
	// +optional
	AllowPrivate bool `json:"allowPrivate,omitempty"`
}

// SelfApproval says whether a run's author may answer its approvals.
// +kubebuilder:validation:Enum=Allow;Deny
type SelfApproval string

// The self-approval settings.
const (
	SelfApprovalAllow SelfApproval = "Allow"
	SelfApprovalDeny  SelfApproval = "Deny"
)

// PlatformApproval is who may answer the approvals of governed runs.
type PlatformApproval struct {
	// selfApproval: Deny refuses an answer from the user who created the
	// run (the annotation agents.agentrun.dev/created-by; for a scheduled
	// run, who created the AgentSchedule) and, for a run created as a
	// ServiceAccount, from whoever may act as that ServiceAccount
	// (impersonate it or create its tokens). Defaults to Allow.
	// +optional
	// +kubebuilder:default=Allow
	SelfApproval SelfApproval `json:"selfApproval,omitempty"`

	// serviceAccounts are the ServiceAccounts that may answer (a bot that
	// relays a chat approval, say). A ServiceAccount not listed here is
	// refused even when it holds the verb "approve": every editor of its
	// namespace can act as it.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	ServiceAccounts []ServiceAccountRef `json:"serviceAccounts,omitempty"`
}

// ServiceAccountRef names a ServiceAccount.
type ServiceAccountRef struct {
	// namespace of the ServiceAccount.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// name of the ServiceAccount.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}
