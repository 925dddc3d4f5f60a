package mcptool

import (
	"context"
	"net/http"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentrun/agentrun/internal/telemetry"
)

// Every request of a call's session carries the tool call span's
// traceparent, so the server's spans join the run's trace.
func TestExecute_sendsTheCallsTraceParent(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := billingServerWith(t, func(r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("traceparent"))
		mu.Unlock()
	})

	rec := tracetest.NewSpanRecorder()
	run := telemetry.StartRun(telemetry.NewProvider(sdktrace.WithSpanProcessor(rec)), "")
	inv := call(`{"email":"r.okafor@northwind.example"}`)
	ctx, done := run.Observer("", "").ToolCall(run.Context(context.Background()), inv)
	res := executor(t, srv.URL, "lookup_account").Execute(ctx, inv)
	done(res)
	if res.Failure != nil {
		t.Fatalf("Failure = %+v", res.Failure)
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want the tool call's", len(spans))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 { // initialize, then tools/call at least
		t.Fatalf("the server saw %d requests", len(seen))
	}
	for i, h := range seen {
		sc, err := telemetry.ParseTraceParent(h)
		if err != nil {
			t.Errorf("request %d: %v", i, err)
			continue
		}
		if sc.TraceID().String() != run.TraceID() || sc.SpanID() != spans[0].SpanContext().SpanID() {
			t.Errorf("request %d: traceparent %q, want the run's trace %s and the call's span %s",
				i, h, run.TraceID(), spans[0].SpanContext().SpanID())
		}
	}
}
