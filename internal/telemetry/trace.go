package telemetry

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agentrun/agentrun/internal/loop"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of AgentRun's spans.
const ScopeName = "github.com/agentrun/agentrun"

// Enabled reports whether the environment asks for traces: an OTLP
// endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER is otlp, and
// neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none says no.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return true
	}
}

// Setup returns the tracer provider the OTEL_* environment asks for and a
// function that flushes and stops it. Without that environment (see
// Enabled) it is a no-op provider and nothing is sent. The exporter is
// OTLP over HTTP (protobuf); it reads its endpoint, headers, timeout,
// compression and TLS settings from the standard variables itself, and
// OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES name the service (service
// is the default name).
func Setup(ctx context.Context, service string) (trace.TracerProvider, func(context.Context) error, error) {
	none := func(context.Context) error { return nil }
	if !Enabled(os.Getenv) {
		return noop.NewTracerProvider(), none, nil
	}
	if exp := os.Getenv("OTEL_TRACES_EXPORTER"); exp != "" && exp != "otlp" {
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: only otlp (or none) is supported", exp)
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := os.Getenv(v); p != "" {
			if p != "http/protobuf" {
				return nil, nil, fmt.Errorf("%s=%s: only http/protobuf is supported", v, p)
			}
			break
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("the OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, nil, err
	}
	tp := NewProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}

// NewProvider returns an SDK tracer provider that can emit a run's root
// span under the span id the run remembers (see Run.End). Other options
// are the SDK's (an exporter, a resource, a sampler).
func NewProvider(opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithIDGenerator(&idGenerator{})}, opts...)...)
}

// idGenerator is the SDK's random generator, except that a span started
// with a context from withIDs gets the ids the context carries.
type idGenerator struct{}

type fixedIDsKey struct{}

func withIDs(ctx context.Context, sc trace.SpanContext) context.Context {
	return context.WithValue(ctx, fixedIDsKey{}, sc)
}

func (g *idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if sc, ok := ctx.Value(fixedIDsKey{}).(trace.SpanContext); ok {
		return sc.TraceID(), sc.SpanID()
	}
	sc := newSpanContext()
	return sc.TraceID(), sc.SpanID()
}

func (g *idGenerator) NewSpanID(ctx context.Context, traceID trace.TraceID) trace.SpanID {
	if sc, ok := ctx.Value(fixedIDsKey{}).(trace.SpanContext); ok && sc.TraceID() == traceID {
		return sc.SpanID()
	}
	return newSpanContext().SpanID()
}

func newSpanContext() trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	for !tid.IsValid() {
		_, _ = rand.Read(tid[:]) // crypto/rand.Read never fails
	}
	for !sid.IsValid() {
		_, _ = rand.Read(sid[:])
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
}

// Run is one run's trace: the ids of its invoke_agent span, chosen when
// the run started and carried by the run from then on.
type Run struct {
	tracer trace.Tracer
	sc     trace.SpanContext
	// parent is the span the run span is a child of (a tool call of the
	// run that made this one); invalid for a run at the top of its trace.
	parent trace.SpanContext
}

// StartRun returns the run's trace. traceParent is the W3C traceparent
// the run carries; when it is empty or unreadable the run starts a new
// trace (read TraceParent to carry it).
func StartRun(tp trace.TracerProvider, traceParent string) *Run {
	return StartRunUnder(tp, traceParent, "")
}

// StartRunUnder returns the trace of a run made by another run's tool
// call (an agent tool): parent is the W3C traceparent of that call's
// span. A run that carries no traceparent yet starts in the parent's
// trace, and its invoke_agent span is a child of the call's span. An
// empty or unreadable parent, or one of another trace than the run
// carries, is StartRun's.
func StartRunUnder(tp trace.TracerProvider, traceParent, parent string) *Run {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	p, perr := ParseTraceParent(parent)
	sc, err := ParseTraceParent(traceParent)
	if err != nil {
		sc = newSpanContext()
		if perr == nil {
			sc = sc.WithTraceID(p.TraceID()).WithTraceFlags(p.TraceFlags())
		}
	}
	r := &Run{tracer: tp.Tracer(ScopeName), sc: sc}
	if perr == nil && p.TraceID() == sc.TraceID() {
		r.parent = p
	}
	return r
}

// TraceParentOf is the W3C traceparent of the span ctx carries (a tool
// call's, to carry into what the call makes), or "" when it carries none.
func TraceParentOf(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c.Get("traceparent")
}

// TraceParent is the run span's W3C traceparent, to carry in the run.
func (r *Run) TraceParent() string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), r.sc), c)
	return c["traceparent"]
}

// TraceID is the run's trace id in hex.
func (r *Run) TraceID() string { return r.sc.TraceID().String() }

// ParseTraceParent reads a W3C traceparent.
func ParseTraceParent(s string) (trace.SpanContext, error) {
	if s == "" {
		return trace.SpanContext{}, errors.New("no traceparent")
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return sc, fmt.Errorf("traceparent %q is not valid", s)
	}
	return sc, nil
}

// Context returns ctx with the run span as the parent of the spans
// started from it (the model and tool calls).
func (r *Run) Context(ctx context.Context) context.Context {
	return trace.ContextWithRemoteSpanContext(ctx, r.sc)
}

// RunInfo describes a run that ended, for its invoke_agent span.
type RunInfo struct {
	Name, Namespace, UID string
	Provider, Model      string
	Start, End           time.Time
	Outcome, Reason      string
	InputTokens          int64
	OutputTokens         int64
	Turns                int
}

// End emits the run's invoke_agent span, from Start to End, under the
// span id the run carried. Completed is an OK span; every other outcome
// is an error span whose description is the reason.
func (r *Run) End(ctx context.Context, info RunInfo) {
	root := trace.WithNewRoot()
	if r.parent.IsValid() {
		ctx, root = trace.ContextWithRemoteSpanContext(ctx, r.parent), nil
	}
	ctx = withIDs(ctx, r.sc)
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.agent.name", info.Name),
		attribute.String("gen_ai.provider.name", providerName(info.Provider)),
		attribute.String("gen_ai.request.model", info.Model),
		attribute.Int64("gen_ai.usage.input_tokens", info.InputTokens),
		attribute.Int64("gen_ai.usage.output_tokens", info.OutputTokens),
		attribute.String("agentrun.outcome", info.Outcome),
		attribute.Int("agentrun.turns", info.Turns),
	}
	if info.UID != "" {
		attrs = append(attrs, attribute.String("gen_ai.agent.id", info.UID))
	}
	if info.Namespace != "" {
		attrs = append(attrs, attribute.String("k8s.namespace.name", info.Namespace))
	}
	start := info.Start
	if start.IsZero() || start.After(info.End) {
		start = info.End
	}
	opts := []trace.SpanStartOption{trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...)}
	if root != nil {
		opts = append(opts, root)
	}
	_, span := r.tracer.Start(ctx, "invoke_agent "+info.Name, opts...)
	if info.Outcome != string(loop.Completed) {
		span.SetAttributes(attribute.String("error.type", info.Outcome))
		// The reason stays in the AgentRun: it may quote the model or a
		// tool (a refusal, a guardrail's match), and a trace backend is
		// read by more people than the run's namespace.
		span.SetStatus(codes.Error, "the run ended "+info.Outcome+"; its reason is in the AgentRun's status.reason")
	}
	span.End(trace.WithTimestamp(info.End))
}

// Compactions traces the context compactions among notes: a
// compact_context span each, a child of the run span, at the time of the
// step that made it. Its attributes say the turn whose request it
// shrank, the strategy and what was compacted, with the estimates before
// and after (the note's text: figures and tool names only).
func (r *Run) Compactions(ctx context.Context, strategy string, notes []loop.Note, at time.Time) {
	for _, n := range notes {
		if n.Kind != loop.NoteContextCompacted || n.Warning {
			continue
		}
		_, span := r.tracer.Start(r.Context(ctx), "compact_context", trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(at),
			trace.WithAttributes(
				attribute.String("agentrun.context.strategy", strategy),
				attribute.Int("agentrun.turn", n.Turn),
				attribute.String("agentrun.context.compaction", n.Message)))
		span.End(trace.WithTimestamp(at))
	}
}

// Observer returns the loop observer that traces the run's model and tool
// calls as children of the run span (the caller passes contexts made by
// Context).
func (r *Run) Observer(provider, model string) loop.Observer {
	return calls{tracer: r.tracer, provider: providerName(provider), model: model}
}

type calls struct {
	tracer          trace.Tracer
	provider, model string
}

func (c calls) ModelCall(ctx context.Context, req *loop.Request) (context.Context, func(*loop.Reply, error)) {
	model := c.model
	if req != nil && req.Model != "" {
		model = req.Model
	}
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", c.provider),
		attribute.String("gen_ai.request.model", model),
	}
	if req != nil && req.MaxOutputTokens > 0 {
		attrs = append(attrs, attribute.Int64("gen_ai.request.max_tokens", req.MaxOutputTokens))
	}
	if req != nil && req.Attempt > 0 {
		// Two calls in a turn are a retry or a fallback: the trace says
		// which.
		attrs = append(attrs, attribute.Int("agentrun.model.attempt", req.Attempt),
			attribute.Int("agentrun.model.fallback", req.Fallback))
	}
	name := "chat"
	if model != "" {
		name += " " + model
	}
	ctx, span := c.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, func(reply *loop.Reply, err error) {
		defer span.End()
		if err != nil {
			span.SetAttributes(attribute.String("error.type", fmt.Sprintf("%T", err)))
			span.SetStatus(codes.Error, loop.ClipDetail(err.Error()))
			return
		}
		if reply == nil {
			return
		}
		span.SetAttributes(
			attribute.Int64("gen_ai.usage.input_tokens", reply.Usage.InputTokens),
			attribute.Int64("gen_ai.usage.output_tokens", reply.Usage.OutputTokens),
			attribute.StringSlice("gen_ai.response.finish_reasons", []string{finishReason(reply)}))
		if reply.Usage.CachedInputTokens > 0 {
			span.SetAttributes(attribute.Int64("gen_ai.usage.cache_read.input_tokens", reply.Usage.CachedInputTokens))
		}
	}
}

func (c calls) ToolCall(ctx context.Context, inv loop.Invocation) (context.Context, func(loop.Result)) {
	ctx, span := c.tracer.Start(ctx, "execute_tool "+inv.Tool, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", inv.Tool),
		attribute.String("gen_ai.tool.call.id", inv.CallID),
		attribute.Int("agentrun.tool.attempt", inv.Attempt)))
	return ctx, func(res loop.Result) {
		defer span.End()
		if f := res.Failure; f != nil {
			span.SetAttributes(attribute.String("error.type", string(f.Kind)))
			span.SetStatus(codes.Error, loop.ClipDetail(string(f.Kind)+": "+f.Detail))
		}
	}
}

func finishReason(r *loop.Reply) string {
	switch {
	case r.Refusal != "":
		return "content_filter"
	case r.Truncated:
		return "length"
	case len(r.ToolCalls) > 0:
		return "tool_calls"
	}
	return "stop"
}

// providerName is the gen_ai.provider.name of a model provider.
func providerName(p string) string {
	if p == "" {
		return "_OTHER"
	}
	return p // openai and anthropic are the convention's own names
}

// Info describes a run that ended from its engine state, for End.
func Info(name string, cfg *loop.Config, s *loop.State, end time.Time) RunInfo {
	info := RunInfo{Name: name, Provider: cfg.Model.Provider, Model: cfg.Model.Name, End: end,
		Outcome: string(s.Outcome), Reason: s.Reason, Turns: s.Usage.Turns,
		InputTokens: s.Usage.InputTokens, OutputTokens: s.Usage.OutputTokens}
	if s.StartedAt != nil {
		info.Start = *s.StartedAt
	}
	return info
}
