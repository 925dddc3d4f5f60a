package loop

// Acting: approved calls are dispatched, reads together and writes one at
// a time, and their results become observations.

import (
	"fmt"
	"slices"
	"time"
)

func (e *Engine) startActing(s *State, notes *[]Note) next {
	// What a child may use leaves the run its next turn.
	res := e.batchReservation(s.Calls, s.Usage.then(nextTurn(&e.cfg, s, e.tool)))
	if rej := Admit(&e.cfg.Budget, s.Usage, res); rej != nil {
		return refusal(rej)
	}
	s.Reserved = res
	s.Phase = PhaseAct
	return e.dispatchNext(s, e.clock(), notes)
}

// dispatchNext hands out the next group: every approved read at once
// (concurrently), then the approved writes one at a time in proposal
// order. Calls waiting for a retry go again, as one group, once their
// backoff has passed, before anything after them. When nothing is left,
// every call has its result (observed).
func (e *Engine) dispatchNext(s *State, now time.Time, notes *[]Note) next {
	e.plan.stopFailedWave(s)
	inflight := false
	var reads []Invocation
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.State == CallDispatched {
			inflight = true
		}
		if c.State == CallProposed && c.Approved() && !c.Mutates {
			reads = append(reads, e.dispatch(s, c))
		}
	}
	if len(reads) > 0 {
		return proceed(Effect{Kind: EffectRunTools, Calls: reads, Concurrent: len(reads) > 1})
	}
	if inflight {
		return proceed(Effect{Kind: EffectRunTools})
	}
	if w := retryWait(s, now); w != nil {
		return proceed(*w)
	}
	var again []Invocation
	writes := false
	for i := range s.Calls {
		if c := &s.Calls[i]; c.State == CallRetrying {
			writes = writes || c.Mutates
			again = append(again, e.dispatch(s, c))
		}
	}
	if len(again) > 0 {
		return proceed(Effect{Kind: EffectRunTools, Calls: again, Concurrent: len(again) > 1 && !writes})
	}
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.State == CallProposed && c.Approved() {
			return proceed(Effect{Kind: EffectRunTools, Calls: []Invocation{e.dispatch(s, c)}})
		}
	}
	return observed()
}

// Rerunnable reports whether a group of calls may run before the step
// that dispatched it is saved: every call is a read that a lost result
// lets run again (Repeatable) and reserves nothing (no cost, no child
// run, no person's answer). A crash before the save then only runs the
// reads again, as onLostResults would. c is the engine's (normalised)
// configuration, Engine.Config.
func (c *Config) Rerunnable(calls []Invocation) bool {
	for _, call := range calls {
		i := slices.IndexFunc(c.Tools, func(t ToolSpec) bool { return t.Name == call.Tool })
		if i < 0 {
			return false
		}
		t := &c.Tools[i]
		if t.Mutates || !t.Repeatable || t.MaxCost != 0 || t.Child != nil || t.AsksPerson {
			return false
		}
	}
	return len(calls) > 0
}

// appendObservations appends the batch's observations, in proposal order.
func appendObservations(s *State) {
	for i := range s.Calls {
		c := &s.Calls[i]
		m := c.message(s.Turn)
		if c.Proposed != nil {
			m.Arguments, m.EditedBy = c.Arguments, c.EditedBy
		}
		s.Transcript = append(s.Transcript, m)
	}
}

// dispatch marks c dispatched as its next attempt and returns its invocation.
func (e *Engine) dispatch(s *State, c *Call) Invocation {
	c.State = CallDispatched
	c.Attempts++
	return e.invocation(s, c)
}

func (e *Engine) invocation(s *State, c *Call) Invocation {
	t := e.tool(c.Name)
	inv := Invocation{CallID: c.ID, Tool: c.Name, Arguments: c.Arguments, IdempotencyKey: IdempotencyKey(s.RunID, c.ID),
		Attempt: max(c.Attempts, 1), Timeout: t.Timeout, StartupGrace: t.StartupGrace, KillGrace: t.KillGrace, MaxResultBytes: t.MaxResultBytes}
	if ch := reservedChild(t, c); ch != nil {
		// The child's wall clock is what the call reserved for it.
		inv.Child, inv.Timeout = ch, ch.WallClock
	}
	return inv
}

// applyResults records a group's results. A call whose attempt failed
// transiently is retried or ends the run (see scheduleRetries); every
// other call gets its observation. It returns the end of the run, or
// proceed(Effect{}) to go on.
func (e *Engine) applyResults(s *State, results []Result, now time.Time, notes *[]Note) next {
	var retry []retryCandidate
	var halted *Call
	var haltedBy string
	for _, r := range results {
		for i := range s.Calls {
			c := &s.Calls[i]
			if c.ID != r.CallID || c.State != CallDispatched {
				continue
			}
			t := e.tool(c.Name)
			s.settleCall(t, c.Attempts <= 1, reservedChild(t, c), r.Child)
			if r.Failure.Transient() {
				c.State, c.LastFailure = CallRetrying, failureSummary(r.Failure)
				retry = append(retry, retryCandidate{call: c, retryAfter: r.Failure.RetryAfter, failure: r})
				continue
			}
			c.Observation, c.ObsStatus = RenderResult(c.Name, t.MaxResultBytes, r)
			c.Duration, c.ResultBytes = r.Duration, r.Size
			if c.ResultBytes == 0 {
				c.ResultBytes = int64(len(r.Output))
			}
			if r.ChildRun != "" {
				s.recordChild(c, r, reservedChild(t, c))
			}
			if c.Proposed != nil {
				c.Observation = editedText(c) + " Its result: " + c.Observation
			}
			c.State = CallDone
			if g := e.guardrails.screenResult(c, notes); g != "" && halted == nil {
				halted, haltedBy = c, g
			}
			// Every result has a note: the message is joined, not formatted.
			msg := c.ID + " " + c.Name + ": " + string(c.ObsStatus)
			if r.Failure != nil {
				msg += fmt.Sprintf(" (%s", r.Failure.Kind)
				if r.Failure.Code != 0 {
					msg += fmt.Sprintf(" %d", r.Failure.Code)
				}
				msg += ")"
			}
			if r.Duration >= 10*time.Millisecond {
				msg += fmt.Sprintf(" in %s", r.Duration.Round(time.Millisecond))
			}
			*notes = append(*notes, Note{Kind: NoteCallFinished, CallID: c.ID, Warning: r.Failure != nil, Message: msg})
		}
	}
	if halted != nil {
		return finishWith(GuardrailStop, fmt.Sprintf("guardrail %s halted the run: it matched the result of call %s (%s)", haltedBy, halted.ID, halted.Name))
	}
	if len(retry) > 0 {
		return e.scheduleRetries(s, retry, now, notes)
	}
	return next{}
}

// settleCall moves one executed attempt from reserved to consumed. A
// tool's declared maxCostUSD is what it costs: tools do not report spend,
// so the declared ceiling is charged (never under-counted). A call that
// ran a child (child is what it reserved) is charged what the child used
// (used, its turns, tokens, tool calls and cost), or, when that is
// unknown, the whole reservation. Every attempt is a tool call; only a
// call's first attempt counts against its tool's perTool limit, which
// bounds distinct calls, not retries of one.
func (s *State) settleCall(t *ToolSpec, first bool, child *ChildBudget, used *Usage) {
	s.Usage.ToolCalls++
	if s.Usage.PerTool == nil {
		s.Usage.PerTool = map[string]int{}
	}
	s.Reserved.ToolCalls = max(0, s.Reserved.ToolCalls-1)
	if child != nil {
		s.settleChild(child, used)
	} else {
		s.Usage.Cost += t.MaxCost
		s.Reserved.Cost = max(0, s.Reserved.Cost-t.MaxCost)
	}
	if !first {
		return
	}
	s.Usage.PerTool[t.Name]++
	if s.Reserved.PerTool[t.Name] > 0 {
		s.Reserved.PerTool[t.Name]--
	}
}

// settleChild releases what a call reserved for its child and charges what
// the child used (the reservation when used is nil). Its wall clock is
// not added: the run's own clock ran while it waited.
func (s *State) settleChild(child *ChildBudget, used *Usage) {
	u := child.usage()
	s.Reserved = s.Reserved.release(u)
	if used != nil {
		u = *used
		u.PerTool, u.WallClock = nil, 0
	}
	s.Usage = s.Usage.then(u).withPerTool(s.Usage.PerTool)
	s.Children = new(s.Children.orZero().then(u))
}

// recordChild adds the child run of call c, whose result r is, to
// ChildRuns, keeping the newest MaxChildRuns. reserved is what the call
// reserved for it: what it is charged when its use is unknown.
func (s *State) recordChild(c *Call, r Result, reserved *ChildBudget) {
	ch := ChildRun{Name: r.ChildRun, CallID: c.ID, Outcome: r.ChildOutcome}
	if r.Child != nil {
		ch.Turns, ch.Cost = r.Child.Turns, r.Child.Cost
	} else if reserved != nil {
		ch.Turns, ch.Cost = reserved.Turns, reserved.Cost // charged its whole reservation
	}
	s.ChildRuns = append(s.ChildRuns, ch)
	if n := len(s.ChildRuns) - MaxChildRuns; n > 0 {
		s.ChildRuns = slices.Delete(s.ChildRuns, 0, n)
		s.ChildRunsOmitted += n
	}
}

// Own is the run's usage and reservation without its children's part:
// what its children used (Children) and what its calls hold for children
// still to end. A child is a run of its own, which a shared budget counts
// as such; this is the rest.
func (s *State) Own() (used, reserved Usage) {
	used, reserved = s.Usage, s.Reserved
	ch := s.Children.orZero()
	used.Turns, used.InputTokens, used.OutputTokens = used.Turns-ch.Turns, used.InputTokens-ch.InputTokens, used.OutputTokens-ch.OutputTokens
	used.CachedInputTokens, used.Cost, used.ToolCalls = used.CachedInputTokens-ch.CachedInputTokens, used.Cost-ch.Cost, used.ToolCalls-ch.ToolCalls
	for i := range s.Calls {
		c := &s.Calls[i]
		if b := c.Child; b != nil && c.State != CallDone {
			reserved = reserved.release(b.usage())
		}
	}
	return used, reserved
}

// onLostResults handles a restart while calls were dispatched: a call that
// may safely run again (read-only, or an executor that adopts the earlier
// attempt) is dispatched again; any other call is never repeated and its
// observation says its outcome is unknown.
func (e *Engine) onLostResults(s *State, now time.Time, notes *[]Note) next {
	var again []Invocation
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.State != CallDispatched {
			continue
		}
		t := e.tool(c.Name)
		if t.Repeatable {
			if !t.Mutates && t.Child == nil {
				s.Usage.Cost += t.MaxCost // the lost attempt may have spent
			}
			inv := e.invocation(s, c)
			inv.Resumed = true
			again = append(again, inv)
			continue
		}
		c.State, c.ObsStatus = CallDone, ObsFailed
		c.Observation, _ = RenderResult(c.Name, t.MaxResultBytes, Result{Failure: &Failure{Kind: FailUnknown}})
		s.settleCall(t, c.Attempts <= 1, reservedChild(t, c), nil)
		*notes = append(*notes, Note{Kind: NoteCallFinished, CallID: c.ID, Warning: true,
			Message: fmt.Sprintf("%s %s: outcome unknown after a restart; not repeated", c.ID, c.Name)})
	}
	if len(again) > 0 {
		return proceed(Effect{Kind: EffectRunTools, Calls: again, Concurrent: len(again) > 1})
	}
	return e.dispatchNext(s, now, notes)
}

// abandonCalls ends the calls of a cancelled run that are still
// dispatched: their results were lost to a restart and the run will not
// wait for them. Each is charged as onLostResults charges a call it does
// not repeat, as one call made at its tool's declared maxCostUSD, and its
// outcome is unknown; none is run again.
func (e *Engine) abandonCalls(s *State, notes *[]Note) {
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.State != CallDispatched {
			continue
		}
		t := e.tool(c.Name)
		s.settleCall(t, c.Attempts <= 1, reservedChild(t, c), nil)
		c.State, c.ObsStatus = CallDone, ObsFailed
		c.Observation, _ = RenderResult(c.Name, t.MaxResultBytes, Result{Failure: &Failure{Kind: FailUnknown}})
		msg := fmt.Sprintf("%s %s was in flight when the run was cancelled and its result was lost: its outcome is unknown, and it is charged as a call made", c.ID, c.Name)
		if t.MaxCost > 0 {
			msg += fmt.Sprintf(" ($%s, the tool's maxCostUSD)", t.MaxCost)
		}
		*notes = append(*notes, Note{Kind: NoteCallAbandoned, CallID: c.ID, Warning: true, Message: msg})
	}
}
