package loop

// Approval with changes: a person approves a call with other arguments
// than the model proposed. The edited call is vetted again from the
// start, as a proposal is: loop detection, the tool's schema, guardrails
// and the policy; budgets hold it when it is dispatched, as any call.

import (
	"context"
	"fmt"
	"time"
)

// maxEditShown bounds the edited arguments where the model's observation
// and the run's events quote them.
const maxEditShown = 1024

// vetEdit vets c again with the edited arguments and keeps the verdict.
// An edit that vetting refuses (a policy rule denies it, a guardrail
// blocks it, the tool's schema refuses it) leaves the call as that rule
// decides, done with the rule's message; an edit vetting allows, or asks
// about, runs: the person approved these very arguments. It ends the run
// when the edited call repeats the run's calls (LoopDetected) or a
// guardrail halts on it (GuardrailStop).
func vetEdit(ctx context.Context, e *Engine, s *State, c *Call, ed Edit, now time.Time, notes *[]Note) next {
	d := decodeArgs(ed.Arguments, e.cfg.Loop.IgnoreArguments)
	if s.Plan == nil && d.err == nil {
		if det := s.recordSignature(e.cfg.Loop, sigEntry(signature(c.Name, d.canon, ed.Arguments))); det != nil {
			return finishWith(LoopDetected, det.reason(e.cfg.Loop))
		}
		if why := s.recordNear(e.cfg.Loop, c.Name, d.canon); why != "" {
			return finishWith(LoopDetected, why)
		}
	}
	ctx, cancel := e.vetContext(ctx)
	defer cancel()
	fresh, halt := e.vetCall(ctx, ToolCall{ID: c.ID, Name: c.Name, Arguments: ed.Arguments}, d, now, notes)
	if halt != "" {
		return finishWith(GuardrailStop, fmt.Sprintf("%s, with the arguments %s changed it to, before any call of the batch ran: %s",
			halt, who(ed.By), fresh.Reason))
	}
	proposed, answer, requested := c.Arguments, c.Answer, c.RequestedAt
	if fresh.State == CallDone {
		*c = fresh
		c.Answer, c.RequestedAt = answer, requested
		c.Proposed, c.EditedBy = proposed, ed.By
		c.Observation = editedText(c) + " " + c.Observation
		*notes = append(*notes, Note{Kind: NoteEditRefused, CallID: c.ID, Warning: true, Message: fmt.Sprintf(
			"The changes %s made to %s (%s) were refused by %s%s; the call does not run", who(ed.By), c.ID, c.Name, c.Rule, suffix(c.Reason))})
		return next{}
	}
	c.Arguments, c.Proposed, c.EditedBy = ed.Arguments, proposed, ed.By
	*notes = append(*notes, Note{Kind: NoteEdited, CallID: c.ID, Message: fmt.Sprintf(
		"%s approved %s (%s) with changes: it runs with %s in place of %s", who(ed.By), c.ID, c.Name,
		cut(string(c.Arguments), maxEditShown), cut(string(proposed), maxEditShown))})
	return next{}
}

// editedText tells the model that a person changed the call's arguments,
// and to what: what it reads next is the result of those, not of its
// proposal.
func editedText(c *Call) string {
	return fmt.Sprintf("A person changed the arguments of this call to %s before it ran.", cut(string(c.Arguments), maxEditShown))
}

func who(by string) string {
	if by == "" {
		return "a person"
	}
	return by
}
