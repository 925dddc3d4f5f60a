package mcptool

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrun/agentrun/internal/loop"
)

type lookupIn struct {
	Email string `json:"email"`
}

type refundIn struct {
	AmountMinor int `json:"amount_minor"`
}

// billingServer is an MCP server on httptest, speaking streamable HTTP,
// with a few tools that exercise the executor.
func billingServer(t *testing.T) *httptest.Server {
	t.Helper()
	return billingServerWith(t, nil)
}

// billingServerWith is billingServer with see called on every request.
func billingServerWith(t *testing.T, see func(*http.Request)) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	s := mcp.NewServer(&mcp.Implementation{Name: "billing", Version: "v0.0.1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "lookup_account", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest, in lookupIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "acct_42 belongs to " + in.Email},
				&mcp.TextContent{Text: fmt.Sprintf("key=%v", req.Params.Meta[MetaIdempotencyKey])},
			}}, nil, nil
		})
	yes := true
	mcp.AddTool(s, &mcp.Tool{Name: "issue_refund", Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}},
		func(_ context.Context, _ *mcp.CallToolRequest, in refundIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{
				&mcp.TextContent{Text: fmt.Sprintf("refund of %d exceeds the limit", in.AmountMinor)},
			}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "export"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("z", 100<<10)}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "stats"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, map[string]int, error) {
			return &mcp.CallToolResult{}, map[string]int{"invoices": 3}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			select {
			case <-ctx.Done():
			case <-release:
			}
			return &mcp.CallToolResult{}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if see != nil {
			see(r)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv
}

// closedAddress returns a loopback address where nothing listens.
func closedAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func executor(t *testing.T, endpoint, tool string, opts ...Option) *Executor {
	t.Helper()
	e, err := New(endpoint, tool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func call(args string) loop.Invocation {
	return loop.Invocation{CallID: "t2-c1", Tool: "x", Arguments: json.RawMessage(args),
		IdempotencyKey: "uid/t2-c1", Timeout: 10 * time.Second, MaxResultBytes: 4096}
}

func TestPreflight_findsTheToolAndRecordsItsHints(t *testing.T) {
	srv := billingServer(t)
	for _, tc := range []struct {
		tool string
		want Hints
	}{
		{tool: "lookup_account", want: Hints{Annotated: true, ReadOnly: true}},
		{tool: "issue_refund", want: Hints{Annotated: true, Destructive: true}},
		{tool: "export", want: Hints{}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			e := executor(t, srv.URL, tc.tool)
			if _, ok := e.Hints(); ok {
				t.Error("Hints reported ok before any preflight")
			}
			if err := e.Preflight(context.Background()); err != nil {
				t.Fatalf("Preflight: %v", err)
			}
			got, ok := e.Hints()
			if !ok {
				t.Fatal("Hints not recorded by Preflight")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Hints (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPreflight_failsForAToolTheServerDoesNotOffer(t *testing.T) {
	srv := billingServer(t)
	err := executor(t, srv.URL, "close_account").Preflight(context.Background())
	want := fmt.Sprintf(`MCP server %s does not offer tool "close_account"; `+
		`it offers: export, issue_refund, lookup_account, slow, stats`, srv.URL)
	if err == nil || err.Error() != want {
		t.Errorf("Preflight = %v\nwant %s", err, want)
	}
}

func TestPreflight_failsForAnUnreachableServer(t *testing.T) {
	endpoint := "http://" + closedAddress(t) + "/mcp"
	start := time.Now()
	err := executor(t, endpoint, "lookup_account").Preflight(context.Background())
	want := "MCP server " + endpoint + " is unreachable: connection refused"
	if err == nil || err.Error() != want {
		t.Errorf("Preflight = %v\nwant %s", err, want)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Preflight took %s to find a refused connection", took)
	}
}

// A server whose certificate the client does not trust (a private CA the
// run did not name) is unreachable for that reason, not for a bare
// "rejected by transport"; with the CA in the transport's roots it is
// reached.
func TestPreflight_saysWhenTheServersCertificateIsNotTrusted(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "billing", Version: "v0.0.1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "lookup_account"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	srv := httptest.NewUnstartedServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake fails on purpose
	srv.StartTLS()
	defer srv.Close()
	endpoint := srv.URL + "/mcp"
	err := executor(t, endpoint, "lookup_account").Preflight(context.Background())
	want := "MCP server " + endpoint + " is unreachable: tls: failed to verify certificate: x509: certificate signed by unknown authority"
	if err == nil || err.Error() != want {
		t.Errorf("Preflight = %v\nwant %s", err, want)
	}
	if err := executor(t, endpoint, "lookup_account", WithTransport(srv.Client().Transport)).Preflight(context.Background()); err != nil {
		t.Errorf("Preflight trusting the server's certificate = %v", err)
	}
}

func TestExecute_concatenatesTextAndPassesTheIdempotencyKey(t *testing.T) {
	srv := billingServer(t)
	res := executor(t, srv.URL, "lookup_account").Execute(context.Background(), call(`{"email":"r.okafor@northwind.example"}`))
	if res.Failure != nil {
		t.Fatalf("Failure = %+v", res.Failure)
	}
	want := "acct_42 belongs to r.okafor@northwind.example\nkey=uid/t2-c1"
	if got := string(res.Output); got != want || res.Truncated {
		t.Errorf("Output %q, Truncated %v; want %q, false", got, res.Truncated, want)
	}
}

func TestExecute_toolErrorIsAToolErrorWithTheToolsText(t *testing.T) {
	srv := billingServer(t)
	res := executor(t, srv.URL, "issue_refund").Execute(context.Background(), call(`{"amount_minor":8240}`))
	want := &loop.Failure{Kind: loop.FailTool, Detail: "refund of 8240 exceeds the limit"}
	if diff := cmp.Diff(want, res.Failure); diff != "" {
		t.Errorf("Failure (-want +got):\n%s", diff)
	}
	if string(res.Output) != "refund of 8240 exceeds the limit" {
		t.Errorf("Output = %q, want the tool's text", res.Output)
	}
}

func TestExecute_serverRejectionIsAFailedCall(t *testing.T) {
	srv := billingServer(t)
	for name, tc := range map[string]struct {
		tool, args string
		kind       loop.FailureKind
	}{
		"unknown tool": {tool: "close_account", args: `{}`, kind: loop.FailInvalid},
		// The SDK's server reports argument validation as a tool error.
		"arguments type": {tool: "issue_refund", args: `{"amount_minor":"a lot"}`, kind: loop.FailTool},
	} {
		t.Run(name, func(t *testing.T) {
			res := executor(t, srv.URL, tc.tool).Execute(context.Background(), call(tc.args))
			if res.Failure == nil || res.Failure.Kind != tc.kind {
				t.Errorf("Failure = %+v, want %s", res.Failure, tc.kind)
			}
			t.Logf("detail: %s", res.Failure.Detail)
		})
	}
}

func TestExecute_capsOutput(t *testing.T) {
	srv := billingServer(t)
	inv := call(`{}`)
	inv.MaxResultBytes = 1000
	res := executor(t, srv.URL, "export").Execute(context.Background(), inv)
	if res.Failure != nil {
		t.Fatalf("Failure = %+v", res.Failure)
	}
	if len(res.Output) != 1001 || !res.Truncated || res.Size != 100<<10 {
		t.Errorf("len(Output), Truncated, Size = %d, %v, %d; want 1001, true, %d", len(res.Output), res.Truncated, res.Size, 100<<10)
	}
}

func TestExecute_responseOverTheTransportLimitFails(t *testing.T) {
	srv := billingServer(t)
	res := executor(t, srv.URL, "export", WithMaxResponseBytes(64<<10)).Execute(context.Background(), call(`{}`))
	if res.Failure == nil || res.Failure.Kind != loop.FailUnavailable || !strings.Contains(res.Failure.Detail, "size limit") {
		t.Errorf("Failure = %+v, want Unavailable about the size limit", res.Failure)
	}
}

func TestExecute_structuredContentOnlyIsJSON(t *testing.T) {
	srv := billingServer(t)
	res := executor(t, srv.URL, "stats").Execute(context.Background(), call(`{}`))
	if res.Failure != nil {
		t.Fatalf("Failure = %+v", res.Failure)
	}
	// The SDK fills Content with the JSON text of structured output; either
	// way the model reads the JSON.
	var got map[string]int
	if err := json.Unmarshal(res.Output, &got); err != nil || got["invoices"] != 3 {
		t.Errorf("Output = %q, want {\"invoices\":3}", res.Output)
	}
}

func TestExecute_deadlineIsTimeout(t *testing.T) {
	srv := billingServer(t)
	inv := call(`{}`)
	inv.Timeout = 300 * time.Millisecond
	start := time.Now()
	res := executor(t, srv.URL, "slow").Execute(context.Background(), inv)
	if res.Failure == nil || res.Failure.Kind != loop.FailTimeout {
		t.Errorf("Failure = %+v, want Timeout", res.Failure)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Execute took %s with a 300ms timeout", took)
	}
}

func TestExecute_unreachableServerIsUnavailable(t *testing.T) {
	endpoint := "http://" + closedAddress(t) + "/mcp"
	res := executor(t, endpoint, "lookup_account").Execute(context.Background(), call(`{}`))
	want := &loop.Failure{Kind: loop.FailUnavailable, Detail: "MCP server " + endpoint + " is unreachable: connection refused"}
	if diff := cmp.Diff(want, res.Failure); diff != "" {
		t.Errorf("Failure (-want +got):\n%s", diff)
	}
}

func TestExecute_argumentsMustBeAnObject(t *testing.T) {
	res := executor(t, "http://127.0.0.1:1/mcp", "x").Execute(context.Background(), call(`[1,2]`))
	if res.Failure == nil || res.Failure.Kind != loop.FailInvalid {
		t.Errorf("Failure = %+v, want InvalidCall", res.Failure)
	}
}

func TestNew_rejectsBadConfiguration(t *testing.T) {
	for name, tc := range map[string]struct{ endpoint, tool string }{
		"not a URL":    {endpoint: "mcp-billing:8080", tool: "x"},
		"other scheme": {endpoint: "ws://mcp/", tool: "x"},
		"no tool":      {endpoint: "http://mcp/", tool: " "},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(tc.endpoint, tc.tool); err == nil {
				t.Error("New succeeded, want an error")
			}
		})
	}
}
