package loop

import (
	"errors"
	"fmt"
	"hash/fnv"
	"time"
)

// Retry defaults (part of the API contract, documented on tools[].retry
// and model.retry).
var (
	// DefaultToolRetry: three attempts, 1s then about 2s apart (jittered).
	DefaultToolRetry = RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: 30 * time.Second}
	// DefaultModelRetry: five attempts over about half a minute, so a
	// provider outage of a few seconds never ends a run.
	DefaultModelRetry = RetryPolicy{MaxAttempts: 5, InitialBackoff: 2 * time.Second, MaxBackoff: time.Minute}
)

// normalize fills the unset fields of p from def.
func (p RetryPolicy) normalize(def RetryPolicy) RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = def.MaxAttempts
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = def.InitialBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = max(def.MaxBackoff, p.InitialBackoff)
	}
	p.MaxBackoff = max(p.MaxBackoff, p.InitialBackoff)
	return p
}

// backoff is the wait after attempt number failed (1 for the first):
// InitialBackoff doubled for each earlier failure and capped at
// MaxBackoff, times a jitter factor in [0.5, 1.5) (still capped), and
// never shorter than the wait the dependency asked for. The jitter is
// drawn from seed (the run and the call), not from a global source: runs
// retrying together spread out, while one run's decisions stay a function
// of its state, so replaying them gives the same answer.
func (p RetryPolicy) backoff(failed int, retryAfter time.Duration, seed string) time.Duration {
	d := p.InitialBackoff
	for i := 1; i < failed && d < p.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, p.MaxBackoff)
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", seed, failed)
	jitter := 0.5 + float64(h.Sum64()>>11)/float64(1<<53) // [0.5, 1.5)
	d = min(time.Duration(float64(d)*jitter), p.MaxBackoff)
	return max(d, retryAfter)
}

// retryWait returns the effect that waits for the due retry, or nil when
// it is due now (and clears it).
func retryWait(s *State, now time.Time) *Effect {
	if s.RetryAt == nil {
		return nil
	}
	if now.Before(*s.RetryAt) {
		return &Effect{Kind: EffectWait, Until: *s.RetryAt}
	}
	s.RetryAt = nil
	return nil
}

// onModelError handles a failed model call: a transient failure with
// attempts left is retried after its backoff, once that wait and the next
// attempt are admitted against the ceilings; anything else ends the run
// ToolFailure, naming the attempts and the last error.
func (e *Engine) onModelError(s *State, err error, now time.Time, notes *[]Note) next {
	p := e.cfg.Model.Retry
	msg := cut(err.Error(), 400)
	if n, ok := e.context.lengthExceeded(s, err); ok {
		return n
	}
	var te TransientError
	if !errors.As(err, &te) || !te.Transient() {
		s.Usage.Turns++
		return finishWith(ToolFailure, "the model provider failed: "+msg)
	}
	if s.Attempt >= p.MaxAttempts {
		if s.Model+1 < len(e.models) {
			// The turn goes to the next fallback and is admitted again
			// for it: its request (the model's name, its prompt-cache
			// prefix), estimate and reservation are the new model's, and
			// its first attempt is made at once. The failed attempts
			// charged nothing but the wall clock they took; the earlier
			// model's reservation is replaced, not added to. The run stays
			// on the new model, a resumed one too (State.Model).
			from := e.cfg.Model.Name
			s.Model++
			e.cfg.Model, e.active = e.models[s.Model], s.Model
			*notes = append(*notes, Note{Kind: NoteModelFallback, Turn: s.Turn, Warning: true, Message: fmt.Sprintf(
				"Model %s stayed unavailable after %s (last error: %s); turn %d goes to fallback %d of %d, model %s",
				from, plural(s.Attempt, "attempt"), msg, s.Turn, s.Model, len(e.models)-1, e.cfg.Model.Name)})
			s.Turn--
			s.Phase = PhaseAdmit
			return admitNow()
		}
		s.Usage.Turns++
		return finishWith(ToolFailure, fmt.Sprintf("the model provider stayed unavailable after %s (model.retry.maxAttempts is %d); last error: %s",
			plural(s.Attempt, "attempt"), p.MaxAttempts, msg))
	}
	delay := p.backoff(s.Attempt, te.RetryAfter(), fmt.Sprintf("%s/model/t%d", s.RunID, s.Turn))
	res := s.Reserved
	res.WallClock = delay + e.cfg.Model.Timeout + e.cfg.ToolAllowance.WallClock
	if rej := Admit(&e.cfg.Budget, s.Usage, res); rej != nil {
		s.Usage.Turns++
		n := finishWith(ToolFailure, fmt.Sprintf("the model provider was unavailable on %s (last error: %s) and another attempt does not fit the budget: %s",
			plural(s.Attempt, "attempt"), msg, rej.Reason))
		n.refused = rej
		return n
	}
	s.Reserved = res
	at := now.Add(delay)
	s.RetryAt = &at
	s.Attempt++
	*notes = append(*notes, Note{Kind: NoteRetry, Warning: true, Message: fmt.Sprintf(
		"Model call of turn %d failed on attempt %d of %d (%s); retrying in %s", s.Turn, s.Attempt-1, p.MaxAttempts, msg, roundDelay(delay))})
	return proceed(Effect{Kind: EffectWait, Until: at})
}

// retryCandidate is a call whose attempt failed transiently.
type retryCandidate struct {
	call       *Call
	retryAfter time.Duration
	failure    Result
}

// scheduleRetries decides what happens to the calls of one group whose
// attempt failed transiently. When every one of them may be tried again
// (attempts left; a mutating tool only if it is declared retry-safe) and
// the retries fit the ceilings, they wait in state Retrying for the
// longest of their backoffs; otherwise the run ends ToolFailure, naming
// the tool, its attempts and the last error.
func (e *Engine) scheduleRetries(s *State, cands []retryCandidate, now time.Time, notes *[]Note) next {
	var delay, longest time.Duration
	res := s.Reserved
	res.PerTool = nil // retries of a call are not new calls of its tool
	for _, rc := range cands {
		c, t := rc.call, e.tool(rc.call.Name)
		p := t.Retry
		switch {
		case t.Mutates && !p.MutatingSafe:
			return e.endWithToolFailure(s, rc, fmt.Sprintf("tool %s (call %s) failed after 1 attempt and was not retried: it mutates and does not set retry.mutatingSafe; last error: %s",
				c.Name, c.ID, c.LastFailure))
		case c.Attempts >= p.MaxAttempts:
			return e.endWithToolFailure(s, rc, fmt.Sprintf("tool %s (call %s) stayed unavailable after %s (retry.maxAttempts is %d); last error: %s",
				c.Name, c.ID, plural(c.Attempts, "attempt"), p.MaxAttempts, c.LastFailure))
		}
		delay = max(delay, p.backoff(c.Attempts, rc.retryAfter, IdempotencyKey(s.RunID, c.ID)))
		child := reservedChild(t, c)
		longest = max(longest, t.callDuration(child))
		res.ToolCalls++
		if child != nil {
			res = res.then(child.usage())
		} else {
			res.Cost += t.MaxCost
		}
	}
	var waiting []Call
	for _, c := range s.Calls {
		if c.State == CallProposed {
			waiting = append(waiting, c)
		}
	}
	// The retried calls go again as one group (reads at most
	// maxConcurrentReads at a time), then whatever has not run yet.
	waves := (len(cands) + maxConcurrentReads - 1) / maxConcurrentReads
	res.WallClock = delay + time.Duration(waves)*longest + e.batchReservation(waiting, s.Usage).WallClock
	if rej := Admit(&e.cfg.Budget, s.Usage, res); rej != nil {
		rc := cands[0]
		n := e.endWithToolFailure(s, rc, fmt.Sprintf("tool %s (call %s) was unavailable on %s (last error: %s) and another attempt does not fit the budget: %s",
			rc.call.Name, rc.call.ID, plural(rc.call.Attempts, "attempt"), rc.call.LastFailure, rej.Reason))
		if n.ends() {
			n.refused = rej
		}
		return n
	}
	res.PerTool = s.Reserved.PerTool
	s.Reserved = res
	at := now.Add(delay)
	s.RetryAt = &at
	for _, rc := range cands {
		c := rc.call
		c.State = CallRetrying
		*notes = append(*notes, Note{Kind: NoteRetry, CallID: c.ID, Warning: true, Message: fmt.Sprintf(
			"%s %s: attempt %d of %d failed (%s); retrying in %s", c.ID, c.Name, c.Attempts, e.tool(c.Name).Retry.MaxAttempts,
			c.LastFailure, roundDelay(delay))})
	}
	return next{}
}

// endWithToolFailure records the failed call's observation, closes the
// batch's transcript with the observations made so far, and ends the run.
func (e *Engine) endWithToolFailure(s *State, rc retryCandidate, reason string) next {
	c := rc.call
	c.Observation, c.ObsStatus = RenderResult(c.Name, e.tool(c.Name).MaxResultBytes, rc.failure)
	c.State = CallDone
	if s.Plan != nil && s.Plan.Stage == StageExecuting {
		// A step that failed after its retries stops its plan, not the run.
		s.Plan.Failure = reason
		return next{}
	}
	for i := range s.Calls {
		if d := &s.Calls[i]; d.State == CallDone {
			s.Transcript = append(s.Transcript, d.message(s.Turn))
		}
	}
	return finishWith(ToolFailure, reason)
}

// failureSummary is a failure in a few words: its kind, code and detail.
func failureSummary(f *Failure) string {
	out := string(f.Kind)
	if f.Code != 0 {
		out += fmt.Sprintf(" %d", f.Code)
	}
	if f.Detail != "" {
		out += ": " + cut(f.Detail, 300)
	}
	return out
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func roundDelay(d time.Duration) time.Duration {
	if d >= 10*time.Second {
		return d.Round(time.Second)
	}
	return d.Round(10 * time.Millisecond)
}
