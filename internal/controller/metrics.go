package controller

import (
	"context"
	"sync"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/budget"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Domain metrics, next to controller-runtime's own (reconcile counts,
// errors and durations, work queue depth). No label names a run: every
// label takes a bounded set of values. provider and model are the run's
// spec.model (the models an installation uses); tool is a declared tool
// name, which users choose: bounded per installation, but a cluster whose
// runs declare ever new tool names grows that label.
var (
	runsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentrun", Name: "runs_finished_total",
		Help: "Runs that ended, by outcome (Completed, BudgetExhausted, GuardrailStop, LoopDetected, ApprovalDenied, Escalated, ToolFailure, Error) and reason (the Succeeded condition's: the outcome, or InvalidConfiguration for an Error caused by the run's manifest or namespace rather than by a defect).",
	}, []string{"outcome", "reason"})
	turnsStarted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "agentrun", Name: "turns_total",
		Help: "Turns admitted (each is one model call).",
	})
	spend = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentrun", Name: "spend_usd_total",
		Help: "US dollars charged to runs (model calls as the provider reported them, tool calls at their declared maxCostUSD, lost calls at their reservation), counted as each step is saved, by the run's model provider and model.",
	}, []string{"provider", "model"})
	tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentrun", Name: "tokens_total",
		Help: "Tokens charged to runs, counted as each model call is saved, by the run's model provider and model, and type (input or output).",
	}, []string{"provider", "model", "type"})
	modelCallDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "agentrun", Name: "model_call_duration_seconds",
		Help:    "Duration of model calls (the provider SDK's own retries included), by provider.",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320},
	}, []string{"provider"})
	toolCallDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "agentrun", Name: "tool_call_duration_seconds",
		Help:    "Duration of tool call attempts, by declared tool name.",
		Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900},
	}, []string{"tool"})
	retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentrun", Name: "retries_total",
		Help: "Retries the loop scheduled after a transient failure, by kind (model or tool).",
	}, []string{"kind"})
	refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentrun", Name: "reservation_refusals_total",
		Help: "Runs ended because the next step's reservation did not fit, by ceiling (turns, tokens, wallClock, cost, toolCalls, perTool).",
	}, []string{"ceiling"})
	turnsToCompletion = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "agentrun", Name: "turns_to_completion",
		Help:    "Model turns of runs that ended Completed.",
		Buckets: []float64{1, 2, 3, 5, 8, 13, 21, 34, 55, 100},
	})
	repeatedIntent = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "agentrun", Name: "repeated_intent_depth",
		Help:    "The most times one call signature was proposed in a run, for runs that ended.",
		Buckets: []float64{1, 2, 3, 4, 6, 10},
	})
	verificationTrials = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "agentrun", Name: "verification_trials",
		Help:    "Trials used by runs with spec.verify that ended, by outcome: for Completed, the trial whose answer the verifier verified (does reflection pay?).",
		Buckets: []float64{1, 2, 3, 4, 5, 7, 10},
	}, []string{"outcome"})
	approvals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentrun", Name: "approvals_total",
		Help: "Answers people gave to calls that asked, by decision (approve, deny, stop, or stale for answers to calls that were not waiting).",
	}, []string{"decision"})
)

// inFlight reports the gauges of runs in flight from the informer cache
// at each scrape, so they are right after a restart and never drift.
var inFlight = &runCollector{
	runs: prometheus.NewDesc("agentrun_runs", "Runs that have not ended, by phase (Pending, Running, AwaitingApproval).", []string{"phase"}, nil),
	pending: prometheus.NewDesc("agentrun_pending_approvals",
		"Calls waiting for a person's answer, over all runs.", nil, nil),
	oldest: prometheus.NewDesc("agentrun_pending_approval_oldest_seconds",
		"How long the longest-waiting call has waited for a person, in seconds (0 when none waits).", nil, nil),
}

func init() {
	metrics.Registry.MustRegister(runsFinished, turnsStarted, spend, tokens, modelCallDuration, toolCallDuration,
		retries, refusals, turnsToCompletion, repeatedIntent, approvals, verificationTrials, inFlight)
}

type runCollector struct {
	runs, pending, oldest *prometheus.Desc

	mu     sync.Mutex
	reader client.Reader
	now    func() time.Time
}

// watch makes the collector list runs with r (the manager's cache).
func (c *runCollector) watch(r client.Reader, now func() time.Time) {
	c.mu.Lock()
	c.reader, c.now = r, now
	c.mu.Unlock()
}

func (c *runCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.runs
	ch <- c.pending
	ch <- c.oldest
}

func (c *runCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	r, now := c.reader, c.now
	c.mu.Unlock()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list := &v1alpha1.AgentRunList{}
	if err := r.List(ctx, list); err != nil {
		return // the cache is not ready yet: no sample beats a wrong one
	}
	phases := map[v1alpha1.Phase]int{v1alpha1.PhasePending: 0, v1alpha1.PhaseRunning: 0, v1alpha1.PhaseAwaitingApproval: 0}
	pending := 0
	var oldest time.Duration
	t := now()
	for i := range list.Items {
		st := &list.Items[i].Status
		if st.Outcome != "" {
			continue
		}
		p := st.Phase
		if p == "" {
			p = v1alpha1.PhasePending
		}
		if _, ok := phases[p]; ok {
			phases[p]++
		}
		pending += len(st.PendingApprovals)
		for _, a := range st.PendingApprovals {
			if a.RequestedAt != nil {
				oldest = max(oldest, t.Sub(a.RequestedAt.Time))
			}
		}
	}
	for p, n := range phases {
		ch <- prometheus.MustNewConstMetric(c.runs, prometheus.GaugeValue, float64(n), string(p))
	}
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, oldest.Seconds())
}

// callMetrics times a run's model and tool calls as they happen.
type callMetrics struct{ provider string }

func (m callMetrics) ModelCall(ctx context.Context, _ *loop.Request) (context.Context, func(*loop.Reply, error)) {
	start := time.Now()
	return ctx, func(*loop.Reply, error) {
		modelCallDuration.WithLabelValues(m.provider).Observe(time.Since(start).Seconds())
	}
}

func (m callMetrics) ToolCall(ctx context.Context, inv loop.Invocation) (context.Context, func(loop.Result)) {
	start := time.Now()
	return ctx, func(loop.Result) { toolCallDuration.WithLabelValues(inv.Tool).Observe(time.Since(start).Seconds()) }
}

// recordMetrics records what a saved reconcile did: its notes, what it charged
// (the difference between the usage it read and the usage it wrote, so a
// step is counted once, when status holds it) and, when the run ended,
// its outcome.
func recordMetrics(base, run *v1alpha1.AgentRun, s *loop.State, notes []loop.Note) {
	for _, n := range notes {
		switch n.Kind {
		case loop.NoteTurnStarted:
			turnsStarted.Inc()
		case loop.NoteApproval:
			approvals.WithLabelValues(string(lastDecision(run, n.CallID))).Inc()
		case loop.NoteStaleApproval:
			approvals.WithLabelValues("stale").Inc()
		case loop.NoteRetry:
			kind := "tool"
			if n.CallID == "" {
				kind = "model"
			}
			retries.WithLabelValues(kind).Inc()
		}
		if n.Ceiling != "" {
			refusals.WithLabelValues(string(n.Ceiling)).Inc()
		}
	}
	provider, model := string(run.Spec.Model.Provider), run.Spec.Model.Name
	was, now := usageOf(base), usageOf(run)
	if d := now.InputTokens - was.InputTokens; d > 0 {
		tokens.WithLabelValues(provider, model, "input").Add(float64(d))
	}
	if d := now.OutputTokens - was.OutputTokens; d > 0 {
		tokens.WithLabelValues(provider, model, "output").Add(float64(d))
	}
	if d := costOf(now) - costOf(was); d > 0 {
		spend.WithLabelValues(provider, model).Add(float64(d) / 1e12)
	}
	if run.Status.Outcome == "" || base.Status.Outcome != "" {
		return
	}
	o := string(run.Status.Outcome)
	runsFinished.WithLabelValues(o, runstatus.EndReason(&run.Status)).Inc()
	if s != nil {
		repeatedIntent.Observe(float64(s.MaxDepth))
		if s.Outcome == loop.Completed {
			turnsToCompletion.Observe(float64(s.Usage.Turns))
		}
		if s.Verify != nil {
			verificationTrials.WithLabelValues(o).Observe(float64(s.Verify.Trial))
		}
	}
}

func usageOf(run *v1alpha1.AgentRun) v1alpha1.UsageStatus {
	if run.Status.Usage == nil {
		return v1alpha1.UsageStatus{}
	}
	return *run.Status.Usage
}

func costOf(u v1alpha1.UsageStatus) loop.Money { return budget.Money(v1alpha1.USD(u.CostUSD)) }

func lastDecision(run *v1alpha1.AgentRun, callID string) v1alpha1.ApprovalDecision {
	for i := len(run.Status.Approvals) - 1; i >= 0; i-- {
		if a := run.Status.Approvals[i]; a.CallID == callID && !a.Stale {
			return a.Decision
		}
	}
	return "unknown"
}
