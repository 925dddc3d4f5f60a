package model

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentrun/agentrun/internal/clip"
)

// maxMessageBytes bounds the server message kept in an error.
const maxMessageBytes = 200

// ProviderError is what a provider returns when a call failed for good:
// after its retries, at its deadline, or with an answer it could not use.
// It names the provider and the last HTTP status, so the run's reason says
// what happened. It never holds the API key, the request body or the
// SDK's error value (which carries the request, headers included).
type ProviderError struct {
	// Provider is "openai" or "anthropic".
	Provider string
	// Status is the HTTP status of the last attempt; 0 when the last
	// attempt got no response or none was sent.
	Status int
	// Attempts is the number of HTTP attempts made (retries included).
	Attempts int
	// Timeout is set when the call's deadline ended it.
	Timeout time.Duration
	// Message is a short description: the server's message, cut to about
	// 200 bytes, or what went wrong on our side.
	Message string
	// Err is the underlying cause when there is one worth matching with
	// errors.Is (a context error, a transport error); nil otherwise.
	Err error
	// Wait is how long the last response asked to wait before another
	// attempt (Retry-After); zero when it did not say.
	Wait time.Duration
	// Code is the server's error code for the last attempt (OpenAI's
	// error.code, else error.type), as it sent it; empty when it sent none.
	Code string
	// ReplyLimit is set when a response's body was longer than this
	// many bytes (Config.MaxReplyBytes): reading stopped there, and Status
	// is that response's.
	ReplyLimit int64
}

// ErrEgressRefused is the cause of a call the operator's egress policy
// refused to connect (internal/egress): asking again cannot succeed.
var ErrEgressRefused = errors.New("refused by the operator's egress policy")

// ErrUntrustedCertificate is the cause of a call whose server's
// certificate could not be verified (a CA the operator does not trust, a
// name the certificate does not hold): asking again cannot succeed until
// the run names the CA (model.caBundleRef) or the server changes.
var ErrUntrustedCertificate = errors.New("the server's certificate is not trusted")

// Transient reports whether an unchanged retry may succeed: the provider
// did not answer in time, could not be reached (a transport error), or
// answered HTTP 408, 409, 429 or 5xx (except 501 and 505; Anthropic's 529
// overloaded included). A call abandoned by its caller, a key that cannot
// be read, a 4xx such as 401, an answer that could not be used, and a
// reply past the limit (whatever its status: the server that sent it once
// would send it again, and each time the operator would read it up to the
// limit), an egress refusal and a certificate that cannot be verified are
// not. It makes *ProviderError a loop.TransientError.
func (e *ProviderError) Transient() bool {
	switch {
	case e.ReplyLimit > 0, errors.Is(e.Err, ErrEgressRefused), errors.Is(e.Err, ErrUntrustedCertificate):
		return false
	case e.Timeout > 0:
		return true
	case errors.Is(e.Err, context.Canceled):
		return false
	case errors.Is(e.Err, context.DeadlineExceeded):
		return true // the call's deadline, or its caller's, passed
	case e.Status == 0:
		return e.Attempts > 0 && e.Err != nil
	}
	c := e.Status
	return c == 408 || c == 409 || c == 429 || (c >= 500 && c <= 599 && c != 501 && c != 505)
}

// ContextLengthExceeded reports whether the provider refused the request
// as longer than the model's context window: OpenAI's error code
// context_length_exceeded (which OpenAI-compatible servers copy), or an
// HTTP 400 whose message says so in the words OpenAI, Anthropic, vLLM
// and llama.cpp use. It makes *ProviderError a loop.ContextLengthError.
func (e *ProviderError) ContextLengthExceeded() bool {
	if e.Code == "context_length_exceeded" {
		return true
	}
	if e.Status != 400 {
		return false
	}
	m := strings.ToLower(e.Message)
	for _, s := range []string{"maximum context length", "context length exceeded", "prompt is too long", "context window", "exceeds the context"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// RetryAfter is the wait the provider asked for (see Wait).
func (e *ProviderError) RetryAfter() time.Duration { return e.Wait }

// Error reads like "openai: HTTP 500 after 4 attempts: upstream overloaded".
func (e *ProviderError) Error() string {
	var b strings.Builder
	b.WriteString(e.Provider)
	b.WriteString(": ")
	switch {
	case e.ReplyLimit > 0:
		b.WriteString("the ")
		if e.Status >= 400 {
			fmt.Fprintf(&b, "HTTP %d ", e.Status)
		}
		fmt.Fprintf(&b, "reply is larger than %s, the operator's limit for a model reply (--model-max-reply-bytes); it was not read",
			byteSize(e.ReplyLimit))
		return b.String()
	case e.Timeout > 0:
		fmt.Fprintf(&b, "no answer within %s (%s", e.Timeout, plural(e.Attempts, "attempt"))
		if e.Status > 0 {
			fmt.Fprintf(&b, ", last HTTP %d", e.Status)
		}
		b.WriteString(")")
	case e.Attempts == 0:
		// Nothing was sent: the message says why.
	case e.Status >= 400:
		fmt.Fprintf(&b, "HTTP %d after %s", e.Status, plural(e.Attempts, "attempt"))
	case e.Status > 0:
		fmt.Fprintf(&b, "unusable response (HTTP %d)", e.Status)
	default:
		fmt.Fprintf(&b, "no response after %s", plural(e.Attempts, "attempt"))
	}
	if e.Message != "" {
		if e.Attempts > 0 || e.Timeout > 0 {
			b.WriteString(": ")
		}
		b.WriteString(e.Message)
	}
	return b.String()
}

// Unwrap returns the underlying cause, if any.
func (e *ProviderError) Unwrap() error { return e.Err }

// byteSize is n in the largest binary unit that divides it: "8 MiB",
// "1536 KiB", "1000 bytes".
func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	if n == 1 {
		return "1 byte"
	}
	return fmt.Sprintf("%d bytes", n)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// cut collapses whitespace and shortens s to about maxMessageBytes,
// on a rune boundary, marking the cut.
func cut(s string) string {
	return clip.Cut(strings.Join(strings.Fields(s), " "), maxMessageBytes+len("..."), "...")
}

// redact removes every occurrence of secret from s.
func redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[redacted]")
}
