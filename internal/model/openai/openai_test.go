package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/modeltest"
)

const modelName = "gpt-5.1"

// provider is this adapter as the conformance suite and the tests below
// see it.
var provider = modeltest.Provider{
	Name:    Name,
	New:     func(c model.Config) (loop.Model, error) { return New(c) },
	Path:    "/v1",
	Model:   modelName,
	Request: billingRequest, RoundTrip: roundTripRequest,
	Endpoint: "/v1/chat/completions",
	Text:     "response_text.json", ToolCall: "response_one_tool_call.json", ToolCalls: "response_tool_calls.json",
	Truncated: "response_truncated.json",
	Refusals: map[string]string{"response_refusal.json": "I can't help with reading other customers' card numbers.",
		"response_content_filter.json": RefusedByFilter},
	RateLimit: "error_rate_limit.json", ServerError: "error_server.json", Unauthorized: "error_unauthorized.json",
	RateLimitMessage:    "Rate limit reached for gpt-5.1",
	ServerErrorMessage:  "The server had an error",
	UnauthorizedMessage: "Incorrect API key provided",
	KeyHeader:           "Authorization",
	KeyValue:            func(key string) string { return "Bearer " + key },
	// Chat completions carry the system prompt as the first message.
	Prefix: func(t testing.TB, body []byte) string {
		m := modeltest.Members(t, body)
		var msgs []json.RawMessage
		if err := json.Unmarshal(m["messages"], &msgs); err != nil {
			t.Fatal(err)
		}
		return string(m["tools"]) + string(msgs[0])
	},
}

func billingRequest() *loop.Request { return modeltest.BillingRequest(modelName) }

func roundTripRequest() *loop.Request { return modeltest.RoundTripRequest(modelName) }

func newFixture(t *testing.T, edit func(*model.Config), steps ...modeltest.Step) *modeltest.Fixture {
	t.Helper()
	return provider.Fixture(t, edit, steps...)
}

func TestComplete_connectionErrorsAreRetried(t *testing.T) {
	f := newFixture(t, func(c *model.Config) { c.MaxRetries = 1 }, modeltest.Reply(nil))
	f.Srv.Close() // nothing listens any more

	_, err := f.Model.Complete(context.Background(), billingRequest())

	var pe *model.ProviderError
	if !errors.As(err, &pe) || pe.Status != 0 || pe.Attempts != 2 {
		t.Fatalf("got %v, want a ProviderError without status after 2 attempts", err)
	}
	if !strings.HasPrefix(err.Error(), "openai: no response after 2 attempts: ") {
		t.Errorf("error %q does not say no response came", err)
	}
	if calls := f.Retries.Calls(); len(calls) != 1 || calls[0].Status != 0 || calls[0].Err == "" {
		t.Errorf("OnRetry saw %+v, want one call with status 0 and the transport error", calls)
	}
}

func TestNew_rejectsIncompleteConfig(t *testing.T) {
	tests := map[string]model.Config{
		"no model":         {KeySource: model.StaticKey("k")},
		"relative baseURL": {Model: "gpt-5.1", KeySource: model.StaticKey("k"), BaseURL: "vllm:8000/v1"},
	}
	for name, cfg := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := New(cfg); err == nil {
				t.Error("New accepted the config")
			}
		})
	}
}

// A server that needs no key (a local vLLM) is called without any
// Authorization header, and never with a key from the operator's
// environment.
func TestComplete_withoutAKeySourceSendsNoKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-the-operators-environment")
	f := newFixture(t, func(c *model.Config) { c.KeySource = nil }, modeltest.Reply(modeltest.File(t, "response_text.json")))
	if _, err := f.Model.Complete(context.Background(), billingRequest()); err != nil {
		t.Fatal(err)
	}
	if f.Keys != 0 {
		t.Errorf("the key source was called %d times", f.Keys)
	}
	for name, values := range f.Srv.Requests()[0].Header {
		for _, v := range values {
			if name == "Authorization" || strings.Contains(v, "sk-") {
				t.Errorf("header %s: %q was sent to a server that needs no key", name, v)
			}
		}
	}
}

func TestEstimateInputTokens_isNotBelowTheBytesSent(t *testing.T) {
	req := roundTripRequest()
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))
	if _, err := f.Model.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	// The wire body holds every text the model sees plus JSON syntax, so
	// it is longer than the text; the estimate must still cover the text.
	text := len(req.System)
	for _, tool := range req.Tools {
		text += len(tool.Name) + len(tool.Description) + len(tool.Parameters)
	}
	for _, m := range req.Messages {
		text += len(m.Content)
		for _, c := range m.ToolCalls {
			text += len(c.Name) + len(c.Arguments)
		}
	}
	if got := (loop.ByteEstimator{}).EstimateInputTokens(req); got < int64(text) {
		t.Errorf("estimate %d is below the %d bytes of text sent", got, text)
	}
}

func TestNew_ignoresTheOperatorsOpenAIEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-the-environment")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))

	if _, err := f.Model.Complete(context.Background(), billingRequest()); err != nil {
		t.Fatal(err)
	}
	if got := f.Srv.Requests()[0].Header.Get("Authorization"); got != "Bearer "+modeltest.TestKey {
		t.Errorf("Authorization = %q, want the configured key", got)
	}
}

// With the SDK's retries off (as AgentRun builds providers: the engine
// retries), one attempt's failure says whether it is transient and how
// long the server asked to wait.
func TestComplete_oneAttemptReportsTransienceAndRetryAfter(t *testing.T) {
	noRetries := func(c *model.Config) { c.MaxRetries = -1 }
	f := newFixture(t, noRetries, modeltest.Step{Status: http.StatusServiceUnavailable,
		Header: map[string]string{"Retry-After": "12"}, Body: modeltest.File(t, "error_server.json")})
	_, err := f.Model.Complete(context.Background(), billingRequest())
	var te loop.TransientError
	if !errors.As(err, &te) || !te.Transient() || te.RetryAfter() != 12*time.Second || len(f.Srv.Requests()) != 1 {
		t.Fatalf("got %v after %d attempts, want one transient failure asking for 12s", err, len(f.Srv.Requests()))
	}

	f = newFixture(t, noRetries, modeltest.Step{Status: http.StatusUnauthorized, Body: modeltest.File(t, "error_unauthorized.json")})
	_, err = f.Model.Complete(context.Background(), billingRequest())
	if !errors.As(err, &te) || te.Transient() {
		t.Fatalf("HTTP 401: got %v, want a failure that is not transient", err)
	}

	f = newFixture(t, noRetries, modeltest.Reply(nil))
	f.Srv.Close()
	_, err = f.Model.Complete(context.Background(), billingRequest())
	if !errors.As(err, &te) || !te.Transient() {
		t.Fatalf("connection refused: got %v, want a transient failure", err)
	}
}

func TestConformance(t *testing.T) { modeltest.Run(t, provider) }

// A server that reports negative token counts lowers nothing: each count
// is 0, and the others are kept.
func TestComplete_negativeUsageCountsAsZero(t *testing.T) {
	for usage, want := range map[string]loop.TokenUsage{
		`{"prompt_tokens":-5300,"completion_tokens":-140,"total_tokens":-5440,"prompt_tokens_details":{"cached_tokens":-4864,"cache_write_tokens":-256}}`: {},
		`{"prompt_tokens":5300,"completion_tokens":-140,"total_tokens":5160,"prompt_tokens_details":{"cached_tokens":-4864,"cache_write_tokens":256}}`: {
			InputTokens: 5300, CacheWriteTokens: 256},
	} {
		f := newFixture(t, nil, modeltest.Reply([]byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-5.1",`+
			`"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Done."}}],"usage":`+usage+`}`)))
		got, err := f.Model.Complete(context.Background(), billingRequest())
		if err != nil {
			t.Fatal(err)
		}
		if got.Usage != want {
			t.Errorf("usage %s became %+v, want %+v", usage, got.Usage, want)
		}
	}
}

// responsesProvider is the adapter with spec.model.api responses: the
// same model behind the Responses API's wire format.
var responsesProvider = func() modeltest.Provider {
	p := provider
	p.New = func(c model.Config) (loop.Model, error) { return NewResponses(c) }
	p.Endpoint = "/v1/responses"
	p.Dir = "responses"
	p.Refusals = map[string]string{"response_refusal.json": "I can't help with reading other customers' card numbers.",
		"response_content_filter.json": RefusedByFilterResponses}
	// The system prompt is the instructions, beside the tools.
	p.Prefix = func(t testing.TB, body []byte) string {
		m := modeltest.Members(t, body)
		return string(m["tools"]) + string(m["instructions"])
	}
	return p
}()

func TestResponses_conformance(t *testing.T) { modeltest.Run(t, responsesProvider) }
