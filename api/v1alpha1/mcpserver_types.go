package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MCPServer is a Model Context Protocol server, configured once for the
// runs of its namespace: where it is, the transport it speaks and how to
// authenticate. The operator lists its tools (tools/list) into status,
// again every refreshPeriod; a run's tool names it with
// mcp.serverRef instead of repeating its settings.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=mcpservers,singular=mcpserver,scope=Namespaced,shortName=mcps,categories=agents
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`
// +kubebuilder:printcolumn:name="Tools",type=integer,JSONPath=`.status.toolCount`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
type MCPServer struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is where the server is and how to reach it.
	// +required
	Spec MCPServerSpec `json:"spec"`

	// status is what the operator last learnt from the server.
	// +optional
	Status MCPServerStatus `json:"status,omitempty"`
}

// MCPServerList is a list of MCPServers.
//
// +kubebuilder:object:root=true
type MCPServerList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the MCPServers.
	Items []MCPServer `json:"items"`
}

func init() {
	SchemeBuilder.Register(&MCPServer{}, &MCPServerList{})
}

// MCPServerSpec is an MCP server's endpoint and connection settings.
type MCPServerSpec struct {
	// url is the server's MCP endpoint, for example
	// http://mcp-billing:8080/mcp (streamableHTTP) or
	// http://mcp-legacy:8080/sse (sse).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`self.startsWith('http://') || self.startsWith('https://')`,message="url must start with http:// or https://"
	URL string `json:"url"`

	// transport, headers, oauth and caBundleRef say how to reach the
	// server; the Secrets and ConfigMaps they name are in the MCPServer's
	// namespace.
	MCPConnection `json:",inline"`

	// includeTools names the server's tools that runs may use, and that
	// status lists; empty means all of them. A run whose tool names
	// another one does not start.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	IncludeTools []string `json:"includeTools,omitempty"`

	// refreshPeriod is how often the operator lists the server's tools
	// again. Defaults to 5m; at least 30s.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('30s') && duration(self) <= duration('24h')`,message="refreshPeriod must be a duration from 30s to 24h, such as 5m"
	RefreshPeriod *metav1.Duration `json:"refreshPeriod,omitempty"`

	// serviceAccountName is the ServiceAccount of the namespace as which
	// the operator reads the Secrets and ConfigMaps that headers, oauth
	// and caBundleRef name, to list the server's tools: naming a Secret
	// in an MCPServer is not enough to have it sent. A run that uses the
	// server reads them as its own spec.serviceAccountName. Defaults to
	// the namespace's default ServiceAccount.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// MCPServerStatus is what the operator last learnt from an MCP server.
type MCPServerStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Reachable, Authenticated and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// tools are the server's tools (those includeTools names, if it names
	// any), in the server's order, as of lastDiscoveryTime: at most
	// MaxMCPServerTools of them. They are kept when a later listing
	// fails, the conditions saying why.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Tools []MCPServerTool `json:"tools,omitempty"`

	// toolCount is how many tools the server offers (those includeTools
	// names, if it names any), even beyond those tools lists.
	// +optional
	ToolCount int32 `json:"toolCount,omitempty"`

	// lastDiscoveryTime is when the server's tools were last listed.
	// +optional
	LastDiscoveryTime *metav1.Time `json:"lastDiscoveryTime,omitempty"`
}

// MaxMCPServerTools bounds status.tools of an MCPServer, and
// MaxMCPToolDescription each tool's description (in bytes, cut at a
// character boundary with "…" appended).
const (
	MaxMCPServerTools     = 128
	MaxMCPToolDescription = 512
)

// MCPServerTool is one tool an MCP server offers.
type MCPServerTool struct {
	// name is the tool's name on the server (mcp.tool of a run's tool).
	// +required
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// description is the server's description of the tool, cut to
	// MaxMCPToolDescription bytes.
	// +optional
	// +kubebuilder:validation:MaxLength=520
	Description string `json:"description,omitempty"`

	// inputSchemaDigest is the SHA-256 of the tool's input schema as the
	// server sent it ("sha256:" and hex): it changes when the parameters
	// do.
	// +optional
	// +kubebuilder:validation:MaxLength=71
	InputSchemaDigest string `json:"inputSchemaDigest,omitempty"`

	// readOnlyHint is the server's readOnlyHint annotation; absent when
	// the server sent no annotations for the tool.
	// +optional
	ReadOnlyHint *bool `json:"readOnlyHint,omitempty"`

	// destructiveHint is the server's destructiveHint annotation as the
	// MCP specification reads it (true when absent on a tool that is not
	// read-only; false on one that is); absent when the server sent no
	// annotations for the tool. A run treats a destructive tool as
	// mutating and irreversible, whatever its manifest declares.
	// +optional
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
}

// The condition types of an MCPServer.
const (
	// MCPServerReachable is True when the server answered the last
	// listing of its tools (even to refuse its credentials), False when it
	// could not be reached or failed the MCP handshake, Unknown when it
	// was not contacted (its credentials could not be had).
	MCPServerReachable = "Reachable"
	// MCPServerAuthenticated is True when the server accepted the last
	// listing's credentials (or needed none), False when it or its OAuth
	// token endpoint refused them or they could not be read, Unknown when
	// the server was not reached.
	MCPServerAuthenticated = "Authenticated"
	// MCPServerReady sums the other two up for tools that judge an
	// object's health by its Ready condition (kstatus, Argo CD, Flux):
	// True when the last listing succeeded (Reachable and Authenticated
	// True), otherwise False with the reason and message of the condition
	// that says why (Reachable's when it is False or neither is,
	// Authenticated's when it is False).
	MCPServerReady = "Ready"
)

// The reasons of an MCPServer's conditions.
const (
	// ReasonMCPListed: the server listed its tools (Reachable and
	// Authenticated True).
	ReasonMCPListed = "Listed"
	// ReasonMCPUnreachable: the server could not be reached, or did not
	// complete the MCP handshake in time (Reachable False).
	ReasonMCPUnreachable = "Unreachable"
	// ReasonMCPCredentialsRefused: the server answered 401 or 403
	// (Reachable True, Authenticated False).
	ReasonMCPCredentialsRefused = "CredentialsRefused"
	// ReasonMCPTokenRefused: the OAuth token endpoint issued no token
	// (Authenticated False, Reachable Unknown).
	ReasonMCPTokenRefused = "TokenRefused"
	// ReasonMCPCredentialsUnavailable: a Secret or ConfigMap the spec
	// names could not be read as spec.serviceAccountName (Authenticated
	// False, Reachable Unknown).
	ReasonMCPCredentialsUnavailable = "CredentialsUnavailable"
	// ReasonMCPNotContacted: the other condition says why the server was
	// not contacted, or not reached (Unknown).
	ReasonMCPNotContacted = "NotContacted"
)
