package kit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
)

// servers is the MCPServers of a namespace, by name, for
// ResolveMCPServers.
func servers(list ...*v1alpha1.MCPServer) func(string) (*v1alpha1.MCPServer, error) {
	return func(name string) (*v1alpha1.MCPServer, error) {
		for _, s := range list {
			if s.Name == name {
				return s, nil
			}
		}
		return nil, nil
	}
}

func mcpServerAt(name, url string, include ...string) *v1alpha1.MCPServer {
	return &v1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1alpha1.MCPServerSpec{URL: url, IncludeTools: include,
			MCPConnection: v1alpha1.MCPConnection{Transport: v1alpha1.MCPSSE, Headers: []v1alpha1.HTTPHeader{{Name: "X-Tenant", Value: "a"}}}}}
}

// withTools is the manifest of a scripted run named r with tools, a YAML
// list indented under spec.tools.
func withTools(tools string) string {
	return `
metadata: {name: r}
spec:
  goal: g
  model: {provider: scripted, script: [{content: ok}]}
  budget: {maxTurns: 2}
  tools:` + tools
}

// An entry with mcp.tools becomes one tool per name, <entry>__<tool>,
// each with the server's settings and the entry's other settings, in the
// entry's place; the same spec expands to the same tools every time (a
// run built again after a restart has the same names).
func TestResolveMCPServers_expandsAnEntrysTools(t *testing.T) {
	run := parse(t, withTools(`
  - name: first
    http: {url: "http://billing/"}
  - name: ledger
    mcp: {serverRef: {name: ledger}, tools: [lookup_invoice, void_invoice], requireReadOnlyHint: true}
    maxCostUSD: "0.02"
    timeout: 5s
    mutates: true
  - name: last
    mcp: {serverRef: {name: ledger}, tool: lookup_invoice}
`))
	lookup := func() (*v1alpha1.AgentRun, error) {
		return ResolveMCPServers(run, servers(mcpServerAt("ledger", "http://ledger:8080/sse")))
	}
	got, err := lookup()
	if err != nil {
		t.Fatal(err)
	}
	conn := v1alpha1.MCPConnection{Transport: v1alpha1.MCPSSE, Headers: []v1alpha1.HTTPHeader{{Name: "X-Tenant", Value: "a"}}}
	expanded := func(name, tool string) v1alpha1.ToolSpec {
		return v1alpha1.ToolSpec{Name: name, MaxCostUSD: "0.02", Timeout: &metav1.Duration{Duration: 5 * time.Second}, Mutates: new(true),
			MCP: &v1alpha1.MCPTool{URL: "http://ledger:8080/sse", Tool: tool, Tools: []string{tool}, RequireReadOnlyHint: true, MCPConnection: conn}}
	}
	want := []v1alpha1.ToolSpec{
		{Name: "first", HTTP: &v1alpha1.HTTPTool{URL: "http://billing/"}},
		expanded("ledger__lookup_invoice", "lookup_invoice"),
		expanded("ledger__void_invoice", "void_invoice"),
		{Name: "last", MCP: &v1alpha1.MCPTool{URL: "http://ledger:8080/sse", Tool: "lookup_invoice", MCPConnection: conn}},
	}
	if d := cmp.Diff(want, got.Spec.Tools); d != "" {
		t.Errorf("tools (-want +got):\n%s", d)
	}
	if run.Spec.Tools[1].MCP.ServerRef == nil || len(run.Spec.Tools) != 3 {
		t.Errorf("the run itself was changed: %+v", run.Spec.Tools)
	}
	again, err := lookup()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(got.Spec.Tools, again.Spec.Tools); d != "" {
		t.Errorf("a second resolution differs (-first +second):\n%s", d)
	}
}

// A run whose mcp.tools cannot be expanded into usable tools does not
// start, and the refusal says why in words a person can act on.
func TestResolveMCPServers_refusesWhatCannotBeExpanded(t *testing.T) {
	const head = `
metadata: {name: r}
spec:
  goal: g
  model: {provider: scripted, script: [{content: ok}]}
`
	long := strings.Repeat("a", 60)
	for _, tc := range []struct {
		name, spec  string
		wantMissing bool
		want        string
	}{
		{name: "a tool includeTools leaves out", spec: `
  budget: {maxTurns: 2}
  tools:
  - name: ledger
    mcp: {serverRef: {name: narrow}, tools: [lookup_invoice, void_invoice]}
`, want: `tools[0] (ledger): MCPServer narrow does not include tool "void_invoice"; its includeTools are lookup_invoice`},
		{name: "a missing server", spec: `
  budget: {maxTurns: 2}
  tools:
  - name: ledger
    mcp: {serverRef: {name: nowhere}, tools: [lookup_invoice]}
`, wantMissing: true, want: `tools[0] (ledger): MCPServer "nowhere" does not exist in namespace default`},
		{name: "an expanded name too long", spec: `
  budget: {maxTurns: 2}
  tools:
  - name: ` + long + `
    mcp: {serverRef: {name: ledger}, tools: [lookup_invoice]}
`, want: `tools[0] (` + long + `): mcp.tools "lookup_invoice" makes the tool name ` + long + `__lookup_invoice, which model providers refuse: ` +
			`it is 76 characters long, and tool names have at most 64 (shorten the entry's name, or declare the tool in an entry of its own with mcp.tool)`},
		{name: "a server tool name with a dot", spec: `
  budget: {maxTurns: 2}
  tools:
  - name: ledger
    mcp: {serverRef: {name: ledger}, tools: [invoices.lookup]}
`, want: `tools[0] (ledger): mcp.tools "invoices.lookup" makes the tool name ledger__invoices.lookup, which model providers refuse: ` +
			`tool names use only letters, digits, _ and - (MCP tool names may contain dots, a run's tool names may not: declare the tool in an entry of its own with mcp.tool)`},
		{name: "an expanded name another tool has", spec: `
  budget: {maxTurns: 2}
  tools:
  - name: ledger__lookup_invoice
    http: {url: "http://billing/"}
  - name: ledger
    mcp: {serverRef: {name: ledger}, tools: [lookup_invoice]}
`, want: `tools: the tool name ledger__lookup_invoice is declared twice: as ledger__lookup_invoice and as ledger__lookup_invoice (from mcp.tools "lookup_invoice")`},
		{name: "a rule that names the entry", spec: `
  budget: {maxTurns: 2}
  tools:
  - name: ledger
    mcp: {serverRef: {name: ledger}, tools: [lookup_invoice, void_invoice]}
  policy:
    grants: [ledger]
`, want: `policy.grants names ledger, which is not a tool of the run; the entries with mcp.tools make the tools ledger__lookup_invoice, ledger__void_invoice`},
		{name: "a rule that names a tool not listed", spec: `
  budget: {maxTurns: 2, perTool: {ledger__void_invoice: 1}}
  tools:
  - name: ledger
    mcp: {serverRef: {name: ledger}, tools: [lookup_invoice]}
`, want: `budget.perTool names ledger__void_invoice, which is not a tool of the run; the entries with mcp.tools make the tools ledger__lookup_invoice`},
		{name: "a guardrail that names a tool not listed", spec: `
  budget: {maxTurns: 2}
  tools:
  - name: ledger
    mcp: {serverRef: {name: ledger}, tools: [lookup_invoice]}
  guardrails: [{name: g, tools: [ledger__void], pattern: x}]
`, want: `guardrails[0].tools names ledger__void, which is not a tool of the run`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ResolveMCPServers(parse(t, head+tc.spec),
				servers(mcpServerAt("ledger", "http://ledger:8080/sse"), mcpServerAt("narrow", "http://ledger:8080/sse", "lookup_invoice")))
			var refusal *MCPServerRefusal
			if !errors.As(err, &refusal) || refusal.Missing != tc.wantMissing || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ResolveMCPServers = %v (refusal %+v), want a refusal (missing %v) saying %q", err, refusal, tc.wantMissing, tc.want)
			}
		})
	}
}

// describedServer is an MCP server on loopback offering lookup_invoice,
// with a description and an input schema, and void_invoice, which it
// calls destructive.
func describedServer(t *testing.T) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "ledger", Version: "v1"}, nil)
	type lookupArgs struct {
		Invoice string `json:"invoice" jsonschema:"the invoice number"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "lookup_invoice", Description: "Looks an invoice up by its number.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, a lookupArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "invoice " + a.Invoice + ": paid"}}}, nil, nil
		})
	yes := true
	mcp.AddTool(s, &mcp.Tool{Name: "void_invoice", Description: "Voids an invoice.", Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "voided"}}}, nil, nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// A tool expanded from mcp.tools is shown to the model with the server's
// description and input schema, and its hints tighten as a single
// tool's; a listed tool the server does not offer is the manifest's
// mistake (not ErrUnavailable), saying what the server offers.
func TestBuild_listedToolsTakeTheServersDefinition(t *testing.T) {
	url := describedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	build := func(tools string) (*Kit, error) {
		run, err := ResolveMCPServers(parse(t, withTools(`
  - name: ledger
    mcp: {serverRef: {name: ledger}, tools: `+tools+`}
`)), servers(&v1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Name: "ledger"}, Spec: v1alpha1.MCPServerSpec{URL: url}}))
		if err != nil {
			t.Fatal(err)
		}
		return (&Builder{}).Build(ctx, run, egress.Grant{})
	}
	k, err := build(`[lookup_invoice, void_invoice]`)
	if err != nil {
		t.Fatal(err)
	}
	type def struct {
		Name, Description   string
		Mutates, Reversible bool
		Schema              map[string]any
	}
	var got []def
	for _, ts := range k.Engine.Config().Tools {
		d := def{Name: ts.Name, Description: ts.Description, Mutates: ts.Mutates, Reversible: ts.Reversible}
		if err := json.Unmarshal(ts.Parameters, &d.Schema); err != nil {
			t.Fatalf("%s parameters %s: %v", ts.Name, ts.Parameters, err)
		}
		got = append(got, d)
	}
	want := []def{
		{Name: "ledger__lookup_invoice", Description: "Looks an invoice up by its number.", Reversible: true, Schema: map[string]any{
			"type": "object", "required": []any{"invoice"}, "additionalProperties": false,
			"properties": map[string]any{"invoice": map[string]any{"type": "string", "description": "the invoice number"}}}},
		// Destructive on the server's word: mutating and irreversible.
		{Name: "ledger__void_invoice", Description: "Voids an invoice.", Mutates: true, Reversible: false, Schema: map[string]any{
			"type": "object", "additionalProperties": false}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the model's tools (-want +got):\n%s", d)
	}

	_, err = build(`[lookup_invoice, refund_invoice]`)
	wantErr := `tool ledger__refund_invoice: MCP server ` + url + ` does not offer tool "refund_invoice"; it offers: lookup_invoice, void_invoice`
	if err == nil || errors.Is(err, ErrUnavailable) || err.Error() != wantErr {
		t.Errorf("Build = %v (unavailable: %v), want a configuration error %q", err, errors.Is(err, ErrUnavailable), wantErr)
	}
}
