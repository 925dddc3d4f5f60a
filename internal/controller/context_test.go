package controller

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/modeltest"
	"github.com/agentrun/agentrun/internal/model/openai"
	"github.com/agentrun/agentrun/internal/telemetry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// The window run of issue 29 through the operator: a tool that returns
// 8 KB on every turn, an OpenAI-compatible server on loopback that refuses
// any request over 32,000 tokens with context_length_exceeded.
const (
	ctxWindowLimit  = 32_000
	ctxWindowResult = 8 << 10
)

// windowRunOnOperator starts an operator whose model is a WindowServer
// of the given turns and whose read_chunk tool returns 8 KB, and creates
// a run with the context policy c (none when nil).
func windowRunOnOperator(t *testing.T, name string, turns int, c *v1alpha1.ContextSpec) (*v1alpha1.AgentRun, *modeltest.WindowServer, *tracetest.InMemoryExporter) {
	t.Helper()
	return windowRunWithCeiling(t, name, turns, turns, c)
}

// windowRunWithCeiling is windowRunOnOperator with a turn ceiling of its
// own: the model answers on turn turns, the run may make maxTurns.
func windowRunWithCeiling(t *testing.T, name string, turns, maxTurns int, c *v1alpha1.ContextSpec) (*v1alpha1.AgentRun, *modeltest.WindowServer, *tracetest.InMemoryExporter) {
	t.Helper()
	srv := modeltest.NewWindowServer(t, ctxWindowLimit, "read_chunk", turns)
	m, err := openai.New(model.Config{Model: "window", BaseURL: srv.URL, KeySource: model.StaticKey("sk-test"), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	tb := newTools()
	tb.funcs["read_chunk"] = func(_ context.Context, inv loop.Invocation) loop.Result {
		return loop.Result{Output: bytes.Repeat([]byte{'a' + byte(len(inv.CallID)%26)}, ctxWindowResult)}
	}
	exp := tracetest.NewInMemoryExporter()
	ns := namespace(t)
	startObserved(t, &kits{tools: tb, model: m}, ns, telemetry.NewProvider(sdktrace.WithSyncer(exp)))
	run := makeRun(ns, name).maxTurns(int32(maxTurns)).budget(func(b *v1alpha1.BudgetSpec) {
		b.MaxTokens, b.MaxCostUSD = ptr64(1<<40), "1000"
		b.MaxToolCalls, b.DefaultToolLimit = ptr32(int32(2*turns)), ptr32(int32(2*turns))
	}).with(func(s *v1alpha1.AgentRunSpec) {
		s.Model = v1alpha1.ModelSpec{
			ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "window", BaseURL: srv.URL, APIKeySecretRef: &v1alpha1.SecretKeySelector{Name: "window", Key: "api-key"}, Pricing: &v1alpha1.ModelPricing{Input: "2", Output: "8", CachedInput: "0.5"}},
		}
		s.Goal = "Read every chunk with read_chunk, one per turn, then say that all the chunks are read."
		s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "read_chunk", Builtin: v1alpha1.BuiltinTool("kubernetes.get")})
		s.Context = c
	}).create(t)
	return run, srv, exp
}

// Issue 29: with spec.context.maxInputTokens 30000 the run completes under
// either strategy, no request passes the policy (the server refuses none),
// and status.context, the ContextCompacted events and the transcript's
// markers say what was compacted.
func TestContext_aLongRunCompactsToFitTheWindow(t *testing.T) {
	const turns = 150
	for _, strategy := range []v1alpha1.ContextStrategy{v1alpha1.ContextClear, v1alpha1.ContextSummarize} {
		t.Run(string(strategy), func(t *testing.T) {
			run, srv, exp := windowRunOnOperator(t, "window-"+string(strategy), turns,
				&v1alpha1.ContextSpec{MaxInputTokens: ptr64(30_000), Strategy: strategy})
			got := waitOutcome(t, run, 120*time.Second)
			expectOutcome(t, got, v1alpha1.OutcomeCompleted, "final answer")
			if got.Status.Usage == nil || got.Status.Usage.Turns != turns {
				t.Errorf("usage %+v; want %d turns (a summary call is no turn)", got.Status.Usage, turns)
			}
			summaries := 0
			for i, r := range srv.Requests() {
				if r.Refused || r.Input > 30_000 {
					t.Fatalf("request %d was counted %d tokens, over the policy's 30000 (refused %v)", i+1, r.Input, r.Refused)
				}
				if r.Summary {
					summaries++
				}
			}
			c := got.Status.Context
			if c == nil || c.MaxInputTokens != 30_000 || c.Source != "spec" || c.Strategy != strategy || c.Compactions < 2 ||
				c.LastCompactionTurn < 2 || c.LastInputTokens <= 0 || c.LastInputTokens > 30_000 {
				t.Fatalf("status.context = %+v; want the spec's 30000, %s, at least two compactions and the last request's tokens", c, strategy)
			}
			if strategy == v1alpha1.ContextSummarize && summaries != int(c.Compactions) {
				t.Errorf("%d summary calls for %d compactions; want one each", summaries, c.Compactions)
			}
			if strategy == v1alpha1.ContextClear && summaries != 0 {
				t.Errorf("%d summary calls under strategy clear", summaries)
			}
			markers := 0
			for _, m := range readTranscript(t, got) {
				if m.Role != loop.RoleContext {
					continue
				}
				markers++
				// Each summary call's reply is the summary: none is
				// taken for lost and cleared instead.
				if strategy == v1alpha1.ContextSummarize && !strings.Contains(m.Content, "summarised") {
					t.Errorf("compaction %d was not summarised: %s", markers, m.Content)
				}
			}
			if markers != int(c.Compactions) {
				t.Errorf("the transcript marks %d compactions; status.context counts %d", markers, c.Compactions)
			}
			spans := 0
			for _, sp := range exp.GetSpans() {
				if sp.Name == "compact_context" {
					spans++
				}
			}
			if spans != int(c.Compactions) {
				t.Errorf("%d compact_context spans for %d compactions", spans, c.Compactions)
			}
			g := NewWithT(t)
			g.Eventually(func() []string {
				return eventNotes(t, run.Namespace, "AgentRun", run.Name, corev1.EventTypeNormal, string(loop.NoteContextCompacted))
			}, 10*time.Second, 50*time.Millisecond).Should(ContainElement(And(
				ContainSubstring("Context compacted before turn"), ContainSubstring("input tokens before"), ContainSubstring("after"))))
		})
	}
}

// Without a policy that fits the window (none set: the default of 128000
// for a model whose window is not known), the provider refuses a request
// and the run ends BudgetExhausted with a reason a person can act on, not
// a raw HTTP 400.
func TestContext_aRunWithoutAPolicyThatFitsEndsReadably(t *testing.T) {
	run, srv, _ := windowRunOnOperator(t, "window-nopolicy", 150, nil)
	got := waitOutcome(t, run, 60*time.Second)
	expectOutcome(t, got, v1alpha1.OutcomeBudgetExhausted, "refused the request of turn")
	for _, want := range []string{"longer than the model's context window", "set spec.context.maxInputTokens below the model's window", "128000"} {
		if !strings.Contains(got.Status.Reason, want) {
			t.Errorf("reason %q does not say %q", got.Status.Reason, want)
		}
	}
	for _, raw := range []string{"HTTP", "invalid_request_error", "context_length_exceeded"} {
		if strings.Contains(got.Status.Reason, raw) {
			t.Errorf("reason %q carries the provider's raw error (%s)", got.Status.Reason, raw)
		}
	}
	refused := 0
	for _, r := range srv.Requests() {
		if r.Refused {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("the server refused %d requests; want the one that ended the run", refused)
	}
	if c := got.Status.Context; c == nil || c.MaxInputTokens != loop.DefaultMaxInputTokens || c.Source != "default" {
		t.Errorf("status.context = %+v; want the default 128000 from source default", c)
	}
}

// Issue 43, item 3, through the operator: a run whose next request needs
// a summary but that has no turn left does not pay for the summary. A
// first run finds the turn the first summary serves; a run whose turn
// ceiling stops just before that turn ends BudgetExhausted on turns, and
// the model server saw no summary request from it.
func TestContext_noSummaryIsPaidForATurnTheCeilingRefuses(t *testing.T) {
	summarize := &v1alpha1.ContextSpec{MaxInputTokens: ptr64(30_000), Strategy: v1alpha1.ContextSummarize}
	roomy, srv, _ := windowRunOnOperator(t, "roomy", 30, summarize)
	got := waitOutcome(t, roomy, 120*time.Second)
	expectOutcome(t, got, v1alpha1.OutcomeCompleted, "final answer")
	served := 0 // the turn the first summary served
	for i, r := range srv.Requests() {
		if r.Summary {
			served = i + 1 // the turns' requests before it, plus this turn
			break
		}
	}
	if served < 2 {
		t.Fatalf("the roomy run made no summary (requests %+v)", srv.Requests())
	}
	short, srv, _ := windowRunWithCeiling(t, "short", 30, served-1, summarize)
	got = waitOutcome(t, short, 120*time.Second)
	expectOutcome(t, got, v1alpha1.OutcomeBudgetExhausted, "turns ceiling")
	for i, r := range srv.Requests() {
		if r.Summary {
			t.Fatalf("request %d of the run with %d turns asked for a summary for turn %d, which its ceiling refuses", i+1, served-1, served)
		}
	}
	if got.Status.Usage == nil || got.Status.Usage.Turns != int32(served-1) {
		t.Fatalf("usage %+v, want %d turns", got.Status.Usage, served-1)
	}
}
