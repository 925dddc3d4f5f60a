package model

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun/agentrun/internal/loop"
)

func TestProviderError_namesProviderStatusAndAttempts(t *testing.T) {
	tests := []struct {
		err  ProviderError
		want string
	}{
		{ProviderError{Provider: "openai", Status: 500, Attempts: 4, Message: "upstream overloaded"},
			"openai: HTTP 500 after 4 attempts: upstream overloaded"},
		{ProviderError{Provider: "anthropic", Status: 401, Attempts: 1, Message: "invalid x-api-key"},
			"anthropic: HTTP 401 after 1 attempt: invalid x-api-key"},
		{ProviderError{Provider: "openai", Attempts: 2, Message: "dial tcp 10.0.0.1:443: connect: connection refused"},
			"openai: no response after 2 attempts: dial tcp 10.0.0.1:443: connect: connection refused"},
		{ProviderError{Provider: "openai", Status: 429, Attempts: 2, Timeout: time.Minute, Message: "slow down"},
			"openai: no answer within 1m0s (2 attempts, last HTTP 429): slow down"},
		{ProviderError{Provider: "anthropic", Attempts: 1, Timeout: 2 * time.Second},
			"anthropic: no answer within 2s (1 attempt)"},
		{ProviderError{Provider: "openai", Status: 200, Attempts: 1, Message: "the response has no choices"},
			"openai: unusable response (HTTP 200): the response has no choices"},
		{ProviderError{Provider: "openai", Message: "API key is empty"},
			"openai: API key is empty"},
		{ProviderError{Provider: "openai", Status: 200, Attempts: 1, ReplyLimit: 8 << 20},
			"openai: the reply is larger than 8 MiB, the operator's limit for a model reply (--model-max-reply-bytes); it was not read"},
		{ProviderError{Provider: "anthropic", Status: 503, Attempts: 1, ReplyLimit: 1536 << 10, Message: "overloaded"},
			"anthropic: the HTTP 503 reply is larger than 1536 KiB, the operator's limit for a model reply (--model-max-reply-bytes); it was not read"},
		{ProviderError{Provider: "openai", Status: 200, Attempts: 1, ReplyLimit: 1000},
			"openai: the reply is larger than 1000 bytes, the operator's limit for a model reply (--model-max-reply-bytes); it was not read"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestCut_keepsAbout200BytesOnARuneBoundary(t *testing.T) {
	long := strings.Repeat("é", 150) // 300 bytes
	got := cut(long)
	if !strings.HasSuffix(got, "...") || len(got) > maxMessageBytes+3 {
		t.Errorf("cut gave %d bytes: %q", len(got), got)
	}
	if !json.Valid([]byte(`"`+got+`"`)) || strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("cut split a rune: %q", got)
	}
	if got := cut("  a\n\tb  "); got != "a b" {
		t.Errorf("cut(%q) = %q, want whitespace collapsed", "  a\n\tb  ", got)
	}
}

func TestErrorMessage_readsTheShapesServersUse(t *testing.T) {
	tests := map[string]string{
		`{"error":{"message":"Rate limit reached","type":"requests"}}`:                    "Rate limit reached",
		`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`:     "Overloaded",
		`{"object":"error","message":"The model does not exist.","type":"NotFoundError"}`: "The model does not exist.",
		`{"error":"model 'llama3' not found"}`:                                            "model 'llama3' not found",
		"<html><body>502 Bad Gateway</body></html>":                                       "<html><body>502 Bad Gateway</body></html>",
	}
	for body, want := range tests {
		if got := errorMessage([]byte(body)); got != want {
			t.Errorf("errorMessage(%s) = %q, want %q", body, got, want)
		}
	}
}

func TestNewCaller_appliesDefaults(t *testing.T) {
	c, err := NewCaller("openai", Config{Model: "m", KeySource: StaticKey("k")})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Config(); got.MaxRetries != DefaultMaxRetries {
		t.Errorf("got %d retries, want the default", got.MaxRetries)
	}
	c, err = NewCaller("openai", Config{Model: "m", KeySource: StaticKey("k"), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Config().MaxRetries; got != 0 {
		t.Errorf("a negative MaxRetries gave %d retries, want 0", got)
	}
	// Without a client of its own, a provider gets one with the default
	// transport's settings (a proxy from the environment, HTTP/2) and
	// small connection buffers; one that has a client keeps it.
	tr, ok := c.Config().HTTPClient.Transport.(*http.Transport)
	if !ok || !tr.ForceAttemptHTTP2 || tr.Proxy == nil || tr.ReadBufferSize != 1<<10 || tr.WriteBufferSize != 1<<10 {
		t.Errorf("the default client's transport is %+v", c.Config().HTTPClient.Transport)
	}
	own := &http.Client{}
	if c, _ := NewCaller("openai", Config{Model: "m", KeySource: StaticKey("k"), HTTPClient: own}); c.Config().HTTPClient != own {
		t.Error("a configured client was replaced")
	}
}

func TestCallerDo_neverPutsTheKeyInTheError(t *testing.T) {
	const key = "sk-secret-123"
	c, err := NewCaller("openai", Config{Model: "m", KeySource: StaticKey(key)})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Do(context.Background(), func(ctx context.Context, k string, record Middleware) error {
		// A transport that echoes the key in its error.
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://example.invalid/v1", nil)
		_, err := record(req, func(*http.Request) (*http.Response, error) {
			return nil, errors.New("proxy refused credentials " + k)
		})
		return err
	})
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Attempts != 1 || pe.Status != 0 {
		t.Fatalf("got %v, want a ProviderError after 1 attempt without status", err)
	}
	if strings.Contains(err.Error(), key) || (pe.Err != nil && strings.Contains(pe.Err.Error(), key)) {
		t.Errorf("the error carries the key: %q", err)
	}
}

func TestCallerDo_callerCancellationIsReported(t *testing.T) {
	c, err := NewCaller("anthropic", Config{Model: "m", KeySource: StaticKey("k")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = c.Do(ctx, func(ctx context.Context, _ string, _ Middleware) error { return ctx.Err() })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want it to wrap context.Canceled", err)
	}
}

func TestOrderToolResults_putsResultsInCallOrder(t *testing.T) {
	call := func(id string) loop.ToolCall { return loop.ToolCall{ID: id, Name: "x"} }
	result := func(id string) loop.Message { return loop.Message{Role: loop.RoleTool, CallID: id} }
	in := []loop.Message{
		{Role: loop.RoleUser, Content: "goal"},
		{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{call("t1-c1"), call("t1-c2"), call("t1-c3")}},
		result("t1-c3"), result("stray"), result("t1-c1"),
		{Role: loop.RoleUser, Content: "note"},
		result("t1-c2"),
		{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{call("t2-c1"), call("t2-c2")}},
		result("t2-c2"), result("t2-c1"),
	}
	var got []string
	for _, m := range OrderToolResults(in) {
		got = append(got, string(m.Role)+":"+m.CallID+m.Content)
	}
	want := []string{
		"user:goal", "assistant:",
		"tool:t1-c1", "tool:t1-c2", "tool:t1-c3", "tool:stray",
		"user:note", "assistant:",
		"tool:t2-c1", "tool:t2-c2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if in[2].CallID != "t1-c3" {
		t.Error("the input was modified")
	}
}

func TestArguments_alwaysValidJSON(t *testing.T) {
	tests := map[string]string{
		``:                `{}`,
		`  `:              `{}`,
		`{"a":1}`:         `{"a":1}`,
		` {"a":1} `:       `{"a":1}`,
		`{"a":1`:          `"{\"a\":1"`,
		`not json at all`: `"not json at all"`,
	}
	for in, want := range tests {
		if got := string(Arguments([]byte(in))); got != want {
			t.Errorf("Arguments(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSchema(t *testing.T) {
	got, err := Schema(nil)
	if err != nil || string(got["type"]) != `"object"` || string(got["properties"]) != `{}` {
		t.Errorf("empty schema gave %v, %v", got, err)
	}
	got, err = Schema(json.RawMessage(`{"properties":{"b":{},"a":{}}}`))
	if err != nil || string(got["type"]) != `"object"` || string(got["properties"]) != `{"b":{},"a":{}}` {
		t.Errorf("schema without type gave %v, %v", got, err)
	}
	for _, bad := range []string{`[]`, `"object"`, `null`, `{`} {
		if _, err := Schema(json.RawMessage(bad)); err == nil {
			t.Errorf("Schema(%s) succeeded", bad)
		}
	}
}

func TestProviderError_transientOnesAreWhatARetryMayCure(t *testing.T) {
	tests := []struct {
		err  ProviderError
		want bool
	}{
		{ProviderError{Status: 503, Attempts: 1}, true},
		{ProviderError{Status: 529, Attempts: 1, Message: "overloaded"}, true},
		{ProviderError{Status: 429, Attempts: 1, Wait: 20 * time.Second}, true},
		{ProviderError{Status: 408, Attempts: 1}, true},
		{ProviderError{Attempts: 1, Err: errors.New("connection refused")}, true},
		{ProviderError{Attempts: 1, Timeout: time.Minute, Err: context.DeadlineExceeded}, true},
		{ProviderError{Status: 401, Attempts: 1}, false},
		{ProviderError{Status: 400, Attempts: 1}, false},
		{ProviderError{Status: 501, Attempts: 1}, false},
		{ProviderError{Status: 200, Attempts: 1, Message: "the response has no choices"}, false},
		{ProviderError{Message: "API key is empty"}, false},
		{ProviderError{Attempts: 1, Err: context.Canceled, Message: "call abandoned by the caller"}, false},
		// A reply past the limit would be as large the next time.
		{ProviderError{Status: 503, Attempts: 1, ReplyLimit: 8 << 20}, false},
		{ProviderError{Status: 200, Attempts: 1, ReplyLimit: 8 << 20}, false},
	}
	for _, tt := range tests {
		if got := tt.err.Transient(); got != tt.want {
			t.Errorf("%+v: Transient() = %v, want %v", tt.err, got, tt.want)
		}
	}
	var te loop.TransientError = &ProviderError{Status: 429, Wait: 20 * time.Second}
	if te.RetryAfter() != 20*time.Second {
		t.Errorf("RetryAfter() = %s, want the server's 20s", te.RetryAfter())
	}
}

func TestNewCaller_defaultsTheReplyLimit(t *testing.T) {
	for in, want := range map[int64]int64{0: DefaultMaxReplyBytes, -1: DefaultMaxReplyBytes, 1 << 10: 1 << 10} {
		c, err := NewCaller("openai", Config{Model: "m", KeySource: StaticKey("k"), MaxReplyBytes: in})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Config().MaxReplyBytes; got != want {
			t.Errorf("MaxReplyBytes %d became %d, want %d", in, got, want)
		}
	}
}

// callThrough makes one call of c to url with a plain client, the way
// the SDKs do: through the middleware, then reading the whole body.
func callThrough(t *testing.T, c *Caller, url string) ([]byte, error) {
	t.Helper()
	var body []byte
	err := c.Do(context.Background(), func(ctx context.Context, _ string, record Middleware) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		if err != nil {
			return err
		}
		res, err := record(req, http.DefaultClient.Do)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		body, err = io.ReadAll(res.Body)
		if err == nil && res.StatusCode >= 400 {
			err = errors.New(res.Status)
		}
		return err
	})
	return body, err
}

// A body is read up to the limit and no further, however it comes:
// announced or not, compressed or not; the bytes up to the limit, and an
// error body's message, are read as before.
func TestCallerDo_readsNoBodyPastTheLimit(t *testing.T) {
	const limit = 4 << 10
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		var out io.Writer = w
		if r.URL.Query().Has("gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			defer zw.Close()
			out = zw
		}
		if r.URL.Query().Has("length") {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		if status, _ := strconv.Atoi(r.URL.Query().Get("status")); status != 0 {
			w.WriteHeader(status)
		}
		// A JSON error, then spaces, in chunks from one small buffer.
		msg := `{"error":{"message":"upstream overloaded"}}`
		if _, err := io.WriteString(out, msg); err != nil {
			return
		}
		spaces := bytes.Repeat([]byte(" "), 32<<10)
		for left := n - len(msg); left > 0; left -= len(spaces) {
			if _, err := out.Write(spaces[:min(left, len(spaces))]); err != nil {
				return // the client went away
			}
		}
	}))
	defer srv.Close()
	c, err := NewCaller("openai", Config{Model: "m", KeySource: StaticKey("k"), MaxReplyBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		query  string
		status int // of the ProviderError; 0 for none
		want   string
	}{
		{query: "n=4096"},
		{query: "n=4096&length"},
		{query: "n=4096&gzip"},
		{query: "n=4097", status: 200},
		{query: "n=67108864", status: 200},
		{query: "n=4097&length", status: 200},
		// 64 MiB of spaces arrive as some 64 KiB of gzip.
		{query: "n=67108864&gzip", status: 200},
		{query: "n=4096&status=503", status: 503, want: "openai: HTTP 503 after 1 attempt: upstream overloaded"},
		{query: "n=67108864&status=503", status: 503},
		{query: "n=67108864&status=503&length", status: 503},
	} {
		body, err := callThrough(t, c, srv.URL+"/?"+tc.query)
		var pe *ProviderError
		switch {
		case tc.status == 0:
			if err != nil || len(body) != 4096 {
				t.Errorf("%s: got %d bytes and %v, want the 4096 bytes", tc.query, len(body), err)
			}
		case !errors.As(err, &pe):
			t.Errorf("%s: got %v, want a ProviderError", tc.query, err)
		case tc.want != "":
			if err.Error() != tc.want || pe.ReplyLimit != 0 {
				t.Errorf("%s: got %q, want %q", tc.query, err, tc.want)
			}
		default:
			want := "openai: the reply is larger than 4 KiB, the operator's limit for a model reply (--model-max-reply-bytes); it was not read"
			if tc.status != 200 {
				want = "openai: the HTTP 503 reply is larger than 4 KiB, the operator's limit for a model reply (--model-max-reply-bytes); it was not read"
			}
			if err.Error() != want || pe.Status != tc.status || pe.ReplyLimit != limit || pe.Transient() {
				t.Errorf("%s: got %q (status %d, limit %d, transient %v), want %q", tc.query, err, pe.Status, pe.ReplyLimit, pe.Transient(), want)
			}
		}
	}
}

func TestTokens_neverNegativeNorWrapped(t *testing.T) {
	for _, tc := range []struct {
		in   []int64
		want int64
	}{
		{nil, 0},
		{[]int64{-5}, 0},
		{[]int64{180, -256, 4864}, 5044},
		{[]int64{math.MinInt64, 7}, 7},
		{[]int64{math.MaxInt64, 1}, math.MaxInt64},
		{[]int64{math.MaxInt64 - 1, 1}, math.MaxInt64},
		{[]int64{1 << 62, 1 << 62, 1 << 62}, math.MaxInt64},
	} {
		if got := Tokens(tc.in...); got != tc.want {
			t.Errorf("Tokens(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
