package controller

import (
	"context"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/telemetry"
	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	ctrl "sigs.k8s.io/controller-runtime"
)

// TraceIDOf returns the trace id of a run's trace, or "" when it has none;
// every transition line carries it as traceID when there is one. It reads
// the trace the run carries (status.traceParent, set on its first
// reconcile), else the span in ctx.
func TraceIDOf(ctx context.Context, run *v1alpha1.AgentRun) string {
	if sc, err := telemetry.ParseTraceParent(run.Status.TraceParent); err == nil {
		return sc.TraceID().String()
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

// logTransitions writes one structured line per transition of the run
// that this reconcile's status write made: the run started its first
// turn, asked a person about a call, had a call answered, was refused as a
// GitOps re-run, or finished (with its outcome). The logger from
// controller-runtime already names the run (namespace, name).
func (r *AgentRunReconciler) logTransitions(ctx context.Context, c change) {
	log := ctrl.LoggerFrom(ctx)
	traceID := TraceIDOf
	if r.traceIDOf != nil {
		traceID = r.traceIDOf
	}
	if id := traceID(ctx, c.run); id != "" {
		log = log.WithValues("traceID", id)
	}
	if c.started {
		log.Info("Run started", "turn", c.run.Status.Turn)
	}
	for _, p := range c.asked {
		log.Info("Run asked for approval", "callID", p.CallID, "tool", p.Tool, "rule", p.Rule)
	}
	for _, n := range c.notes {
		switch n.Kind {
		case loop.NoteApproval, loop.NoteStaleApproval:
			log.Info("Approval answered", "callID", n.CallID, "decision", string(c.answers[n.CallID].Decision), "by", c.answers[n.CallID].By,
				"stale", n.Kind == loop.NoteStaleApproval)
		}
	}
	if c.refused {
		log.Info("Run refused", "reason", v1alpha1.ReasonRerunRefused, "message", c.run.Status.Reason)
	}
	if c.ended {
		finishedLine(log, &c.run.Status)
	}
}

func finishedLine(log logr.Logger, st *v1alpha1.AgentRunStatus) {
	kv := []any{"outcome", string(st.Outcome), "reason", st.Reason, "turns", st.Turn}
	if u := st.Usage; u != nil {
		kv = append(kv, "costUSD", u.CostUSD, "inputTokens", u.InputTokens, "outputTokens", u.OutputTokens, "toolCalls", u.ToolCalls)
	}
	log.Info("Run finished", kv...)
}
