package kit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// With the operator's egress policy (Builder.Egress, as operator.Run sets
// it), a run's model calls, HTTP tools and MCP tools cannot reach a server
// on loopback: each fails with the policy's refusal, and nothing reaches
// the server. With 127.0.0.0/8 allowed they do, whether the operator
// allows it for every run or the run's grant (its namespace's
// AgentRunPolicies) for this one.
func TestBuild_egressPolicyCoversModelsHTTPAndMCPTools(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hello"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
			return
		}
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer srv.Close()
	ms := mcp.NewServer(&mcp.Implementation{Name: "billing", Version: "v1"}, nil)
	mcp.AddTool(ms, &mcp.Tool{Name: "lookup"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		requests.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	})
	msrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms }, nil))
	defer msrv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	mhost := strings.TrimPrefix(msrv.URL, "http://")

	manifest := func(tools string) string {
		return `
metadata: {name: r}
spec:
  goal: g
  model: {provider: openai, name: m, baseURL: '` + srv.URL + `/v1', apiKeySecretRef: {name: k, key: k}}
  budget: {maxTurns: 2}
  tools:
` + tools
	}
	httpTool := "  - name: web\n    http: {url: '" + srv.URL + "/lookup'}\n"
	mcpTool := "  - name: lookup\n    mcp: {url: '" + msrv.URL + "', tool: lookup}\n"
	builder := func(p *egress.Policy) *Builder {
		return &Builder{Egress: egress.NewClients(p),
			Secrets: func(context.Context, string, string, string) (string, error) { return "sk-test", nil }}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &loop.Request{Messages: []loop.Message{{Role: loop.RoleUser, Content: "hi"}}, MaxOutputTokens: 10}
	call := loop.Invocation{CallID: "c1", Tool: "web", Arguments: json.RawMessage(`{}`), Attempt: 1, Timeout: 10 * time.Second, MaxResultBytes: 1 << 10}

	// Refused: the model call and the HTTP tool call fail, the MCP tool
	// fails the build (its server is inspected first).
	refused := builder(&egress.Policy{})
	k, err := refused.Build(ctx, parse(t, manifest(httpTool)), egress.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	want := "egress to " + host + " refused: loopback address (the operator's egress policy; allow it with --egress-allow-cidrs, " +
		"or per namespace with an AgentRunPolicy's spec.egress.allowCIDRs)"
	if _, err := k.Model.Complete(ctx, req); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("model call: %v\nwant it to say %s", err, want)
	} else if te, ok := err.(loop.TransientError); !ok || te.Transient() {
		t.Errorf("a model call the policy refused is retried: %v", err)
	}
	if res := k.Tools.Execute(ctx, call); res.Failure == nil || res.Failure.Kind != loop.FailUnavailable || !strings.Contains(res.Failure.Detail, want) {
		t.Errorf("HTTP tool call: %+v\nwant Unavailable saying %s", res.Failure, want)
	}
	_, err = refused.Build(ctx, parse(t, manifest(mcpTool)), egress.Grant{})
	if mwant := "egress to " + mhost + " refused: loopback address"; !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), mwant) {
		t.Errorf("MCP tool: %v\nwant ErrUnavailable saying %s", err, mwant)
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests reached the servers", n)
	}

	// Allowed, by the operator for every run or by the run's grant.
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	for name, allowed := range map[string]func(run string) (*Kit, error){
		"the operator's policy": func(run string) (*Kit, error) {
			return builder(&egress.Policy{Allow: loopback}).Build(ctx, parse(t, run), egress.Grant{})
		},
		"the run's grant": func(run string) (*Kit, error) {
			return builder(&egress.Policy{}).Build(ctx, parse(t, run), egress.Grant{Allow: loopback})
		},
	} {
		k, err = allowed(manifest(httpTool + mcpTool))
		if err != nil {
			t.Fatalf("loopback allowed by %s: %v", name, err)
		}
		if reply, err := k.Model.Complete(ctx, req); err != nil || reply.Content != "hello" {
			t.Errorf("model call with loopback allowed by %s: %+v, %v", name, reply, err)
		}
		call.Tool, call.CallID = "web", "c1"
		if res := k.Tools.Execute(ctx, call); res.Failure != nil || string(res.Output) != `{"ok":true}` {
			t.Errorf("HTTP tool call with loopback allowed by %s: %q, %+v", name, res.Output, res.Failure)
		}
		call.Tool, call.CallID = "lookup", "c2"
		if res := k.Tools.Execute(ctx, call); res.Failure != nil || string(res.Output) != "ok" {
			t.Errorf("MCP tool call with loopback allowed by %s: %q, %+v", name, res.Output, res.Failure)
		}
	}
}
