// Package gemini is the model provider for Google's Gemini models, on the
// Gemini API (with an API key) or on Vertex AI (as the operator's Google
// identity), built on Google's official Go SDK, google.golang.org/genai.
//
// A request becomes one generateContent call with function declarations:
// the system prompt as systemInstruction, the goal and other user text as
// user contents, each assistant turn as a model content with its text and
// functionCall parts, and the results of its calls as one user content of
// functionResponse parts, in the order of the calls. A thinking model's
// thought signature, which Gemini asks back with the function call it came
// on, is kept in the transcript (loop.Reasoning.Signature) and sent back
// on that call's part.
//
// The SDK reads its endpoint, API version and key from the environment
// when its configuration leaves them unset; every one is set here, so that
// the operator's environment never redirects a run's requests or lends
// them a key. Each call's credential (the run's API key, or an access
// token of the operator's identity) is put on the request by this
// package's transport, which removes any other.
package gemini

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/oauth2"
	"google.golang.org/genai"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
)

// Name is the provider's name, as in spec.model.provider and in errors.
const Name = "gemini"

// The endpoints and API versions the SDK is given.
const (
	DefaultBaseURL   = "https://generativelanguage.googleapis.com/"
	GeminiAPIVersion = "v1beta"
	VertexAPIVersion = "v1beta1"
)

// RefusedBySafety is the refusal text when Gemini blocked the prompt or
// stopped the answer for its safety or policy filters.
const RefusedBySafety = "the provider's safety filter stopped the answer"

// Vertex is where Gemini on Vertex AI is called and as whom. The zero
// Vertex means the Gemini API, with the run's API key.
type Vertex struct {
	// ProjectID is the Google Cloud project. Required.
	ProjectID string
	// Region is the location, such as us-central1, or global. Required.
	Region string
	// TokenSource gives the OAuth access tokens the calls carry (the
	// operator's Google default credentials). Required.
	TokenSource oauth2.TokenSource
}

// Model calls one Gemini model. It is safe for concurrent use.
type Model struct {
	caller *model.Caller
	client *genai.Client
	// header carries each call's credential: x-goog-api-key for the
	// Gemini API, Authorization for Vertex AI.
	header string
	// credential, when set, fetches each call's credential instead of
	// the configured KeySource (Vertex AI's access token).
	credential model.KeySource
}

var _ loop.Model = (*Model)(nil)

// New returns a provider for the Gemini API, or for Vertex AI when v names
// a project. The key (or the token) is not read here but at every call.
func New(ctx context.Context, cfg model.Config, v Vertex) (*Model, error) {
	vertex := v.ProjectID != "" || v.Region != ""
	if vertex {
		if v.ProjectID == "" || v.Region == "" {
			return nil, fmt.Errorf("%s: Vertex AI needs a project id and a region", Name)
		}
		if v.TokenSource == nil {
			return nil, fmt.Errorf("%s: no Google credentials configured", Name)
		}
		if cfg.BaseURL != "" && !googleHost(cfg.BaseURL) {
			// The operator's token goes to Google's own hosts only.
			return nil, fmt.Errorf("%s: with the operator's Google identity, the base URL %q must be an https:// endpoint under googleapis.com", Name, cfg.BaseURL)
		}
		cfg.KeySource = nil
	} else if cfg.KeySource == nil {
		return nil, fmt.Errorf("%s: the Gemini API needs an API key", Name)
	}
	caller, err := model.NewCaller(Name, cfg)
	if err != nil {
		return nil, err
	}
	cfg = caller.Config()
	base := cfg.HTTPClient
	hc := &http.Client{Transport: transport{base: base.Transport}, CheckRedirect: base.CheckRedirect, Jar: base.Jar, Timeout: base.Timeout}
	cc := &genai.ClientConfig{HTTPClient: hc, HTTPOptions: genai.HTTPOptions{BaseURL: cfg.BaseURL, RetryOptions: retries(cfg.MaxRetries)}}
	m := &Model{caller: caller}
	if vertex {
		cc.Backend, cc.Project, cc.Location = genai.BackendVertexAI, v.ProjectID, v.Region
		cc.HTTPOptions.APIVersion = VertexAPIVersion
		if cc.HTTPOptions.BaseURL == "" {
			cc.HTTPOptions.BaseURL = vertexBaseURL(v.Region)
		}
		m.header = "Authorization"
		m.credential = func(context.Context) (string, error) {
			tok, err := v.TokenSource.Token()
			if err != nil {
				return "", err
			}
			return "Bearer " + tok.AccessToken, nil
		}
	} else {
		// The SDK wants a key to build the client; the transport puts
		// each call's own in its place.
		cc.Backend, cc.APIKey = genai.BackendGeminiAPI, "set-per-call"
		cc.HTTPOptions.APIVersion = GeminiAPIVersion
		if cc.HTTPOptions.BaseURL == "" {
			cc.HTTPOptions.BaseURL = DefaultBaseURL
		}
		m.header = "x-goog-api-key"
	}
	if m.client, err = genai.NewClient(ctx, cc); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return m, nil
}

// googleHost reports whether raw is an https:// URL of a host under
// googleapis.com (a regional endpoint, or Private Service Connect's).
func googleHost(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Scheme == "https" && strings.HasSuffix(u.Hostname(), ".googleapis.com")
}

// vertexBaseURL is Vertex AI's endpoint for a region.
func vertexBaseURL(region string) string {
	if region == "global" {
		return "https://aiplatform.googleapis.com/"
	}
	return "https://" + region + "-aiplatform.googleapis.com/"
}

// retries are the SDK's attempts: Config.MaxRetries after the first, on a
// transport failure, 408, 429 or a 5xx (never another 4xx), backing off
// from half a second to at most 8, as the other providers' SDKs do.
func retries(maxRetries int) *genai.HTTPRetryOptions {
	attempts := int32(maxRetries + 1)
	initial, maxDelay, jitter := 0.5, 8.0, 0.25
	return &genai.HTTPRetryOptions{Attempts: &attempts, InitialDelay: &initial, MaxDelay: &maxDelay, Jitter: &jitter,
		HTTPStatusCodes: []int32{408, 429, 500, 502, 503, 504}}
}

// callInfo is what one call's attempts carry through the transport: the
// credential's header and value, the Caller's middleware, and stop, which
// ends the SDK's retries.
type callInfo struct {
	header, value string
	record        model.Middleware
	stop          context.CancelFunc
}

type callKey struct{}

// transport puts the call's credential on every attempt, in place of any
// the SDK set, and passes the attempt through the Caller's middleware.
type transport struct{ base http.RoundTripper }

func (t transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	ci, _ := r.Context().Value(callKey{}).(*callInfo)
	if ci == nil {
		return nil, errors.New("a request outside a call")
	}
	r = r.Clone(r.Context())
	r.Header.Del("x-goog-api-key")
	r.Header.Del("Authorization")
	if ci.value != "" {
		r.Header.Set(ci.header, ci.value)
	}
	res, err := ci.record(r, base.RoundTrip)
	if err != nil || res == nil {
		return res, err
	}
	if res.StatusCode >= 400 {
		// An error body is read here, within the reply limit the
		// middleware put on it, so that a body past the limit vetoes the
		// retry below, and so that it can still be read once the call's
		// context is cancelled.
		body, rerr := io.ReadAll(res.Body)
		_ = res.Body.Close()
		var rest io.Reader = eofReader{}
		if rerr != nil {
			rest = errReader{rerr}
		}
		res.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), rest))
	}
	// The middleware vetoes a retry its policy forbids (a 401 or 403, a
	// Retry-After past the deadline, a reply past the limit) with the
	// header the OpenAI and Anthropic SDKs read. The genai SDK reads none:
	// it stops retrying once the call's context is done, and returns the
	// response it has.
	if res.Header.Get("X-Should-Retry") == "false" {
		ci.stop()
	}
	return res, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// Complete makes one generateContent call. Transport failures are retried
// by the SDK; what still fails is a *model.ProviderError.
func (m *Model) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	contents, cfg, err := buildRequest(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if b := m.caller.Config().ThinkingBudget; b > 0 {
		cfg.ThinkingConfig = &genai.ThinkingConfig{ThinkingBudget: genai.Ptr(int32(b))}
	}
	name := m.caller.ModelName(req.Model)
	return model.Answer(ctx, m.caller, m.credential, func(ctx context.Context, key string, record model.Middleware) (*genai.GenerateContentResponse, error) {
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		ctx = context.WithValue(ctx, callKey{}, &callInfo{header: m.header, value: key, record: record, stop: stop})
		return m.client.Models.GenerateContent(ctx, name, contents, cfg)
	}, toReply)
}

func buildRequest(req *loop.Request) ([]*genai.Content, *genai.GenerateContentConfig, error) {
	cfg := &genai.GenerateContentConfig{
		MaxOutputTokens:       int32(min(req.MaxOutputTokens, 1<<31-1)),
		CandidateCount:        1,
		AutomaticContinuation: genai.Ptr(false),
	}
	if req.System != "" {
		cfg.SystemInstruction = &genai.Content{Parts: []*genai.Part{{Text: req.System}}}
	}
	if len(req.Tools) > 0 {
		tool := &genai.Tool{}
		for _, t := range req.Tools {
			schema, err := model.Schema(t.Parameters)
			if err != nil {
				return nil, nil, fmt.Errorf("tool %q: %w", t.Name, err)
			}
			tool.FunctionDeclarations = append(tool.FunctionDeclarations, &genai.FunctionDeclaration{
				Name: t.Name, Description: t.Description, ParametersJsonSchema: schema})
		}
		cfg.Tools = []*genai.Tool{tool}
	}
	if len(req.Output) > 0 && !req.Summary {
		cfg.ResponseMIMEType, cfg.ResponseJsonSchema = "application/json", req.Output
	}
	var contents []*genai.Content
	var results *genai.Content
	for _, msg := range model.OrderToolResults(req.Messages) {
		if msg.Role != loop.RoleTool {
			results = nil
		}
		switch msg.Role {
		case loop.RoleUser:
			contents = append(contents, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{Text: msg.Content}}})
		case loop.RoleAssistant:
			c := &genai.Content{Role: genai.RoleModel}
			if msg.Content != "" || len(msg.ToolCalls) == 0 {
				c.Parts = append(c.Parts, &genai.Part{Text: msg.Content})
			}
			for i, tc := range msg.ToolCalls {
				var args map[string]any
				if err := json.Unmarshal(model.Arguments(tc.Arguments), &args); err != nil {
					return nil, nil, fmt.Errorf("call %s: arguments: %w", tc.ID, err)
				}
				p := &genai.Part{FunctionCall: &genai.FunctionCall{Name: tc.Name, Args: args}}
				if i == 0 {
					p.ThoughtSignature = thoughtSignature(msg.Reasoning)
				}
				c.Parts = append(c.Parts, p)
			}
			contents = append(contents, c)
		case loop.RoleTool:
			// One user content holds the results of a turn's calls.
			if results == nil {
				results = &genai.Content{Role: genai.RoleUser}
				contents = append(contents, results)
			}
			key := "output"
			if msg.Status != "" && msg.Status != "ok" {
				key = "error"
			}
			results.Parts = append(results.Parts, &genai.Part{FunctionResponse: &genai.FunctionResponse{
				Name: msg.Tool, Response: map[string]any{key: msg.Content}}})
		default:
			return nil, nil, fmt.Errorf("message with unknown role %q", msg.Role)
		}
	}
	return contents, cfg, nil
}

// thoughtSignature is the signature kept with an assistant message, as
// the bytes Gemini gave it.
func thoughtSignature(rs []loop.Reasoning) []byte {
	for _, r := range rs {
		if r.Signature != "" {
			if b, err := base64.StdEncoding.DecodeString(r.Signature); err == nil {
				return b
			}
		}
	}
	return nil
}

func toReply(out *genai.GenerateContentResponse) (*loop.Reply, error) {
	if out == nil {
		return nil, errors.New("the response is empty")
	}
	reply := &loop.Reply{}
	if u := out.UsageMetadata; u != nil {
		// Thinking is billed as output: the thoughts' tokens are output
		// tokens, beside the candidates'.
		reply.Usage = loop.TokenUsage{
			InputTokens:       int64(u.PromptTokenCount),
			CachedInputTokens: int64(u.CachedContentTokenCount),
			OutputTokens:      int64(u.CandidatesTokenCount) + int64(u.ThoughtsTokenCount),
		}
	}
	if f := out.PromptFeedback; f != nil && f.BlockReason != "" {
		reply.Refusal = RefusedBySafety + " (prompt blocked: " + string(f.BlockReason) + ")"
		return reply, nil
	}
	if len(out.Candidates) == 0 {
		return nil, errors.New("the response has no candidates")
	}
	cand := out.Candidates[0]
	switch cand.FinishReason {
	case genai.FinishReasonMaxTokens:
		reply.Truncated = true
	case genai.FinishReasonSafety, genai.FinishReasonProhibitedContent, genai.FinishReasonBlocklist, genai.FinishReasonSPII, genai.FinishReasonRecitation:
		reply.Refusal = RefusedBySafety + " (finishReason " + string(cand.FinishReason) + ")"
		return reply, nil
	}
	var text strings.Builder
	if cand.Content != nil {
		for _, p := range cand.Content.Parts {
			switch {
			case p.Thought:
				// A thought summary is not the answer.
			case p.FunctionCall != nil:
				args, err := json.Marshal(p.FunctionCall.Args)
				if err != nil {
					return nil, fmt.Errorf("call %q: arguments: %w", p.FunctionCall.Name, err)
				}
				if p.FunctionCall.Args == nil {
					args = []byte("{}")
				}
				reply.ToolCalls = append(reply.ToolCalls, loop.ToolCall{Name: p.FunctionCall.Name, Arguments: model.Arguments(args)})
			default:
				text.WriteString(p.Text)
			}
			if len(p.ThoughtSignature) > 0 && len(reply.Reasoning) == 0 {
				reply.Reasoning = []loop.Reasoning{{Signature: base64.StdEncoding.EncodeToString(p.ThoughtSignature)}}
			}
		}
	}
	reply.Content = text.String()
	return reply, nil
}
