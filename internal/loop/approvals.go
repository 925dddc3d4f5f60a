package loop

// Approvals: calls the policy asked about wait here for a person's answer.

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// maxAnswerReasonShown bounds a person's reason where the run's event and
// its reason show it (the model reads it whole, up to the tool's
// maxResultBytes).
const maxAnswerReasonShown = 256

func (e *Engine) onAnswers(ctx context.Context, s *State, in *Input, now time.Time, notes *[]Note) next {
	answers, reasons := in.Answers, in.Reasons
	waiting := 0
	var oldest *Call
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.Verdict != Ask || c.Answer != "" || c.State != CallProposed {
			continue
		}
		a, ok := answers[c.ID]
		_, edited := in.Edits[c.ID]
		ok = ok && Misfit(c, a, edited) == ""
		if ok && a == Approve && c.Needed > 1 {
			// Several approvers: this one may leave it short.
			ok = takeApproval(c, in.By[c.ID], notes)
		}
		if !ok {
			waiting++
			if oldest == nil || c.RequestedAt.Before(*oldest.RequestedAt) {
				oldest = c
			}
			continue
		}
		c.Answer = a
		because := ""
		if q := quotedReason(reasons[c.ID], maxAnswerReasonShown); q != "" {
			because = ": " + q
		}
		*notes = append(*notes, Note{Kind: NoteApproval, CallID: c.ID, Warning: a != Approve && a != AnswerReply,
			Message: fmt.Sprintf("A person answered %s for %s (%s)%s", a, c.ID, c.Name, because)})
		switch ed, edited := in.Edits[c.ID]; {
		case a == Approve && edited:
			if n := vetEdit(ctx, e, s, c, ed, now, notes); n.ends() {
				return n
			}
		case a == Stop:
			return finishWith(ApprovalDenied, fmt.Sprintf("a person stopped the run when asked to approve %s (%s)%s", c.ID, c.Name, because))
		case a == AnswerReply:
			c.State, c.ObsStatus = CallDone, ObsOK
			c.Observation = answeredText(reasons[c.ID], e.tool(c.Name).MaxResultBytes)
		case a == DenyAnswer:
			c.State, c.ObsStatus = CallDone, ObsDeclined
			c.Observation = declinedText(c.Name, reasons[c.ID], e.tool(c.Name).MaxResultBytes)
		}
	}
	if waiting > 0 {
		if oldest.RequestedAt != nil && now.Sub(*oldest.RequestedAt) > e.cfg.ApprovalTimeout {
			return finishWith(Escalated, fmt.Sprintf("call %s (%s) waited more than approvalTimeout (%s) for a person",
				oldest.ID, oldest.Name, e.cfg.ApprovalTimeout))
		}
		return proceed(Effect{Kind: EffectAsk, Pending: s.PendingCalls()})
	}
	s.ActiveSince = now
	return act()
}

// ApprovalDeadline is when the oldest pending ASK times out (zero when
// nothing waits), so a caller can wake up in time.
func (e *Engine) ApprovalDeadline(s *State) time.Time {
	var d time.Time
	for _, c := range s.PendingCalls() {
		if c.RequestedAt == nil {
			continue
		}
		if t := c.RequestedAt.Add(e.cfg.ApprovalTimeout); d.IsZero() || t.Before(d) {
			d = t
		}
	}
	return d
}

// staleAnswers reports answers that name no pending call: they are never
// applied (a later call with the same id must get its own answer).
func (e *Engine) staleAnswers(s *State, answers map[string]Answer) []Note {
	if len(answers) == 0 {
		return nil
	}
	pending := map[string]bool{}
	if s.Phase == PhaseApproval {
		for _, c := range s.PendingCalls() {
			pending[c.ID] = true
		}
	}
	var ids []string
	for id := range answers {
		if !pending[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	notes := make([]Note, 0, len(ids))
	for _, id := range ids {
		notes = append(notes, Note{Kind: NoteStaleApproval, CallID: id, Warning: true,
			Message: fmt.Sprintf("Ignored answer %q for %s: that call is not waiting for approval", answers[id], id)})
	}
	return notes
}

// revet is Revet's vetting: the notes it makes, and the end of the run
// when a guardrail now halts it.
func (e *Engine) revet(ctx context.Context, s *State, now time.Time) ([]Note, next) {
	if s.Phase != PhaseApproval || s.Done() {
		return nil, next{}
	}
	ctx, cancel := e.vetContext(ctx)
	defer cancel()
	var notes []Note
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.State != CallProposed {
			continue
		}
		var discard []Note
		fresh, halt := e.vetCall(ctx, c.ToolCall, decodeArgs(c.Arguments, e.cfg.Loop.IgnoreArguments), now, &discard)
		switch {
		case halt != "":
			return notes, finishWith(GuardrailStop, halt+" when the run was resumed, before any call of the batch ran: "+fresh.Reason)
		case fresh.State == CallDone:
			// Denied, blocked or refused now: it will not run.
			was := *c
			fresh.Mutates = c.Mutates
			*c = fresh
			notes = append(notes, revettedNote(&was, c))
		case fresh.Verdict == Ask && c.Verdict == Allow:
			was := *c
			c.Verdict, c.Rule, c.Reason = Ask, fresh.Rule, fresh.Reason
			t := now
			c.RequestedAt = &t
			notes = append(notes, revettedNote(&was, c))
		}
	}
	return notes, next{}
}

func revettedNote(was, now *Call) Note {
	return Note{Kind: NoteRevetted, CallID: now.ID, Warning: true, Message: fmt.Sprintf(
		"Vetted again when the run was resumed, %s (%s) is now %s (%s)%s; it was %s (%s)",
		now.ID, now.Name, now.Verdict, now.Rule, suffix(now.Reason), was.Verdict, was.Rule)}
}
