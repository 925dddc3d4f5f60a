package loop

// Running a plan: the steps run in waves of those whose dependencies have
// their results; a failed wave stops the rest, and the plan is replanned
// or the solver answers from the evidence.

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// startWave vets and starts every step whose dependencies have their
// results, with its placeholders replaced; when no step is left, the
// solver is due.
func (pl *planner) startWave(ctx context.Context, s *State, now time.Time, notes *[]Note) next {
	ctx, cancel := pl.vetContext(ctx)
	defer cancel()
	p := s.Plan
	s.Calls, s.Reserved = nil, Usage{}
	doc, err := pl.acceptedPlan(s)
	if err != nil {
		return finishWith(Error, fmt.Sprintf("plan %d cannot go on: %v", p.Number, err))
	}
	var batch []Call
	asks, refused := 0, false
	for i := range p.Steps {
		st := &p.Steps[i]
		if st.At > 0 {
			continue
		}
		ready := true
		for _, d := range st.After {
			if dep := p.step(d); dep == nil || dep.At <= 0 {
				ready = false
			}
		}
		if !ready {
			continue
		}
		tc, err := pl.stepCall(s, doc, st)
		if err != nil {
			bc := Call{ToolCall: tc, State: CallProposed}
			refuse(&bc, rejection{rule: RulePlaceholder, reason: "a placeholder cannot be resolved: " + err.Error(),
				observation: fmt.Sprintf("Step %s (%s) did not run: a placeholder cannot be resolved: %v.", st.ID, tc.Name, err)}, notes)
			batch = append(batch, bc)
			refused = true
			continue
		}
		// vetCall is a function the planner holds: what it is handed
		// escapes, so it notes into its own slice, not the step's.
		var vetted []Note
		bc, halt := pl.vetCall(ctx, tc, decodeArgs(tc.Arguments, pl.cfg.Loop.IgnoreArguments), now, &vetted)
		*notes = append(*notes, vetted...)
		if halt != "" {
			return finishWith(GuardrailStop, halt+" before the step ran: "+bc.Reason)
		}
		switch {
		case bc.State == CallDone:
			refused = true
		case bc.Verdict == Ask:
			asks++
		}
		batch = append(batch, bc)
	}
	if len(batch) == 0 {
		p.Stage = StageSolving
		*notes = append(*notes, Note{Kind: NoteSolving, Message: fmt.Sprintf("Every step of plan %d has its result; the solver answers from them", p.Number)})
		return turnOver()
	}
	s.Calls = batch
	if refused {
		return pl.waveDone(s, notes)
	}
	for _, c := range batch {
		msg := fmt.Sprintf("Plan %d step %s (%s) starts", p.Number, stepOf(c.ID), c.Name)
		if c.Verdict == Ask {
			msg = fmt.Sprintf("Plan %d step %s (%s) waits for a person's approval", p.Number, stepOf(c.ID), c.Name)
		}
		*notes = append(*notes, Note{Kind: NoteStepStarted, CallID: c.ID, Message: msg})
	}
	if asks > 0 {
		s.Phase = PhaseApproval
		return proceed(Effect{Kind: EffectAsk, Pending: s.PendingCalls()})
	}
	return act()
}

// RulePlaceholder is the rule recorded on a step whose placeholder could
// not be resolved against the results it names.
const RulePlaceholder = "plan.placeholder"

// stopFailedWave, once a step of the running wave has failed or was
// refused, drops the steps that have not started (the plan is going to be
// replaced) and gives up the retries still due.
func (pl *planner) stopFailedWave(s *State) {
	if s.Plan == nil || s.Plan.Stage != StageExecuting {
		return
	}
	failed := s.Plan.Failure != ""
	for _, c := range s.Calls {
		failed = failed || (c.State == CallDone && c.ObsStatus.IsError())
	}
	if !failed {
		return
	}
	kept := s.Calls[:0]
	for _, c := range s.Calls {
		switch c.State {
		case CallProposed:
			continue
		case CallRetrying:
			c.State, c.ObsStatus = CallDone, ObsFailed
			c.Observation = fmt.Sprintf("%s was not tried again: another step of the plan failed. Its last attempt failed: %s.", c.Name, c.LastFailure)
		}
		kept = append(kept, c)
	}
	s.Calls = kept
	s.RetryAt = nil
}

// waveDone records the wave's results in the transcript. A step that
// failed (after its retries) or did not run stops the plan: the planner is
// asked for a new one, with the evidence so far. Otherwise the next wave
// is due.
func (pl *planner) waveDone(s *State, notes *[]Note) next {
	p := s.Plan
	var failed *Call
	for i := range s.Calls {
		c := &s.Calls[i]
		s.Transcript = append(s.Transcript, c.message(s.Turn))
		st := p.step(stepOf(c.ID))
		if c.ObsStatus.IsError() || st == nil {
			if failed == nil || (failed.ObsStatus != ObsFailed && c.ObsStatus == ObsFailed) {
				failed = c
			}
		} else {
			st.At = len(s.Transcript) - 1
		}
		if c.State == CallDone && c.Verdict != "" {
			*notes = append(*notes, Note{Kind: NoteStepFinished, CallID: c.ID, Warning: c.ObsStatus.IsError(),
				Message: fmt.Sprintf("Plan %d step %s (%s): %s", p.Number, stepOf(c.ID), c.Name, c.ObsStatus)})
		}
	}
	s.Calls, s.Reserved = nil, Usage{}
	if failed != nil {
		why := p.Failure
		outcome := ToolFailure
		switch {
		case why != "":
		case failed.ObsStatus == ObsFailed:
			why = fmt.Sprintf("step %s (%s) failed: %s", stepOf(failed.ID), failed.Name, cut(failed.Observation, 300))
		default:
			outcome = Escalated
			why = fmt.Sprintf("step %s (%s) did not run (%s, %s)%s", stepOf(failed.ID), failed.Name, failed.ObsStatus, failed.Rule, suffix(cut(failed.Reason, 300)))
		}
		return pl.replan(s, "", "stopped: "+why, outcome, nil, notes)
	}
	s.Phase = PhasePlanWave
	return proceed(Effect{Kind: EffectContinue})
}

// replan asks the planner for a new plan, saying what became of this one
// (what says it: "was refused: ...", "stopped: ..."), with the evidence
// so far; answer is the submit_plan call to answer (a refused plan), else
// the message is the user's. With no replan left the run ends with
// outcome.
func (pl *planner) replan(s *State, answer, what string, outcome Outcome, rej *Rejection, notes *[]Note) next {
	p := s.Plan
	max := *pl.cfg.Plan.MaxReplans
	var b strings.Builder
	what = strings.TrimRight(what, ". ")
	fmt.Fprintf(&b, "Plan %d %s.", p.Number, what)
	if ev := pl.evidence(s); ev != "" {
		b.WriteString("\n\nEvidence so far (results of the steps that ran):\n\n" + ev)
	}
	left := p.Replans < max
	if left {
		fmt.Fprintf(&b, "\n\nSubmit a new plan with %s (replan %d of %d). Its steps cannot name earlier plans' results: write the values you need from the evidence above.",
			PlanTool, p.Replans+1, max)
	}
	if answer != "" {
		s.Transcript = append(s.Transcript, Message{Role: RoleTool, Turn: s.Turn, CallID: answer, Tool: PlanTool, Content: b.String(), Status: ObsInvalid})
	} else {
		s.Transcript = append(s.Transcript, Message{Role: RoleUser, Turn: s.Turn, Content: b.String()})
	}
	if !left {
		n := finishWith(outcome, fmt.Sprintf("plan %d %s; no replan is left (plan.maxReplans is %d)", p.Number, cut(what, 600), max))
		n.refused = rej
		return n
	}
	p.Replans++
	p.next()
	*notes = append(*notes, Note{Kind: NoteReplanned, Warning: true, Message: fmt.Sprintf("Plan %d %s; plan %d is asked for (replan %d of %d)",
		p.Number-1, cut(what, 400), p.Number, p.Replans, max)})
	return turnOver()
}

// solverAnswer reads a solver's text answer: ok is false when it reports
// that the evidence is not enough, and then missing says what it lacks.
func solverAnswer(content string) (missing string, ok bool) {
	t := strings.TrimSpace(content)
	if len(t) < len(ReplanMarker) || !strings.EqualFold(t[:len(ReplanMarker)], ReplanMarker) {
		return "", true
	}
	missing = strings.TrimSpace(t[len(ReplanMarker):])
	if missing == "" {
		missing = "it did not say what is missing"
	}
	return missing, false
}
