package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/agentrun/agentrun/internal/loop"
)

// echoServer is an MCP server with one tool, whoami, that answers with
// the request's Authorization header (a server that echoes what it was
// sent) and one, drop_table, annotated destructive.
func echoServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "v0.0.1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			who := "anonymous"
			if req.Extra != nil && req.Extra.TokenInfo != nil {
				who = req.Extra.TokenInfo.UserID
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "you are " + who}}}, nil, nil
		})
	yes := true
	mcp.AddTool(s, &mcp.Tool{Name: "drop_table", Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "dropped"}}}, nil, nil
		})
	return s
}

// serve serves s on loopback with the transport p, behind wrap.
func serve(t *testing.T, s *mcp.Server, p Protocol, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	var h http.Handler
	switch p {
	case SSE:
		h = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil)
	default:
		h = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	}
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// tokenEndpoint is a loopback OAuth 2 token endpoint that issues
// issuedToken to the client credentials agentrun/s3cret, and counts the
// tokens it issued.
func tokenEndpoint(t *testing.T, issuedToken string, issued *atomic.Int32) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		if !ok { // RFC 6749 allows the credentials in the body too
			id, secret, ok = r.FormValue("client_id"), r.FormValue("client_secret"), r.FormValue("client_id") != ""
		}
		if r.Method != http.MethodPost || r.FormValue("grant_type") != "client_credentials" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if !ok || id != "agentrun" || secret != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_client","error_description":"unknown client"}`))
			return
		}
		if r.FormValue("scope") != "tools:call" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_scope"}`))
			return
		}
		issued.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": issuedToken, "token_type": "Bearer", "expires_in": 3600})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// requireToken refuses every request without the bearer token want.
func requireToken(want string) func(http.Handler) http.Handler {
	return auth.RequireBearerToken(func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if token != want {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: "agentrun-client", Expiration: time.Now().Add(time.Hour)}, nil
	}, nil)
}

func TestExecute_overEachTransport(t *testing.T) {
	for _, p := range []Protocol{StreamableHTTP, SSE} {
		t.Run(string(p), func(t *testing.T) {
			srv := serve(t, echoServer(), p, nil)
			e := executor(t, srv.URL, "whoami", WithProtocol(p))
			h, err := e.Inspect(context.Background())
			if err != nil {
				t.Fatalf("Inspect: %v", err)
			}
			if diff := cmp.Diff(Hints{Annotated: true, ReadOnly: true}, h); diff != "" {
				t.Errorf("Hints (-want +got):\n%s", diff)
			}
			res := e.Execute(context.Background(), call(`{}`))
			if res.Failure != nil || string(res.Output) != "you are anonymous" {
				t.Errorf("Execute = %q, %+v; want \"you are anonymous\"", res.Output, res.Failure)
			}
		})
	}
}

// A server that speaks only SSE does not answer the streamable HTTP
// handshake: the transport must be the server's.
func TestInspect_sseServerIsNotReachedAsStreamableHTTP(t *testing.T) {
	srv := serve(t, echoServer(), SSE, nil)
	_, err := executor(t, srv.URL, "whoami").Inspect(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "MCP server "+srv.URL+" is unreachable: ") {
		t.Errorf("Inspect = %v, want unreachable", err)
	}
}

func TestServerTools_listsEveryToolWithItsAnnotations(t *testing.T) {
	for _, p := range []Protocol{StreamableHTTP, SSE} {
		t.Run(string(p), func(t *testing.T) {
			srv := serve(t, echoServer(), p, nil)
			s, err := NewServer(srv.URL, WithProtocol(p))
			if err != nil {
				t.Fatal(err)
			}
			tools, err := s.Tools(context.Background())
			if err != nil {
				t.Fatalf("Tools: %v", err)
			}
			got := map[string]Hints{}
			for _, tool := range tools {
				got[tool.Name] = HintsFrom(tool.Annotations)
			}
			want := map[string]Hints{
				"whoami":     {Annotated: true, ReadOnly: true},
				"drop_table": {Annotated: true, Destructive: true},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("tools (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExecute_clientCredentials(t *testing.T) {
	const token = "tok-7f3a9c"
	for _, p := range []Protocol{StreamableHTTP, SSE} {
		t.Run(string(p), func(t *testing.T) {
			var issued atomic.Int32
			te := tokenEndpoint(t, token, &issued)
			srv := serve(t, echoServer(), p, requireToken(token))
			cc := clientcredentials.Config{ClientID: "agentrun", ClientSecret: "s3cret", TokenURL: te.URL, Scopes: []string{"tools:call"}}

			// Without the token, the server refuses; the error says so.
			_, err := executor(t, srv.URL, "whoami", WithProtocol(p)).Inspect(context.Background())
			want := "MCP server " + srv.URL + ": the server refused the request's credentials (HTTP 401 Unauthorized)"
			if err == nil || err.Error() != want || !errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrNoToken) {
				t.Errorf("Inspect without a token = %v\nwant %s (ErrUnauthenticated)", err, want)
			}

			e := executor(t, srv.URL, "whoami", WithProtocol(p), WithClientCredentials(cc, nil))
			if err := e.Preflight(context.Background()); err != nil {
				t.Fatalf("Preflight with a token: %v", err)
			}
			// The SDK's SSE handler does not hand the token's identity to
			// the tool; it did check the token.
			want = "you are agentrun-client"
			if p == SSE {
				want = "you are anonymous"
			}
			for range 2 {
				res := e.Execute(context.Background(), call(`{}`))
				if res.Failure != nil || string(res.Output) != want {
					t.Errorf("Execute = %q, %+v; want %q", res.Output, res.Failure, want)
				}
			}
			if n := issued.Load(); n != 1 {
				t.Errorf("the token endpoint issued %d tokens for three sessions, want 1 (the token is kept)", n)
			}
		})
	}
}

// A server that echoes the bearer token it was sent does not hand it to
// the model.
func TestExecute_redactsTheAccessToken(t *testing.T) {
	const token = "tok-echoed-5521"
	var issued atomic.Int32
	te := tokenEndpoint(t, token, &issued)
	s := mcp.NewServer(&mcp.Implementation{Name: "leaky", Version: "v0.0.1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "headers"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "got " + req.Extra.Header.Get("Authorization")}}}, nil, nil
	})
	srv := serve(t, s, StreamableHTTP, requireToken(token))
	cc := clientcredentials.Config{ClientID: "agentrun", ClientSecret: "s3cret", TokenURL: te.URL, Scopes: []string{"tools:call"}}
	res := executor(t, srv.URL, "headers", WithClientCredentials(cc, nil)).Execute(context.Background(), call(`{}`))
	if res.Failure != nil {
		t.Fatalf("Failure = %+v", res.Failure)
	}
	if got := string(res.Output); strings.Contains(got, token) || !strings.Contains(got, "[redacted]") {
		t.Errorf("Output = %q, want the token redacted", got)
	}
}

func TestExecute_refusedCredentialsAreAReadableFailure(t *testing.T) {
	var issued atomic.Int32
	te := tokenEndpoint(t, "tok-1", &issued)
	srv := serve(t, echoServer(), StreamableHTTP, requireToken("tok-1"))
	for name, tc := range map[string]struct {
		cc   clientcredentials.Config
		want string
	}{
		"wrong secret": {
			cc:   clientcredentials.Config{ClientID: "agentrun", ClientSecret: "guess", TokenURL: te.URL, Scopes: []string{"tools:call"}},
			want: "MCP server " + srv.URL + ": the OAuth token endpoint " + te.URL + " refused the client credentials (HTTP 401): invalid_client: unknown client",
		},
		"wrong scope": {
			cc:   clientcredentials.Config{ClientID: "agentrun", ClientSecret: "s3cret", TokenURL: te.URL, Scopes: []string{"admin"}},
			want: "MCP server " + srv.URL + ": the OAuth token endpoint " + te.URL + " refused the client credentials (HTTP 400): invalid_scope",
		},
		"token endpoint down": {
			cc:   clientcredentials.Config{ClientID: "agentrun", ClientSecret: "s3cret", TokenURL: "http://" + closedAddress(t) + "/token"},
			want: "", // checked by prefix below
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := executor(t, srv.URL, "whoami", WithClientCredentials(tc.cc, nil))
			if _, err := e.Tools(context.Background()); !errors.Is(err, ErrNoToken) || !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("Tools = %v, want ErrNoToken and ErrUnauthenticated", err)
			}
			res := e.Execute(context.Background(), call(`{}`))
			if res.Failure == nil || res.Failure.Kind != loop.FailUnavailable {
				t.Fatalf("Failure = %+v, want Unavailable", res.Failure)
			}
			if tc.want == "" {
				want := "MCP server " + srv.URL + ": no OAuth token from " + tc.cc.TokenURL + ": connection refused"
				if res.Failure.Detail != want {
					t.Errorf("Detail = %q\nwant %q", res.Failure.Detail, want)
				}
			} else if res.Failure.Detail != tc.want {
				t.Errorf("Detail = %q\nwant %q", res.Failure.Detail, tc.want)
			}
			if strings.Contains(res.Failure.Detail, tc.cc.ClientSecret) {
				t.Errorf("Detail %q holds the client secret", res.Failure.Detail)
			}
		})
	}
}

func TestExecute_unreachableServerIsUnavailableOverSSE(t *testing.T) {
	endpoint := "http://" + closedAddress(t) + "/sse"
	res := executor(t, endpoint, "whoami", WithProtocol(SSE)).Execute(context.Background(), call(`{}`))
	want := &loop.Failure{Kind: loop.FailUnavailable, Detail: "MCP server " + endpoint + " is unreachable: connection refused"}
	if diff := cmp.Diff(want, res.Failure); diff != "" {
		t.Errorf("Failure (-want +got):\n%s", diff)
	}
}

func TestNewServer_rejectsAnUnknownTransport(t *testing.T) {
	if _, err := NewServer("http://mcp/", WithProtocol("websocket")); err == nil {
		t.Error("NewServer succeeded with transport websocket, want an error")
	}
}
