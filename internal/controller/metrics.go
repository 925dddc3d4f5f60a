package controller

import (
	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Domain metrics, next to controller-runtime's own (reconcile counts and
// durations, work queue depth).
var (
	runsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentrun", Name: "runs_finished_total",
		Help: "Runs that ended, by outcome (Completed, BudgetExhausted, GuardrailStop, LoopDetected, ApprovalDenied, Escalated, ToolFailure, Error).",
	}, []string{"outcome"})
	turnsStarted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "agentrun", Name: "turns_total",
		Help: "Turns admitted (each is one model call).",
	})
	spend = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentrun", Name: "spend_usd_total",
		Help: "US dollars spent by runs that ended, by outcome.",
	}, []string{"outcome"})
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

func init() {
	metrics.Registry.MustRegister(runsFinished, turnsStarted, spend, turnsToCompletion, repeatedIntent, approvals, verificationTrials)
}

// observe records a reconcile's notes and, when the run ended, its outcome.
func observe(run *v1alpha1.AgentRun, s *loop.State, notes []loop.Note) {
	for _, n := range notes {
		switch n.Kind {
		case loop.NoteTurnStarted:
			turnsStarted.Inc()
		case loop.NoteApproval:
			approvals.WithLabelValues(string(lastDecision(run, n.CallID))).Inc()
		case loop.NoteStaleApproval:
			approvals.WithLabelValues("stale").Inc()
		}
	}
	if run.Status.Outcome == "" {
		return
	}
	o := string(run.Status.Outcome)
	runsFinished.WithLabelValues(o).Inc()
	if s != nil {
		cost := float64(s.Usage.Cost) / 1e12
		spend.WithLabelValues(o).Add(cost)
		repeatedIntent.Observe(float64(s.MaxDepth))
		if s.Outcome == loop.Completed {
			turnsToCompletion.Observe(float64(s.Usage.Turns))
		}
		if s.Verify != nil {
			verificationTrials.WithLabelValues(o).Observe(float64(s.Verify.Trial))
		}
	}
}

func lastDecision(run *v1alpha1.AgentRun, callID string) v1alpha1.ApprovalDecision {
	for i := len(run.Status.Approvals) - 1; i >= 0; i-- {
		if a := run.Status.Approvals[i]; a.CallID == callID && !a.Stale {
			return a.Decision
		}
	}
	return "unknown"
}
