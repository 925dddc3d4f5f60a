package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/modeltest"
)

const testKey = "sk-test-4f9c2b7e1d"

// billingRequest is the first turn of the API document's example run.
func billingRequest() *loop.Request {
	return &loop.Request{
		Model:  "gpt-5.1",
		System: "You are a billing assistant. Answer from the records only.",
		Tools: []loop.ToolSchema{
			{
				Name:        "identify_account",
				Description: "Look up an account id by e-mail.",
				Parameters:  json.RawMessage(`{"type":"object","properties":{"email":{"type":"string"}},"required":["email"]}`),
			},
			{
				Name:        "find_invoices",
				Description: "List the invoices of an account for one month.",
				Parameters: json.RawMessage(`{
					"type": "object",
					"title": "find_invoices arguments",
					"properties": {"account_id": {"type": "string"}, "month": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"}},
					"required": ["account_id", "month"],
					"additionalProperties": false
				}`),
			},
		},
		Messages: []loop.Message{
			{Role: loop.RoleUser, Content: "The customer says they were charged twice in August. Find out what happened."},
		},
		MaxOutputTokens: 4096,
	}
}

// roundTripRequest is turn 3: two turns of calls and their results. The
// results of turn 2 are recorded out of call order, as concurrent calls
// may finish.
func roundTripRequest() *loop.Request {
	req := billingRequest()
	req.Messages = append(req.Messages,
		loop.Message{Role: loop.RoleAssistant, Turn: 1, ToolCalls: []loop.ToolCall{
			{ID: "t1-c1", Name: "identify_account", Arguments: json.RawMessage(`{"email":"r.okafor@northwind.example"}`)},
		}},
		loop.Message{Role: loop.RoleTool, Turn: 1, CallID: "t1-c1", Tool: "identify_account", Status: "ok", Content: `{"account_id":"acct_7731"}`},
		loop.Message{Role: loop.RoleAssistant, Turn: 2, Content: "Looking at both months.", ToolCalls: []loop.ToolCall{
			{ID: "t2-c1", Name: "find_invoices", Arguments: json.RawMessage(`{"account_id":"acct_7731","month":"2025-08"}`)},
			{ID: "t2-c2", Name: "find_invoices", Arguments: json.RawMessage(`{"account_id":"acct_7731","month":"2025-07"}`)},
		}},
		loop.Message{Role: loop.RoleTool, Turn: 2, CallID: "t2-c2", Tool: "find_invoices", Status: "declined", Content: "a person declined this call"},
		loop.Message{Role: loop.RoleTool, Turn: 2, CallID: "t2-c1", Tool: "find_invoices", Status: "ok", Content: `[{"id":"in_1","amount_minor":8240},{"id":"in_2","amount_minor":8240}]`},
	)
	return req
}

type fixture struct {
	srv     *modeltest.Server
	model   *Model
	retries *modeltest.Retries
	keys    int
}

func newFixture(t *testing.T, edit func(*model.Config), steps ...modeltest.Step) *fixture {
	t.Helper()
	f := &fixture{srv: modeltest.NewServer(t, steps...), retries: &modeltest.Retries{}}
	cfg := model.Config{
		BaseURL: f.srv.URL + "/v1",
		Model:   "gpt-5.1",
		KeySource: func(context.Context) (string, error) {
			f.keys++
			return testKey, nil
		},
		OnRetry: f.retries.Hook,
	}
	if edit != nil {
		edit(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.model = m
	return f
}

func TestComplete_textAnswerSendsToolsSystemAndGoal(t *testing.T) {
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))

	got, err := f.model.Complete(context.Background(), billingRequest())
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
	reqs := f.srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("got %d requests, want 1", len(reqs))
	}
	if reqs[0].Method != http.MethodPost || reqs[0].Path != "/v1/chat/completions" {
		t.Errorf("request went to %s %s, want POST /v1/chat/completions", reqs[0].Method, reqs[0].Path)
	}
	if diff := modeltest.JSONDiff(t, modeltest.File(t, "request_first_turn.json"), reqs[0].Body); diff != "" {
		t.Errorf("request body (-want +got):\n%s", diff)
	}
}

func TestComplete_toolCallsBecomeOneBatchInOrder(t *testing.T) {
	tests := []struct {
		name string
		file string
		want *loop.Reply
	}{
		{
			name: "one call",
			file: "response_one_tool_call.json",
			want: &loop.Reply{
				ToolCalls: []loop.ToolCall{
					{Name: "identify_account", Arguments: json.RawMessage(`{"email":"r.okafor@northwind.example"}`)},
				},
				Usage: loop.TokenUsage{InputTokens: 1600, OutputTokens: 40},
			},
		},
		{
			name: "several calls",
			file: "response_tool_calls.json",
			want: &loop.Reply{
				Content: "Looking at both months.",
				ToolCalls: []loop.ToolCall{
					{Name: "find_invoices", Arguments: json.RawMessage(`{"account_id":"acct_7731","month":"2025-08"}`)},
					{Name: "find_invoices", Arguments: json.RawMessage(`{"account_id":"acct_7731","month":"2025-07"}`)},
				},
				Usage: loop.TokenUsage{InputTokens: 1810, CachedInputTokens: 1536, OutputTokens: 71},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, tt.file)))
			got, err := f.model.Complete(context.Background(), billingRequest())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
		})
	}
}

func TestComplete_toolResultsFollowTheirCallsInCallOrder(t *testing.T) {
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))

	if _, err := f.model.Complete(context.Background(), roundTripRequest()); err != nil {
		t.Fatal(err)
	}
	body := f.srv.Requests()[0].Body
	if diff := modeltest.JSONDiff(t, modeltest.File(t, "request_round_trip.json"), body); diff != "" {
		t.Errorf("request body (-want +got):\n%s", diff)
	}
}

func TestComplete_reportsCachedAndCacheWriteTokens(t *testing.T) {
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_usage_cached.json")))

	got, err := f.model.Complete(context.Background(), roundTripRequest())
	if err != nil {
		t.Fatal(err)
	}
	want := loop.TokenUsage{InputTokens: 5300, CachedInputTokens: 4864, CacheWriteTokens: 256, OutputTokens: 140}
	if diff := cmp.Diff(want, got.Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

func TestComplete_finishReasons(t *testing.T) {
	tests := []struct {
		file          string
		wantTruncated bool
		wantRefusal   string
	}{
		{file: "response_truncated.json", wantTruncated: true},
		{file: "response_refusal.json", wantRefusal: "I can't help with reading other customers' card numbers."},
		{file: "response_content_filter.json", wantRefusal: RefusedByFilter},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, tt.file)))
			got, err := f.model.Complete(context.Background(), billingRequest())
			if err != nil {
				t.Fatal(err)
			}
			if got.Truncated != tt.wantTruncated || got.Refusal != tt.wantRefusal {
				t.Errorf("got Truncated=%v Refusal=%q, want %v %q", got.Truncated, got.Refusal, tt.wantTruncated, tt.wantRefusal)
			}
		})
	}
}

func TestComplete_retriesRateLimitAfterTheServersDelay(t *testing.T) {
	f := newFixture(t, nil,
		modeltest.Step{Status: http.StatusTooManyRequests, Header: map[string]string{"Retry-After-Ms": "150"}, Body: modeltest.File(t, "error_rate_limit.json")},
		modeltest.Reply(modeltest.File(t, "response_text.json")),
	)

	start := time.Now()
	got, err := f.model.Complete(context.Background(), billingRequest())
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed < 150*time.Millisecond {
		t.Errorf("the retry came after %s, before the 150ms the server asked for", elapsed)
	}
	if got.Content == "" {
		t.Error("the answer after the retry is empty")
	}
	if n := len(f.srv.Requests()); n != 2 {
		t.Errorf("got %d attempts, want 2", n)
	}
	retries := f.retries.Calls()
	if len(retries) != 1 || retries[0].Attempt != 2 || retries[0].Status != http.StatusTooManyRequests ||
		!strings.HasPrefix(retries[0].Err, "Rate limit reached for gpt-5.1") {
		t.Errorf("OnRetry saw %+v, want one call for attempt 2 after HTTP 429 with the server's message", retries)
	}
}

func TestComplete_serverErrorsUntilRetriesRunOut(t *testing.T) {
	f := newFixture(t, nil, modeltest.Step{
		Status: http.StatusInternalServerError,
		Header: map[string]string{"Retry-After": "0"},
		Body:   modeltest.File(t, "error_server.json"),
	})

	_, err := f.model.Complete(context.Background(), billingRequest())

	var pe *model.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("got %v, want a *model.ProviderError", err)
	}
	if pe.Status != 500 || pe.Attempts != 4 {
		t.Errorf("got status %d after %d attempts, want 500 after 4", pe.Status, pe.Attempts)
	}
	if !strings.HasPrefix(err.Error(), "openai: HTTP 500 after 4 attempts: The server had an error") {
		t.Errorf("error %q does not name the provider, the status and the attempts", err)
	}
	if len(pe.Message) > 210 {
		t.Errorf("the server message is %d bytes, want it cut to about 200", len(pe.Message))
	}
	if strings.Contains(err.Error(), testKey) {
		t.Errorf("the error contains the API key: %q", err)
	}
	if n := len(f.srv.Requests()); n != 4 {
		t.Errorf("got %d attempts, want 4", n)
	}
	var attempts []int
	for _, r := range f.retries.Calls() {
		attempts = append(attempts, r.Attempt)
		if r.Status != 500 || strings.Contains(r.Err, testKey) {
			t.Errorf("OnRetry saw %+v, want status 500 and no key", r)
		}
	}
	if diff := cmp.Diff([]int{2, 3, 4}, attempts); diff != "" {
		t.Errorf("retried attempts (-want +got):\n%s", diff)
	}
}

func TestComplete_unauthorizedIsNeverRetried(t *testing.T) {
	// Even when the server says the request may be retried.
	f := newFixture(t, nil, modeltest.Step{
		Status: http.StatusUnauthorized,
		Header: map[string]string{"X-Should-Retry": "true"},
		Body:   modeltest.File(t, "error_unauthorized.json"),
	})

	_, err := f.model.Complete(context.Background(), billingRequest())

	var pe *model.ProviderError
	if !errors.As(err, &pe) || pe.Status != http.StatusUnauthorized || pe.Attempts != 1 {
		t.Fatalf("got %v, want a ProviderError for HTTP 401 after 1 attempt", err)
	}
	if n := len(f.srv.Requests()); n != 1 {
		t.Errorf("got %d attempts, want 1", n)
	}
	if calls := f.retries.Calls(); len(calls) != 0 {
		t.Errorf("OnRetry was called: %+v", calls)
	}
}

func TestComplete_aRetryAfterPastTheDeadlineEndsTheCallAtOnce(t *testing.T) {
	f := newFixture(t, nil,
		modeltest.Step{Status: http.StatusTooManyRequests, Header: map[string]string{"Retry-After": "30"}, Body: modeltest.File(t, "error_rate_limit.json")},
	)

	start := time.Now()
	// The engine puts the model call's deadline on the context.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := f.model.Complete(ctx, billingRequest())
	var pe *model.ProviderError
	if !errors.As(err, &pe) || pe.Status != http.StatusTooManyRequests || pe.Attempts != 1 || pe.Timeout != 0 {
		t.Fatalf("got %v, want a ProviderError for HTTP 429 after 1 attempt", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("the call took %s; it should not wait for a retry it cannot make", elapsed)
	}
}

func TestComplete_deadlineIsEnforcedAroundTheCall(t *testing.T) {
	f := newFixture(t, nil, modeltest.Step{Hang: true})

	// The engine puts the model call's deadline on the context.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := f.model.Complete(ctx, billingRequest())

	var pe *model.ProviderError
	if !errors.As(err, &pe) || pe.Timeout != 200*time.Millisecond {
		t.Fatalf("got %v, want a ProviderError for the 200ms deadline", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(%v, context.DeadlineExceeded) is false", err)
	}
	if !strings.HasPrefix(err.Error(), "openai: no answer within 200ms") {
		t.Errorf("error %q does not say the deadline passed", err)
	}
}

func TestComplete_connectionErrorsAreRetried(t *testing.T) {
	f := newFixture(t, func(c *model.Config) { c.MaxRetries = 1 }, modeltest.Reply(nil))
	f.srv.Close() // nothing listens any more

	_, err := f.model.Complete(context.Background(), billingRequest())

	var pe *model.ProviderError
	if !errors.As(err, &pe) || pe.Status != 0 || pe.Attempts != 2 {
		t.Fatalf("got %v, want a ProviderError without status after 2 attempts", err)
	}
	if !strings.HasPrefix(err.Error(), "openai: no response after 2 attempts: ") {
		t.Errorf("error %q does not say no response came", err)
	}
	if calls := f.retries.Calls(); len(calls) != 1 || calls[0].Status != 0 || calls[0].Err == "" {
		t.Errorf("OnRetry saw %+v, want one call with status 0 and the transport error", calls)
	}
}

func TestComplete_keyIsReadAtEveryCallAndSentOnlyAsBearerToken(t *testing.T) {
	f := newFixture(t, nil,
		modeltest.Reply(modeltest.File(t, "response_one_tool_call.json")),
		modeltest.Step{Status: http.StatusInternalServerError, Header: map[string]string{"Retry-After": "0"}, Body: modeltest.File(t, "error_server.json")},
	)
	if _, err := f.model.Complete(context.Background(), billingRequest()); err != nil {
		t.Fatal(err)
	}
	_, err := f.model.Complete(context.Background(), billingRequest())
	if err == nil {
		t.Fatal("the second call succeeded, want the server error")
	}

	if f.keys != 2 {
		t.Errorf("the key source was called %d times for 2 calls", f.keys)
	}
	for i, r := range f.srv.Requests() {
		if got := r.Header.Get("Authorization"); got != "Bearer "+testKey {
			t.Errorf("request %d: Authorization = %q, want the bearer key", i, got)
		}
		if strings.Contains(string(r.Body), testKey) {
			t.Errorf("request %d: the body contains the key", i)
		}
	}
	if strings.Contains(err.Error(), testKey) || strings.Contains(strings.ReplaceAll(err.Error(), " ", ""), testKey) {
		t.Errorf("the error contains the key: %q", err)
	}
	var pe *model.ProviderError
	if errors.As(err, &pe) && pe.Err != nil && strings.Contains(pe.Err.Error(), testKey) {
		t.Errorf("the wrapped error contains the key")
	}
}

func TestComplete_keySourceFailureSendsNothing(t *testing.T) {
	f := newFixture(t, func(c *model.Config) {
		c.KeySource = func(context.Context) (string, error) { return "", errors.New(`secret "openai" not found`) }
	}, modeltest.Reply(modeltest.File(t, "response_text.json")))

	_, err := f.model.Complete(context.Background(), billingRequest())

	if err == nil || err.Error() != `openai: API key unavailable: secret "openai" not found` {
		t.Errorf("got %v, want the key source's failure", err)
	}
	if n := len(f.srv.Requests()); n != 0 {
		t.Errorf("%d requests were sent without a key", n)
	}
}

func TestComplete_prefixBytesAreTheSameOnEveryTurn(t *testing.T) {
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))
	// Map iteration order changes from run to run; a few turns make an
	// unstable serialization show.
	for i := 0; i < 5; i++ {
		if _, err := f.model.Complete(context.Background(), billingRequest()); err != nil {
			t.Fatal(err)
		}
		if _, err := f.model.Complete(context.Background(), roundTripRequest()); err != nil {
			t.Fatal(err)
		}
	}
	prefix := func(body []byte) string {
		m := modeltest.Members(t, body)
		var msgs []json.RawMessage
		if err := json.Unmarshal(m["messages"], &msgs); err != nil {
			t.Fatal(err)
		}
		return string(m["tools"]) + string(msgs[0])
	}
	reqs := f.srv.Requests()
	first := prefix(reqs[0].Body)
	for i, r := range reqs[1:] {
		if got := prefix(r.Body); got != first {
			t.Fatalf("turn %d: the system and tools bytes differ:\n%s\n%s", i+2, first, got)
		}
	}
}

func TestNew_rejectsIncompleteConfig(t *testing.T) {
	tests := map[string]model.Config{
		"no key source":    {Model: "gpt-5.1"},
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

func TestEstimateInputTokens_isNotBelowTheBytesSent(t *testing.T) {
	req := roundTripRequest()
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))
	if _, err := f.model.Complete(context.Background(), req); err != nil {
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
	if got := f.model.EstimateInputTokens(req); got < int64(text) {
		t.Errorf("estimate %d is below the %d bytes of text sent", got, text)
	}
}

func TestNew_ignoresTheOperatorsOpenAIEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-the-environment")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))

	if _, err := f.model.Complete(context.Background(), billingRequest()); err != nil {
		t.Fatal(err)
	}
	if got := f.srv.Requests()[0].Header.Get("Authorization"); got != "Bearer "+testKey {
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
	_, err := f.model.Complete(context.Background(), billingRequest())
	var te loop.TransientError
	if !errors.As(err, &te) || !te.Transient() || te.RetryAfter() != 12*time.Second || len(f.srv.Requests()) != 1 {
		t.Fatalf("got %v after %d attempts, want one transient failure asking for 12s", err, len(f.srv.Requests()))
	}

	f = newFixture(t, noRetries, modeltest.Step{Status: http.StatusUnauthorized, Body: modeltest.File(t, "error_unauthorized.json")})
	_, err = f.model.Complete(context.Background(), billingRequest())
	if !errors.As(err, &te) || te.Transient() {
		t.Fatalf("HTTP 401: got %v, want a failure that is not transient", err)
	}

	f = newFixture(t, noRetries, modeltest.Reply(nil))
	f.srv.Close()
	_, err = f.model.Complete(context.Background(), billingRequest())
	if !errors.As(err, &te) || !te.Transient() {
		t.Fatalf("connection refused: got %v, want a transient failure", err)
	}
}
