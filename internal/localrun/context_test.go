package localrun

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/internal/model/modeltest"
	"github.com/agentrun/agentrun/internal/telemetry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// windowManifest is the window run of issue 29 for agentrun local: an
// OpenAI-compatible model at modelURL, a read_chunk tool at toolURL that
// returns 8 KB, and the lines under spec.context (none when empty).
func windowManifest(modelURL, toolURL string, turns int, context string) string {
	m := fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: window}
stringData: {api-key: sk-test}
---
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: window-run}
spec:
  goal: "Read every chunk with read_chunk, one per turn, then say that all the chunks are read."
  model:
    provider: openai
    name: window
    baseURL: %s
    apiKeySecretRef: {name: window, key: api-key}
    retry: {maxAttempts: 1}
    pricing: {input: "2", output: "8", cachedInput: "0.5"}
  budget: {maxTurns: %d, maxTokens: 100000000, maxCostUSD: "1000", maxToolCalls: %d, defaultToolLimit: %d}
  tools:
  - name: read_chunk
    parameters: {type: object, properties: {"n": {type: integer}}, required: ["n"]}
    http: {url: "%s/chunks/{{.n}}", method: GET}
`, modelURL, turns, 2*turns, 2*turns, toolURL)
	if context != "" {
		m += "  context: " + context + "\n"
	}
	return m
}

func chunkServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("c", 8<<10)))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Issue 29 with agentrun local: the 150-turn window run completes under
// maxInputTokens 30000 with either strategy; the stream says which limit
// applied and prints every compaction, and the summary counts them.
func TestRun_contextPolicyCompactsAndSaysSo(t *testing.T) {
	const turns = 150
	for _, strategy := range []string{"clear", "summarize"} {
		t.Run(strategy, func(t *testing.T) {
			model := modeltest.NewWindowServer(t, 32_000, "read_chunk", turns)
			exp := tracetest.NewInMemoryExporter()
			r := run(t, windowManifest(model.URL, chunkServer(t).URL, turns, "{maxInputTokens: 30000, strategy: "+strategy+"}"),
				Options{TracerProvider: telemetry.NewProvider(sdktrace.WithSyncer(exp))})
			r.mustExit(t, 0)
			mustContain(t, "stdout", r.stdout,
				"Context: at most 30000 input tokens a request (spec.context.maxInputTokens); older turns compacted by "+strategy+", the newest 4 kept",
				"  Context compacted before turn ", "input tokens before, about ", "outcome: Completed", "usage: 150 turns")
			compactions := strings.Count(r.stdout, "  Context compacted before turn ")
			if compactions < 2 || !strings.Contains(r.stdout, fmt.Sprintf("context: %d compactions (%s), the last before turn ", compactions, strategy)) {
				t.Errorf("%d compactions printed; the summary does not count them:\n%s", compactions, r.stdout[max(0, len(r.stdout)-600):])
			}
			spans := 0
			for _, sp := range exp.GetSpans() {
				if sp.Name == "compact_context" {
					spans++
				}
			}
			if spans != compactions {
				t.Errorf("%d compact_context spans in the run's trace for %d compactions", spans, compactions)
			}
			for i, q := range model.Requests() {
				if q.Refused || q.Input > 30_000 {
					t.Fatalf("request %d was counted %d tokens, over the policy's 30000", i+1, q.Input)
				}
			}
		})
	}
}

// Without a policy that fits, agentrun local says which limit applied
// (the default: the model's window is not known) and ends
// BudgetExhausted with a reason a person can act on.
func TestRun_contextWithoutAPolicyThatFits(t *testing.T) {
	model := modeltest.NewWindowServer(t, 32_000, "read_chunk", 150)
	r := run(t, windowManifest(model.URL, chunkServer(t).URL, 150, ""), Options{})
	r.mustExit(t, ExitCode("BudgetExhausted"))
	mustContain(t, "stdout", r.stdout,
		"Context: at most 128000 input tokens a request (the default for a model whose window is not known)",
		"outcome: BudgetExhausted", "longer than the model's context window", "set spec.context.maxInputTokens below the model's window")
}
