package controller

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/telemetry"
)

// modelServer is an OpenAI-compatible server on loopback that answers
// every request with status (and an error body), or, with 200, the
// answer "All done.". It counts the requests.
func modelServer(t *testing.T, status int) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if status != http.StatusOK {
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"message":"the server said %d","type":"test"}}`, status)
			return
		}
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"backup","choices":[{"index":0,"finish_reason":"stop",`+
			`"message":{"role":"assistant","content":"All done."}}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// Issue 47 item 1: a primary whose endpoint fails with 500s on every
// attempt hands the turn to the fallback, which answers: the run ends
// Completed, and status.model, a ModelFallback event, the call span and
// the call metrics name the fallback. A 400 from the primary is the
// request's fault and does not fall back.
func TestFallback_primaryOutageFallsBackAndA400DoesNot(t *testing.T) {
	ns := namespace(t)
	exp := tracetest.NewInMemoryExporter()
	m, _ := startObserved(t, &kit.Builder{}, ns, telemetry.NewProvider(sdktrace.WithSyncer(exp)))
	backupSrv, backupCalls := modelServer(t, http.StatusOK)
	withModels := func(primary string) func(*v1alpha1.AgentRunSpec) {
		return func(s *v1alpha1.AgentRunSpec) {
			s.Model = v1alpha1.ModelSpec{
				ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "primary", BaseURL: primary + "/v1",
					Pricing: &v1alpha1.ModelPricing{Input: "1", Output: "2"}},
				Retry: &v1alpha1.ModelRetry{MaxAttempts: ptr32(2), InitialBackoff: &metav1.Duration{Duration: 10 * time.Millisecond},
					MaxBackoff: &metav1.Duration{Duration: 20 * time.Millisecond}},
				Fallbacks: []v1alpha1.ModelEndpoint{{Provider: v1alpha1.ProviderOpenAI, Name: "backup", BaseURL: backupSrv.URL + "/v1",
					Pricing: &v1alpha1.ModelPricing{Input: "3", Output: "6"}}},
			}
			s.Budget.MaxCostUSD = "1"
		}
	}

	t.Run("outage", func(t *testing.T) {
		down, downCalls := modelServer(t, http.StatusInternalServerError)
		run := makeRun(ns, "outage").with(withModels(down.URL)).create(t)
		got := waitOutcome(t, run, 60*time.Second)
		expectOutcome(t, got, v1alpha1.OutcomeCompleted, "final answer")
		if got.Status.Answer != "All done." || downCalls.Load() != 2 || backupCalls.Load() != 1 {
			t.Fatalf("answer %q; the primary was called %d times (want 2), the fallback %d (want 1)", got.Status.Answer, downCalls.Load(), backupCalls.Load())
		}
		if diff := cmp.Diff(&v1alpha1.ModelStatus{Active: "backup", Fallbacks: 1}, got.Status.Model); diff != "" {
			t.Errorf("status.model (-want +got):\n%s", diff)
		}
		// Charged once, at the fallback's prices: 10 input tokens at $3
		// and 3 output at $6 a million.
		if u := got.Status.Usage; u == nil || u.CostUSD != "0.000048" {
			t.Errorf("usage %+v; want $0.000048, the fallback's call alone", u)
		}
		notes := eventNotes(t, ns, "AgentRun", "outage", corev1.EventTypeWarning, "ModelFallback")
		if len(notes) != 1 || !strings.Contains(notes[0], "Model primary stayed unavailable after 2 attempts") ||
			!strings.Contains(notes[0], "goes to fallback 1 of 1, model backup") || !strings.Contains(notes[0], "500") {
			t.Errorf("ModelFallback events: %q", notes)
		}
		var chats []string
		for _, sp := range exp.GetSpans() {
			if !strings.HasPrefix(sp.Name, "chat") {
				continue
			}
			attrs := map[string]string{}
			for _, a := range sp.Attributes {
				attrs[string(a.Key)] = a.Value.String()
			}
			chats = append(chats, fmt.Sprintf("%s fallback=%s attempt=%s", attrs["gen_ai.request.model"], attrs["agentrun.model.fallback"], attrs["agentrun.model.attempt"]))
		}
		want := []string{"primary fallback=0 attempt=1", "primary fallback=0 attempt=2", "backup fallback=1 attempt=1"}
		if diff := cmp.Diff(want, chats); diff != "" {
			t.Errorf("chat spans (-want +got):\n%s", diff)
		}
		// The run's own span names the model it ended on.
		NewWithT(t).Eventually(func() string {
			for _, sp := range exp.GetSpans() {
				if strings.HasPrefix(sp.Name, "invoke_agent") {
					for _, a := range sp.Attributes {
						if a.Key == "gen_ai.request.model" {
							return a.Value.String()
						}
					}
				}
			}
			return ""
		}, 10*time.Second, 20*time.Millisecond).Should(Equal("backup"), "the invoke_agent span's model")
		fams := scrape(t, m)
		for model, want := range map[string]float64{"primary": 2, "backup": 1} {
			if got := sample(fams, "agentrun_model_call_duration_seconds", map[string]string{"provider": "openai", "model": model}); got != want {
				t.Errorf("model calls labelled model=%s: %v, want %v", model, got, want)
			}
		}
		// What the fallback's reply charged counts under the fallback.
		if got := sample(fams, "agentrun_tokens_total", map[string]string{"namespace": nsLabel(m, ns), "provider": "openai", "model": "backup", "type": "output"}); got != 3 {
			t.Errorf("output tokens labelled model=backup: %v, want 3", got)
		}
	})

	t.Run("bad request", func(t *testing.T) {
		before := backupCalls.Load()
		bad, badCalls := modelServer(t, http.StatusBadRequest)
		run := makeRun(ns, "bad-request").with(withModels(bad.URL)).create(t)
		got := waitOutcome(t, run, 60*time.Second)
		expectOutcome(t, got, v1alpha1.OutcomeToolFailure, "the model provider failed")
		if badCalls.Load() != 1 || backupCalls.Load() != before {
			t.Fatalf("the primary was called %d times (want 1), the fallback %d (want 0)", badCalls.Load(), backupCalls.Load()-before)
		}
		if diff := cmp.Diff(&v1alpha1.ModelStatus{Active: "primary"}, got.Status.Model); diff != "" {
			t.Errorf("status.model (-want +got):\n%s", diff)
		}
		if n := eventNotes(t, ns, "AgentRun", "bad-request", "", "ModelFallback"); len(n) != 0 {
			t.Errorf("ModelFallback events after a 400: %q", n)
		}
	})
}

// Issue 47 item 2: a run whose model's next request does not fit its
// cost ceiling completes on a cheaper fallback with model.routeOnBudget
// (a ModelRouted event, status.model naming it), and without it ends
// BudgetExhausted with a reason that names both models.
func TestRouteOnBudget_aRequestThatDoesNotFitGoesToTheCheaperModel(t *testing.T) {
	ns := namespace(t)
	startObserved(t, &kit.Builder{}, ns, nil)
	dear, dearCalls := modelServer(t, http.StatusOK)
	cheap, cheapCalls := modelServer(t, http.StatusOK)
	// 4,096 output tokens at $200 a million is $0.82: no request to dear
	// fits $0.50; at $2 a million cheap's does.
	withModels := func(route bool) func(*v1alpha1.AgentRunSpec) {
		return func(s *v1alpha1.AgentRunSpec) {
			s.Model = v1alpha1.ModelSpec{
				ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "dear", BaseURL: dear.URL + "/v1",
					Pricing: &v1alpha1.ModelPricing{Input: "100", Output: "200"}},
				Fallbacks: []v1alpha1.ModelEndpoint{{Provider: v1alpha1.ProviderOpenAI, Name: "cheap", BaseURL: cheap.URL + "/v1",
					Pricing: &v1alpha1.ModelPricing{Input: "1", Output: "2"}}},
				RouteOnBudget: route,
			}
			s.Budget.MaxCostUSD = "0.5"
		}
	}

	got := waitOutcome(t, makeRun(ns, "routed").with(withModels(true)).create(t), 60*time.Second)
	expectOutcome(t, got, v1alpha1.OutcomeCompleted, "final answer")
	if dearCalls.Load() != 0 || cheapCalls.Load() != 1 {
		t.Fatalf("dear was called %d times (want 0), cheap %d (want 1)", dearCalls.Load(), cheapCalls.Load())
	}
	if diff := cmp.Diff(&v1alpha1.ModelStatus{Active: "cheap", Fallbacks: 1}, got.Status.Model); diff != "" {
		t.Errorf("status.model (-want +got):\n%s", diff)
	}
	notes := eventNotes(t, ns, "AgentRun", "routed", corev1.EventTypeWarning, "ModelRouted")
	if len(notes) != 1 || !strings.Contains(notes[0], "Model dear's next request does not fit the cost ceiling") ||
		!strings.Contains(notes[0], "turn 1 goes to fallback 1 of 1, model cheap") {
		t.Errorf("ModelRouted events: %q", notes)
	}

	got = waitOutcome(t, makeRun(ns, "unrouted").with(withModels(false)).create(t), 60*time.Second)
	expectOutcome(t, got, v1alpha1.OutcomeBudgetExhausted, "cost ceiling")
	for _, want := range []string{"model dear's fallbacks (cheap) are tried on an outage only", "set model.routeOnBudget"} {
		if !strings.Contains(got.Status.Reason, want) {
			t.Errorf("reason %q does not say %q", got.Status.Reason, want)
		}
	}
	if dearCalls.Load() != 0 || cheapCalls.Load() != 1 {
		t.Fatalf("without routing: dear was called %d times (want 0), cheap %d more", dearCalls.Load(), cheapCalls.Load()-1)
	}
}
