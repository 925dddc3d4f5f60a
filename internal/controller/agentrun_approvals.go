package controller

import (
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
)

// answersFrom reads the approval annotations. Answers already applied (in
// status.approvals, not stale) are left out: they are history, not news.
func answersFrom(run *v1alpha1.AgentRun) (map[string]loop.Answer, map[string]string) {
	answers := map[string]loop.Answer{}
	for k, v := range run.Annotations {
		id, ok := strings.CutPrefix(k, v1alpha1.ApprovalAnnotationPrefix)
		if !ok || id == "" {
			continue
		}
		a := loop.Answer(strings.ToLower(strings.TrimSpace(v)))
		if a != loop.Approve && a != loop.DenyAnswer && a != loop.Stop {
			continue
		}
		applied := false
		for _, r := range run.Status.Approvals {
			if r.CallID == id && !r.Stale {
				applied = true
			}
		}
		if !applied {
			answers[id] = a
		}
	}
	return answers, answeredBy(run)
}

// answeredBy names who set each approval annotation, as the API server
// authenticated them: the admission policy agentrun-approver-identity
// stamps the username into approved-by.agents.agentrun.dev/<callID> in the
// same request, and agentrun-approval refuses clients that write it
// themselves. The field manager is not used: any client chooses its own.
func answeredBy(run *v1alpha1.AgentRun) map[string]string {
	by := map[string]string{}
	for k, v := range run.Annotations {
		if id, ok := strings.CutPrefix(k, v1alpha1.ApprovedByAnnotationPrefix); ok && id != "" {
			if _, answered := run.Annotations[v1alpha1.ApprovalAnnotationPrefix+id]; answered {
				by[id] = v
			}
		}
	}
	return by
}
