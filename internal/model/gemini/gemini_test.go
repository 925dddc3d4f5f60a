package gemini

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"golang.org/x/oauth2"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/modeltest"
)

const modelName = "gemini-2.5-pro"

// provider is the Gemini API adapter as the conformance suite sees it.
var provider = modeltest.Provider{
	Name:      Name,
	New:       func(c model.Config) (loop.Model, error) { return New(context.Background(), c, Vertex{}) },
	Path:      "/",
	Model:     modelName,
	Request:   func() *loop.Request { return modeltest.BillingRequest(modelName) },
	RoundTrip: func() *loop.Request { return modeltest.RoundTripRequest(modelName) },
	Endpoint:  "/" + GeminiAPIVersion + "/models/" + modelName + ":generateContent",
	Text:      "response_text.json", ToolCall: "response_one_tool_call.json", ToolCalls: "response_tool_calls.json",
	Truncated: "response_truncated.json",
	Refusals: map[string]string{"response_refusal.json": RefusedBySafety + " (finishReason SAFETY)",
		"response_prompt_blocked.json": RefusedBySafety + " (prompt blocked: PROHIBITED_CONTENT)"},
	// Gemini reports cache reads only (it bills no writes), and its
	// thoughts' tokens apart from the answer's: both are output.
	CachedUsage: &loop.TokenUsage{InputTokens: 5300, CachedInputTokens: 4864, OutputTokens: 140},
	RateLimit:   "error_rate_limit.json", ServerError: "error_server.json", Unauthorized: "error_unauthorized.json",
	RateLimitMessage:    "Resource has been exhausted",
	ServerErrorMessage:  "An internal error has occurred",
	UnauthorizedMessage: "Request had invalid authentication credentials",
	KeyHeader:           "X-Goog-Api-Key",
	KeyValue:            func(key string) string { return key },
	Prefix: func(t testing.TB, body []byte) string {
		m := modeltest.Members(t, body)
		return string(m["tools"]) + string(m["systemInstruction"])
	},
}

func TestConformance(t *testing.T) { modeltest.Run(t, provider) }

// vertexProvider is the adapter on Vertex AI: the project and region in
// the path, the operator's access token as the credential.
var vertexProvider = func() modeltest.Provider {
	p := provider
	p.New = func(c model.Config) (loop.Model, error) {
		// The operator's token goes to Google's hosts only: the requests
		// are made to the regional endpoint, and this client carries them
		// to the suite's server. The suite's key stands for the access
		// token, fetched at every call as Google's credentials are.
		server, err := url.Parse(c.BaseURL)
		if err != nil {
			return nil, err
		}
		c.BaseURL, c.HTTPClient = "", &http.Client{Transport: redirect{to: server}}
		return New(context.Background(), c, Vertex{ProjectID: "northwind-agents", Region: "us-central1", TokenSource: keyTokens{c.KeySource}})
	}
	p.Endpoint = "/" + VertexAPIVersion + "/projects/northwind-agents/locations/us-central1/publishers/google/models/" + modelName + ":generateContent"
	p.KeyHeader, p.KeyValue = "Authorization", func(key string) string { return "Bearer " + key }
	p.Credential = "credentials"
	return p
}()

// redirect sends requests for us-central1-aiplatform.googleapis.com to
// the test server instead.
type redirect struct{ to *url.URL }

func (r redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != "us-central1-aiplatform.googleapis.com" {
		return nil, fmt.Errorf("a request to %s", req.URL.Host)
	}
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host = r.to.Scheme, r.to.Host
	return http.DefaultTransport.RoundTrip(req)
}

type keyTokens struct{ keys model.KeySource }

func (k keyTokens) Token() (*oauth2.Token, error) {
	key, err := k.keys(context.Background())
	if err != nil {
		return nil, err
	}
	return &oauth2.Token{AccessToken: key}, nil
}

func TestConformance_vertexAI(t *testing.T) { modeltest.Run(t, vertexProvider) }

func TestNew_refusesAnIncompleteConfiguration(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg model.Config
		v   Vertex
	}{
		"no key":                {cfg: model.Config{Model: modelName}},
		"a project, no region":  {cfg: model.Config{Model: modelName}, v: Vertex{ProjectID: "p", TokenSource: oauth2.StaticTokenSource(&oauth2.Token{})}},
		"Vertex AI, no account": {cfg: model.Config{Model: modelName}, v: Vertex{ProjectID: "p", Region: "r"}},
		"Vertex AI, the token sent elsewhere": {cfg: model.Config{Model: modelName, BaseURL: "https://collector.example.com/"},
			v: Vertex{ProjectID: "p", Region: "r", TokenSource: oauth2.StaticTokenSource(&oauth2.Token{})}},
	} {
		if _, err := New(context.Background(), tc.cfg, tc.v); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// A thinking model's thought signature comes with its function call and
// goes back on that call's part on the next turn.
func TestComplete_thoughtSignatureIsPassedBack(t *testing.T) {
	answer := []byte(`{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"identify_account","args":{"email":"r.okafor@northwind.example"}},"thoughtSignature":"c2lnbmVkLXRob3VnaHQ="}]},"finishReason":"STOP"}],` +
		`"usageMetadata":{"promptTokenCount":1600,"candidatesTokenCount":40,"thoughtsTokenCount":900}}`)
	f := provider.Fixture(t, nil, modeltest.Reply(answer), modeltest.Reply(answer))
	reply, err := f.Model.Complete(context.Background(), provider.Request())
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Reasoning) != 1 || reply.Reasoning[0].Signature != "c2lnbmVkLXRob3VnaHQ=" || reply.Usage.OutputTokens != 940 {
		t.Fatalf("reasoning %+v, usage %+v; want the signature and 940 output tokens", reply.Reasoning, reply.Usage)
	}
	next := modeltest.AnsweredIdentify(provider.Request(), reply.Reasoning)
	if _, err := f.Model.Complete(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Contents []struct {
			Parts []map[string]any `json:"parts"`
		} `json:"contents"`
	}
	if err := json.Unmarshal(f.Srv.Requests()[1].Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Contents) != 3 || body.Contents[1].Parts[0]["thoughtSignature"] != "c2lnbmVkLXRob3VnaHQ=" {
		t.Fatalf("the model's turn sent back: %+v", body.Contents)
	}
}
