package localrun

import (
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Status is the AgentRun status the operator would write for a run in
// state s: the same counters, phase, outcome and Succeeded condition (the
// operator's own setters live in internal/controller, which a run with no
// cluster does not load). now stamps completionTime and the conditions.
func Status(s *loop.State, conv loop.Convergence, now time.Time) v1alpha1.AgentRunStatus {
	t := metav1.NewTime(now.UTC().Truncate(time.Second))
	st := v1alpha1.AgentRunStatus{Turn: int32(s.Turn), Usage: usage(s.Usage)}
	if s.StartedAt != nil {
		start := metav1.NewTime(s.StartedAt.UTC().Truncate(time.Second))
		st.StartTime = &start
	}
	st.Convergence = &v1alpha1.ConvergenceStatus{RepeatedIntentDepth: int32(conv.RepeatedIntentDepth), Headroom: map[string]string{}}
	for k, v := range conv.Headroom {
		st.Convergence.Headroom[string(k)] = v
	}
	if conv.TurnsToCompletion > 0 {
		n := int32(conv.TurnsToCompletion)
		st.Convergence.TurnsToCompletion = &n
	}
	if !s.Done() {
		st.Phase = v1alpha1.PhaseRunning
		condition(&st, v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, v1alpha1.ReasonRunning, "the run has not ended", t)
		condition(&st, v1alpha1.ConditionAwaitingApproval, metav1.ConditionFalse, v1alpha1.ReasonNoApprovalPending, "no call waits for a person", t)
		return st
	}
	st.Answer = s.Answer
	end(&st, v1alpha1.Outcome(s.Outcome), s.Reason, t)
	return st
}

// FailedStatus is the status of a run that could not start (a declared
// tool that is not available), as the operator writes it.
func FailedStatus(o loop.Outcome, reason string, now time.Time) v1alpha1.AgentRunStatus {
	st := v1alpha1.AgentRunStatus{}
	end(&st, v1alpha1.Outcome(o), reason, metav1.NewTime(now.UTC().Truncate(time.Second)))
	return st
}

func end(st *v1alpha1.AgentRunStatus, o v1alpha1.Outcome, reason string, t metav1.Time) {
	st.Outcome, st.Reason, st.CompletionTime = o, clip(reason, 8192), &t
	status := metav1.ConditionFalse
	st.Phase = v1alpha1.PhaseFailed
	if o == v1alpha1.OutcomeCompleted {
		status, st.Phase = metav1.ConditionTrue, v1alpha1.PhaseSucceeded
	}
	condition(st, v1alpha1.ConditionSucceeded, status, string(o), st.Reason, t)
	condition(st, v1alpha1.ConditionAwaitingApproval, metav1.ConditionFalse, v1alpha1.ReasonNoApprovalPending, "no call waits for a person", t)
}

func condition(st *v1alpha1.AgentRunStatus, typ string, status metav1.ConditionStatus, reason, msg string, t metav1.Time) {
	apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
		Message: clip(msg, 1024), LastTransitionTime: t})
}

func usage(u loop.Usage) *v1alpha1.UsageStatus {
	out := &v1alpha1.UsageStatus{
		Turns:             int32(u.Turns),
		InputTokens:       u.InputTokens,
		OutputTokens:      u.OutputTokens,
		CachedInputTokens: u.CachedInputTokens,
		CostUSD:           u.Cost.String(),
		ToolCalls:         int32(u.ToolCalls),
		WallClockSeconds:  int64((u.WallClock + time.Second - 1) / time.Second),
	}
	for k, v := range u.PerTool {
		if v > 0 {
			if out.PerTool == nil {
				out.PerTool = map[string]int32{}
			}
			out.PerTool[k] = int32(v)
		}
	}
	return out
}

// clip cuts s at n bytes on a rune boundary and marks the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "… [cut]"
	i := n - len(mark)
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + mark
}
