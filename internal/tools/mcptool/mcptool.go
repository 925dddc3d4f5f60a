// Package mcptool executes an `mcp` tool: it calls one named tool on a
// Model Context Protocol server over the streamable HTTP or the HTTP+SSE
// transport, with the official Go SDK, optionally with an OAuth 2 access
// token obtained with the client credentials grant. It also lists a
// server's tools (Server.Tools), for the MCPServer controller.
//
// Every call opens its own session (initialize, tools/call, close). That
// costs a round trip, and buys calls that do not depend on a session that
// may have expired on the server, been dropped by an operator restart, or
// died with a connection; a failed call is never retried here, so a
// mutating tool is never called twice behind the engine's back.
//
// How a call's outcome maps to a Result:
//   - the server cannot be reached, or fails the handshake: Unavailable;
//   - the server refuses the credentials (401, 403), or the token endpoint
//     will not issue a token: Unavailable, saying which (the error wraps
//     ErrUnauthenticated);
//   - the deadline passes: Timeout;
//   - the server rejects the request (a JSON-RPC error: unknown tool,
//     invalid parameters): InvalidCall, with the server's message;
//   - the tool answers with isError: InvalidCall, with the tool's text as
//     the detail and the output. The tool ran and declined the call;
//     MCP intends such errors for the model to read and correct, which is
//     what the engine asks of an InvalidCall. (No better kind exists yet;
//     ExitCode would report a process exit code that does not exist.)
//   - otherwise the text content, concatenated, is the output; a result
//     with only structured content is output as JSON.
package mcptool

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/tools/redact"
)

const (
	// DefaultMaxResponseBytes bounds any one HTTP response read from the
	// server. The SDK decodes whole messages, so this, not MaxResultBytes,
	// bounds what a call may hold in memory; a larger answer fails.
	DefaultMaxResponseBytes = 8 << 20

	// MetaIdempotencyKey is the _meta key of a tools/call request that
	// carries the call's idempotency key, for servers that deduplicate.
	MetaIdempotencyKey = "agentrun.dev/idempotencyKey"

	// maxListedTools bounds the tool names a preflight error lists.
	maxListedTools = 30
)

// Protocol is the MCP transport a server speaks.
type Protocol string

const (
	// StreamableHTTP is the streamable HTTP transport (MCP 2025-03-26 and
	// later): each message is a POST to the endpoint.
	StreamableHTTP Protocol = "streamableHTTP"
	// SSE is the older HTTP+SSE transport (MCP 2024-11-05): a GET to the
	// endpoint opens an event stream that names where to POST messages,
	// and every answer comes back on that stream.
	SSE Protocol = "sse"
)

// Server is how to reach one MCP server: its endpoint, its transport and
// credentials. It is safe for concurrent use.
type Server struct {
	endpoint         string
	protocol         Protocol
	transport        http.RoundTripper
	maxResponseBytes int64
	secrets          func() []string
}

// Executor calls one tool of one MCP server. It is safe for concurrent use.
type Executor struct {
	*Server
	tool string

	mu        sync.Mutex
	hints     Hints
	inspected bool
	// description and schema are the server's for the tool, as of the
	// last successful Inspect.
	description string
	schema      json.RawMessage
}

// ErrNotOffered marks an Inspect that found the server does not offer
// the executor's tool.
var ErrNotOffered = errors.New("the server does not offer the tool")

// Option configures a Server or an Executor.
type Option func(*executorOptions)

type executorOptions struct {
	protocol         Protocol
	transport        http.RoundTripper
	maxResponseBytes int64
	secrets          func() []string
	oauth            *clientcredentials.Config
	oauthTransport   http.RoundTripper
}

// WithProtocol sets the transport the server speaks; the default is
// StreamableHTTP.
func WithProtocol(p Protocol) Option {
	return func(o *executorOptions) { o.protocol = p }
}

// WithTransport sets the transport requests go through (custom TLS roots,
// a proxy, authentication). The default is a clone of
// http.DefaultTransport.
func WithTransport(rt http.RoundTripper) Option {
	return func(o *executorOptions) { o.transport = rt }
}

// WithRedaction names the values read from Secrets that the transport
// sends (header values): wherever the tool's answer echoes one, it is
// replaced by [redacted] before the result leaves the executor.
func WithRedaction(secrets func() []string) Option {
	return func(o *executorOptions) { o.secrets = secrets }
}

// WithMaxResponseBytes bounds each HTTP response read from the server.
func WithMaxResponseBytes(n int64) Option {
	return func(o *executorOptions) { o.maxResponseBytes = n }
}

// WithClientCredentials authenticates every request to the server with
// an OAuth 2 access token from cfg.TokenURL (the client credentials
// grant). The token is kept until shortly before it expires or until the
// server answers 401, and is redacted, like the client secret, from
// anything the server answers. Token requests go through rt (nil: a clone
// of http.DefaultTransport), not through WithTransport's transport, which
// may add headers meant for the server only.
func WithClientCredentials(cfg clientcredentials.Config, rt http.RoundTripper) Option {
	return func(o *executorOptions) { o.oauth, o.oauthTransport = &cfg, rt }
}

// NewServer returns how to reach the MCP server at endpoint (an http or
// https URL, such as http://mcp-billing:8080/mcp). It does not contact the
// server.
func NewServer(endpoint string, opts ...Option) (*Server, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("mcp tool: %q is not an http(s) URL", endpoint)
	}
	o := executorOptions{
		protocol:         StreamableHTTP,
		transport:        http.DefaultTransport.(*http.Transport).Clone(),
		maxResponseBytes: DefaultMaxResponseBytes,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.protocol != StreamableHTTP && o.protocol != SSE {
		return nil, fmt.Errorf("mcp tool: unknown transport %q (want %s or %s)", o.protocol, StreamableHTTP, SSE)
	}
	s := &Server{
		endpoint:         endpoint,
		protocol:         o.protocol,
		transport:        o.transport,
		maxResponseBytes: o.maxResponseBytes,
		secrets:          o.secrets,
	}
	if o.oauth != nil {
		if o.oauth.TokenURL == "" || o.oauth.ClientID == "" {
			return nil, errors.New("mcp tool: OAuth client credentials need a token URL and a client ID")
		}
		fetch := o.oauthTransport
		if fetch == nil {
			fetch = http.DefaultTransport.(*http.Transport).Clone()
		}
		tt := &tokenTransport{next: s.transport, config: *o.oauth, fetch: &http.Client{Transport: fetch}}
		s.transport = tt
		headerSecrets := s.secrets
		s.secrets = func() []string {
			out := tt.sent()
			if headerSecrets != nil {
				out = append(out, headerSecrets()...)
			}
			return out
		}
	}
	return s, nil
}

// New returns an executor for tool on the MCP server at endpoint. It does
// not contact the server; Preflight does.
func New(endpoint, tool string, opts ...Option) (*Executor, error) {
	if strings.TrimSpace(tool) == "" {
		return nil, errors.New("mcp tool: the tool name is empty")
	}
	s, err := NewServer(endpoint, opts...)
	if err != nil {
		return nil, err
	}
	return &Executor{Server: s, tool: tool}, nil
}

// Endpoint returns the server's URL.
func (s *Server) Endpoint() string { return s.endpoint }

// connection is one session and what its transport observed.
type connection struct {
	session *mcp.ClientSession
	limit   *limitedTransport
}

// connect opens a session. With streamable HTTP the standalone SSE stream
// is not opened: a session lives for one call and waits for no
// server-initiated messages. With SSE the session's stream carries every
// answer, so the response limit bounds the whole session.
func (s *Server) connect(ctx context.Context) (*connection, error) {
	next := s.transport
	// A session lives for one call: every request of it carries the W3C
	// traceparent of the call's span (none when there is no trace), so the
	// server's spans join the run's trace.
	trace := http.Header{}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(trace))
	if len(trace) > 0 {
		next = &traceTransport{next: next, trace: trace}
	}
	lt := &limitedTransport{next: next, limit: s.maxResponseBytes}
	hc := &http.Client{Transport: lt, CheckRedirect: sameOrigin}
	var transport mcp.Transport
	switch s.protocol {
	case SSE:
		transport = &mcp.SSEClientTransport{Endpoint: s.endpoint, HTTPClient: hc, MaxEventSize: int(s.maxResponseBytes)}
	default:
		transport = &mcp.StreamableClientTransport{Endpoint: s.endpoint, HTTPClient: hc, DisableStandaloneSSE: true}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "agentrun", Version: "v1alpha1"}, nil)
	session, err := client.Connect(ctx, transport, nil)
	if err != nil {
		return nil, lt.explain(err)
	}
	return &connection{session: session, limit: lt}, nil
}

// Tools connects to the server and lists the tools it offers, in the
// server's order. An error says why the list could not be had; it wraps
// ErrUnauthenticated when the credentials were refused.
func (s *Server) Tools(ctx context.Context) ([]*mcp.Tool, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, loop.DefaultToolTimeout)
		defer cancel()
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, s.unreachable(err)
	}
	var tools []*mcp.Tool
	for tool, err := range conn.session.Tools(ctx, nil) {
		if err != nil {
			conn.close(false)
			return nil, fmt.Errorf("MCP server %s: listing its tools failed: %w", s.endpoint, describe(conn.limit.explain(err)))
		}
		tools = append(tools, tool)
	}
	conn.close(true)
	return tools, nil
}

// unreachable describes a session that could not be opened.
func (s *Server) unreachable(err error) error {
	if errors.Is(err, ErrUnauthenticated) {
		return fmt.Errorf("MCP server %s: %w", s.endpoint, describe(err))
	}
	return fmt.Errorf("MCP server %s is unreachable: %w", s.endpoint, describe(err))
}

// errCrossOrigin refuses a redirect to another scheme, host or port: the
// request's headers (an API key from a Secret) must reach no server but
// the one the manifest names.
var errCrossOrigin = errors.New("the server redirected to another origin; not followed, so that its headers reach no other server")

// sameOrigin follows redirects within the endpoint's scheme and host only.
func sameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if first := via[0].URL; req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
		return fmt.Errorf("%w (%s://%s)", errCrossOrigin, req.URL.Scheme, req.URL.Host)
	}
	return nil
}

// close ends the session. The SDK bounds the DELETE it sends; a call that
// failed does not wait for it, as the server may be what failed.
func (c *connection) close(wait bool) {
	if wait {
		_ = c.session.Close()
		return
	}
	go func() { _ = c.session.Close() }()
}

// Preflight checks that the server is reachable and offers the tool, and
// records the tool's annotations (see Hints).
func (e *Executor) Preflight(ctx context.Context) error {
	_, err := e.Inspect(ctx)
	return err
}

// Inspect connects to the server, lists its tools and returns what the
// server says about this one. It fails when the server cannot be reached
// or does not offer the tool, naming the tools it does offer.
func (e *Executor) Inspect(ctx context.Context) (Hints, error) {
	tools, err := e.Tools(ctx)
	if err != nil {
		return Hints{}, err
	}
	var names []string
	var found *mcp.Tool
	for _, tool := range tools {
		names = append(names, tool.Name)
		if tool.Name == e.tool {
			found = tool
		}
	}
	if found == nil {
		return Hints{}, &described{msg: fmt.Sprintf("MCP server %s does not offer tool %q; %s", e.endpoint, e.tool, offered(names)), err: ErrNotOffered}
	}
	var schema json.RawMessage
	if found.InputSchema != nil {
		if schema, err = json.Marshal(found.InputSchema); err != nil {
			return Hints{}, fmt.Errorf("MCP server %s: the input schema of tool %q: %w", e.endpoint, e.tool, err)
		}
	}
	h := HintsFrom(found.Annotations)
	e.mu.Lock()
	e.hints, e.inspected = h, true
	e.description, e.schema = found.Description, schema
	e.mu.Unlock()
	return h, nil
}

// Definition returns the server's description and input schema of the
// tool at the last successful Inspect or Preflight; ok is false before
// one succeeded.
func (e *Executor) Definition() (description string, schema json.RawMessage, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.description, e.schema, e.inspected
}

// Hints returns what the server said about the tool at the last
// successful Inspect or Preflight; ok is false before one succeeded.
// Combine them with the manifest's declaration with Tighten.
func (e *Executor) Hints() (h Hints, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hints, e.inspected
}

func offered(names []string) string {
	if len(names) == 0 {
		return "it offers no tools"
	}
	slices.Sort(names)
	more := ""
	if len(names) > maxListedTools {
		more = fmt.Sprintf(" and %d more", len(names)-maxListedTools)
		names = names[:maxListedTools]
	}
	return "it offers: " + strings.Join(names, ", ") + more
}

// Execute calls the tool once for inv. It always returns a Result.
func (e *Executor) Execute(ctx context.Context, inv loop.Invocation) loop.Result {
	return e.call(ctx, inv) // the Router stamps the call id and the duration
}

func (e *Executor) call(ctx context.Context, inv loop.Invocation) loop.Result {
	// The engine's Config.Normalize gave every invocation its timeout and
	// result limit.
	timeout, limit := inv.Timeout, inv.MaxResultBytes
	args := bytes.TrimSpace(inv.Arguments)
	if len(args) == 0 {
		args = []byte("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return failed(loop.FailInvalid, "the arguments are not a JSON object")
	}

	// Whatever the server says goes to the model: a Secret value it echoes
	// does not (send redacts the output, here the failure's detail).
	res := e.send(ctx, inv, args, timeout, limit)
	if e.secrets != nil && res.Failure != nil {
		res.Failure.Detail = redact.String(res.Failure.Detail, redact.Forms(e.secrets()...))
	}
	return res
}

func (e *Executor) send(ctx context.Context, inv loop.Invocation, args []byte, timeout time.Duration, limit int) loop.Result {
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := e.connect(callCtx)
	if err != nil {
		if f := deadlineFailure(ctx, callCtx, timeout); f != nil {
			return loop.Result{Failure: f}
		}
		return failed(loop.FailUnavailable, e.unreachable(err).Error())
	}
	params := &mcp.CallToolParams{Name: e.tool, Arguments: json.RawMessage(args)}
	if inv.IdempotencyKey != "" {
		params.Meta = mcp.Meta{MetaIdempotencyKey: inv.IdempotencyKey}
	}
	r, err := conn.session.CallTool(callCtx, params)
	conn.close(err == nil)
	if err != nil {
		err = conn.limit.explain(err)
		if f := deadlineFailure(ctx, callCtx, timeout); f != nil {
			return loop.Result{Failure: f}
		}
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) {
			return failed(loop.FailInvalid, fmt.Sprintf("MCP server %s rejected the call (JSON-RPC error %d): %s",
				e.endpoint, rpcErr.Code, rpcErr.Message))
		}
		return failed(loop.FailUnavailable, fmt.Sprintf("MCP server %s failed during the call: %s", e.endpoint, describe(err)))
	}

	out, contentType := render(r)
	var forms []string
	if e.secrets != nil {
		// Before the cut, so that no part of a value stays.
		forms = redact.Forms(e.secrets()...)
		out = redact.Bytes(out, forms)
	}
	res := loop.Result{Output: out, ContentType: contentType, Size: int64(len(out))}
	if len(out) > limit+1 {
		res.Output, res.Truncated = redact.TrimPartial(out[:limit+1], forms), true
	}
	if r.IsError {
		detail := strings.TrimSpace(string(out))
		if detail == "" {
			detail = "the tool reported an error without a message"
		}
		res.Failure = &loop.Failure{Kind: loop.FailTool, Detail: loop.ClipDetail(detail)}
	}
	return res
}

// render turns a tool result into output bytes: the text of its content
// blocks, one after another on separate lines. Blocks that are not text
// are named, not shown. A result with no content but structured content is
// that content as JSON.
func render(r *mcp.CallToolResult) ([]byte, string) {
	var parts []string
	for _, c := range r.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.EmbeddedResource:
			switch {
			case c.Resource == nil:
			case c.Resource.Text != "":
				parts = append(parts, c.Resource.Text)
			default:
				parts = append(parts, fmt.Sprintf("[resource %s (%s) not shown]", c.Resource.URI, c.Resource.MIMEType))
			}
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource link %s]", c.URI))
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image (%s) not shown]", c.MIMEType))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio (%s) not shown]", c.MIMEType))
		default:
			parts = append(parts, "[content not shown]")
		}
	}
	if len(parts) == 0 && r.StructuredContent != nil {
		if b, err := json.Marshal(r.StructuredContent); err == nil {
			return b, "application/json"
		}
	}
	return []byte(strings.Join(parts, "\n")), ""
}

// deadlineFailure returns the failure for a call whose context ended: its
// own deadline or the caller's is a Timeout; a caller that gave up leaves
// the outcome unknown. It returns nil while both contexts are live.
func deadlineFailure(parent, call context.Context, timeout time.Duration) *loop.Failure {
	switch {
	case errors.Is(parent.Err(), context.Canceled):
		return &loop.Failure{Kind: loop.FailUnknown, Detail: "the call was abandoned before its answer arrived"}
	case call.Err() != nil:
		return &loop.Failure{Kind: loop.FailTimeout, Detail: fmt.Sprintf("no answer within %s", timeout)}
	}
	return nil
}

// cause names the condition behind an SDK error briefly; the SDK's own
// messages nest every layer ("calling "initialize": sending ... Post ...").
func cause(err error) string {
	// First: a token endpoint that refused a connection is not the server.
	var tokErr *tokenError
	if errors.As(err, &tokErr) {
		return tokErr.Error()
	}
	var credErr *credentialsError
	if errors.As(err, &credErr) {
		return credErr.Error()
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, errResponseTooLarge):
		return err.Error()
	case errors.Is(err, errCrossOrigin):
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			return urlErr.Err.Error()
		}
		return err.Error()
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "cannot resolve host " + dnsErr.Name
	}
	// The SDK wraps a request's transport error in a JSON-RPC error
	// ("rejected by transport") that says nothing of the refusal.
	var refused *egress.RefusedError
	if errors.As(err, &refused) {
		return refused.Error()
	}
	// The same for a certificate the client does not trust.
	var untrusted *tls.CertificateVerificationError
	if errors.As(err, &untrusted) {
		return untrusted.Error()
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return fmt.Sprintf("JSON-RPC error %d: %s", rpcErr.Code, rpcErr.Message)
	}
	return err.Error()
}

// described is an error with cause's brief message that keeps the chain
// (errors.Is(err, ErrUnauthenticated) still holds).
type described struct {
	msg string
	err error
}

func (d *described) Error() string { return d.msg }
func (d *described) Unwrap() error { return d.err }

func describe(err error) error { return &described{msg: cause(err), err: err} }

// credentialsError is the server's refusal of a request for its
// credentials (HTTP 401 or 403).
type credentialsError struct{ status int }

func (e *credentialsError) Error() string {
	return fmt.Sprintf("the server refused the request's credentials (HTTP %d %s)", e.status, http.StatusText(e.status))
}

func (e *credentialsError) Unwrap() error { return ErrUnauthenticated }

func failed(kind loop.FailureKind, detail string) loop.Result { return loop.Failed(kind, 0, detail) }

var errResponseTooLarge = errors.New("the server's response exceeds the size limit")

// limitedTransport fails the read of any response body longer than limit,
// and remembers that it did: the SDK reads responses in its own goroutines
// and reports such a failure only as a lost response. It also remembers a
// refusal of the credentials (401, 403), which the SDK reports only by
// its status text.
type limitedTransport struct {
	next     http.RoundTripper
	limit    int64
	exceeded atomic.Bool
	refused  atomic.Int32
}

func (t *limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
		t.refused.Store(int32(resp.StatusCode))
	}
	if err != nil || t.limit <= 0 {
		return resp, err
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: t.limit, exceeded: &t.exceeded}
	return resp, nil
}

// explain replaces err by errResponseTooLarge when a response was cut,
// and by a credentialsError when the server refused the credentials.
func (t *limitedTransport) explain(err error) error {
	if err == nil {
		return nil
	}
	if t.exceeded.Load() {
		return fmt.Errorf("%w (%d bytes)", errResponseTooLarge, t.limit)
	}
	if code := t.refused.Load(); code != 0 {
		return &credentialsError{status: int(code)}
	}
	return err
}

type limitedBody struct {
	io.ReadCloser
	left     int64
	exceeded *atomic.Bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			b.exceeded.Store(true)
			return 0, errResponseTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// traceTransport adds the call's trace context headers to every request
// of its session.
type traceTransport struct {
	next  http.RoundTripper
	trace http.Header
}

func (t *traceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.trace {
		req.Header[k] = v
	}
	return t.next.RoundTrip(req)
}
