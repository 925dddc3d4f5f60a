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
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// nsLabel is the namespace label m gives ns: ns itself, unless m has seen
// more namespaces than the bound, when the runs of every further namespace
// share "other".
func nsLabel(m *Metrics, ns string) string { return m.labels.namespaces.value(ns) }

// Issue 33.1: a storm of 1,000 runs, each with its own namespace, model
// and tool, grows the series of a labelled metric only to the bounds, the
// rest counted as "other", and nothing is lost.
func TestMetricLabels_aStormOfDistinctValuesStaysBounded(t *testing.T) {
	l := newMetricLabels()
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "storm_runs_total", Help: "test"}, []string{"namespace", "provider", "model"})
	tools := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "storm_tool_total", Help: "test"}, []string{"tool"})
	for i := range 1000 {
		run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("team-%d", i)},
			Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{Model: v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: fmt.Sprintf("model-%d", i)}}}}}
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

// Issue 33.1: tool failures by tool and kind, read from a scrape after a
// run (an AgentBudget's gauges: agentbudget's TestMetrics_budgetGauges).
func TestMetrics_toolFailures(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	tb.funcs["metrics_flaky"] = func(context.Context, loop.Invocation) loop.Result {
		return loop.Result{Failure: &loop.Failure{Kind: loop.FailExit, Code: 2, Detail: "no such invoice"}}
	}
	m, _ := startObserved(t, &kits{tools: tb}, ns, nil)
	before := scrape(t, m)
	run := makeRun(ns, "flaky").readTool("metrics_flaky").calls("metrics_flaky", `{"id":1}`).answer("It failed.").create(t)
	expectOutcome(t, waitOutcome(t, run, 20*time.Second), v1alpha1.OutcomeCompleted, "")

	g := NewWithT(t)
	after := scrape(t, m)
	kind := map[string]string{"tool": "metrics_flaky", "kind": "ExitCode"}
	g.Expect(sample(after, "agentrun_tool_failures_total", kind) - sample(before, "agentrun_tool_failures_total", kind)).To(Equal(1.0))
}

// listReader lists the runs it holds, as the manager's cache would.
type listReader struct {
	client.Reader
	runs []v1alpha1.AgentRun
}

func (r listReader) List(_ context.Context, l client.ObjectList, _ ...client.ListOption) error {
	if rl, ok := l.(*v1alpha1.AgentRunList); ok {
		rl.Items = append(rl.Items, r.runs...)
	}
	return nil
}

// Issue 33.2: a run with no outcome past the latest moment it could end
// (its wall clock, an approval timeout per ask, a margin) is overdue: the
// stuck-run alert reads agentrun_runs_overdue.
func TestRunCollector_countsOverdueRuns(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	started := func(name string, ago time.Duration, f func(*v1alpha1.AgentRun)) v1alpha1.AgentRun {
		r := v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team-overdue", Name: name}}
		r.Spec.Budget.MaxWallClock = &metav1.Duration{Duration: 10 * time.Minute}
		r.Spec.ApprovalTimeout = &metav1.Duration{Duration: 30 * time.Minute}
		r.Status.StartTime = ptr.To(metav1.NewTime(now.Add(-ago)))
		if f != nil {
			f(&r)
		}
		return r
	}
	asked := func(r *v1alpha1.AgentRun) {
		r.Status.Approvals = []v1alpha1.ApprovalRecord{{CallID: "t1-c1", Decision: "approve"}, {CallID: "t2-c1", Decision: "approve", Stale: true}}
	}
	runs := []v1alpha1.AgentRun{
		started("fresh", 14*time.Minute, nil),         // within 10m + 5m
		started("late", 16*time.Minute, nil),          // past it: overdue
		started("answered", 44*time.Minute, asked),    // one real ask: 10m + 30m + 5m
		started("slow-answer", 46*time.Minute, asked), // past that
		started("ended", 5*time.Hour, func(r *v1alpha1.AgentRun) { r.Status.Outcome = v1alpha1.OutcomeCompleted }),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-overdue", Name: "not-started"}},
	}
	c := NewMetrics().inFlight
	c.watch(listReader{runs: runs}, func() time.Time { return now })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, f := range fams {
		if f.GetName() == "agentrun_runs_overdue" {
			for _, m := range f.Metric {
				got += m.GetGauge().GetValue()
			}
		}
	}
	if got != 2 {
		t.Fatalf("agentrun_runs_overdue = %v, want 2 (late, slow-answer)", got)
	}
}
