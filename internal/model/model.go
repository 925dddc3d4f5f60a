// Package model holds what the model providers have in common: their
// configuration, where the API key comes from, how one call is bounded in
// time and retried, and the error a provider returns when it stays
// unavailable.
//
// The providers themselves live in the sub-packages (openai, anthropic) and
// implement loop.Model; the token estimate is the engine's, the same for
// every provider (loop.ByteEstimator), and what a provider bills beyond
// the manifest's prices is its adapter's (anthropic.Model.Pricing). Retries are the SDKs' own;
// this package only observes them (through the SDKs' middleware hook) so
// each retry can be reported, bounds every response body it sees there
// (Config.MaxReplyBytes: the endpoint is the tenant's choice, the memory
// the operator's), and turns the last failure into a *ProviderError that
// names the provider and the HTTP status.
package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/agentrun/agentrun/internal/loop"
)

// DefaultMaxRetries is the number of retries after the first attempt,
// applied by NewCaller to a Config that leaves it unset.
//
// A call's deadline and its output limit are not the provider's to
// default: the engine's Config.Normalize sets both (loop.Engine.CallModel
// puts the deadline on the context, the Request carries MaxOutputTokens).
const DefaultMaxRetries = 3

// DefaultMaxReplyBytes bounds the body of every response a provider call
// reads, applied by NewCaller to a Config that leaves MaxReplyBytes unset.
// A model's answer is bounded by its output limit (the engine's default
// of 4096 tokens is some 16 KiB of JSON), so 8 MiB is far above any real
// reply and far below the operator's memory limit (256 MiB in the chart),
// which a body read whole from a tenant's baseURL could otherwise exceed.
const DefaultMaxReplyBytes = 8 << 20

// KeySource returns the API key for one call. It is called at the start of
// every Complete, so a rotated Secret takes effect on the next call. The
// key it returns is sent in the provider's authentication header and
// nowhere else: it is never logged and never part of an error.
type KeySource func(ctx context.Context) (string, error)

// StaticKey returns a KeySource that always returns key. It is meant for
// tests and local runs; the operator reads the key from a Secret instead.
func StaticKey(key string) KeySource {
	return func(context.Context) (string, error) { return key, nil }
}

// RetryHook is told about every retry just before it is sent. attempt is
// the number of the attempt about to be made (2 for the first retry);
// status is the HTTP status of the attempt that failed, or 0 when it got no
// response (a connection error); err describes that failure in a few words
// (the server's message, or the transport error). err never contains the
// API key or the request body.
type RetryHook func(attempt int, status int, err error)

// Config is the plain configuration of one provider client.
type Config struct {
	// BaseURL of the API. Empty means the provider's public endpoint. For
	// OpenAI-compatible servers (vLLM, Ollama, LiteLLM, Azure OpenAI) it is
	// the URL that ends before /chat/completions, such as
	// http://vllm.ai:8000/v1.
	BaseURL string
	// Model is the model name used when a request does not name one.
	Model string
	// MaxRetries is the number of retries after the first attempt, for
	// 408, 409, 429, 5xx and connection errors. Zero means
	// DefaultMaxRetries; a negative value turns retries off.
	MaxRetries int
	// KeySource provides the API key at every call. Nil means the
	// provider is called without one: an OpenAI-compatible server that
	// needs no key, or a cloud provider that authenticates with the
	// operator's own identity (see Caller.DoWith).
	KeySource KeySource
	// HTTPClient carries the requests; nil means one of the caller's own
	// (NewHTTPClient).
	HTTPClient *http.Client
	// Clients, when set, shares the provider's SDK client with every
	// Config that names the same Clients, endpoint, retries and
	// HTTPClient (SharedClient); nil builds one for this Config alone.
	Clients *Clients
	// OnRetry, when set, is called before every retry.
	OnRetry RetryHook
	// MaxReplyBytes bounds the body of every response, an answer's or an
	// error's: reading stops one byte past it and the call fails with a
	// *ProviderError whose ReplyLimit is set, which is not transient.
	// Zero or less means DefaultMaxReplyBytes.
	MaxReplyBytes int64
	// ReasoningEffort is the reasoning_effort sent to an OpenAI reasoning
	// model with every call (low, medium or high); empty sends none.
	ReasoningEffort string
	// ThinkingBudget turns on Claude's extended thinking with this many
	// tokens of budget (at least 1024, below the request's
	// MaxOutputTokens, which bounds thinking and answer together); zero
	// leaves it off.
	ThinkingBudget int64
}

// NewHTTPClient returns the client provider calls use when the Config
// names none: http.DefaultTransport's settings (proxy from the
// environment, HTTP/2, the same timeouts), with 1 KiB connection buffers
// instead of 4 KiB. A run waiting on its model holds a connection for the
// whole call (over HTTP/1.1, one connection per call in flight), so with
// a thousand runs waiting the buffers were 8 KiB of each run's share of
// the operator's heap; a request and its reply go through them whole
// either way, at the cost of a few more reads and writes per call. Its
// connection pool is its own: whoever builds many runs builds one and
// names it in each Config (kit.Builder does).
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ReadBufferSize, t.WriteBufferSize = 1<<10, 1<<10
	return &http.Client{Transport: t}
}

// Caller runs one provider call with the behaviour every provider shares:
// the key is fetched, the SDK's attempts are observed (a Retry-After past
// the context's deadline ends the call at once), every response body is
// read up to Config.MaxReplyBytes only, and a failure becomes a
// *ProviderError.
type Caller struct {
	provider string
	cfg      Config
}

// NewCaller checks cfg, applies the defaults and returns a Caller for the
// named provider.
func NewCaller(provider string, cfg Config) (*Caller, error) {
	if cfg.Model == "" {
		return nil, fmt.Errorf("%s: no model name configured", provider)
	}
	if cfg.BaseURL != "" {
		u, err := url.Parse(cfg.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%s: base URL %q is not an absolute http(s) URL", provider, cfg.BaseURL)
		}
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = NewHTTPClient()
	}
	if cfg.MaxReplyBytes <= 0 {
		cfg.MaxReplyBytes = DefaultMaxReplyBytes
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	return &Caller{provider: provider, cfg: cfg}, nil
}

// Provider is the provider's name as it appears in errors.
func (c *Caller) Provider() string { return c.provider }

// Config returns the configuration with the defaults applied.
func (c *Caller) Config() Config { return c.cfg }

// ModelName is the request's model, or the configured one.
func (c *Caller) ModelName(requested string) string {
	if requested != "" {
		return requested
	}
	return c.cfg.Model
}

// Middleware is the shape of both SDKs' option.Middleware: it sees every
// HTTP attempt, retries included.
type Middleware = func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error)

// CallFunc makes the SDK call. It must pass key as the credential,
// record as a per-request middleware, and use ctx, which carries the
// call's deadline. Whatever it returns besides nil (an SDK error, or its
// own error for a response it cannot use) becomes a *ProviderError.
type CallFunc func(ctx context.Context, key string, record Middleware) error

// Do runs fn once under ctx, whose deadline (set by the engine, see
// loop.Engine.CallModel) bounds every attempt and every wait between
// attempts. fn gets the key of Config.KeySource, or "" when there is
// none. The error it returns is nil or a *ProviderError.
func (c *Caller) Do(ctx context.Context, fn CallFunc) error {
	if c.cfg.KeySource == nil {
		return c.run(ctx, "", fn)
	}
	return c.DoWith(ctx, "API key", c.cfg.KeySource, fn)
}

// DoAs is DoWith with source when it is set (a cloud identity's
// credential), else Do with Config.KeySource.
func (c *Caller) DoAs(ctx context.Context, source KeySource, fn CallFunc) error {
	if source != nil {
		return c.DoWith(ctx, "credentials", source, fn)
	}
	return c.Do(ctx, fn)
}

// Answer makes one model call through c.DoAs: send makes the SDK call
// (as a CallFunc, with the key and the recording middleware) and convert
// reads its answer as a reply. A reply convert refuses is the call's
// error, as any CallFunc's.
func Answer[T any](ctx context.Context, c *Caller, source KeySource,
	send func(ctx context.Context, key string, record Middleware) (T, error), convert func(T) (*loop.Reply, error)) (*loop.Reply, error) {
	var reply *loop.Reply
	err := c.DoAs(ctx, source, func(ctx context.Context, key string, record Middleware) error {
		out, err := send(ctx, key, record)
		if err != nil {
			return err
		}
		reply, err = convert(out)
		return err
	})
	if err != nil {
		return nil, err
	}
	return reply, nil
}

// DoWith is Do with the credential from source instead of
// Config.KeySource: a cloud provider's short-lived token or signing
// secret, fetched before every call (the credential libraries cache
// them) so that a credential that cannot be had fails the call before
// anything is sent, without retries, as "<provider>: <what> unavailable:
// <why>". What source returns is passed to fn and scrubbed from every
// error, like an API key.
func (c *Caller) DoWith(ctx context.Context, what string, source KeySource, fn CallFunc) error {
	key, err := source(ctx)
	if err != nil {
		return &ProviderError{Provider: c.provider, Message: cut(what + " unavailable: " + err.Error()), Err: contextErr(err)}
	}
	if key == "" {
		return &ProviderError{Provider: c.provider, Message: what + " is empty"}
	}
	return c.run(ctx, key, fn)
}

func (c *Caller) run(ctx context.Context, key string, fn CallFunc) error {
	start := time.Now()
	deadline, _ := ctx.Deadline()
	obs := &attemptLog{provider: c.provider, secret: key, onRetry: c.cfg.OnRetry, deadline: deadline, maxReply: c.cfg.MaxReplyBytes}
	err := fn(ctx, key, obs.middleware)
	if err == nil {
		return nil
	}
	return obs.fail(ctx, start, err)
}

// contextErr keeps a context error reachable through errors.Is, and drops
// anything else (its text is already in the message).
func contextErr(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return context.Canceled
	}
	return nil
}
