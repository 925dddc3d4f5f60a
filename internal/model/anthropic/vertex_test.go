package anthropic

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/modeltest"
)

const (
	vertexModel   = "claude-sonnet-4-5@20250929"
	vertexProject = "northwind-agents"
	vertexRegion  = "us-east5"
)

// keyTokens is a token source that hands out the suite's key as its
// access token, reading it at every Token: the stand-in for the
// operator's workload identity.
type keyTokens struct{ source model.KeySource }

func (k keyTokens) Token() (*oauth2.Token, error) {
	key, err := k.source(context.Background())
	if err != nil {
		return nil, err
	}
	return &oauth2.Token{AccessToken: key, TokenType: "Bearer"}, nil
}

var vertexProvider = onPlatform(vertexModel, modeltest.Provider{
	Name: VertexName,
	Dir:  "vertex",
	New: func(c model.Config) (loop.Model, error) {
		return NewVertex(c, Vertex{ProjectID: vertexProject, Region: vertexRegion, TokenSource: keyTokens{c.KeySource}})
	},
	// The model is in the rawPredict path of the project and region.
	Endpoint:  "/v1/projects/" + vertexProject + "/locations/" + vertexRegion + "/publishers/anthropic/models/" + vertexModel + ":rawPredict",
	RateLimit: "error_resource_exhausted.json", ServerError: "error_internal.json", Unauthorized: "error_unauthenticated.json",
	RateLimitMessage:    "Quota exceeded for aiplatform.googleapis.com",
	ServerErrorMessage:  "Internal error encountered",
	UnauthorizedMessage: "Request had invalid authentication credentials",
	KeyHeader:           "Authorization",
	KeyValue:            func(key string) string { return "Bearer " + key },
})

func TestVertexConformance(t *testing.T) { modeltest.Run(t, vertexProvider) }

// The operator's path: Google's default credentials, here an
// authorized_user file whose token endpoint is a test server, exchanged
// for an access token that the call carries.
func TestVertex_defaultCredentialsFromAFile(t *testing.T) {
	tokens := modeltest.NewServer(t, modeltest.Reply([]byte(`{"access_token":"ya29.from-the-token-endpoint","token_type":"Bearer","expires_in":3600}`)))
	file := filepath.Join(t.TempDir(), "adc.json")
	if err := os.WriteFile(file, []byte(`{"type":"authorized_user","client_id":"id","client_secret":"secret","refresh_token":"refresh","token_uri":"`+tokens.URL+`/token"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", file)
	ts, err := GoogleTokenSource(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := modeltest.NewServer(t, modeltest.Reply(modeltest.File(t, "response_text.json")))
	m, err := NewVertex(model.Config{Model: vertexModel, BaseURL: srv.URL}, Vertex{ProjectID: vertexProject, Region: vertexRegion, TokenSource: ts})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := m.Complete(context.Background(), vertexProvider.Request()); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range srv.Requests() {
		if got := r.Header.Get("Authorization"); got != "Bearer ya29.from-the-token-endpoint" {
			t.Errorf("Authorization = %q", got)
		}
	}
	if n := len(tokens.Requests()); n != 1 {
		t.Errorf("the token was fetched %d times for 2 calls, want once (cached)", n)
	}
	if body := string(tokens.Requests()[0].Body); !strings.Contains(body, "refresh_token=refresh") {
		t.Errorf("token request body %q", body)
	}
}
