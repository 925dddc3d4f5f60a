package model

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/retryafter"
)

// maxErrorBody bounds how much of an error response is read for its message.
const maxErrorBody = 64 << 10

// attemptLog watches the HTTP attempts of one call. Both SDKs run their
// middlewares once per attempt, inside their retry loop, so the attemptLog
// sees every attempt and what it got. It remembers the last status and
// message for the final error, reports each retry to the hook, bounds
// every response body (limitBody), and uses the SDKs' own x-should-retry
// response header to veto the retries our policy forbids. The retry loop,
// backoff, jitter and Retry-After handling stay the SDK's.
type attemptLog struct {
	provider string
	secret   string
	onRetry  RetryHook
	deadline time.Time
	maxReply int64 // Config.MaxReplyBytes

	// tooLarge is the HTTP status of a response whose body went past
	// maxReply, 0 while none did. It is set by the body's reader, which
	// for an answer is the SDK, after the middleware returned: not under
	// mu.
	tooLarge atomic.Int32

	mu       sync.Mutex
	attempts int
	status   int    // of the last attempt; 0 without a response
	message  string // the server's message of the last failed attempt
	code     string // the server's error code (error.code, error.type) of that attempt
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
	o.status, o.message, o.code, o.err, o.retryAfter = 0, "", "", nil, 0
	if err != nil || res == nil {
		if err == nil {
			err = errors.New("no response")
		}
		cause, msg := contextErr(err), cut(redact(err.Error(), o.secret))
		var refused *egress.RefusedError
		var untrusted *tls.CertificateVerificationError
		switch {
		case errors.As(err, &refused):
			// The operator's own words, which end in how to open the
			// address: kept whole, without the request around them.
			cause, msg = ErrEgressRefused, refused.Error()
		case errors.As(err, &untrusted):
			cause = ErrUntrustedCertificate
		}
		o.err = scrubbed{msg: msg, cause: cause}
		return res, err
	}
	o.status = res.StatusCode
	if res.Header == nil {
		res.Header = http.Header{}
	}
	o.limitBody(res)
	if res.StatusCode < 400 {
		return res, nil
	}
	o.message = o.serverMessage(res)
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

// serverMessage reads the error body for its message, keeping its first
// maxErrorBody bytes, and puts those back for the SDK. The rest is read
// and dropped here, up to the reply limit, so that an error body past the
// limit is known before the SDK decides on a retry (limitBody then vetoes
// it). The SDK sees at most maxErrorBody bytes of the body; its error is
// not kept anyway (fail builds the ProviderError from what was seen here).
func (o *attemptLog) serverMessage(res *http.Response) string {
	if res.Body == nil {
		return http.StatusText(res.StatusCode)
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body = replayBody{Reader: io.MultiReader(bytes.NewReader(body), res.Body), Closer: res.Body}
	msg := errorMessage(body)
	o.code = errorCode(body)
	if msg == "" {
		msg = http.StatusText(res.StatusCode)
	}
	return cut(redact(msg, o.secret))
}

type replayBody struct {
	io.Reader
	io.Closer
}

// limitBody bounds res's body to o.maxReply bytes. A body that goes past
// it (or announces in its Content-Length that it will) fails its reader
// with errReplyTooLarge, and the response's x-should-retry becomes false:
// both SDKs read that header when a body fails, and would otherwise send
// the request again as if the connection had dropped. The bytes read
// before are never more than the limit, whoever reads them.
func (o *attemptLog) limitBody(res *http.Response) {
	if res.Body == nil || res.Body == http.NoBody {
		return
	}
	b := &limitedBody{rc: res.Body, left: o.maxReply, over: func() {
		o.tooLarge.CompareAndSwap(0, int32(res.StatusCode))
		res.Header.Set("X-Should-Retry", "false")
	}}
	if res.ContentLength > o.maxReply {
		// Announced: nothing of it is read.
		_ = b.fail()
		_ = res.Body.Close()
	}
	res.Body = b
}

// errReplyTooLarge is what a limitedBody returns past its limit. The
// ProviderError does not carry it: its ReplyLimit says what happened.
var errReplyTooLarge = errors.New("the response body is larger than the reply limit")

// limitedBody reads at most left bytes of rc, then fails with
// errReplyTooLarge if rc has more, calling over once.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
	over func()
	err  error
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	// Ask for one byte more than is left, to tell a body that ends at
	// the limit from one that goes on.
	if int64(len(p))-1 > b.left {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	if int64(n) > b.left {
		n = int(b.left)
		b.left = 0
		return n, b.fail()
	}
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) fail() error {
	if b.err == nil {
		b.err = errReplyTooLarge
		b.over()
	}
	return b.err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

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

// errorCode finds the machine-readable code in an error body: OpenAI's
// error.code (context_length_exceeded), else its error.type (Anthropic's
// invalid_request_error). It keeps at most 64 bytes of it.
func errorCode(body []byte) string {
	var doc struct {
		Error struct {
			Code any    `json:"code"`
			Type string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &doc) != nil {
		return ""
	}
	code, _ := doc.Error.Code.(string)
	if code == "" {
		code = doc.Error.Type
	}
	return clip.Cut(code, 64, "")
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
	pe := &ProviderError{Provider: o.provider, Status: o.status, Attempts: o.attempts, Message: o.message, Code: o.code, Wait: o.retryAfter}
	switch {
	case o.tooLarge.Load() != 0:
		// A body went past the limit: that ended the call, whatever the
		// SDK made of the failed read (and whatever the context did
		// since).
		pe.Status, pe.Message, pe.Wait = int(o.tooLarge.Load()), "", 0
		pe.ReplyLimit = o.maxReply
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
