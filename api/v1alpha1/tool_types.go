package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ToolSpec declares one tool the model may call: its schema for the model,
// the metadata that vetting and budgeting rely on, and exactly one executor
// (http, job, mcp, builtin or agent).
//
// +kubebuilder:validation:XValidation:rule=`has(self.http) || has(self.job) || has(self.mcp) || has(self.builtin) || has(self.agent)`,message="a tool needs an executor: set exactly one of http, job, mcp, builtin or agent",messageExpression=`'tool ' + self.name + ' has no executor: set exactly one of http, job, mcp, builtin or agent'`
// +kubebuilder:validation:XValidation:rule=`[has(self.http), has(self.job), has(self.mcp), has(self.builtin), has(self.agent)].filter(x, x).size() <= 1`,message="a tool has exactly one executor: set only one of http, job, mcp, builtin or agent",messageExpression=`'tool ' + self.name + ' sets more than one executor: set only one of http, job, mcp, builtin or agent'`
// +kubebuilder:validation:XValidation:rule=`!has(self.mcp) || !has(self.mcp.tools) || (!has(self.description) && !has(self.parameters))`,message="an mcp entry with tools takes each tool's description and parameters from its server: set neither",messageExpression=`'tool ' + self.name + ' lists mcp.tools, which take their description and parameters from the server: set neither on the entry'`
type ToolSpec struct {
	// name is how the model calls the tool: letters, digits, _ and -, at
	// most 64 characters, as model providers require. Unique within the run.
	// +required
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[a-zA-Z0-9_-]{1,64}$')`,message="tool names use only letters, digits, _ and -, 1 to 64 characters (model providers require it)"
	Name string `json:"name"`

	// description tells the model what the tool does and when to use it.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Description string `json:"description,omitempty"`

	// parameters is the JSON Schema of the tool's arguments, an object
	// schema. Calls whose arguments do not match it are refused and the
	// model is told why.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Parameters *runtime.RawExtension `json:"parameters,omitempty"`

	// mutates declares that the tool changes something outside the run.
	// It is declared here, never inferred from the tool's name. Defaults to
	// false, and to true for an agent tool.
	// +optional
	Mutates *bool `json:"mutates,omitempty"`

	// reversible declares that what the tool changes can be undone. A call
	// of a mutating, irreversible tool asks a person first unless
	// policy.grants names the tool. Defaults to true.
	// +optional
	// +kubebuilder:default=true
	Reversible *bool `json:"reversible,omitempty"`

	// maxCostUSD is the most one call may cost, in US dollars. It is
	// reserved against budget.maxCostUSD before the call is dispatched.
	// Unset, a call counts $0; unlike "0", unset is not a declaration, and
	// an AgentRunPolicy with requireToolCosts refuses a run whose tools
	// leave it out.
	// +optional
	MaxCostUSD USD `json:"maxCostUSD,omitempty"`

	// timeout bounds one call, enforced from outside the tool's process.
	// Defaults to 30s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="tool timeout must be a positive duration such as 30s or 5m"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// maxResultBytes cuts longer results; the cut is marked so the model
	// knows. Defaults to 16384; 0 is refused.
	// +optional
	// +kubebuilder:default=16384
	// +kubebuilder:validation:XValidation:rule=`self >= 1`,message="maxResultBytes must be at least 1"
	// +kubebuilder:validation:Maximum=262144
	MaxResultBytes *int32 `json:"maxResultBytes,omitempty"`

	// retry says how a call that failed transiently (the dependency could
	// not be reached or started, timed out, or answered HTTP 408, 429 or
	// 5xx) is tried again before the run ends ToolFailure. A mutating
	// tool's calls are tried once unless retry.mutatingSafe is true.
	// Defaults to 3 attempts, 1s initial and 30s maximum backoff.
	// +optional
	// +kubebuilder:default={}
	Retry *ToolRetry `json:"retry,omitempty"`

	// http calls an HTTP endpoint.
	// +optional
	HTTP *HTTPTool `json:"http,omitempty"`

	// job runs a container as a Kubernetes Job (or, where tools run as local
	// processes, its command and args on the operator's machine). The call's
	// arguments arrive as one JSON object on standard input and in
	// AGENTRUN_TOOL_ARGS, an idempotency key in AGENTRUN_IDEMPOTENCY_KEY;
	// standard output is the result, a non-zero exit a failed call.
	// +optional
	Job *JobTool `json:"job,omitempty"`

	// mcp calls one tool of a Model Context Protocol server, or, with
	// mcp.tools, makes one tool of each of several tools of an MCPServer.
	// +optional
	MCP *MCPTool `json:"mcp,omitempty"`

	// builtin is a tool the operator implements: kubernetes.get,
	// kubernetes.list or kubernetes.events, acting as
	// spec.serviceAccountName; memory.remember (always mutating,
	// whatever mutates says) or memory.recall, over spec.memory, which
	// they require; or person.ask, with which the agent asks a person a
	// question and waits for the answer.
	// +optional
	Builtin BuiltinTool `json:"builtin,omitempty"`

	// agent makes each call a child AgentRun from an AgentRunTemplate
	// (see AgentTool).
	// +optional
	Agent *AgentTool `json:"agent,omitempty"`
}

// ToolRetry bounds the retries of a tool call that failed transiently.
// Attempts are spaced by an exponential backoff (doubling from
// initialBackoff, capped at maxBackoff, with jitter of ±50% that never
// passes the cap), or by the dependency's Retry-After when that is longer.
// Every attempt is reserved against the budget (a tool call, the tool's
// maxCostUSD, the backoff and the tool's timeout on the wall clock) before
// it is made; only the first counts against the tool's perTool limit.
//
// +kubebuilder:validation:XValidation:rule=`!has(self.initialBackoff) || !has(self.maxBackoff) || duration(self.maxBackoff) >= duration(self.initialBackoff)`,message="retry.maxBackoff must not be shorter than retry.initialBackoff"
type ToolRetry struct {
	// maxAttempts is the number of attempts in all, the first included: 1
	// never retries. Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`

	// initialBackoff is the wait before the first retry. Defaults to 1s.
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s') && duration(self) <= duration('10m')`,message="retry.initialBackoff must be a positive duration of at most 10m, such as 1s"
	InitialBackoff *metav1.Duration `json:"initialBackoff,omitempty"`

	// maxBackoff caps the wait between two attempts (a longer Retry-After
	// is still honoured). Defaults to 30s.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s') && duration(self) <= duration('1h')`,message="retry.maxBackoff must be a positive duration of at most 1h, such as 30s"
	MaxBackoff *metav1.Duration `json:"maxBackoff,omitempty"`

	// mutatingSafe declares that the tool deduplicates by the idempotency
	// key every attempt of a call carries (AGENTRUN_IDEMPOTENCY_KEY, the
	// Idempotency-Key header, MCP _meta), so a mutating call may be retried.
	// Without it a call of a mutating tool is tried once, and a transient
	// failure ends the run ToolFailure. Defaults to false.
	// +optional
	MutatingSafe bool `json:"mutatingSafe,omitempty"`
}

// HTTPMethod is an HTTP request method.
// +kubebuilder:validation:Enum=GET;POST;PUT;PATCH;DELETE
type HTTPMethod string

// The HTTP methods an http tool can use.
const (
	HTTPGet    HTTPMethod = "GET"
	HTTPPost   HTTPMethod = "POST"
	HTTPPut    HTTPMethod = "PUT"
	HTTPPatch  HTTPMethod = "PATCH"
	HTTPDelete HTTPMethod = "DELETE"
)

// HTTPTool calls an HTTP endpoint. The url and body are templates over the
// call's arguments ({{.email}}); the response body is the result.
type HTTPTool struct {
	// url is the endpoint, a template over the call's arguments, for example
	// http://billing.default.svc/accounts?email={{.email}}.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`self.startsWith('http://') || self.startsWith('https://')`,message="http.url must start with http:// or https://"
	URL string `json:"url"`

	// method is the HTTP method. Defaults to GET.
	// +optional
	// +kubebuilder:default=GET
	Method HTTPMethod `json:"method,omitempty"`

	// headers are sent with every request; values can come from Secrets.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Headers []HTTPHeader `json:"headers,omitempty"`

	// body is the request body, a template over the call's arguments.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Body string `json:"body,omitempty"`

	// caBundleRef names PEM certificates of the certificate authorities
	// that may sign the endpoint's certificate, trusted besides the
	// system's roots. It is read when the run starts.
	// +optional
	CABundleRef *CABundleRef `json:"caBundleRef,omitempty"`
}

// HTTPHeader is one request header, with its value given inline or read
// from a Secret.
//
// +kubebuilder:validation:XValidation:rule=`!(has(self.value) && has(self.valueFrom))`,message="a header sets value or valueFrom, not both"
type HTTPHeader struct {
	// name is the header name, for example Authorization.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// value is the header value. Use valueFrom for credentials.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	Value string `json:"value,omitempty"`

	// valueFrom reads the header value from a Secret. The value is never
	// echoed in status, events or logs.
	// +optional
	ValueFrom *HeaderValueSource `json:"valueFrom,omitempty"`
}

// HeaderValueSource is where a header value comes from.
type HeaderValueSource struct {
	// secretKeyRef names a key of a Secret in the AgentRun's namespace.
	// +required
	SecretKeyRef SecretKeySelector `json:"secretKeyRef"`
}

// JobTool runs a container once per call.
//
// +kubebuilder:validation:XValidation:rule=`!has(self.resources) || !has(self.pod) || !has(self.pod.resources)`,message="set job.resources or job.pod.resources, not both"
type JobTool struct {
	// image is the container image. Not used where tools run as local
	// processes.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image"`

	// command is the program to run and its first arguments. It is
	// required: AgentRun runs it under a small entrypoint of its own (which
	// feeds the arguments on standard input and reports the result), and
	// that entrypoint cannot read the image's own ENTRYPOINT.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	Command []string `json:"command"`

	// args are the arguments of the entrypoint.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	Args []string `json:"args,omitempty"`

	// env are environment variables set in the container, besides
	// AGENTRUN_TOOL_ARGS and AGENTRUN_IDEMPOTENCY_KEY.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Env []EnvVar `json:"env,omitempty"`

	// resources are the container's compute resource requests and limits.
	// What is not set takes the operator's defaults (--tool-default-requests,
	// --tool-default-limits), and no request or limit may exceed the
	// operator's caps (--tool-max-resources): a tool that asks for more is
	// refused, and the run ends Error with a reason naming the resource.
	// pod.resources is the same field; set one of them.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// pod places the tool's pod (node selector, tolerations, runtime
	// class) and adds labels and annotations to it. Everything else of
	// the pod is the operator's: its security context, volumes and
	// service account.
	// +optional
	Pod *JobPod `json:"pod,omitempty"`

	// egress lists where the tool's pod may connect. The operator puts every
	// tool pod under a NetworkPolicy that denies all ingress and all egress
	// but DNS to kube-dns and these destinations; an empty list means no
	// network at all besides DNS. NetworkPolicy matches addresses, not
	// names: list the CIDRs of the services the tool calls. It is enforced
	// only where the cluster's network plugin enforces NetworkPolicy.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Egress []EgressRule `json:"egress,omitempty"`

	// automountServiceAccountToken mounts the ServiceAccount's API token in
	// the tool's pod. Defaults to false: a tool gets no Kubernetes
	// credentials unless it asks for them.
	// +optional
	// +kubebuilder:default=false
	AutomountServiceAccountToken *bool `json:"automountServiceAccountToken,omitempty"`
}

// EgressRule allows a job tool's pod to connect to an IP block.
type EgressRule struct {
	// cidr is the destination block, such as 10.96.0.0/12 or 203.0.113.7/32
	// (IPv4 or IPv6).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="cidr must be an IP block such as 10.0.0.0/8 or 203.0.113.7/32"
	CIDR string `json:"cidr"`

	// ports limits the rule to these ports; empty means every port.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Ports []EgressPort `json:"ports,omitempty"`
}

// EgressPort is one destination port of an egress rule.
type EgressPort struct {
	// port is the destination port.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// protocol is TCP (the default), UDP or SCTP.
	// +optional
	// +kubebuilder:default=TCP
	// +kubebuilder:validation:Enum=TCP;UDP;SCTP
	Protocol corev1.Protocol `json:"protocol,omitempty"`
}

// EnvVar is one environment variable of a job tool.
//
// +kubebuilder:validation:XValidation:rule=`!(has(self.value) && has(self.valueFrom))`,message="an env var sets value or valueFrom, not both"
type EnvVar struct {
	// name is the variable's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule=`!self.startsWith('AGENTRUN_')`,message="env names starting with AGENTRUN_ are reserved for the tool process contract"
	Name string `json:"name"`

	// value is the variable's value. Use valueFrom for credentials.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Value string `json:"value,omitempty"`

	// valueFrom reads the value from a Secret in the run's namespace.
	// The Job's pod names the Secret (a secretKeyRef in its container's
	// env) and the kubelet reads it when the pod starts: the value never
	// passes through the operator and is never in the run's status or
	// events. The run starts only if spec.serviceAccountName may get the
	// Secret.
	// +optional
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty"`
}

// EnvVarSource is where an environment variable's value comes from.
type EnvVarSource struct {
	// secretKeyRef names a key of a Secret in the AgentRun's namespace.
	// +required
	SecretKeyRef SecretKeySelector `json:"secretKeyRef"`
}

// JobPod is what a manifest may set of a job tool's pod. The operator's
// caps and its restricted security context still apply.
//
// +kubebuilder:validation:XValidation:rule=`!has(self.labels) || self.labels.all(k, !k.contains('agentrun.dev/') && k != 'app.kubernetes.io/managed-by')`,message="pod.labels may not use the agentrun.dev prefixes or app.kubernetes.io/managed-by: the operator sets those"
// +kubebuilder:validation:XValidation:rule=`!has(self.annotations) || self.annotations.all(k, !k.contains('agentrun.dev/') && !k.contains('security.alpha.kubernetes.io/') && !k.contains('security.beta.kubernetes.io/'))`,message="pod.annotations may not use the agentrun.dev prefixes (the operator sets those) nor the AppArmor and seccomp annotations (the operator's security context decides those)"
type JobPod struct {
	// nodeSelector must match a node's labels for the pod to run there.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations let the pod run on nodes with these taints.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// labels are added to the pod (not the Job). Keys under the
	// operator's prefixes (agents.agentrun.dev/ and the like) and
	// app.kubernetes.io/managed-by are refused: the operator finds and
	// confines its pods by them.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Labels map[string]string `json:"labels,omitempty"`

	// annotations are added to the pod (not the Job). Keys under the
	// operator's prefixes are refused, and so are the AppArmor and seccomp
	// annotations (*.security.alpha/beta.kubernetes.io/): the pod's
	// security is the operator's restricted context.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Annotations map[string]string `json:"annotations,omitempty"`

	// resources are the tool container's requests and limits, within the
	// operator's caps (see job.resources, the same field).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// runtimeClassName runs the pod under this RuntimeClass (gVisor, Kata)
	// where the cluster offers one.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')`,message="runtimeClassName must be a DNS subdomain such as gvisor"
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`
}

// MCPTool calls one tool of a Model Context Protocol server: one named by
// url with the connection settings given here (inline), or an MCPServer
// of the run's namespace named by serverRef, whose settings are used.
// With serverRef, tools picks several of the server's tools in one entry.
//
// +kubebuilder:validation:XValidation:rule=`has(self.url) != has(self.serverRef)`,message="mcp names its server exactly one way: url (inline) or serverRef (an MCPServer)"
// +kubebuilder:validation:XValidation:rule=`!has(self.serverRef) || (!has(self.transport) && !has(self.headers) && !has(self.oauth) && !has(self.caBundleRef))`,message="mcp.serverRef uses the MCPServer's transport, headers, oauth and caBundleRef: set none of them on the tool"
// +kubebuilder:validation:XValidation:rule=`has(self.tool) != has(self.tools)`,message="mcp names the server's tools exactly one way: tool (one tool) or tools (several, each its own tool of the run)"
// +kubebuilder:validation:XValidation:rule=`!has(self.tools) || has(self.serverRef)`,message="mcp.tools needs serverRef: only an MCPServer's tools are known before the run starts; with url, declare one tool per entry (mcp.tool)"
type MCPTool struct {
	// url is the server's MCP endpoint, for example http://mcp-billing:8080/mcp.
	// Exactly one of url and serverRef is set.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`self.startsWith('http://') || self.startsWith('https://')`,message="mcp.url must start with http:// or https://"
	URL string `json:"url,omitempty"`

	// serverRef names an MCPServer of the run's namespace: its url,
	// transport, headers, oauth and caBundleRef are used, read when the
	// run's tools are built (when it starts, and again after an operator
	// restart). Exactly one of url and serverRef is set.
	// +optional
	ServerRef *MCPServerRef `json:"serverRef,omitempty"`

	// tool is the tool's name on the server; the model sees spec.tools[].name.
	// Exactly one of tool and tools is set.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Tool string `json:"tool,omitempty"`

	// tools names several tools of the serverRef's MCPServer. The entry
	// becomes one tool of the run per name, called
	// <spec.tools[].name>__<the tool's name on the server> (as Claude's
	// SDK names MCP tools), with the server's description and input
	// schema, listed when the run starts, and the entry's other settings
	// (mutates, reversible, maxCostUSD, timeout, retry,
	// requireReadOnlyHint...). Rules that name tools (policy.rules,
	// policy.grants, guardrails, budget.perTool, verify.tool) name these
	// expanded names. A name the server does not offer (or its
	// includeTools leave out), or an expanded name that is not a valid
	// tool name or is another tool's, fails the start. Exactly one of
	// tool and tools is set; tools needs serverRef.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	Tools []string `json:"tools,omitempty"`

	// requireReadOnlyHint: true treats the tool as mutating unless its
	// server annotates it readOnlyHint: true when the run starts (the
	// annotations are read then, not at creation). It can only tighten
	// what mutates declares. An AgentRunPolicy whose readOnlyTools call
	// the tool read-only on its server's word sets it on the runs it
	// governs.
	// +optional
	RequireReadOnlyHint bool `json:"requireReadOnlyHint,omitempty"`

	// transport, headers, oauth and caBundleRef say how to reach the
	// server named by url; with serverRef, the MCPServer's are used.
	MCPConnection `json:",inline"`
}

// MCPServerRef names an MCPServer in the run's namespace.
type MCPServerRef struct {
	// name is the MCPServer's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// MCPTransport is the transport an MCP server speaks.
// +kubebuilder:validation:Enum=streamableHTTP;sse
type MCPTransport string

const (
	// MCPStreamableHTTP is the streamable HTTP transport (MCP 2025-03-26
	// and later): every message is a POST to the endpoint.
	MCPStreamableHTTP MCPTransport = "streamableHTTP"
	// MCPSSE is the older HTTP+SSE transport (MCP 2024-11-05): a GET to the
	// endpoint opens an event stream on which every answer comes back.
	MCPSSE MCPTransport = "sse"
)

// MCPConnection is how to reach an MCP server besides its URL.
type MCPConnection struct {
	// transport is the MCP transport the server speaks: streamableHTTP
	// (the default) or sse, for servers that speak only the older
	// HTTP+SSE transport.
	// +optional
	Transport MCPTransport `json:"transport,omitempty"`

	// headers are sent with every request; values can come from Secrets.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Headers []HTTPHeader `json:"headers,omitempty"`

	// oauth authenticates every request with an OAuth 2 access token
	// obtained with the client credentials grant.
	// +optional
	OAuth *OAuthClientCredentials `json:"oauth,omitempty"`

	// caBundleRef names PEM certificates of the certificate authorities
	// that may sign the server's certificate (and the token endpoint's),
	// trusted besides the system's roots. It is read when the run starts.
	// +optional
	CABundleRef *CABundleRef `json:"caBundleRef,omitempty"`
}

// OAuthClientCredentials is an OAuth 2 client that obtains access tokens
// with the client credentials grant (RFC 6749 section 4.4). The token is
// sent as a bearer token, kept until shortly before it expires, and never
// shown in status, events or logs; the client secret neither.
type OAuthClientCredentials struct {
	// clientSecretRef names a Secret in the namespace whose keys clientID
	// and clientSecret are the client's credentials.
	// +required
	ClientSecretRef OAuthSecretRef `json:"clientSecretRef"`

	// tokenURL is the authorization server's token endpoint.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`self.startsWith('http://') || self.startsWith('https://')`,message="oauth.tokenURL must start with http:// or https://"
	TokenURL string `json:"tokenURL"`

	// scopes are the scopes the token is requested for.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=256
	Scopes []string `json:"scopes,omitempty"`
}

// OAuthSecretRef names a Secret holding an OAuth client's credentials.
type OAuthSecretRef struct {
	// name is the Secret's name. Its keys clientID and clientSecret are
	// read.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// The keys of an OAuth client's Secret (oauth.clientSecretRef).
const (
	OAuthClientIDKey     = "clientID"
	OAuthClientSecretKey = "clientSecret"
)

// CABundleRef names a key holding one or more PEM certificates (a CA
// bundle), in a ConfigMap or a Secret of the AgentRun's namespace. A CA
// bundle is public, so a ConfigMap is the natural home (it is where
// cert-manager's trust-manager and OpenShift's CA injection put one); a
// Secret is accepted for bundles that are already kept in one. Exactly
// one of the two is set.
//
// +kubebuilder:validation:XValidation:rule=`has(self.configMapKeyRef) != has(self.secretKeyRef)`,message="caBundleRef names exactly one of configMapKeyRef or secretKeyRef"
type CABundleRef struct {
	// configMapKeyRef names a key of a ConfigMap in the AgentRun's
	// namespace.
	// +optional
	ConfigMapKeyRef *ConfigMapKeySelector `json:"configMapKeyRef,omitempty"`

	// secretKeyRef names a key of a Secret in the AgentRun's namespace.
	// +optional
	SecretKeyRef *SecretKeySelector `json:"secretKeyRef,omitempty"`
}

// ConfigMapKeySelector names one key of a ConfigMap in the AgentRun's
// namespace.
type ConfigMapKeySelector struct {
	// name is the name of the ConfigMap.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key is the key within the ConfigMap's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// BuiltinTool names a tool the operator implements.
// +kubebuilder:validation:Enum=kubernetes.get;kubernetes.list;kubernetes.events;memory.remember;memory.recall;person.ask
type BuiltinTool string

// The builtin tools. They impersonate spec.serviceAccountName, so they can
// read only what that ServiceAccount may read.
const (
	// BuiltinKubernetesGet reads one object.
	BuiltinKubernetesGet BuiltinTool = "kubernetes.get"
	// BuiltinKubernetesList lists objects of a kind.
	BuiltinKubernetesList BuiltinTool = "kubernetes.list"
	// BuiltinKubernetesEvents lists the events about an object.
	BuiltinKubernetesEvents BuiltinTool = "kubernetes.events"
	// BuiltinAskPerson asks a person a question, arguments {question,
	// choices?}: the run waits as for an approval (AwaitingApproval, the
	// call in status.pendingApprovals with its question, counted against
	// approvalTimeout) until a person answers (answer::TEXT in the
	// approval annotation), and the answer is the call's result. It reads
	// and changes nothing.
	BuiltinAskPerson BuiltinTool = "person.ask"
)

// The memory tools, over spec.memory.
const (
	// BuiltinMemoryRemember writes an entry: arguments {key?, text}; an
	// entry with the same key is replaced.
	BuiltinMemoryRemember BuiltinTool = "memory.remember"
	// BuiltinMemoryRecall finds the entries that best match a query:
	// arguments {query}.
	BuiltinMemoryRecall BuiltinTool = "memory.recall"
)
