package modeltest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Window counting rule of WindowServer: a token per WindowBytesPerToken
// bytes of each part's JSON as sent (rounded up), plus WindowPartTokens
// per part; the parts are the tools array, then each message.
const (
	WindowBytesPerToken = 4
	WindowPartTokens    = 4
	// WindowCacheMinTokens is the shortest prefix the server reports as
	// cached, as OpenAI caches prompts of 1,024 tokens or more.
	WindowCacheMinTokens = 1024
)

// WindowRequest is what WindowServer made of one request.
type WindowRequest struct {
	// Input is the request's count; Cached the part of it read from the
	// cache (the parts it shares, from the first, with the request before).
	Input, Cached int64
	// Summary marks a request that asked for a summary (its last message
	// asks to condense the conversation).
	Summary bool
	// Refused marks a request counted above the limit.
	Refused bool
}

// WindowServer is an OpenAI-compatible chat completions server with a
// context window, for tests of the context policy. It counts every
// request deterministically (see WindowBytesPerToken) and refuses one
// counted above Limit as OpenAI does: HTTP 400 with the error code
// context_length_exceeded. It reports usage with cached tokens for the
// prefix a request shares with the one before, as a prompt cache would.
//
// It plays an agent that reads Turns-1 chunks: its k-th answer (summary
// calls aside) calls Tool with {"n":k}, and its Turns-th is a final
// answer. A summary request is answered with a short summary.
type WindowServer struct {
	*httptest.Server
	Limit int64
	Tool  string
	Turns int

	mu       sync.Mutex
	answers  int
	prev     []string
	requests []WindowRequest
}

// NewWindowServer starts a server that refuses requests over limit and
// plays an agent of the given number of turns; it is closed when the test
// ends.
func NewWindowServer(t testing.TB, limit int64, tool string, turns int) *WindowServer {
	t.Helper()
	s := &WindowServer{Limit: limit, Tool: tool, Turns: turns}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Requests returns what the server made of the requests so far.
func (s *WindowServer) Requests() []WindowRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]WindowRequest(nil), s.requests...)
}

// CachedShare is the cached part of the input of every request answered
// so far (refused ones aside).
func (s *WindowServer) CachedShare() float64 {
	var in, cached int64
	for _, r := range s.Requests() {
		if !r.Refused {
			in, cached = in+r.Input, cached+r.Cached
		}
	}
	if in == 0 {
		return 0
	}
	return float64(cached) / float64(in)
}

// WindowTokens counts a chat completion request's body by the server's
// rule, returning the count of each part from the first.
func WindowTokens(body []byte) (parts []string, counts []int64, err error) {
	var doc struct {
		Tools    json.RawMessage   `json:"tools"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, nil, err
	}
	parts = append(parts, string(doc.Tools))
	for _, m := range doc.Messages {
		parts = append(parts, string(m))
	}
	for _, p := range parts {
		counts = append(counts, int64(len(p)+WindowBytesPerToken-1)/WindowBytesPerToken+WindowPartTokens)
	}
	return parts, counts, nil
}

func (s *WindowServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	parts, counts, err := WindowTokens(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var input int64
	for _, c := range counts {
		input += c
	}
	summary := strings.Contains(parts[len(parts)-1], "Condense the conversation")

	s.mu.Lock()
	defer s.mu.Unlock()
	if input > s.Limit {
		s.requests = append(s.requests, WindowRequest{Input: input, Summary: summary, Refused: true})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
			s.Limit, input)
		return
	}
	var shared, cached int64
	for i := range parts {
		if i >= len(s.prev) || s.prev[i] != parts[i] {
			break
		}
		shared += counts[i]
	}
	if shared >= WindowCacheMinTokens {
		cached = shared
	}
	s.prev = parts
	s.requests = append(s.requests, WindowRequest{Input: input, Cached: cached, Summary: summary})

	msg := map[string]any{"role": "assistant", "content": "All the chunks are read."}
	finish := "stop"
	switch {
	case summary:
		msg["content"] = fmt.Sprintf("Chunks 1 to %d were read with %s; each returned its text. The rest remain.", s.answers, s.Tool)
	case s.answers+1 < s.Turns:
		s.answers++
		args, _ := json.Marshal(map[string]int{"n": s.answers})
		msg["content"] = nil
		msg["tool_calls"] = []map[string]any{{"id": fmt.Sprintf("call_%d", s.answers), "type": "function",
			"function": map[string]any{"name": s.Tool, "arguments": string(args)}}}
		finish = "tool_calls"
	default:
		s.answers++
	}
	out, _ := json.Marshal(map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", len(s.requests)), "object": "chat.completion", "created": 0, "model": "window",
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finish}},
		"usage": map[string]any{"prompt_tokens": input, "completion_tokens": 20, "total_tokens": input + 20,
			"prompt_tokens_details": map[string]any{"cached_tokens": cached}},
	})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}
