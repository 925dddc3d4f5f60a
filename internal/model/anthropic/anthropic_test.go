package anthropic

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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
	Text: "response_text.json", ToolCall: "response_one_tool_use.json",
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
func roundTripRequest() *loop.Request {
	req := modeltest.RoundTripRequest(modelName)
	req.Messages = append(req.Messages, loop.Message{Role: loop.RoleUser, Turn: 2, Content: "Budget: 2 of 12 turns left."})
	return req
}

func newFixture(t *testing.T, edit func(*model.Config), steps ...modeltest.Step) *modeltest.Fixture {
	t.Helper()
	return provider.Fixture(t, edit, steps...)
}

func TestComplete_textAnswerSendsToolsSystemAndGoal(t *testing.T) {
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))

	got, err := f.Model.Complete(context.Background(), billingRequest())
	if err != nil {
		t.Fatal(err)
	}
	want := &loop.Reply{
		Content: "Two separate charges of 82.40 were made on 3 and 4 August; the second one is a duplicate.",
		Usage:   loop.TokenUsage{InputTokens: 2100, OutputTokens: 60},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	reqs := f.Srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("got %d requests, want 1", len(reqs))
	}
	if reqs[0].Method != http.MethodPost || reqs[0].Path != "/v1/messages" {
		t.Errorf("request went to %s %s, want POST /v1/messages", reqs[0].Method, reqs[0].Path)
	}
	if reqs[0].Header.Get("Anthropic-Version") == "" {
		t.Error("no anthropic-version header")
	}
	if diff := modeltest.JSONDiff(t, modeltest.File(t, "request_first_turn.json"), reqs[0].Body); diff != "" {
		t.Errorf("request body (-want +got):\n%s", diff)
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

func TestComplete_toolUsesBecomeOneBatchInOrder(t *testing.T) {
	tests := []struct {
		name string
		file string
		want *loop.Reply
	}{
		{
			name: "one call",
			file: "response_one_tool_use.json",
			want: &loop.Reply{
				ToolCalls: []loop.ToolCall{
					{Name: "identify_account", Arguments: json.RawMessage(`{"email": "r.okafor@northwind.example"}`)},
				},
				Usage: loop.TokenUsage{InputTokens: 1600, OutputTokens: 40},
			},
		},
		{
			name: "several calls",
			file: "response_tool_uses.json",
			want: &loop.Reply{
				Content: "Looking at both months.",
				ToolCalls: []loop.ToolCall{
					{Name: "find_invoices", Arguments: json.RawMessage(`{"account_id": "acct_7731", "month": "2025-08"}`)},
					{Name: "find_invoices", Arguments: json.RawMessage(`{"account_id": "acct_7731", "month": "2025-07"}`)},
				},
				Usage: loop.TokenUsage{InputTokens: 1810, CachedInputTokens: 1536, OutputTokens: 71},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, tt.file)))
			got, err := f.Model.Complete(context.Background(), billingRequest())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(sameJSON)); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
		})
	}
}

// sameJSON compares arguments by value: the SDK keeps the response's
// bytes, spacing included.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return cmp.Equal(x, y)
}

func TestComplete_toolResultsGoInOneUserTurnInCallOrder(t *testing.T) {
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))

	if _, err := f.Model.Complete(context.Background(), roundTripRequest()); err != nil {
		t.Fatal(err)
	}
	body := f.Srv.Requests()[0].Body
	if diff := modeltest.JSONDiff(t, modeltest.File(t, "request_round_trip.json"), body); diff != "" {
		t.Errorf("request body (-want +got):\n%s", diff)
	}
}

func TestComplete_inputTokensAddCacheReadsAndWrites(t *testing.T) {
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_usage_cached.json")))

	got, err := f.Model.Complete(context.Background(), roundTripRequest())
	if err != nil {
		t.Fatal(err)
	}
	want := loop.TokenUsage{InputTokens: 180 + 4864 + 256, CachedInputTokens: 4864, CacheWriteTokens: 256, OutputTokens: 140}
	if diff := cmp.Diff(want, got.Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

func TestComplete_stopReasons(t *testing.T) {
	tests := []struct {
		file          string
		wantTruncated bool
		wantRefusal   string
	}{
		{file: "response_max_tokens.json", wantTruncated: true},
		{file: "response_refusal.json", wantRefusal: "The request asks for other customers' card numbers."},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, tt.file)))
			got, err := f.Model.Complete(context.Background(), billingRequest())
			if err != nil {
				t.Fatal(err)
			}
			if got.Truncated != tt.wantTruncated || got.Refusal != tt.wantRefusal {
				t.Errorf("got Truncated=%v Refusal=%q, want %v %q", got.Truncated, got.Refusal, tt.wantTruncated, tt.wantRefusal)
			}
		})
	}
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
