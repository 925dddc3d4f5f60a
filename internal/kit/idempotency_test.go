package kit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
)

// Every executor sends the key the engine made from the run's UID and the
// call id: the HTTP header, the MCP request's _meta and the environment of
// a job tool. Two runs that propose the same call ids send different keys.
func TestBuild_everyExecutorSendsTheRunsIdempotencyKey(t *testing.T) {
	var mu sync.Mutex
	var httpKeys, mcpKeys []string
	hsrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		httpKeys = append(httpKeys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer hsrv.Close()
	ms := mcp.NewServer(&mcp.Implementation{Name: "billing", Version: "v1"}, nil)
	mcp.AddTool(ms, &mcp.Tool{Name: "lookup"},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			mcpKeys = append(mcpKeys, fmt.Sprint(req.Params.Meta["agentrun.dev/idempotencyKey"]))
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
		})
	msrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms }, nil))
	defer msrv.Close()

	manifest := `
metadata: {name: r}
spec:
  goal: Look everything up.
  model:
    provider: scripted
    script:
    - toolCalls: [{name: web, arguments: {}}, {name: lookup, arguments: {}}, {name: shell, arguments: {}}]
    - content: done
  budget: {maxTurns: 3}
  tools:
  - name: web
    http: {url: ` + hsrv.URL + `}
  - name: lookup
    mcp: {url: ` + msrv.URL + `, tool: lookup}
  - name: shell
    job: {image: unused, command: [sh, -c, 'printf %s "$AGENTRUN_IDEMPOTENCY_KEY"']}
`
	var jobKeys []string
	for _, uid := range []types.UID{"0f8e2c4a-6b1d-4c55-9a7e-2b1f3c4d5e6f", "7d1e9b20-3c4f-4a8b-9e6d-5f2a1b0c9d8e"} {
		run := parse(t, manifest)
		run.UID = uid
		s := runLocally(t, run)
		if s.Outcome != loop.Completed {
			t.Fatalf("outcome %s: %s", s.Outcome, s.Reason)
		}
		for _, m := range s.Transcript {
			if m.Tool == "shell" {
				jobKeys = append(jobKeys, strings.TrimSpace(m.Content))
			}
		}
	}
	// Reads run concurrently: the call ids are t1-c1 (web), t1-c2 (lookup), t1-c3 (shell).
	a, b := "0f8e2c4a-6b1d-4c55-9a7e-2b1f3c4d5e6f", "7d1e9b20-3c4f-4a8b-9e6d-5f2a1b0c9d8e"
	for _, c := range []struct {
		what string
		got  []string
		id   string
	}{{"HTTP Idempotency-Key", httpKeys, "t1-c1"}, {"MCP _meta", mcpKeys, "t1-c2"}, {"AGENTRUN_IDEMPOTENCY_KEY", jobKeys, "t1-c3"}} {
		if diff := cmp.Diff([]string{a + "/" + c.id, b + "/" + c.id}, c.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.what, diff)
		}
	}
}
