package modeltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
)

// Provider describes one provider adapter to the conformance suite: how
// to build it and what its server says. Its testdata files are read from
// the adapter's own testdata directory.
type Provider struct {
	// Name is the provider's name, which its errors start with.
	Name string
	// New builds the adapter.
	New func(model.Config) (loop.Model, error)
	// Path is appended to the test server's URL to make the base URL
	// ("/v1" for OpenAI-compatible servers).
	Path string
	// Model is the model name of the requests.
	Model string
	// Request is a first turn; RoundTrip a later turn with tool results.
	Request, RoundTrip func() *loop.Request
	// Endpoint is the path the requests go to.
	Endpoint string
	// Testdata files: a text answer, an answer with one tool call, one
	// with several calls and text, and the error bodies for HTTP 429, 500
	// and 401.
	Text, ToolCall, ToolCalls, RateLimit, ServerError, Unauthorized string
	// Truncated is an answer cut at the output limit; Refusals are answers
	// the model or the provider refused, by file, with the refusal each
	// must carry.
	Truncated string
	Refusals  map[string]string
	// CachedUsage, when set, is what response_usage_cached.json becomes
	// instead of the suite's usage with cache reads and writes: for a
	// provider whose usage has no cache writes (Gemini bills none).
	CachedUsage *loop.TokenUsage
	// The start of the message in each error body.
	RateLimitMessage, ServerErrorMessage, UnauthorizedMessage string
	// KeyHeader is the one header that carries the API key, as
	// KeyValue(key).
	KeyHeader string
	KeyValue  func(key string) string
	// Auth, when set, checks a request's authentication instead of
	// KeyHeader and KeyValue, for credentials the request carries only
	// as a signature (AWS SigV4); with KeyHeader empty, no header may
	// contain the key at all.
	Auth func(t testing.TB, key string, r Recorded)
	// Dir, when set, is a directory under testdata whose files are read
	// before the ones of the same name in testdata itself: a cloud
	// platform's request bodies and error bodies, beside the vendor API's
	// answers, which it serves unchanged.
	Dir string
	// Credential is what the key stands for in errors: "API key" when
	// empty, "credentials" for a cloud identity's token or secret.
	Credential string
	// Prefix is the part of a request body that must be the same bytes on
	// every turn (the tools and the system prompt), for prompt caching.
	Prefix func(t testing.TB, body []byte) string
}

// file reads testdata/Dir/name, or testdata/name when there is none.
func (p Provider) file(t testing.TB, name string) []byte {
	t.Helper()
	if p.Dir != "" {
		if b, err := os.ReadFile(filepath.Join("testdata", p.Dir, name)); err == nil {
			return b
		}
	}
	return File(t, name)
}

// TestKey is the API key the suite configures.
const TestKey = "sk-test-4f9c2b7e1d"

// Fixture is an adapter configured against a scripted server, with the
// TestKey from a key source that counts its calls.
type Fixture struct {
	Srv     *Server
	Model   loop.Model
	Retries *Retries
	// Keys counts the calls of the key source.
	Keys int
}

// Fixture starts a server for steps and builds p's adapter for it; edit,
// when set, changes the configuration first.
func (p Provider) Fixture(t *testing.T, edit func(*model.Config), steps ...Step) *Fixture {
	t.Helper()
	f := &Fixture{Srv: NewServer(t, steps...), Retries: &Retries{}}
	cfg := model.Config{
		BaseURL: f.Srv.URL + p.Path,
		Model:   p.Model,
		KeySource: func(context.Context) (string, error) {
			f.Keys++
			return TestKey, nil
		},
		OnRetry: f.Retries.Hook,
	}
	if edit != nil {
		edit(&cfg)
	}
	m, err := p.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.Model = m
	return f
}

// BillingRequest is the first turn of the API document's example run.
func BillingRequest(modelName string) *loop.Request {
	return &loop.Request{
		Model:  modelName,
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

// RoundTripRequest is turn 3 of that run: two turns of calls and their
// results. The results of turn 2 are recorded out of call order, as
// concurrent calls may finish.
func RoundTripRequest(modelName string) *loop.Request {
	req := AnsweredIdentify(BillingRequest(modelName), nil)
	req.Messages = append(req.Messages,
		loop.Message{Role: loop.RoleAssistant, Turn: 2, Content: "Looking at both months.", ToolCalls: []loop.ToolCall{
			{ID: "t2-c1", Name: "find_invoices", Arguments: json.RawMessage(`{"account_id":"acct_7731","month":"2025-08"}`)},
			{ID: "t2-c2", Name: "find_invoices", Arguments: json.RawMessage(`{"account_id":"acct_7731","month":"2025-07"}`)},
		}},
		loop.Message{Role: loop.RoleTool, Turn: 2, CallID: "t2-c2", Tool: "find_invoices", Status: "declined", Content: "a person declined this call"},
		loop.Message{Role: loop.RoleTool, Turn: 2, CallID: "t2-c1", Tool: "find_invoices", Status: "ok", Content: `[{"id":"in_1","amount_minor":8240},{"id":"in_2","amount_minor":8240}]`},
	)
	return req
}

// AnsweredIdentify appends turn 1 of the example run to req, as the
// engine builds the next request: the model's call of identify_account,
// with the reasoning it returned (nil for none), and the call's result.
func AnsweredIdentify(req *loop.Request, reasoning []loop.Reasoning) *loop.Request {
	req.Messages = append(req.Messages,
		loop.Message{Role: loop.RoleAssistant, Turn: 1, Reasoning: reasoning, ToolCalls: []loop.ToolCall{
			{ID: "t1-c1", Name: "identify_account", Arguments: json.RawMessage(`{"email":"r.okafor@northwind.example"}`)}}},
		loop.Message{Role: loop.RoleTool, Turn: 1, CallID: "t1-c1", Tool: "identify_account", Status: "ok", Content: `{"account_id":"acct_7731"}`})
	return req
}

// Run runs the behaviour every provider must share (retries, deadlines,
// the key's handling, a stable prefix, what the example run's requests
// and replies become, the reply limit) against p, one subtest each.
func Run(t *testing.T, p Provider) {
	for _, c := range []struct {
		name string
		test func(*testing.T, Provider)
	}{
		{"RetriesRateLimitAfterTheServersDelay", retriesRateLimitAfterTheServersDelay},
		{"ServerErrorsUntilRetriesRunOut", serverErrorsUntilRetriesRunOut},
		{"UnauthorizedIsNeverRetried", unauthorizedIsNeverRetried},
		{"ARetryAfterPastTheDeadlineEndsTheCallAtOnce", aRetryAfterPastTheDeadlineEndsTheCallAtOnce},
		{"DeadlineIsEnforcedAroundTheCall", deadlineIsEnforcedAroundTheCall},
		{"KeyIsReadAtEveryCallAndSentOnlyInItsHeader", keyIsReadAtEveryCallAndSentOnlyInItsHeader},
		{"KeySourceFailureSendsNothing", keySourceFailureSendsNothing},
		{"PrefixBytesAreTheSameOnEveryTurn", prefixBytesAreTheSameOnEveryTurn},
		{"TextAnswerSendsTheFirstTurn", textAnswerSendsTheFirstTurn},
		{"ToolCallsBecomeOneBatchInOrder", toolCallsBecomeOneBatchInOrder},
		{"ToolResultsFollowTheirCalls", toolResultsFollowTheirCalls},
		{"CachedUsageIsReportedWhole", cachedUsageIsReportedWhole},
		{"TruncatedAndRefusedAnswersSaySo", truncatedAndRefusedAnswersSaySo},
		{"AHugeReplyIsNotRead", aHugeReplyIsNotRead},
		{"TheReplyLimitIsConfigurable", theReplyLimitIsConfigurable},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, p) })
	}
}

func retriesRateLimitAfterTheServersDelay(t *testing.T, p Provider) {
	f := p.Fixture(t, nil,
		Step{Status: http.StatusTooManyRequests, Header: map[string]string{"Retry-After-Ms": "150"}, Body: p.file(t, p.RateLimit)},
		Reply(p.file(t, p.Text)),
	)
	start := time.Now()
	got, err := f.Model.Complete(context.Background(), p.Request())
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed < 150*time.Millisecond {
		t.Errorf("the retry came after %s, before the 150ms the server asked for", elapsed)
	}
	if got.Content == "" {
		t.Error("the answer after the retry is empty")
	}
	if n := len(f.Srv.Requests()); n != 2 {
		t.Errorf("got %d attempts, want 2", n)
	}
	retries := f.Retries.Calls()
	if len(retries) != 1 || retries[0].Attempt != 2 || retries[0].Status != http.StatusTooManyRequests ||
		!strings.HasPrefix(retries[0].Err, p.RateLimitMessage) {
		t.Errorf("OnRetry saw %+v, want one call for attempt 2 after HTTP 429 with the server's message", retries)
	}
}

func serverErrorsUntilRetriesRunOut(t *testing.T, p Provider) {
	f := p.Fixture(t, nil, Step{Status: http.StatusInternalServerError, Header: map[string]string{"Retry-After": "0"}, Body: p.file(t, p.ServerError)})
	_, err := f.Model.Complete(context.Background(), p.Request())
	var pe *model.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("got %v, want a *model.ProviderError", err)
	}
	if pe.Status != 500 || pe.Attempts != 4 {
		t.Errorf("got status %d after %d attempts, want 500 after 4", pe.Status, pe.Attempts)
	}
	if want := p.Name + ": HTTP 500 after 4 attempts: " + p.ServerErrorMessage; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start %q (the provider, the status and the attempts)", err, want)
	}
	if len(pe.Message) > 210 {
		t.Errorf("the server message is %d bytes, want it cut to about 200", len(pe.Message))
	}
	if strings.Contains(err.Error(), TestKey) {
		t.Errorf("the error contains the API key: %q", err)
	}
	if n := len(f.Srv.Requests()); n != 4 {
		t.Errorf("got %d attempts, want 4", n)
	}
	var attempts []int
	for _, r := range f.Retries.Calls() {
		attempts = append(attempts, r.Attempt)
		if r.Status != 500 || strings.Contains(r.Err, TestKey) {
			t.Errorf("OnRetry saw %+v, want status 500 and no key", r)
		}
	}
	if diff := cmp.Diff([]int{2, 3, 4}, attempts); diff != "" {
		t.Errorf("retried attempts (-want +got):\n%s", diff)
	}
}

func unauthorizedIsNeverRetried(t *testing.T, p Provider) {
	// Even when the server says the request may be retried.
	f := p.Fixture(t, nil, Step{Status: http.StatusUnauthorized, Header: map[string]string{"X-Should-Retry": "true"}, Body: p.file(t, p.Unauthorized)})
	_, err := f.Model.Complete(context.Background(), p.Request())
	var pe *model.ProviderError
	if !errors.As(err, &pe) || pe.Status != http.StatusUnauthorized || pe.Attempts != 1 {
		t.Fatalf("got %v, want a ProviderError for HTTP 401 after 1 attempt", err)
	}
	if want := p.Name + ": HTTP 401 after 1 attempt: " + p.UnauthorizedMessage; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start %q", err, want)
	}
	if n := len(f.Srv.Requests()); n != 1 {
		t.Errorf("got %d attempts, want 1", n)
	}
	if calls := f.Retries.Calls(); len(calls) != 0 {
		t.Errorf("OnRetry was called: %+v", calls)
	}
}

func aRetryAfterPastTheDeadlineEndsTheCallAtOnce(t *testing.T, p Provider) {
	f := p.Fixture(t, nil, Step{Status: http.StatusTooManyRequests, Header: map[string]string{"Retry-After": "30"}, Body: p.file(t, p.RateLimit)})
	start := time.Now()
	// The engine puts the model call's deadline on the context.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := f.Model.Complete(ctx, p.Request())
	var pe *model.ProviderError
	if !errors.As(err, &pe) || pe.Status != http.StatusTooManyRequests || pe.Attempts != 1 || pe.Timeout != 0 {
		t.Fatalf("got %v, want a ProviderError for HTTP 429 after 1 attempt", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("the call took %s; it should not wait for a retry it cannot make", elapsed)
	}
}

func deadlineIsEnforcedAroundTheCall(t *testing.T, p Provider) {
	f := p.Fixture(t, nil, Step{Hang: true})
	// The engine puts the model call's deadline on the context.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := f.Model.Complete(ctx, p.Request())
	// The timeout reported is what was left of the deadline when the
	// call started: 200ms less the moments before it (building the
	// request, fetching the key), a few milliseconds at most even on a
	// loaded machine.
	var pe *model.ProviderError
	if !errors.As(err, &pe) || pe.Timeout <= 150*time.Millisecond || pe.Timeout > 200*time.Millisecond {
		t.Fatalf("got %v, want a ProviderError for the 200ms deadline", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(%v, context.DeadlineExceeded) is false", err)
	}
	if want := fmt.Sprintf("%s: no answer within %s", p.Name, pe.Timeout); !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not say the deadline passed", err)
	}
}

func keyIsReadAtEveryCallAndSentOnlyInItsHeader(t *testing.T, p Provider) {
	f := p.Fixture(t, nil,
		Reply(p.file(t, p.ToolCall)),
		Step{Status: http.StatusInternalServerError, Header: map[string]string{"Retry-After": "0"}, Body: p.file(t, p.ServerError)},
	)
	if _, err := f.Model.Complete(context.Background(), p.Request()); err != nil {
		t.Fatal(err)
	}
	_, err := f.Model.Complete(context.Background(), p.Request())
	if err == nil {
		t.Fatal("the second call succeeded, want the server error")
	}
	if f.Keys != 2 {
		t.Errorf("the key source was called %d times for 2 calls", f.Keys)
	}
	for i, r := range f.Srv.Requests() {
		if p.Auth != nil {
			p.Auth(t, TestKey, r)
		} else if got, want := r.Header.Get(p.KeyHeader), p.KeyValue(TestKey); got != want {
			t.Errorf("request %d: %s = %q, want %q", i, p.KeyHeader, got, want)
		}
		for name, values := range r.Header {
			if (p.KeyHeader == "" || name != http.CanonicalHeaderKey(p.KeyHeader)) && slices.ContainsFunc(values, func(v string) bool { return strings.Contains(v, TestKey) }) {
				t.Errorf("request %d: header %s carries the key too", i, name)
			}
		}
		if strings.Contains(string(r.Body), TestKey) {
			t.Errorf("request %d: the body contains the key", i)
		}
	}
	if strings.Contains(strings.ReplaceAll(err.Error(), " ", ""), TestKey) {
		t.Errorf("the error contains the key: %q", err)
	}
	var pe *model.ProviderError
	if errors.As(err, &pe) && pe.Err != nil && strings.Contains(pe.Err.Error(), TestKey) {
		t.Errorf("the wrapped error contains the key")
	}
}

func keySourceFailureSendsNothing(t *testing.T, p Provider) {
	f := p.Fixture(t, func(c *model.Config) {
		c.KeySource = func(context.Context) (string, error) { return "", errors.New(`secret "llm" not found`) }
	}, Reply(p.file(t, p.Text)))
	_, err := f.Model.Complete(context.Background(), p.Request())
	credential := p.Credential
	if credential == "" {
		credential = "API key"
	}
	if want := p.Name + ": " + credential + ` unavailable: secret "llm" not found`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
	if n := len(f.Srv.Requests()); n != 0 {
		t.Errorf("%d requests were sent without a key", n)
	}
}

func prefixBytesAreTheSameOnEveryTurn(t *testing.T, p Provider) {
	f := p.Fixture(t, nil, Reply(p.file(t, p.Text)))
	// Map iteration order changes from call to call; several turns make
	// an unstable serialization show.
	for range 5 {
		for _, req := range []*loop.Request{p.Request(), p.RoundTrip()} {
			if _, err := f.Model.Complete(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		}
	}
	reqs := f.Srv.Requests()
	first := p.Prefix(t, reqs[0].Body)
	for i, r := range reqs[1:] {
		if got := p.Prefix(t, r.Body); got != first {
			t.Fatalf("turn %d: the tools and system bytes differ:\n%s\n%s", i+2, first, got)
		}
	}
}
