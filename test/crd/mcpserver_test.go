package crd_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
)

// mcpServer is an MCPServer manifest named name whose spec is spec (YAML
// indented two spaces).
func mcpServer(name, spec string) string { return manifest("MCPServer", name, spec) }

func TestMCPServer_validation(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		wantErr    []string
	}{
		{name: "a URL alone", spec: `
  url: http://mcp-billing:8080/mcp
`},
		{name: "every setting", spec: `
  url: https://mcp.example:8443/sse
  transport: sse
  headers: [{name: X-Tenant, value: northwind}, {name: X-Api-Key, valueFrom: {secretKeyRef: {name: mcp-key, key: key}}}]
  oauth: {clientSecretRef: {name: mcp-client}, tokenURL: https://auth.example/oauth2/token, scopes: [tools.read, tools.call]}
  caBundleRef: {configMapKeyRef: {name: internal-ca, key: ca.crt}}
  includeTools: [lookup_account, issue_refund]
  refreshPeriod: 10m
  serviceAccountName: billing-reader
`},
		{name: "not an http URL", spec: `
  url: ws://mcp-billing:8080/mcp
`, wantErr: []string{"url must start with http:// or https://"}},
		{name: "another transport", spec: `
  url: http://mcp-billing:8080/mcp
  transport: websocket
`, wantErr: []string{`spec.transport: Unsupported value: "websocket"`}},
		{name: "a refresh period too short", spec: `
  url: http://mcp-billing:8080/mcp
  refreshPeriod: 5s
`, wantErr: []string{"refreshPeriod must be a duration from 30s to 24h, such as 5m"}},
		{name: "oauth without a token URL", spec: `
  url: http://mcp-billing:8080/mcp
  oauth: {clientSecretRef: {name: mcp-client}}
`, wantErr: []string{"spec.oauth.tokenURL: Required value"}},
		{name: "an oauth token URL that is not http", spec: `
  url: http://mcp-billing:8080/mcp
  oauth: {clientSecretRef: {name: mcp-client}, tokenURL: "auth.example/token"}
`, wantErr: []string{"oauth.tokenURL must start with http:// or https://"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			expectCreate(testContext(t), t, mcpServer("crd-mcps-"+slug(tc.name), tc.spec), tc.wantErr)
		})
	}
}

// slug makes a test case's name an object name.
func slug(s string) string {
	out := []rune{}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			out = append(out, r)
		case r == ' ' && len(out) > 0 && out[len(out)-1] != '-':
			out = append(out, '-')
		}
	}
	return string(out)
}

func TestMCPServer_defaults(t *testing.T) {
	s := created(testContext(t), t, mcpServer("crd-mcps-defaults", `
  url: http://mcp-billing:8080/mcp
`), &agentsv1alpha1.MCPServer{})
	if s.Spec.RefreshPeriod == nil || s.Spec.RefreshPeriod.Duration != 5*time.Minute {
		t.Errorf("refreshPeriod = %v, want 5m", s.Spec.RefreshPeriod)
	}
}

// A run's mcp tool names its server one way: url with the settings
// inline, or serverRef and nothing else.
func TestMCPTool_urlOrServerRef(t *testing.T) {
	const run = namedRun + `  goal: Look an account up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    description: Looks an account up.
%s`
	expectCreates(t, run, "crd-mcp-ref", []specCase{
		{name: "url", spec: `    mcp: {url: "http://mcp-billing:8080/mcp", tool: lookup_account, transport: sse}
`},
		{name: "serverRef", spec: `    mcp: {serverRef: {name: billing}, tool: lookup_account, requireReadOnlyHint: true}
`},
		{name: "inline oauth", spec: `    mcp: {url: "http://mcp-billing:8080/mcp", tool: lookup_account, oauth: {clientSecretRef: {name: c}, tokenURL: "https://auth.example/token"}}
`},
		{name: "neither", spec: `    mcp: {tool: lookup_account}
`, wantErr: []string{"mcp names its server exactly one way: url (inline) or serverRef (an MCPServer)"}},
		{name: "both", spec: `    mcp: {url: "http://mcp-billing:8080/mcp", serverRef: {name: billing}, tool: lookup_account}
`, wantErr: []string{"mcp names its server exactly one way: url (inline) or serverRef (an MCPServer)"}},
		{name: "serverRef with headers", spec: `    mcp: {serverRef: {name: billing}, tool: lookup_account, headers: [{name: X-Tenant, value: a}]}
`, wantErr: []string{"mcp.serverRef uses the MCPServer's transport, headers, oauth and caBundleRef: set none of them on the tool"}},
		{name: "serverRef with a transport", spec: `    mcp: {serverRef: {name: billing}, tool: lookup_account, transport: sse}
`, wantErr: []string{"mcp.serverRef uses the MCPServer's transport, headers, oauth and caBundleRef: set none of them on the tool"}},
	})
}

// An mcp entry names one tool of its server (tool) or, with serverRef,
// several (tools), each then its own tool of the run: the rules that
// name tools may name the expanded names (which the run checks when it
// starts, once the names are known).
func TestMCPTool_toolOrTools(t *testing.T) {
	const run = namedRun + `  goal: Look an account up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
%s`
	expectCreates(t, run, "crd-mcp-tools", []specCase{
		{name: "tools of a serverRef", spec: `  tools:
  - name: billing
    mcp: {serverRef: {name: billing}, tools: [lookup_account, issue_refund], requireReadOnlyHint: true}
    maxCostUSD: "0.01"
`},
		{name: "rules name the expanded names", spec: `  tools:
  - name: billing
    mcp: {serverRef: {name: billing}, tools: [lookup_account, issue_refund]}
  policy:
    rules: [{tools: [billing__issue_refund], decision: ask}]
    grants: [billing__lookup_account]
  guardrails: [{name: no-card, tools: [billing__issue_refund], pattern: "4[0-9]{15}"}]
  verify: {tool: billing__lookup_account}
`},
		{name: "a rule naming an expanded name of no entry", spec: `  tools:
  - name: billing
    mcp: {serverRef: {name: billing}, tool: lookup_account}
  policy:
    grants: [billing__lookup_account]
`, wantErr: []string{"policy.grants names a tool that is neither declared in spec.tools nor made by an entry's mcp.tools (<entry>__<tool>)"}},
		{name: "tool and tools", spec: `  tools:
  - name: billing
    mcp: {serverRef: {name: billing}, tool: lookup_account, tools: [issue_refund]}
`, wantErr: []string{"mcp names the server's tools exactly one way: tool (one tool) or tools (several, each its own tool of the run)"}},
		{name: "neither tool nor tools", spec: `  tools:
  - name: billing
    mcp: {serverRef: {name: billing}}
`, wantErr: []string{"mcp names the server's tools exactly one way: tool (one tool) or tools (several, each its own tool of the run)"}},
		{name: "tools with url", spec: `  tools:
  - name: billing
    mcp: {url: "http://mcp-billing:8080/mcp", tools: [lookup_account]}
`, wantErr: []string{"mcp.tools needs serverRef: only an MCPServer's tools are known before the run starts; with url, declare one tool per entry (mcp.tool)"}},
		{name: "empty tools", spec: `  tools:
  - name: billing
    mcp: {serverRef: {name: billing}, tools: []}
`, wantErr: []string{"spec.tools[0].mcp.tools"}},
		{name: "tools with a description", spec: `  tools:
  - name: billing
    description: Billing.
    mcp: {serverRef: {name: billing}, tools: [lookup_account]}
`, wantErr: []string{"tool billing lists mcp.tools, which take their description and parameters from the server: set neither on the entry"}},
	})
}

// kubectl get mcps shows the URL, the tool count, whether the server is
// ready (its last listing succeeded) and the age; -o wide adds why. The resource is namespaced,
// with short name mcps, in category agents.
func TestMCPServer_kubectlColumns(t *testing.T) {
	ctx := testContext(t)
	list := groupResources(t)
	i := slices.IndexFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "mcpservers" })
	if i < 0 || !slices.Contains(list.APIResources[i].ShortNames, "mcps") || !list.APIResources[i].Namespaced ||
		!slices.Contains(list.APIResources[i].Categories, "agents") {
		t.Fatalf("mcpservers is not a namespaced resource with short name mcps in category agents: %+v", list.APIResources)
	}
	s := created(ctx, t, mcpServer("crd-mcps-columns", `
  url: http://mcp-billing:8080/mcp
`), &agentsv1alpha1.MCPServer{})
	s.Status = agentsv1alpha1.MCPServerStatus{ToolCount: 2, Tools: []agentsv1alpha1.MCPServerTool{{Name: "a"}, {Name: "b"}},
		Conditions: []metav1.Condition{{Type: agentsv1alpha1.MCPServerReachable, Status: metav1.ConditionTrue,
			Reason: agentsv1alpha1.ReasonMCPListed, Message: "listed 2 tools", LastTransitionTime: metav1.Now()},
			{Type: agentsv1alpha1.MCPServerReady, Status: metav1.ConditionFalse,
				Reason: agentsv1alpha1.ReasonMCPCredentialsRefused, Message: "the server refused the credentials", LastTransitionTime: metav1.Now()}}}
	if err := k8sClient.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	got := columns(ctx, t, "mcpservers", "crd-mcps-columns", 0)
	delete(got, "Name")
	delete(got, "Age")
	want := map[string]any{"URL": "http://mcp-billing:8080/mcp", "Tools": float64(2), "Ready": "False"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("kubectl get mcps columns (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]any{"Reason": "the server refused the credentials"}, columns(ctx, t, "mcpservers", "crd-mcps-columns", 1)); d != "" {
		t.Errorf("kubectl get mcps -o wide adds (-want +got):\n%s", d)
	}
}
