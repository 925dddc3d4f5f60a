package anthropic

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/modeltest"
)

const modelName = "claude-sonnet-4-5"

// provider is this adapter as the conformance suite and the tests below
// see it.
var provider = modeltest.Provider{
	Name:    Name,
	New:     func(c model.Config) (loop.Model, error) { return New(c) },
	Model:   modelName,
	Request: billingRequest, RoundTrip: roundTripRequest,
	Endpoint: "/v1/messages",
	Text:     "response_text.json", ToolCall: "response_one_tool_use.json", ToolCalls: "response_tool_uses.json",
	Truncated: "response_max_tokens.json",
	Refusals:  map[string]string{"response_refusal.json": "The request asks for other customers' card numbers."},
	RateLimit: "error_rate_limit.json", ServerError: "error_api.json", Unauthorized: "error_authentication.json",
	RateLimitMessage:    "This request would exceed the rate limit",
	ServerErrorMessage:  "Internal server error",
	UnauthorizedMessage: "invalid x-api-key",
	// The header the Messages API documents for API keys.
	KeyHeader: "X-Api-Key",
	KeyValue:  func(key string) string { return key },
	Prefix: func(t testing.TB, body []byte) string {
		m := modeltest.Members(t, body)
		return string(m["tools"]) + string(m["system"])
	},
}

func billingRequest() *loop.Request { return modeltest.BillingRequest(modelName) }

// roundTripRequest is turn 3, then a note for the model.
func roundTripRequest() *loop.Request { return roundTripTo(modelName) }

// roundTripTo is roundTripRequest to model m.
func roundTripTo(m string) *loop.Request {
	req := modeltest.RoundTripRequest(m)
	req.Messages = append(req.Messages, loop.Message{Role: loop.RoleUser, Turn: 2, Content: "Budget: 2 of 12 turns left."})
	return req
}

// onPlatform is p, Claude on a cloud platform, completed with what the
// platforms share with the first-party API: the same requests to model m,
// the same responses and prompt prefix. The key stands for the
// platform's credentials.
func onPlatform(m string, p modeltest.Provider) modeltest.Provider {
	p.Model = m
	p.Request = func() *loop.Request { return modeltest.BillingRequest(m) }
	p.RoundTrip = func() *loop.Request { return roundTripTo(m) }
	p.Text, p.ToolCall, p.ToolCalls = provider.Text, provider.ToolCall, provider.ToolCalls
	p.Truncated, p.Refusals = provider.Truncated, provider.Refusals
	p.Credential = "credentials"
	p.Prefix = provider.Prefix
	return p
}

func newFixture(t *testing.T, edit func(*model.Config), steps ...modeltest.Step) *modeltest.Fixture {
	t.Helper()
	return provider.Fixture(t, edit, steps...)
}

func TestComplete_sendsTheAPIVersionHeader(t *testing.T) {
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))
	if _, err := f.Model.Complete(context.Background(), billingRequest()); err != nil {
		t.Fatal(err)
	}
	if f.Srv.Requests()[0].Header.Get("Anthropic-Version") == "" {
		t.Error("no anthropic-version header")
	}
}

func TestComplete_cacheBreakpointEndsTheStablePrefix(t *testing.T) {
	// The API reads tools, then system: with a system prompt the
	// breakpoint goes on it (request_first_turn.json); without one, on the
	// last tool; with neither, nowhere.
	t.Run("no system prompt", func(t *testing.T) {
		f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))
		req := billingRequest()
		req.System = ""
		if _, err := f.Model.Complete(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if diff := modeltest.JSONDiff(t, modeltest.File(t, "request_no_system.json"), f.Srv.Requests()[0].Body); diff != "" {
			t.Errorf("request body (-want +got):\n%s", diff)
		}
	})
	t.Run("neither system nor tools", func(t *testing.T) {
		f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))
		req := billingRequest()
		req.System, req.Tools = "", nil
		if _, err := f.Model.Complete(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if body := string(f.Srv.Requests()[0].Body); strings.Contains(body, "cache_control") {
			t.Errorf("a breakpoint was set without a prefix: %s", body)
		}
	})
}

func TestBuildParams_rejectsASchemaThatIsNotAnObject(t *testing.T) {
	req := billingRequest()
	req.Tools[0].Parameters = json.RawMessage(`{"type":"string"}`)
	if _, err := buildParams(req, "claude-sonnet-4-5"); err == nil {
		t.Error("a non-object input schema was accepted")
	}
}

func TestBuildParams_leavesOutEmptyAssistantTurns(t *testing.T) {
	req := billingRequest()
	req.Messages = append(req.Messages,
		loop.Message{Role: loop.RoleAssistant},
		loop.Message{Role: loop.RoleUser, Content: "Please answer."},
	)
	p, err := buildParams(req, "claude-sonnet-4-5")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Messages) != 1 || len(p.Messages[0].OfUser.Content) != 2 {
		t.Errorf("got %d messages, want the two user texts in one user turn", len(p.Messages))
	}
}

func TestNew_ignoresTheOperatorsAnthropicEnvironment(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-the-environment")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "token-from-the-environment")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))

	if _, err := f.Model.Complete(context.Background(), billingRequest()); err != nil {
		t.Fatal(err)
	}
	h := f.Srv.Requests()[0].Header
	if h.Get("X-Api-Key") != modeltest.TestKey || h.Get("Authorization") != "" {
		t.Errorf("x-api-key = %q, authorization = %q; want only the configured key", h.Get("X-Api-Key"), h.Get("Authorization"))
	}
}

func TestConformance(t *testing.T) { modeltest.Run(t, provider) }

// A server that reports negative token counts lowers nothing: each count
// is 0 before the input's parts are added up, and a sum too large for an
// int64 stays at its largest value instead of turning negative.
func TestComplete_negativeUsageCountsAsZero(t *testing.T) {
	for usage, want := range map[string]loop.TokenUsage{
		`{"input_tokens":-180,"cache_creation_input_tokens":-256,"cache_read_input_tokens":-4864,"output_tokens":-140}`: {},
		`{"input_tokens":-180,"cache_creation_input_tokens":-256,"cache_read_input_tokens":4864,"output_tokens":140}`: {
			InputTokens: 4864, CachedInputTokens: 4864, OutputTokens: 140},
		`{"input_tokens":9000000000000000000,"cache_creation_input_tokens":0,"cache_read_input_tokens":9000000000000000000,"output_tokens":1}`: {
			InputTokens: math.MaxInt64, CachedInputTokens: 9000000000000000000, OutputTokens: 1},
	} {
		f := newFixture(t, nil, modeltest.Reply([]byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",`+
			`"content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn","stop_sequence":null,"usage":`+usage+`}`)))
		got, err := f.Model.Complete(context.Background(), billingRequest())
		if err != nil {
			t.Fatal(err)
		}
		if got.Usage != want {
			t.Errorf("usage %s became %+v, want %+v", usage, got.Usage, want)
		}
	}
}
