package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentrun/agentrun/internal/retryafter"
)

// maxErrorBody bounds how much of an error response is read for its message.
const maxErrorBody = 64 << 10

// attemptLog watches the HTTP attempts of one call. Both SDKs run their
// middlewares once per attempt, inside their retry loop, so the attemptLog
// sees every attempt and what it got. It remembers the last status and
// message for the final error, reports each retry to the hook, and uses
// the SDKs' own x-should-retry response header to veto the retries our
// policy forbids. The retry loop, backoff, jitter and Retry-After handling
// stay the SDK's.
type attemptLog struct {
	provider string
	secret   string
	onRetry  RetryHook
	deadline time.Time

	mu       sync.Mutex
	attempts int
	status   int    // of the last attempt; 0 without a response
	message  string // the server's message of the last failed attempt
	err      error  // the transport error of the last attempt, scrubbed
	// retryAfter is the wait the last failed response asked for.
	retryAfter time.Duration
}

func (o *attemptLog) middleware(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	o.mu.Lock()
	o.attempts++
	attempt, status, prev := o.attempts, o.status, o.failure()
	o.mu.Unlock()
	if attempt > 1 && o.onRetry != nil {
		o.onRetry(attempt, status, prev)
	}

	res, err := next(req)

	o.mu.Lock()
	defer o.mu.Unlock()
	o.status, o.message, o.err, o.retryAfter = 0, "", nil, 0
	if err != nil || res == nil {
		if err == nil {
			err = errors.New("no response")
		}
		o.err = scrubbed{msg: cut(redact(err.Error(), o.secret)), cause: contextErr(err)}
		return res, err
	}
	o.status = res.StatusCode
	if res.StatusCode < 400 {
		return res, nil
	}
	o.message = o.serverMessage(res)
	if res.Header == nil {
		res.Header = http.Header{}
	}
	o.retryAfter, _ = retryafter.Parse(res.Header, time.Now())
	switch {
	case res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden:
		// A wrong or revoked key does not get better by asking again,
		// whatever the server's x-should-retry says.
		res.Header.Set("X-Should-Retry", "false")
	case o.waitTooLong(res):
		// The server asks for a longer wait than the call has left: end
		// the call now with the server's answer instead of sleeping into
		// the deadline.
		res.Header.Set("X-Should-Retry", "false")
	}
	return res, nil
}

// failure describes the last attempt's failure for the retry hook.
// Callers hold o.mu.
func (o *attemptLog) failure() error {
	if o.err != nil {
		return o.err
	}
	if o.message != "" {
		return errors.New(o.message)
	}
	return errors.New(http.StatusText(o.status))
}

// serverMessage reads the error body (bounded) for its message and puts
// the bytes back so the SDK can read them too.
func (o *attemptLog) serverMessage(res *http.Response) string {
	if res.Body == nil {
		return http.StatusText(res.StatusCode)
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	res.Body = replayBody{Reader: io.MultiReader(bytes.NewReader(body), res.Body), Closer: res.Body}
	msg := errorMessage(body)
	if msg == "" {
		msg = http.StatusText(res.StatusCode)
	}
	return cut(redact(msg, o.secret))
}

type replayBody struct {
	io.Reader
	io.Closer
}

// errorMessage finds the human-readable message in an error body. OpenAI,
// Anthropic, LiteLLM and Ollama put it at error.message; vLLM at message;
// some servers send error as a plain string or no JSON at all.
func errorMessage(body []byte) string {
	var doc struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &doc) != nil {
		return strings.TrimSpace(string(body))
	}
	var inner struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(doc.Error, &inner) == nil && inner.Message != "" {
		return inner.Message
	}
	var plain string
	if json.Unmarshal(doc.Error, &plain) == nil && plain != "" {
		return plain
	}
	return doc.Message
}

// waitTooLong reports whether the response's Retry-After reaches past
// the call's deadline.
func (o *attemptLog) waitTooLong(res *http.Response) bool {
	if o.deadline.IsZero() {
		return false
	}
	wait, ok := retryafter.Parse(res.Header, time.Now())
	return ok && wait > time.Until(o.deadline)
}

// fail turns the error the SDK call returned into a *ProviderError from
// what the attemptLog saw; the SDK's error value itself is not kept, since
// it carries the request and its headers.
func (o *attemptLog) fail(ctx context.Context, start time.Time, err error) *ProviderError {
	o.mu.Lock()
	defer o.mu.Unlock()
	pe := &ProviderError{Provider: o.provider, Status: o.status, Attempts: o.attempts, Message: o.message, Wait: o.retryAfter}
	switch {
	case ctx.Err() != nil && !o.deadline.IsZero() && errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The call's deadline passed: say how long it had.
		pe.Timeout = o.deadline.Sub(start).Round(time.Millisecond)
		pe.Err = context.DeadlineExceeded
	case ctx.Err() != nil:
		// The caller gave up.
		pe.Err = contextErr(ctx.Err())
		pe.Message = "call abandoned by the caller: " + ctx.Err().Error()
	case o.status >= 400:
		// The SDK's error is the last response: its status and message
		// are already recorded.
	case o.err != nil:
		pe.Message = o.err.Error()
		pe.Err = o.err
	case o.attempts == 0:
		pe.Message = cut("request not sent: " + redact(err.Error(), o.secret))
	default:
		// A 2xx the SDK could not decode, or an answer the provider
		// adapter could not map.
		pe.Message = cut(redact(err.Error(), o.secret))
	}
	return pe
}

// scrubbed is a transport error reduced to its (redacted, shortened) text,
// keeping a context error matchable.
type scrubbed struct {
	msg   string
	cause error
}

func (s scrubbed) Error() string { return s.msg }
func (s scrubbed) Unwrap() error { return s.cause }
