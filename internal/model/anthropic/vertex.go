package anthropic

import (
	"context"
	"fmt"

	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/vertex"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/agentrun/agentrun/internal/model"
)

// VertexName is the Google Vertex AI provider's name, as in
// spec.model.provider and in errors.
const VertexName = "vertex"

// VertexVersion is the anthropic_version Vertex AI documents for the
// Messages API body.
const VertexVersion = "vertex-2023-10-16"

// Vertex is where Claude on Google Vertex AI is called and as whom.
type Vertex struct {
	// ProjectID is the Google Cloud project. Required.
	ProjectID string
	// Region is the location, such as us-east5, or global. Required.
	Region string
	// TokenSource gives the OAuth access tokens the calls carry: in the
	// operator, Google's default credentials (GKE Workload Identity),
	// which cache and refresh them. Required.
	TokenSource oauth2.TokenSource
}

// NewVertex returns a provider for Claude on Vertex AI, through the
// Anthropic SDK's Vertex client: the model (such as
// claude-sonnet-4-5@20250929) goes in the rawPredict path of the project
// and region, and each call carries a bearer token. cfg.BaseURL, when
// set, replaces the regional aiplatform endpoint (Private Service
// Connect); cfg.KeySource is not used.
func NewVertex(cfg model.Config, v Vertex) (*Model, error) {
	if v.ProjectID == "" || v.Region == "" {
		return nil, fmt.Errorf("%s: a project id and a region are required", VertexName)
	}
	if v.TokenSource == nil {
		return nil, fmt.Errorf("%s: no Google credentials configured", VertexName)
	}
	cfg.KeySource = nil
	caller, err := model.NewCaller(VertexName, cfg)
	if err != nil {
		return nil, err
	}
	cfg = caller.Config()
	m := &Model{name: VertexName, caller: caller, client: platformClient(VertexName, cfg)}
	// The token fetched before a call is the one its attempts carry:
	// Caller.DoWith reports a failure to get one without sending
	// anything, and scrubs it from every error.
	m.credential = func(context.Context) (string, error) {
		tok, err := v.TokenSource.Token()
		if err != nil {
			return "", err
		}
		return tok.AccessToken, nil
	}
	m.auth = func(ctx context.Context, token string) []option.RequestOption {
		creds := &google.Credentials{ProjectID: v.ProjectID, TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token})}
		opts := []option.RequestOption{
			vertex.WithCredentials(ctx, v.Region, v.ProjectID, creds),
			option.WithJSONSet("anthropic_version", VertexVersion),
		}
		if cfg.BaseURL != "" {
			opts = append(opts, option.WithBaseURL(cfg.BaseURL))
		}
		return opts
	}
	return m, nil
}

// GoogleTokenSource is the operator's Google identity: the Application
// Default Credentials (GKE Workload Identity's metadata server, or the
// file GOOGLE_APPLICATION_CREDENTIALS names), for the cloud-platform
// scope, their tokens cached until shortly before they expire.
func GoogleTokenSource(ctx context.Context) (oauth2.TokenSource, error) {
	creds, err := google.FindDefaultCredentials(ctx, "https://www.googleapis.com/auth/cloud-platform")
	if err != nil {
		return nil, err
	}
	return creds.TokenSource, nil
}
