// Package httptool executes an `http` tool: one HTTP request per call,
// whose URL and body are templates over the call's arguments (see the
// escaping rules in template.go), with headers from literal values or from
// Secrets.
//
// The executor reports what the server said and leaves the wording to the
// engine: a non-2xx answer is a Failure of kind HTTPStatus carrying the
// status code, the content type and the (bounded) body, so that the engine
// can recognise an HTML sign-in page or a 401.
package httptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/retryafter"
	"github.com/agentrun/agentrun/internal/tools/redact"
	"go.opentelemetry.io/otel/propagation"
)

const (
	// maxRedirects bounds the same-host redirects followed.
	maxRedirects = 10
	userAgent    = "agentrun-httptool"
)

// SecretResolver returns the value of key in the Secret called name (in
// the run's namespace). The controller provides it; agentrun local
// resolves against the Secret documents of its manifest. Values are never
// logged or put in a Result.
type SecretResolver func(ctx context.Context, name, key string) (string, error)

// Header is one request header. Exactly one of Value and Secret is used:
// Secret when it is set.
type Header struct {
	Name  string
	Value string
	// Secret takes the value from a key of a Secret. Trailing line breaks
	// are dropped (a Secret made from a file often ends in one, which is
	// not valid in a header).
	Secret *SecretKeyRef
}

// SecretKeyRef names a key of a Secret.
type SecretKeyRef struct {
	Name string
	Key  string
}

// Config is a tool's `http` executor as declared in the manifest.
type Config struct {
	// URL is a template of an absolute http or https URL.
	URL string
	// Method defaults to GET, or POST when there is a Body.
	Method string
	// Headers are sent with every request. A Content-Type header decides
	// how Body values are escaped; without one, a Body is JSON.
	Headers []Header
	// Body is an optional template of the request body.
	Body string
}

// Executor sends one request per invocation. It is safe for concurrent use.
type Executor struct {
	method      string
	url         *template.Template
	body        *template.Template
	contentType string // sent when no header sets one and there is a body
	headers     []Header
	resolve     SecretResolver
	client      *http.Client
	// templates parses the templates, shared with other executors
	// (WithTemplates); nil parses them for this executor alone.
	templates *Templates
}

// Option configures an Executor.
type Option func(*Executor)

// WithTransport sets the transport requests go through (custom TLS
// roots, a proxy, the operator's egress policy). The default is
// http.DefaultTransport, whose connections every such executor shares.
func WithTransport(rt http.RoundTripper) Option {
	return func(e *Executor) { e.client.Transport = rt }
}

// WithTemplates shares the parsed URL and body templates with every
// executor given the same Templates. Without it, an executor parses its
// own.
func WithTemplates(t *Templates) Option {
	return func(e *Executor) { e.templates = t }
}

// New parses cfg's templates and returns its executor. resolve may be nil
// when no header comes from a Secret.
func New(cfg Config, resolve SecretResolver, opts ...Option) (*Executor, error) {
	e := &Executor{
		method:  strings.ToUpper(strings.TrimSpace(cfg.Method)),
		resolve: resolve,
		client: &http.Client{
			Transport:     http.DefaultTransport,
			CheckRedirect: sameOriginRedirects,
		},
	}
	for _, o := range opts {
		o(e)
	}
	if e.method == "" {
		e.method = http.MethodGet
		if cfg.Body != "" {
			e.method = http.MethodPost
		}
	}
	if !isToken(e.method) {
		return nil, fmt.Errorf("http tool: method %q is not a valid HTTP method", cfg.Method)
	}
	var err error
	if e.url, err = e.templates.parse("url", strings.TrimSpace(cfg.URL), kindURL); err != nil {
		return nil, fmt.Errorf("http tool: %w", err)
	}
	bodyKind := kindJSON
	for _, h := range cfg.Headers {
		if !isToken(h.Name) {
			return nil, fmt.Errorf("http tool: header name %q is not valid", h.Name)
		}
		if h.Secret != nil {
			if h.Secret.Name == "" || h.Secret.Key == "" {
				return nil, fmt.Errorf("http tool: header %s: the secret needs a name and a key", h.Name)
			}
			if resolve == nil {
				return nil, fmt.Errorf("http tool: header %s comes from a secret, but no secret resolver was given", h.Name)
			}
		} else if strings.ContainsAny(h.Value, "\r\n\x00") {
			return nil, fmt.Errorf("http tool: header %s: the value may not contain line breaks", h.Name)
		}
		if http.CanonicalHeaderKey(h.Name) == "Content-Type" {
			bodyKind = bodyKindOf(h)
		}
		e.headers = append(e.headers, h)
	}
	if cfg.Body != "" {
		if e.body, err = e.templates.parse("body", cfg.Body, bodyKind); err != nil {
			return nil, fmt.Errorf("http tool: %w", err)
		}
		if !hasHeader(cfg.Headers, "Content-Type") {
			e.contentType = "application/json"
		}
	}
	return e, nil
}

// bodyKindOf picks the body escaping for a declared Content-Type header.
// A content type taken from a Secret is not known in advance: raw.
func bodyKindOf(h Header) textKind {
	if h.Secret != nil {
		return kindRaw
	}
	mt, _, err := mime.ParseMediaType(h.Value)
	switch {
	case err != nil:
		return kindRaw
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return kindJSON
	case mt == "application/x-www-form-urlencoded":
		return kindForm
	}
	return kindRaw
}

func hasHeader(hs []Header, name string) bool {
	for _, h := range hs {
		if http.CanonicalHeaderKey(h.Name) == name {
			return true
		}
	}
	return false
}

// sameOriginRedirects follows redirects within the same scheme and host
// only. A redirect elsewhere (a sign-in page on an identity provider, for
// instance) is returned as the answer, so headers such as API keys never
// travel to another host; the engine sees the 3xx status.
func sameOriginRedirects(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if first := via[0].URL; req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
		return http.ErrUseLastResponse
	}
	return nil
}

// Preflight checks that every header's Secret can be read, so that a run
// does not start with a tool that cannot authenticate. It sends nothing.
func (e *Executor) Preflight(ctx context.Context) error {
	var errs []error
	for _, h := range e.headers {
		if h.Secret == nil {
			continue
		}
		if _, err := e.secret(ctx, h); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (e *Executor) secret(ctx context.Context, h Header) (string, error) {
	v, err := e.resolve(ctx, h.Secret.Name, h.Secret.Key)
	if err != nil {
		return "", fmt.Errorf("header %s: cannot read key %q of secret %q: %w", h.Name, h.Secret.Key, h.Secret.Name, err)
	}
	v = strings.TrimRight(v, "\r\n")
	if strings.ContainsAny(v, "\r\n\x00") {
		return "", fmt.Errorf("header %s: key %q of secret %q holds a line break, which a header cannot carry",
			h.Name, h.Secret.Key, h.Secret.Name)
	}
	return v, nil
}

// Execute sends one request for inv. It always returns a Result.
func (e *Executor) Execute(ctx context.Context, inv loop.Invocation) loop.Result {
	return e.do(ctx, inv) // the Router stamps the call id and the duration
}

func (e *Executor) do(ctx context.Context, inv loop.Invocation) loop.Result {
	// The engine's Config.Normalize gave every invocation its timeout and
	// result limit.
	timeout, limit := inv.Timeout, inv.MaxResultBytes
	args, err := decodeArguments(inv.Arguments)
	if err != nil {
		return failed(loop.FailInvalid, err.Error())
	}
	req, secrets, fail := e.request(ctx, args, inv.IdempotencyKey)
	if fail != nil {
		return loop.Result{Failure: fail}
	}
	// Values read from Secrets are hidden wherever the answer echoes them;
	// reading that many bytes more keeps one cut by the limit from leaking
	// its first part.
	forms := redact.Forms(secrets...)
	extra := redact.Longest(forms)

	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req = req.WithContext(callCtx)
	resp, err := e.client.Do(req)
	if err != nil {
		return loop.Result{Failure: transportFailure(ctx, callCtx, req, timeout, err)}
	}
	defer resp.Body.Close()

	// Keep at most limit+1 bytes; one more byte tells whether there was more.
	raw, readErr := io.ReadAll(io.LimitReader(resp.Body, int64(limit+1+extra)))
	body := redact.Bytes(raw, forms)
	res := loop.Result{ContentType: resp.Header.Get("Content-Type"), Size: int64(len(body))}
	if len(body) > limit+1 {
		res.Truncated = true
	} else if readErr == nil && len(raw) == limit+1+extra {
		var one [1]byte
		if n, _ := io.ReadFull(resp.Body, one[:]); n > 0 {
			res.Truncated = true
		}
	}
	if res.Truncated {
		// A value may start in what is kept and go on in what is not.
		body = redact.TrimPartial(body[:min(len(body), limit+1)], forms)
		res.Size = max(resp.ContentLength, 0) // unknown (0) unless the server said
	}
	res.Output = body
	if readErr != nil {
		res.Truncated = true
		res.Size = max(resp.ContentLength, 0)
		res.Failure = transportFailure(ctx, callCtx, req, timeout, readErr)
		res.Failure.Detail = loop.ClipDetail("reading the response: " + res.Failure.Detail)
		return res
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		detail := resp.Status
		if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode/100 == 3 {
			detail += "; redirected to " + redactURL(loc)
		}
		res.Failure = &loop.Failure{Kind: loop.FailHTTP, Code: resp.StatusCode, Detail: loop.ClipDetail(redact.String(detail, forms))}
		// How long the server asked to wait (429, 503): the engine waits
		// at least that long before a retry.
		res.Failure.RetryAfter, _ = retryafter.Parse(resp.Header, time.Now())
	}
	return res
}

// request renders the templates and builds the request, or says why the
// call is invalid or cannot be made. It also returns the values it read
// from Secrets, for the answer to be redacted of them.
func (e *Executor) request(ctx context.Context, args map[string]any, key string) (*http.Request, []string, *loop.Failure) {
	var u strings.Builder
	if err := e.url.Execute(&u, args); err != nil {
		return nil, nil, &loop.Failure{Kind: loop.FailInvalid, Detail: loop.ClipDetail(execError("URL", err))}
	}
	target, err := url.Parse(u.String())
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return nil, nil, &loop.Failure{Kind: loop.FailInvalid, Detail: "the URL built from the arguments is not a valid http(s) URL"}
	}
	if dotSegment(target.Path) {
		return nil, nil, &loop.Failure{Kind: loop.FailInvalid,
			Detail: `the URL built from the arguments has a "." or ".." path segment, which would reach another path`}
	}
	var body io.Reader
	if e.body != nil {
		var b bytes.Buffer
		if err := e.body.Execute(&b, args); err != nil {
			return nil, nil, &loop.Failure{Kind: loop.FailInvalid, Detail: loop.ClipDetail(execError("body", err))}
		}
		body = &b
	}
	req, err := http.NewRequestWithContext(ctx, e.method, target.String(), body)
	if err != nil {
		return nil, nil, &loop.Failure{Kind: loop.FailInvalid, Detail: loop.ClipDetail("building the request: " + err.Error())}
	}
	req.Header.Set("User-Agent", userAgent)
	if e.contentType != "" {
		req.Header.Set("Content-Type", e.contentType)
	}
	if key != "" {
		// The de-facto standard header (IETF draft "The Idempotency-Key
		// HTTP Header Field"); a configured header replaces it.
		req.Header.Set("Idempotency-Key", key)
	}
	// The W3C traceparent of the tool call's span, so that the spans the
	// service makes join the run's trace; nothing when there is no trace.
	// A configured header replaces it.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	var secrets []string
	for _, h := range e.headers {
		v := h.Value
		if h.Secret != nil {
			if v, err = e.secret(ctx, h); err != nil {
				return nil, nil, &loop.Failure{Kind: loop.FailUnavailable, Detail: loop.ClipDetail(err.Error())}
			}
			secrets = append(secrets, v)
		}
		if http.CanonicalHeaderKey(h.Name) == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(h.Name, v)
	}
	return req, secrets, nil
}

// dotSegment reports whether a decoded URL path has a "." or ".." segment.
func dotSegment(path string) bool {
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// decodeArguments reads the arguments object, keeping numbers exact.
func decodeArguments(raw json.RawMessage) (map[string]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var args map[string]any
	if err := dec.Decode(&args); err != nil || args == nil {
		return nil, errors.New("the arguments are not a JSON object")
	}
	if dec.More() {
		return nil, errors.New("the arguments are not a single JSON object")
	}
	return args, nil
}

// transportFailure classifies an error of sending a request or reading its
// answer: the call's own deadline (or the caller's) is a Timeout; a caller
// that gave up leaves the outcome unknown; anything else means the service
// could not be reached.
func transportFailure(parent, call context.Context, req *http.Request, timeout time.Duration, err error) *loop.Failure {
	switch {
	case errors.Is(parent.Err(), context.Canceled):
		return &loop.Failure{Kind: loop.FailUnknown, Detail: "the call was abandoned before its answer arrived"}
	case call.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		return &loop.Failure{Kind: loop.FailTimeout, Detail: fmt.Sprintf("no answer within %s", timeout)}
	}
	return &loop.Failure{Kind: loop.FailUnavailable, Detail: loop.ClipDetail(fmt.Sprintf("%s %s: %s",
		req.Method, redactURL(req.URL.String()), netCause(err)))}
}

// netCause names the network condition behind err briefly.
func netCause(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "connection closed before the answer was complete"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "cannot resolve host " + dnsErr.Name
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return urlErr.Err.Error()
	}
	return err.Error()
}

// redactURL drops credentials, query and fragment: the detail says where
// the request went, not what it carried.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

func failed(kind loop.FailureKind, detail string) loop.Result { return loop.Failed(kind, 0, detail) }

// isToken reports whether s is an RFC 9110 token (a method or header name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}
