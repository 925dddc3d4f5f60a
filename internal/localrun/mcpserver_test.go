package localrun

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// tenantLedger is an MCP server on loopback with two read-only tools,
// lookup_invoice and list_invoices, that refuses requests without the
// header X-Tenant: northwind; it records which tools were called.
func tenantLedger(t *testing.T) (url string, called func() []string) {
	t.Helper()
	var mu sync.Mutex
	var calls []string
	s := mcp.NewServer(&mcp.Implementation{Name: "ledger", Version: "v1"}, nil)
	for _, name := range []string{"lookup_invoice", "list_invoices"} {
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: "Reads invoices.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				mu.Lock()
				calls = append(calls, name)
				mu.Unlock()
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + " answered"}}}, nil, nil
			})
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Tenant") != "northwind" {
			http.Error(w, "which tenant?", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp", func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), calls...)
	}
}

// ledgerRun is a run whose entry ledger picks two tools of the MCPServer
// ledger, after the documents before it.
const ledgerRun = `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: ledger-run}
spec:
  goal: "Look the invoices up."
  model:
    provider: scripted
    script:
    - toolCalls: [{name: ledger__lookup_invoice, arguments: {}}, {name: ledger__list_invoices, arguments: {}}]
    - content: "Both answered."
  budget: {maxTurns: 3}
  tools:
  - name: ledger
    mcp: {serverRef: {name: ledger}, tools: [lookup_invoice, list_invoices]}
`

// An MCPServer document in the file is what a tool's serverRef names, as
// in a cluster: its url and headers are used (a header's Secret read from
// the file, as an inline tool's), and an entry's mcp.tools become tools
// the model calls by their expanded names. A Secret the file does not
// hold, or an MCPServer it does not hold, is refused before anything
// runs, as for an inline tool.
func TestRun_mcpServerDocumentResolvesServerRef(t *testing.T) {
	url, called := tenantLedger(t)
	server := fmt.Sprintf(`
apiVersion: agents.agentrun.dev/v1alpha1
kind: MCPServer
metadata: {name: ledger, namespace: billing}
spec:
  url: %s
  headers:
  - {name: X-Tenant, valueFrom: {secretKeyRef: {name: tenant, key: name}}}
---
`, url)
	const secret = `
apiVersion: v1
kind: Secret
metadata: {name: tenant}
stringData: {name: northwind}
---
`
	r := run(t, secret+server+ledgerRun, Options{})
	r.mustExit(t, 0)
	mustContain(t, "stdout", r.stdout, "ledger__lookup_invoice: ok", "lookup_invoice answered", "ledger__list_invoices: ok", "list_invoices answered")
	if got := strings.Join(called(), ","); got != "lookup_invoice,list_invoices" && got != "list_invoices,lookup_invoice" {
		t.Errorf("the server's tools called: %q, want each once", got)
	}

	for _, tc := range []struct {
		name, manifest, want string
	}{
		{"no Secret", server + ledgerRun,
			`tools[0] (ledger__lookup_invoice) header X-Tenant: no Secret "tenant" in the manifest file (add a v1 Secret document to the file)`},
		{"no MCPServer", secret + ledgerRun,
			`AgentRun "ledger-run": tools[0] (ledger): MCPServer "ledger" does not exist in namespace default: add it to the file as a document`},
		{"an invalid MCPServer", strings.Replace(server, "url: ", "url: ftp", 1) + ledgerRun, `url must start with http:// or https://`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.manifest, Options{})
			r.mustExit(t, 1)
			mustContain(t, "stderr", r.stderr, tc.want)
		})
	}
}
