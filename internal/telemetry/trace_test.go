package telemetry_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/telemetry"
	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// spansByName indexes ended spans by name (names are unique per test).
func spansByName(spans tracetest.SpanStubs) map[string][]tracetest.SpanStub {
	out := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		out[s.Name] = append(out[s.Name], s)
	}
	return out
}

func attrs(s tracetest.SpanStub) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// A run whose model proposes three reads at once: the reads run
// concurrently, and each execute_tool span is a child of the run's
// invoke_agent span (not of a sibling), as are both chat spans.
func TestRunTrace_parallelReadsAreChildrenOfTheRunSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := telemetry.NewProvider(sdktrace.WithSyncer(exp))
	eng, err := loop.New(loop.Config{
		Goal:   "Look three things up.",
		Model:  loop.ModelConfig{Provider: "openai", Name: "gpt-test"},
		Budget: loop.Budget{MaxTurns: 3},
		Tools:  []loop.ToolSpec{{Name: "lookup_a"}, {Name: "lookup_b"}, {Name: "lookup_c"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	model := &loop.Scripted{Entries: []loop.ScriptEntry{
		{ToolCalls: []loop.ToolCall{{Name: "lookup_a", Arguments: json.RawMessage(`{}`)}, {Name: "lookup_b", Arguments: json.RawMessage(`{}`)},
			{Name: "lookup_c", Arguments: json.RawMessage(`{}`)}}, Usage: loop.TokenUsage{InputTokens: 100, OutputTokens: 10}},
		{Content: "Done.", Usage: loop.TokenUsage{InputTokens: 200, OutputTokens: 5}},
	}}
	// Each read waits until all three have started: the group can only
	// finish if it really runs concurrently.
	started := make(chan struct{}, 3)
	all := make(chan struct{})
	go func() {
		for range 3 {
			<-started
		}
		close(all)
	}()
	tools := loop.ToolboxFunc(func(ctx context.Context, inv loop.Invocation) loop.Result {
		started <- struct{}{}
		select {
		case <-all:
			return loop.Result{Output: []byte(`{"ok":true}`)}
		case <-time.After(10 * time.Second):
			return loop.Result{Failure: &loop.Failure{Kind: loop.FailTimeout, Detail: "the reads did not run concurrently"}}
		}
	})

	run := telemetry.StartRun(tp, "")
	obs := run.Observer("openai", "gpt-test")
	ctx := run.Context(context.Background())
	s := &loop.State{}
	(&loop.Runner{Engine: eng, Model: loop.ObserveModel(model, obs), Tools: loop.ObserveTools(tools, obs)}).Run(ctx, s)
	if s.Outcome != loop.Completed {
		t.Fatalf("outcome %s: %s", s.Outcome, s.Reason)
	}
	run.End(context.Background(), telemetry.Info("lookups", eng.Config(), s, time.Now()))

	by := spansByName(exp.GetSpans())
	root := by["invoke_agent lookups"]
	if len(root) != 1 {
		t.Fatalf("invoke_agent spans: %d, want 1; spans: %v", len(root), names(exp.GetSpans()))
	}
	r := root[0]
	if r.Parent.IsValid() {
		t.Errorf("the run span has a parent: %v", r.Parent)
	}
	if got := r.SpanContext.TraceID().String() + "-" + r.SpanContext.SpanID().String(); run.TraceParent() != "00-"+got+"-01" {
		t.Errorf("the run span is %s, the run carries %s", got, run.TraceParent())
	}
	wantChildren := map[string]int{"chat gpt-test": 2, "execute_tool lookup_a": 1, "execute_tool lookup_b": 1, "execute_tool lookup_c": 1}
	gotChildren := map[string]int{}
	for _, s := range exp.GetSpans() {
		if s.Name == r.Name {
			continue
		}
		gotChildren[s.Name]++
		if s.Parent.SpanID() != r.SpanContext.SpanID() || s.SpanContext.TraceID() != r.SpanContext.TraceID() {
			t.Errorf("%s: parent %s in trace %s, want the run span %s in %s", s.Name, s.Parent.SpanID(), s.SpanContext.TraceID(),
				r.SpanContext.SpanID(), r.SpanContext.TraceID())
		}
	}
	if d := cmp.Diff(wantChildren, gotChildren); d != "" {
		t.Errorf("child spans (-want +got):\n%s", d)
	}
	// The reads overlapped: each started before any ended.
	var lastStart, firstEnd time.Time
	for _, n := range []string{"execute_tool lookup_a", "execute_tool lookup_b", "execute_tool lookup_c"} {
		sp := by[n][0]
		if sp.StartTime.After(lastStart) {
			lastStart = sp.StartTime
		}
		if firstEnd.IsZero() || sp.EndTime.Before(firstEnd) {
			firstEnd = sp.EndTime
		}
		a := attrs(sp)
		if a["gen_ai.operation.name"] != "execute_tool" || a["gen_ai.tool.name"] != n[len("execute_tool "):] || a["gen_ai.tool.call.id"] == "" {
			t.Errorf("%s attributes: %v", n, a)
		}
	}
	if lastStart.After(firstEnd) {
		t.Errorf("the reads did not overlap: last start %s, first end %s", lastStart, firstEnd)
	}
	chat := by["chat gpt-test"]
	want := []map[string]string{
		{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-test",
			"gen_ai.usage.input_tokens": "100", "gen_ai.usage.output_tokens": "10", "gen_ai.response.finish_reasons": `["tool_calls"]`, "gen_ai.request.max_tokens": "4096",
			"agentrun.model.attempt": "1", "agentrun.model.fallback": "0"},
		{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-test",
			"gen_ai.usage.input_tokens": "200", "gen_ai.usage.output_tokens": "5", "gen_ai.response.finish_reasons": `["stop"]`, "gen_ai.request.max_tokens": "4096",
			"agentrun.model.attempt": "1", "agentrun.model.fallback": "0"},
	}
	got := []map[string]string{attrs(chat[0]), attrs(chat[1])}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("chat span attributes (-want +got):\n%s", d)
	}
	ra := attrs(r)
	if ra["gen_ai.operation.name"] != "invoke_agent" || ra["gen_ai.agent.name"] != "lookups" || ra["gen_ai.usage.input_tokens"] != "300" ||
		ra["agentrun.outcome"] != "Completed" || r.Status.Code == codes.Error {
		t.Errorf("run span: attributes %v, status %v", ra, r.Status)
	}
	if !r.StartTime.Equal(*s.StartedAt) {
		t.Errorf("the run span starts at %s, the run at %s", r.StartTime, s.StartedAt)
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// A failed tool call and a failed run are error spans.
func TestRunTrace_failuresAreErrorSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	run := telemetry.StartRun(telemetry.NewProvider(sdktrace.WithSyncer(exp)), "")
	obs := run.Observer("anthropic", "claude-test")
	_, done := obs.ToolCall(run.Context(context.Background()), loop.Invocation{CallID: "t1-c1", Tool: "deploy", Attempt: 1})
	done(loop.Result{CallID: "t1-c1", Failure: &loop.Failure{Kind: loop.FailExit, Code: 2}})
	now := time.Now()
	run.End(context.Background(), telemetry.RunInfo{Name: "r", Provider: "anthropic", Start: now.Add(-time.Second), End: now,
		Outcome: string(loop.ToolFailure), Reason: "tool deploy failed: card 4111111111111111 declined"})
	by := spansByName(exp.GetSpans())
	tool, r := by["execute_tool deploy"][0], by["invoke_agent r"][0]
	if tool.Status.Code != codes.Error || attrs(tool)["error.type"] != "ExitCode" {
		t.Errorf("tool span: status %v, attributes %v", tool.Status, attrs(tool))
	}
	// The reason, which may quote a tool or the model, stays out of the
	// trace (issue 27, finding 7).
	if r.Status.Code != codes.Error || strings.Contains(r.Status.Description, "4111") || !strings.Contains(r.Status.Description, "ToolFailure") ||
		attrs(r)["error.type"] != "ToolFailure" {
		t.Errorf("run span: status %v, attributes %v", r.Status, attrs(r))
	}
	if tool.Parent.SpanID() != r.SpanContext.SpanID() {
		t.Errorf("the tool span's parent is %s, the run span is %s", tool.Parent.SpanID(), r.SpanContext.SpanID())
	}
}

// A traceparent the run carries is read back as the same trace.
func TestStartRun_resumesTheTraceTheRunCarries(t *testing.T) {
	first := telemetry.StartRun(nil, "")
	again := telemetry.StartRun(nil, first.TraceParent())
	if first.TraceParent() != again.TraceParent() {
		t.Errorf("resumed %s, carried %s", again.TraceParent(), first.TraceParent())
	}
	if fresh := telemetry.StartRun(nil, "not-a-traceparent"); fresh.TraceParent() == first.TraceParent() || len(fresh.TraceParent()) != 55 {
		t.Errorf("an unreadable traceparent gave %q", fresh.TraceParent())
	}
}

// A run made by another run's tool call starts in that call's trace, and
// its span is the call span's child, also when the run is resumed from the
// traceparent it carries; a parent of another trace than the one the run
// carries is not its parent.
func TestStartRunUnder_nestsTheRunUnderTheCallThatMadeIt(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := telemetry.NewProvider(sdktrace.WithSyncer(exp))
	parent := telemetry.StartRun(tp, "")
	ctx, done := parent.Observer("openai", "m").ToolCall(parent.Context(context.Background()), loop.Invocation{CallID: "t1-c1", Tool: "investigate", Attempt: 1})
	call := telemetry.TraceParentOf(ctx)
	done(loop.Result{CallID: "t1-c1"})

	child := telemetry.StartRunUnder(tp, "", call)
	resumed := telemetry.StartRunUnder(tp, child.TraceParent(), call)
	stranger := telemetry.StartRunUnder(tp, telemetry.StartRun(nil, "").TraceParent(), call)
	now := time.Now()
	for name, r := range map[string]*telemetry.Run{"child": resumed, "stranger": stranger} {
		r.End(context.Background(), telemetry.RunInfo{Name: name, Outcome: string(loop.Completed), Start: now, End: now})
	}
	by := spansByName(exp.GetSpans())
	tool, c, s := by["execute_tool investigate"][0], by["invoke_agent child"][0], by["invoke_agent stranger"][0]
	if c.SpanContext.TraceID() != tool.SpanContext.TraceID() || c.Parent.SpanID() != tool.SpanContext.SpanID() {
		t.Errorf("the child's span is %s under %s, want trace %s under the call's span %s",
			c.SpanContext.TraceID(), c.Parent.SpanID(), tool.SpanContext.TraceID(), tool.SpanContext.SpanID())
	}
	if c.SpanContext.TraceID().String() != child.TraceID() || resumed.TraceParent() != child.TraceParent() {
		t.Errorf("resumed as %s, started as %s", resumed.TraceParent(), child.TraceParent())
	}
	if s.Parent.IsValid() {
		t.Errorf("a run of another trace has the parent %s", s.Parent.SpanID())
	}
}

func TestEnabled_onlyWhenTheEnvironmentAsks(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, false},
	} {
		if got := telemetry.Enabled(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("%v: enabled %v, want %v", c.env, got, c.want)
		}
	}
}

// A compaction is a compact_context span under the run span, with the
// turn, the strategy and what was compacted; a warning about a summary
// that fell back to clearing is not one, nor is any other note.
func TestCompactions_areSpansUnderTheRunSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := telemetry.StartRun(telemetry.NewProvider(sdktrace.WithSyncer(exp)), "")
	msg := "Context compacted before turn 9 (clear): cleared 4 tool result(s) of 32768 bytes before turn 5; about 31000 input tokens before, about 12000 after"
	tr.Compactions(context.Background(), "clear", []loop.Note{
		{Kind: loop.NoteTurnStarted, Turn: 9, Message: "Turn 9 started"},
		{Kind: loop.NoteContextCompacted, Turn: 9, Warning: true, Message: "Older tool results are cleared instead of summarised"},
		{Kind: loop.NoteContextCompacted, Turn: 9, Message: msg},
	}, time.Unix(1_800_000_000, 0))
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "compact_context" {
		t.Fatalf("spans %v; want one compact_context", spansByName(spans))
	}
	s := spans[0]
	run, err := telemetry.ParseTraceParent(tr.TraceParent())
	if err != nil {
		t.Fatal(err)
	}
	if s.Parent.SpanID() != run.SpanID() || s.SpanContext.TraceID() != run.TraceID() {
		t.Errorf("compact_context is not a child of the run span")
	}
	want := map[string]string{"agentrun.turn": "9", "agentrun.context.strategy": "clear", "agentrun.context.compaction": msg}
	if diff := cmp.Diff(want, attrs(s)); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
}
