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

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
)

// oauthSSEServer is an MCP server speaking only SSE that refuses every
// request without the bearer token its loopback token endpoint issues to
// the client run-client/s3cret. It returns the server's URL and the
// token endpoint's.
func oauthSSEServer(t *testing.T) (server, tokenURL string) {
	t.Helper()
	const token = "tok-kit-1"
	te := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		w.Header().Set("Content-Type", "application/json")
		if !ok || id != "run-client" || secret != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": token, "token_type": "Bearer", "expires_in": 3600})
	}))
	t.Cleanup(te.Close)
	s := mcp.NewServer(&mcp.Implementation{Name: "ledger", Version: "v1"}, nil)
	yes := true
	mcp.AddTool(s, &mcp.Tool{Name: "void_invoice", Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "voided"}}}, nil, nil
		})
	verify := func(_ context.Context, got string, _ *http.Request) (*auth.TokenInfo, error) {
		if got != token {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Expiration: time.Now().Add(time.Hour)}, nil
	}
	srv := httptest.NewServer(auth.RequireBearerToken(verify, nil)(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil)))
	t.Cleanup(srv.Close)
	return srv.URL, te.URL
}

// An inline mcp tool with transport sse and oauth reaches a server that
// speaks only SSE and requires a token, with the client's credentials
// read from the Secret the tool names; the server's destructive hint
// makes the tool mutating and irreversible.
func TestBuild_mcpToolOverSSEWithClientCredentials(t *testing.T) {
	server, tokenURL := oauthSSEServer(t)
	manifest := withTools(`
  - name: void
    mcp: {url: '` + server + `', tool: void_invoice, transport: sse, oauth: {clientSecretRef: {name: ledger-client}, tokenURL: '` + tokenURL + `'}}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name, secret string
		wantErr      string
	}{
		{name: "the client's credentials", secret: "s3cret"},
		{name: "a wrong secret", secret: "guess", wantErr: "refused the client credentials (HTTP 401): invalid_client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Builder{Secrets: objects{"ledger-client": {"clientID": "run-client", "clientSecret": tc.secret + "\n"}}.read("Secret")}
			k, err := b.Build(ctx, parse(t, manifest), egress.Grant{})
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), tc.secret) {
					t.Fatalf("Build = %v, want ErrUnavailable saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ts := k.Engine.Config().Tools[0]
			if !ts.Mutates || ts.Reversible {
				t.Errorf("mutates, reversible = %v, %v; want true, false (the server's destructive hint)", ts.Mutates, ts.Reversible)
			}
			res := k.Tools.Execute(ctx, loop.Invocation{CallID: "c1", Tool: "void", Arguments: json.RawMessage(`{}`),
				Attempt: 1, Timeout: 10 * time.Second, MaxResultBytes: 1 << 10})
			if res.Failure != nil || string(res.Output) != "voided" {
				t.Errorf("call = %q, %+v; want voided", res.Output, res.Failure)
			}
		})
	}
}

// An unresolved serverRef (agentrun local reads no MCPServers) fails the
// build saying so.
func TestBuild_unresolvedServerRefFails(t *testing.T) {
	manifest := withTools(`
  - name: void
    mcp: {serverRef: {name: ledger}, tool: void_invoice}
`)
	_, err := (&Builder{}).Build(context.Background(), parse(t, manifest), egress.Grant{})
	want := `tools[0] (void): mcp.serverRef and mcp.tools are resolved before the run is built`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Build = %v, want an error saying %q", err, want)
	}
}

// MCPServer reads the OAuth client's Secret as the server's account; one
// it cannot read is ErrCredentialsUnreadable.
func TestMCPServer_readsTheClientSecret(t *testing.T) {
	server, tokenURL := oauthSSEServer(t)
	s := &v1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Name: "ledger", Namespace: "default"}, Spec: v1alpha1.MCPServerSpec{URL: server,
		MCPConnection: v1alpha1.MCPConnection{Transport: v1alpha1.MCPSSE, OAuth: &v1alpha1.OAuthClientCredentials{
			ClientSecretRef: v1alpha1.OAuthSecretRef{Name: "ledger-client"}, TokenURL: tokenURL}}}}
	ctx := context.Background()
	b := &Builder{Secrets: objects{"ledger-client": {"clientID": "run-client", "clientSecret": "s3cret"}}.read("Secret")}
	srv, err := b.MCPServer(ctx, s, egress.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := srv.Tools(ctx)
	if err != nil || len(tools) != 1 || tools[0].Name != "void_invoice" {
		t.Errorf("Tools = %v, %v; want void_invoice", tools, err)
	}
	_, err = (&Builder{Secrets: objects{}.read("Secret")}).MCPServer(ctx, s, egress.Grant{})
	if !errors.Is(err, ErrCredentialsUnreadable) || !strings.Contains(err.Error(), "MCPServer ledger mcp.oauth.clientSecretRef") {
		t.Errorf("MCPServer without the Secret = %v, want ErrCredentialsUnreadable naming the field", err)
	}
}
