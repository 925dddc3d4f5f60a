package controller

import (
	"fmt"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/notify"
	"github.com/agentrun/agentrun/internal/runstatus"
	corev1 "k8s.io/api/core/v1"
)

// announce tells people what a save asks of them, from its change: a
// Normal event ApprovalRequested for each call that began to wait
// (c.asked), and, with a Notifier, a webhook message for each of those and
// for a run that ended Escalated (c.ended). The messages are only queued:
// their delivery never holds up the run.
func (r *AgentRunReconciler) announce(obj *v1alpha1.AgentRun, c change) {
	ns, name := c.run.Namespace, c.run.Name
	for _, p := range c.asked {
		msg := fmt.Sprintf("%s/%s waits for a person to approve %s: %s %s (arguments %s; %s: %s). Answer with kubectl agentrun approve|deny|stop %s %s -n %s",
			ns, name, p.CallID, p.Tool, clip.Cut(p.Arguments, 256, runstatus.CutMark), p.ArgumentsDigest, p.Rule, p.Reason, name, p.CallID, ns)
		// The call id in the action keeps each call's event its own (the
		// recorder folds events of one reason and action).
		r.event(obj, corev1.EventTypeNormal, v1alpha1.ReasonApprovalRequested, v1alpha1.ReasonApprovalRequested+" "+p.CallID, msg)
		r.Notifier.Notify(notify.Message{
			Event: notify.EventApprovalRequested, Namespace: ns, Run: name, CallID: p.CallID, Tool: p.Tool,
			ArgumentsDigest: p.ArgumentsDigest, Rule: p.Rule, Reason: p.Reason,
			Text: clip.Cut(fmt.Sprintf("AgentRun %s/%s waits for approval of %s (%s, arguments %s): %s",
				ns, name, p.CallID, p.Tool, p.ArgumentsDigest, p.Reason), 1024, runstatus.CutMark),
		})
	}
	if c.ended && c.run.Status.Outcome == v1alpha1.OutcomeEscalated {
		r.Notifier.Notify(notify.Message{
			Event: notify.EventEscalated, Namespace: ns, Run: name, Outcome: string(c.run.Status.Outcome), Reason: c.run.Status.Reason,
			Text: clip.Cut(fmt.Sprintf("AgentRun %s/%s ended Escalated: %s", ns, name, c.run.Status.Reason), 1024, runstatus.CutMark),
		})
	}
}
