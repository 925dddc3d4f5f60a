package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Issue 33.1: a storm of 1,000 runs, each with its own namespace, model
// and tool, grows the series of a labelled metric only to the bounds, the
// rest counted as "other", and nothing is lost.
func TestMetricLabels_aStormOfDistinctValuesStaysBounded(t *testing.T) {
	l := newMetricLabels()
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "storm_runs_total", Help: "test"}, []string{"namespace", "provider", "model"})
	tools := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "storm_tool_total", Help: "test"}, []string{"tool"})
	for i := range 1000 {
		run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("team-%d", i)},
			Spec: v1alpha1.AgentRunSpec{Model: v1alpha1.ModelSpec{Provider: v1alpha1.ProviderOpenAI, Name: fmt.Sprintf("model-%d", i)}}}
		runs.WithLabelValues(l.run(run)).Inc()
		tools.WithLabelValues(l.tool(fmt.Sprintf("tool-%d", i))).Inc()
	}
	g := NewWithT(t)
	// Namespaces and models are bounded apart: the first 50 runs have
	// their own series, the next 150 share model "other", the rest share
	// both.
	g.Expect(testutil.CollectAndCount(runs)).To(Equal(MaxModelLabelValues + MaxNamespaceLabelValues - MaxModelLabelValues + 1))
	g.Expect(testutil.ToFloat64(runs.WithLabelValues(OtherLabelValue, "openai", OtherLabelValue))).To(Equal(800.0))
	g.Expect(testutil.ToFloat64(runs.WithLabelValues("team-0", "openai", "model-0"))).To(Equal(1.0))
	g.Expect(testutil.CollectAndCount(tools)).To(Equal(MaxToolLabelValues + 1))
	g.Expect(testutil.ToFloat64(tools.WithLabelValues(OtherLabelValue))).To(Equal(float64(1000 - MaxToolLabelValues)))
	// A value seen before the bound keeps its series afterwards.
	g.Expect(l.tool("tool-7")).To(Equal("tool-7"))
	g.Expect(l.tool("tool-999")).To(Equal(OtherLabelValue))
}

// Issue 33.1: tool failures by tool and kind, and an AgentBudget's
// gauges, read from a scrape after a run.
func TestMetrics_toolFailuresAndBudgetGauges(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	tb.funcs["metrics_flaky"] = func(context.Context, loop.Invocation) loop.Result {
		return loop.Result{Failure: &loop.Failure{Kind: loop.FailExit, Code: 2, Detail: "no such invoice"}}
	}
	startObserved(t, &kits{tools: tb}, ns, nil)
	before := scrape(t)
	makeBudget(t, ns, "team-a", func(s *v1alpha1.AgentBudgetSpec) {
		s.MaxCostUSD = "5"
		s.MaxTokens = ptr.To(int64(100000))
	})
	run := makeRun(ns, "flaky").readTool("metrics_flaky").calls("metrics_flaky", `{"id":1}`).answer("It failed.").create(t)
	expectOutcome(t, waitOutcome(t, run, 20*time.Second), v1alpha1.OutcomeCompleted, "")

	g := NewWithT(t)
	after := scrape(t)
	kind := map[string]string{"tool": "metrics_flaky", "kind": "ExitCode"}
	g.Expect(sample(after, "agentrun_tool_failures_total", kind) - sample(before, "agentrun_tool_failures_total", kind)).To(Equal(1.0))
	g.Eventually(func() []float64 {
		now := scrape(t)
		at := func(name, ceiling string) float64 {
			return sample(now, name, map[string]string{"namespace": ns, "budget": "team-a", "ceiling": ceiling})
		}
		return []float64{at("agentrun_budget_limit", "cost"), at("agentrun_budget_limit", "tokens"),
			at("agentrun_budget_consumed", "tokens"), at("agentrun_budget_reserved", "tokens")}
	}, 10*time.Second, 50*time.Millisecond).Should(Equal([]float64{5, 100000, 0, 0}))
}
