package controller

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/telemetry"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// startObserved runs the operator for one namespace only (runs other
// tests left behind never add to the counts), sending spans to tp, and
// returns its metrics.
func startObserved(t *testing.T, kb KitBuilder, ns string, tp oteltrace.TracerProvider) (*Metrics, func()) {
	t.Helper()
	r, stop := startWith(t, kb, managerSetup{
		options: func(o *ctrl.Options) { o.Cache.DefaultNamespaces = map[string]cache.Config{ns: {}} },
		config:  func(c *Config) { c.TracerProvider = tp },
	})
	return r.Metrics, stop
}

// scrape reads m as the operator's metrics endpoint serves it, as
// Prometheus would.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// sample is the value of the series of family name with exactly these
// labels (a counter, gauge, or a histogram's count); 0 when absent.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	for _, m := range f.Metric {
		if len(m.Label) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.Label {
			if labels[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return 0
}

// Three runs, then a scrape of the metrics handler: tokens and spend are
// counted per call by provider and model, reads are timed by tool, a
// refused reservation names its ceiling, a model retry is counted, a run
// waiting for a person shows in the gauges, and outcomes are counted.
func TestMetrics_aScrapeAfterRunsShowsWhatTheyDid(t *testing.T) {
	ns := namespace(t)
	m, _ := startObserved(t, &kits{tools: newTools()}, ns, nil)
	before := scrape(t, m)
	g := NewWithT(t)

	priced := func(s *v1alpha1.AgentRunSpec) {
		s.Model.Name = "metrics-model"
		s.Model.Pricing = &v1alpha1.ModelPricing{Input: "1", Output: "10"}
	}
	// Two reads at once, then an answer: 2200 input and 50 output tokens,
	// $0.0022 + $0.0005.
	done := makeRun(ns, "reads").with(priced).readTool("metrics_lookup").
		calls("metrics_lookup", `{"id":1}`, "metrics_lookup", `{"id":2}`).answer("Found both.").create(t)
	// One turn allowed, and the model wants a second.
	refused := makeRun(ns, "refused").with(priced).maxTurns(1).readTool("metrics_lookup").
		calls("metrics_lookup", `{"id":3}`).answer("Never reached.").create(t)
	// The provider is down: one retry, then ToolFailure.
	down := makeRun(ns, "down").with(priced).with(func(s *v1alpha1.AgentRunSpec) {
		n := int32(2)
		s.Model.Retry = &v1alpha1.ModelRetry{MaxAttempts: &n, InitialBackoff: &metav1.Duration{Duration: 10 * time.Millisecond}}
	}).step(v1alpha1.ScriptStep{Error: "overloaded", Transient: true}).create(t)
	// Waits for a person.
	waiting := makeRun(ns, "waiting").with(priced).writeTool("metrics_refund", false).
		calls("metrics_refund", `{"amount_minor":100}`).answer("Refunded.").create(t)

	expectOutcome(t, waitOutcome(t, done, 20*time.Second), v1alpha1.OutcomeCompleted, "final answer")
	expectOutcome(t, waitOutcome(t, refused, 20*time.Second), v1alpha1.OutcomeBudgetExhausted, "turns")
	expectOutcome(t, waitOutcome(t, down, 20*time.Second), v1alpha1.OutcomeToolFailure, "unavailable")
	g.Eventually(func() int { return len(get(t, waiting).Status.PendingApprovals) }, 20*time.Second, 20*time.Millisecond).Should(Equal(1))

	var after map[string]*dto.MetricFamily
	delta := func(name string, labels map[string]string) float64 {
		return sample(after, name, labels) - sample(before, name, labels)
	}
	model := map[string]string{"namespace": nsLabel(m, ns), "provider": "scripted", "model": m.labels.model("metrics-model")}
	with2 := func(k1, v1, k2, v2 string) map[string]string {
		out := map[string]string{k1: v1, k2: v2}
		for a, b := range model {
			out[a] = b
		}
		return out
	}
	with := func(k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range model {
			out[a] = b
		}
		return out
	}
	// What a save did is recorded after the write the test waited for
	// (the reporter follows the write): scrape until the last of it, the
	// three ends and the waiting run's tokens, is in; then every figure.
	ended := func() []float64 {
		var out []float64
		for _, o := range []string{"Completed", "BudgetExhausted", "ToolFailure"} {
			labels := with2("outcome", o, "reason", o)
			labels["template"] = ""
			out = append(out, delta("agentrun_runs_finished_total", labels))
		}
		return append(out, delta("agentrun_tokens_total", with("type", "input")))
	}
	g.Eventually(func() []float64 {
		after = scrape(t, m)
		return ended()
	}, 10*time.Second, 20*time.Millisecond).Should(Equal([]float64{1, 1, 1, 4200}), "the runs' ends and input tokens")
	// reads: 1000+1200 in, 20+30 out; refused: 1000 in, 20 out; waiting:
	// 1000 in, 20 out so far; down: nothing reported.
	g.Expect(delta("agentrun_tokens_total", with("type", "input"))).To(Equal(4200.0), "input tokens")
	g.Expect(delta("agentrun_tokens_total", with("type", "output"))).To(Equal(90.0), "output tokens")
	spent := 0.0
	for _, r := range []*v1alpha1.AgentRun{done, refused, down, waiting} {
		usd, err := parseUSD(get(t, r).Status.Usage)
		g.Expect(err).NotTo(HaveOccurred())
		spent += usd
	}
	g.Expect(delta("agentrun_spend_usd_total", with("template", ""))).To(BeNumerically("~", spent, 1e-9), "spend")
	g.Expect(spent).To(BeNumerically(">", 0.0))
	g.Expect(delta("agentrun_tool_call_duration_seconds", map[string]string{"tool": "metrics_lookup"})).To(Equal(3.0), "timed reads")
	g.Expect(delta("agentrun_model_call_duration_seconds", map[string]string{"provider": "scripted", "model": "metrics-model"})).To(Equal(6.0), "timed model calls: 2 + 1 + 2 attempts + 1")
	g.Expect(delta("agentrun_reservation_refusals_total", map[string]string{"ceiling": "turns"})).To(Equal(1.0), "refusals by turns")
	g.Expect(delta("agentrun_retries_total", map[string]string{"kind": "model"})).To(Equal(1.0), "model retries")
	for outcome, n := range map[string]float64{"Completed": 1, "BudgetExhausted": 1, "ToolFailure": 1} {
		labels := with2("outcome", outcome, "reason", outcome)
		labels["template"] = "" // runs written out in full
		g.Expect(delta("agentrun_runs_finished_total", labels)).To(Equal(n), outcome)
	}
	// Turns by namespace and model: every turn the runs' usage counts.
	turns := 0.0
	for _, r := range []*v1alpha1.AgentRun{done, refused, down, waiting} {
		turns += float64(get(t, r).Status.Usage.Turns)
	}
	g.Expect(turns).To(BeNumerically(">=", 4.0))
	// Counted after each save the test saw: read them until they are in.
	fresh := func(name string, labels map[string]string) func() float64 {
		return func() float64 { return sample(scrape(t, m), name, labels) - sample(before, name, labels) }
	}
	g.Eventually(fresh("agentrun_turns_total", model), 10*time.Second, 50*time.Millisecond).Should(Equal(turns), "turns")
	// The completed run: its turns, and the headroom it left per ceiling.
	g.Eventually(fresh("agentrun_turns_to_completion", map[string]string{"provider": "scripted", "model": "metrics-model", "template": ""}),
		10*time.Second, 50*time.Millisecond).Should(Equal(1.0))
	for _, c := range []string{"turns", "tokens", "wallClock", "toolCalls"} {
		g.Eventually(fresh("agentrun_headroom_at_completion", map[string]string{"ceiling": c}), 10*time.Second, 50*time.Millisecond).
			Should(Equal(1.0), "headroom of "+c)
	}
	// The gauges count this namespace's runs only (the cache is scoped).
	// They read the operator's informer cache, which may hold a run's
	// last status write a moment after the API server answered it.
	g.Eventually(func() []float64 {
		now := scrape(t, m)
		return []float64{sample(now, "agentrun_runs", map[string]string{"phase": "AwaitingApproval"}),
			sample(now, "agentrun_runs", map[string]string{"phase": "Running"}),
			sample(now, "agentrun_pending_approvals", map[string]string{})}
	}, 10*time.Second, 50*time.Millisecond).Should(Equal([]float64{1, 0, 1}), "runs awaiting approval, running, pending approvals")
	g.Expect(sample(scrape(t, m), "agentrun_pending_approval_oldest_seconds", map[string]string{})).To(BeNumerically(">=", 0.0))

	annotate(t, waiting, "t1-c1", "approve")
	expectOutcome(t, waitOutcome(t, waiting, 20*time.Second), v1alpha1.OutcomeCompleted, "final answer")
	g.Eventually(func() float64 {
		return sample(scrape(t, m), "agentrun_pending_approvals", map[string]string{})
	}, 10*time.Second, 50*time.Millisecond).Should(Equal(0.0))
	g.Expect(sample(scrape(t, m), "agentrun_approvals_total", map[string]string{"decision": "approve"}) -
		sample(before, "agentrun_approvals_total", map[string]string{"decision": "approve"})).To(Equal(1.0))
}

func parseUSD(u *v1alpha1.UsageStatus) (float64, error) {
	if u == nil {
		return 0, nil
	}
	m := costOf(*u)
	return float64(m) / 1e12, nil
}

// A run that reads, asks, and is answered after the operator restarted is
// one trace: every chat and execute_tool span, from either process, is a
// child of the run's invoke_agent span, whose id is status.traceParent's.
func TestTrace_oneTraceAcrossReconcilesAndARestart(t *testing.T) {
	ns := namespace(t)
	exp := tracetest.NewInMemoryExporter()
	tb := newTools()
	_, stop := startObserved(t, &kits{tools: tb}, ns, telemetry.NewProvider(sdktrace.WithSyncer(exp)))
	run := makeRun(ns, "traced").readTool("lookup").writeTool("refund", false).
		calls("lookup", `{"id":1}`, "lookup", `{"id":2}`).
		calls("refund", `{"amount_minor":100}`).
		answer("Refunded.").create(t)
	g := NewWithT(t)
	cur := waitPending(t, run, 1)
	carried := cur.Status.TraceParent
	sc, err := telemetry.ParseTraceParent(carried)
	if err != nil {
		t.Fatalf("status.traceParent %q: %v", carried, err)
	}
	stop()
	firstProcess := len(exp.GetSpans())

	startObserved(t, &kits{tools: tb}, ns, telemetry.NewProvider(sdktrace.WithSyncer(exp)))
	annotate(t, run, "t2-c1", "approve")
	end := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, end, v1alpha1.OutcomeCompleted, "final answer")
	if end.Status.TraceParent != carried {
		t.Fatalf("traceParent changed from %s to %s", carried, end.Status.TraceParent)
	}

	var spans tracetest.SpanStubs
	g.Eventually(func() int {
		spans = exp.GetSpans()
		return len(spans)
	}, 10*time.Second, 20*time.Millisecond).Should(Equal(7), "2 chats and 2 reads before the restart; the write, the last chat and the run after")
	if firstProcess != 4 {
		t.Errorf("spans before the restart: %d, want 4 (2 chats, 2 reads)", firstProcess)
	}
	got := map[string]int{}
	var root tracetest.SpanStub
	for _, s := range spans {
		got[s.Name]++
		if s.SpanContext.TraceID() != sc.TraceID() {
			t.Errorf("%s is in trace %s, the run's is %s", s.Name, s.SpanContext.TraceID(), sc.TraceID())
		}
		if s.Name == "invoke_agent traced" {
			root = s
			continue
		}
		if s.Parent.SpanID() != sc.SpanID() {
			t.Errorf("%s has parent %s, want the run span %s", s.Name, s.Parent.SpanID(), sc.SpanID())
		}
	}
	want := map[string]int{"invoke_agent traced": 1, "chat": 3, "execute_tool lookup": 2, "execute_tool refund": 1}
	g.Expect(got).To(Equal(want))
	g.Expect(root.SpanContext.SpanID()).To(Equal(sc.SpanID()), "the run span has the id the run carries")
	g.Expect(root.Parent.IsValid()).To(BeFalse())
	g.Expect(root.StartTime.Before(spans[0].StartTime)).To(BeTrue(), "the run span starts before its first call")
	g.Expect(root.EndTime.Before(spans[len(spans)-2].EndTime)).To(BeFalse(), "the run span ends after its last call")
}

// Transition log lines carry the trace id of the run's traceParent.
func TestTraceIDOf_readsTheTraceTheRunCarries(t *testing.T) {
	run := &v1alpha1.AgentRun{}
	if got := TraceIDOf(context.Background(), run); got != "" {
		t.Errorf("a run without a trace: %q", got)
	}
	run.Status.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if got := TraceIDOf(context.Background(), run); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id %q", got)
	}
}

// The run span ends when the reconcile that saved the run's end emits it,
// not at the reconcile's start: a call whose result that reconcile
// picked up ended after sc.now, and the run span must enclose it.
func TestEndTrace_theRunSpanEndsAfterACallThatEndedDuringTheReconcile(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := telemetry.NewProvider(sdktrace.WithSyncer(exp))
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	clock := start
	r := &AgentRunReconciler{Config: Config{Clock: func() time.Time { clock = clock.Add(time.Second); return clock }}}
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", CreationTimestamp: metav1.NewTime(start)}}
	sc := &scope{run: run, stored: storedOf(run.DeepCopy(), nil), now: r.Clock(), trace: telemetry.StartRun(tp, "")}
	callEnd := sc.now.Add(500 * time.Millisecond) // the model call the reconcile picked up
	run.Status.Outcome = v1alpha1.OutcomeCompleted
	r.endTrace(context.Background(), sc.trace, changeOfScope(sc))
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want the run span", len(spans))
	}
	if end := spans[0].EndTime; end.Before(callEnd) {
		t.Fatalf("the run span ends at %s, before its last call ended (%s)", end.Format(time.StampMilli), callEnd.Format(time.StampMilli))
	}
}
