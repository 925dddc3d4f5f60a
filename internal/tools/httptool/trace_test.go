package httptool

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentrun/agentrun/internal/telemetry"
)

// The service's own spans join the run's trace: the request carries the
// tool call span's traceparent.
func TestExecute_sendsTheCallsTraceParent(t *testing.T) {
	srv, got := recorder(t, ok)
	rec := tracetest.NewSpanRecorder()
	run := telemetry.StartRun(telemetry.NewProvider(sdktrace.WithSpanProcessor(rec)), "")
	inv := call(`{}`)
	ctx, done := run.Observer("", "").ToolCall(run.Context(context.Background()), inv)
	res := mustNew(t, Config{URL: srv.URL}, nil).Execute(ctx, inv)
	done(res)
	if res.Failure != nil {
		t.Fatalf("Failure = %+v", res.Failure)
	}
	sc, err := telemetry.ParseTraceParent(receive(t, got).Header.Get("traceparent"))
	if err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want the tool call's", len(spans))
	}
	if sc.TraceID().String() != run.TraceID() || sc.SpanID() != spans[0].SpanContext().SpanID() {
		t.Errorf("traceparent %s-%s, want the run's trace %s and the call's span %s",
			sc.TraceID(), sc.SpanID(), run.TraceID(), spans[0].SpanContext().SpanID())
	}

	// Without a trace, no header.
	_ = mustNew(t, Config{URL: srv.URL}, nil).Execute(context.Background(), call(`{}`))
	if h := receive(t, got).Header.Get("traceparent"); h != "" {
		t.Errorf("traceparent %q sent without a trace", h)
	}
}
