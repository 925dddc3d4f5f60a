package controller

import (
	"fmt"

	"github.com/agentrun/agentrun/internal/loop"
)

// NoteApprovalVoided is the event reason of an approval that no longer
// applies: the call about to run is not the one a person was asked about.
const NoteApprovalVoided loop.NoteKind = "ApprovalVoided"

// checkProposals compares every call of the turn that has not finished
// with the model's proposal of it, as saved in the transcript when the
// call was vetted (in Secrets, which the operator writes; a status edit
// cannot change them). The checkpoint in status is what the engine resumes
// from, so a call whose name or arguments differ there must not run: the
// reason says which call and both digests. voided names the call when a
// person had been asked about it (its approval, given or not, is void).
// The verifier's call (spec.verify) is the engine's, not the model's: it
// must be the one the engine makes of the final answer in the transcript;
// so is a plan's step (spec.strategy planExecute): it must be the one the
// engine makes of the plan in the transcript and the results it names.
func checkProposals(s *loop.State, e *loop.Engine) (reason, voided string) {
	if len(s.Calls) == 0 {
		return "", ""
	}
	proposed := map[string]loop.ToolCall{}
	if e != nil {
		if v, ok := e.VerifierCall(s); ok {
			proposed[v.ID] = v
		}
	}
	for i := len(s.Transcript) - 1; i >= 0 && len(proposed) < len(s.Calls); i-- {
		m := &s.Transcript[i]
		if m.Role != loop.RoleAssistant {
			continue
		}
		for _, tc := range m.ToolCalls {
			if _, seen := proposed[tc.ID]; !seen {
				proposed[tc.ID] = tc
			}
		}
	}
	for _, c := range s.Calls {
		if c.State == loop.CallDone {
			continue
		}
		what := "the call"
		if c.Verdict == loop.Ask {
			what = "the approval of the call"
			if c.Answer == loop.Approve {
				what = "the approval given for the call"
			}
		}
		p, ok := proposed[c.ID]
		if !ok && e != nil {
			// A plan's step is the engine's call, made of the plan the
			// model proposed and the results its placeholders name.
			p, ok = e.PlanStepCall(s, c.ID)
		}
		// A call a person approved with changes runs with their
		// arguments; the model's proposal is kept beside them.
		args := c.Arguments
		if c.Proposed != nil {
			args = c.Proposed
		}
		got := loop.ArgumentsDigest(args)
		switch {
		case !ok:
			reason = fmt.Sprintf("%s %s (%s) is void: the model never proposed it (no call %s in the run's transcript); the call did not run",
				what, c.ID, c.Name, c.ID)
		case p.Name != c.Name:
			reason = fmt.Sprintf("%s %s is void: status.checkpoint names the tool %s, the model proposed %s; the call did not run",
				what, c.ID, c.Name, p.Name)
		case loop.ArgumentsDigest(p.Arguments) != got:
			shown := ""
			if c.Verdict == loop.Ask {
				shown = " and a person was asked about"
			}
			reason = fmt.Sprintf("%s %s (%s) is void: its arguments in status.checkpoint (%s) are not the ones the model proposed%s (%s); the call did not run",
				what, c.ID, c.Name, got, shown, loop.ArgumentsDigest(p.Arguments))
		default:
			continue
		}
		if c.Verdict == loop.Ask {
			voided = c.ID
		}
		return reason, voided
	}
	return "", ""
}
