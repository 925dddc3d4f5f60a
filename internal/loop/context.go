package loop

// The context policy: what a request may hold. Every request replays the
// transcript of its trial, so a long run's input grows turn by turn until
// the provider refuses it. When the next request would pass the policy's
// maxInputTokens, the engine compacts the older turns first: it clears
// their tool results (strategy clear) or has the model condense them into
// one message (strategy summarize). Compaction changes what is sent, never
// what is kept: State.Transcript keeps every message, and a compaction only
// adds a marker message (RoleContext) that no request carries.

import (
	"errors"
	"fmt"
)

// Context policy defaults (part of the API contract, documented on
// spec.context).
const (
	// DefaultMaxInputTokens is the request limit of a model whose window
	// the provider adapters do not know.
	DefaultMaxInputTokens = 128_000
	// DefaultKeepRecentTurns is how many of the newest turns always go
	// verbatim.
	DefaultKeepRecentTurns = 4
	// DefaultSummaryMaxOutputTokens bounds the output of a summary call.
	DefaultSummaryMaxOutputTokens = 1024
	// contextMargin is the factor on the estimate of a request that does
	// not extend the request counted last (the first after a compaction):
	// its bound, scaled by how the provider counted the last request
	// against that request's bound, plus this share.
	contextMargin = 1.15
)

// Where a policy's MaxInputTokens came from (ContextPolicy.Source).
const (
	ContextFromSpec    = "spec"
	ContextFromModel   = "model"
	ContextFromDefault = "default"
)

// RoleContext marks a compaction in the transcript. Its messages are
// never sent to the model; they say what was compacted, and when.
const RoleContext Role = "context"

func (p ContextPolicy) normalize() ContextPolicy {
	if p.MaxInputTokens <= 0 {
		p.MaxInputTokens, p.Source = DefaultMaxInputTokens, ContextFromDefault
	}
	if p.Source == "" {
		p.Source = ContextFromSpec
	}
	if p.KeepRecentTurns <= 0 {
		p.KeepRecentTurns = DefaultKeepRecentTurns
	}
	if p.Strategy == "" {
		p.Strategy = ContextClear
	}
	if p.SummaryMaxOutputTokens <= 0 {
		p.SummaryMaxOutputTokens = DefaultSummaryMaxOutputTokens
	}
	return p
}

func (p ContextPolicy) check() error {
	switch p.Strategy {
	case ContextClear, ContextSummarize:
	default:
		return fmt.Errorf("context.strategy must be clear or summarize, not %q", p.Strategy)
	}
	return nil
}

// PhaseCompact: a summary call is admitted and reserved; its reply is
// due (or in flight).
const PhaseCompact Phase = "Compacting"

// CallsModel reports whether a state in this phase has a model call due
// or in flight: a turn's (PhaseModel) or a summary's (PhaseCompact). A
// driver hands that call's reply or error to the next step.
func (p Phase) CallsModel() bool { return p == PhaseModel || p == PhaseCompact }

// NoteContextCompacted: older turns were cleared or summarised before a
// request. (An event reason as well.)
const NoteContextCompacted NoteKind = "ContextCompacted"

// ContextLengthError may be implemented by a model error that says the
// provider refused the request as longer than the model's context window
// (OpenAI's context_length_exceeded).
type ContextLengthError interface {
	error
	ContextLengthExceeded() bool
}

const summaryInstruction = "Context limit reached. Condense the conversation above (after the goal) into one message that keeps " +
	"every fact, id, figure and result the rest of the task needs, what was tried and what is left to do. " +
	"Reply with the summary as plain text only; do not call a tool."

const summaryPreamble = "Summary of the earlier turns (they were condensed to fit the context limit):\n\n"

// contextPolicy holds requests to spec.context: it compacts the older
// turns of a request that would pass maxInputTokens, and ends the run
// when nothing more may be compacted.
type contextPolicy struct {
	cfg     *Config
	goal    Message
	system  string
	offered []ToolSchema
	// estimator bounds a whole request; assemble builds the state's next
	// request with its estimate, and estimateFresh estimates a request
	// built afresh (the engine's request assembly, engine.go).
	estimator     TokenEstimator
	assemble      func(*State) (*Request, inputEstimate)
	estimateFresh func(*State, *Request) inputEstimate
}

// newContextPolicy is the policy of the engine's configuration cfg,
// whose requests carry the goal, the system prompt and the tools offered.
func newContextPolicy(cfg *Config, goal Message, system string, offered []ToolSchema, estimator TokenEstimator,
	assemble func(*State) (*Request, inputEstimate), estimateFresh func(*State, *Request) inputEstimate) *contextPolicy {
	return &contextPolicy{cfg: cfg, goal: goal, system: system, offered: offered, estimator: estimator,
		assemble: assemble, estimateFresh: estimateFresh}
}

func (cp *contextPolicy) on(s *State) bool { return cp.cfg.Context.MaxInputTokens > 0 && s.Plan == nil }

// request assembles the request of the trial starting at start
// from the transcript up to end, under the compactions made in that
// trial: the goal, the summary if any, then the transcript from where the
// summary stops, markers for cleared results, compaction markers left out.
// Between two compactions each request extends the one before.
func (cp *contextPolicy) request(s *State, start, end int) *Request {
	clearedTo, summaryTo := 0, 0
	if c := s.Context; c != nil && c.Start == start {
		clearedTo, summaryTo = c.ClearedThrough, c.SummaryThrough
	}
	msgs := make([]Message, 1, 2+end-start)
	msgs[0] = cp.goal
	from, answers := start, s.answersBefore(start)
	if summaryTo > start {
		msgs = append(msgs, Message{Role: RoleUser, Content: summaryPreamble + s.Context.Summary})
		from, answers = summaryTo, answers+s.Context.SummaryAnswers
	}
	for i := from; i < end; i++ {
		m := s.Transcript[i]
		switch {
		case m.Role == RoleContext:
			continue
		case m.Role == RoleTool && i < clearedTo:
			m.Content = clearedMarker(&m)
		}
		msgs = append(msgs, m)
	}
	return &Request{Model: cp.cfg.Model.Name, System: cp.system, Tools: cp.offered, Messages: msgs,
		MaxOutputTokens: cp.cfg.Model.MaxOutputTokens, EarlierAnswers: answers}
}

// clearedMarker is what a cleared tool result is sent as: the same bytes
// every time, so the prefix stays cacheable.
func clearedMarker(m *Message) string {
	return fmt.Sprintf("[The result of call %s (%s, %d bytes) was cleared to save context. Call %s again to get it.]",
		m.CallID, m.Tool, len(m.Content), m.Tool)
}

// estimate is the estimate the policy holds a request to: est when
// it is built on the provider's count of the request before; otherwise
// the request's bound scaled by how the provider counted the last request
// against its bound (plus contextMargin), never above the bound.
func (cp *contextPolicy) estimate(s *State, req *Request, est inputEstimate) int64 {
	if est.sent != nil && est.sent.Base > 0 {
		return est.tokens
	}
	bound := cp.estimator.EstimateInputTokens(req)
	c := s.Context
	if c == nil || c.CountedBound <= 0 || c.CountedTokens <= 0 || s.WholeEstimates {
		return bound
	}
	scaled := int64(float64(bound)*float64(c.CountedTokens)/float64(c.CountedBound)*contextMargin) + 1
	return min(bound, scaled)
}

// fit holds the request of the turn being admitted to the context
// policy: it compacts the older turns when the request would pass
// maxInputTokens, and ends the run BudgetExhausted when even that does
// not make it fit. It returns the request to admit, or what replaces the
// turn (a summary call, the end of the run).
func (cp *contextPolicy) fit(s *State, req *Request, est inputEstimate, notes *[]Note) (*Request, inputEstimate, *next) {
	p := &cp.cfg.Context
	if s.Context == nil {
		s.Context = &ContextState{}
	}
	c := s.Context
	tokens := cp.estimate(s, req, est)
	if tokens <= p.MaxInputTokens {
		c.LastInputTokens = tokens
		return req, est, nil
	}
	start := s.trialStart()
	through := cp.compactTarget(s, start)
	if through <= c.compactedThrough(start) {
		return nil, est, cp.full(s, tokens)
	}
	if p.Strategy == ContextSummarize {
		if eff := cp.startSummary(s, start, through, tokens, notes); eff != nil {
			n := proceed(*eff)
			return nil, est, &n
		}
	}
	cp.clearThrough(s, start, through, tokens)
	req, est = cp.assemble(s)
	after := cp.estimate(s, req, est)
	noteCompaction(s, after, notes)
	if after > p.MaxInputTokens {
		return nil, est, cp.full(s, after)
	}
	c.LastInputTokens = after
	return req, est, nil
}

// compactTarget is the transcript index where the newest
// KeepRecentTurns turns begin: what precedes it may be compacted.
func (cp *contextPolicy) compactTarget(s *State, start int) int {
	keepFrom := s.Turn - cp.cfg.Context.KeepRecentTurns + 1
	i := len(s.Transcript)
	for i > start && (s.Transcript[i-1].Turn >= keepFrom || s.Transcript[i-1].Turn == 0) {
		i--
	}
	return i
}

func (c *ContextState) compactedThrough(start int) int {
	if c.Start != start {
		return start
	}
	return max(c.ClearedThrough, c.SummaryThrough, start)
}

// full ends the run: the request does not fit maxInputTokens, and
// nothing more may be compacted.
func (cp *contextPolicy) full(s *State, tokens int64) *next {
	p := &cp.cfg.Context
	n := finishWith(BudgetExhausted, fmt.Sprintf(
		"the request of turn %d would hold about %d input tokens, more than the context limit of %d (spec.context.maxInputTokens, %s) "+
			"with every turn but the newest %d compacted", s.Turn+1, tokens, p.MaxInputTokens, contextSource(p.Source), p.KeepRecentTurns))
	return &n
}

func contextSource(src string) string {
	switch src {
	case ContextFromModel:
		return "the model's context window"
	case ContextFromDefault:
		return "the default for a model whose window is not known"
	}
	return "as set"
}

// clearThrough clears the tool results before through and records the
// compaction.
func (cp *contextPolicy) clearThrough(s *State, start, through int, before int64) {
	c := s.Context
	if c.Start != start {
		*c = ContextState{Compactions: c.Compactions, LastCompactionTurn: c.LastCompactionTurn, Start: start,
			CountedBound: c.CountedBound, CountedTokens: c.CountedTokens}
	}
	var n, bytes int
	for i := max(c.ClearedThrough, c.SummaryThrough, start); i < through; i++ {
		if m := &s.Transcript[i]; m.Role == RoleTool {
			n++
			bytes += len(m.Content)
		}
	}
	c.ClearedThrough = through
	cp.recordCompaction(s, fmt.Sprintf("cleared %d tool result(s) of %d bytes before turn %d", n, bytes, turnAt(s, through)), before)
}

// recordCompaction counts a compaction and marks it in the transcript.
// The marker's text ends with the estimate before; noteCompaction adds
// the estimate after once the next request is built.
func (cp *contextPolicy) recordCompaction(s *State, what string, before int64) {
	c := s.Context
	c.Compactions++
	c.LastCompactionTurn = s.Turn + 1
	s.Transcript = append(s.Transcript, Message{Role: RoleContext, Turn: s.Turn + 1,
		Content: fmt.Sprintf("Context compacted before turn %d (%s): %s; about %d input tokens before", s.Turn+1, cp.cfg.Context.Strategy, what, before)})
}

// noteCompaction completes the last compaction's marker with the
// estimate after of the request that follows it, and notes it.
func noteCompaction(s *State, after int64, notes *[]Note) {
	m := &s.Transcript[len(s.Transcript)-1]
	if m.Role != RoleContext {
		return
	}
	m.Content += fmt.Sprintf(", about %d after", after)
	*notes = append(*notes, Note{Kind: NoteContextCompacted, Turn: m.Turn, Message: m.Content})
}

// startSummary admits the summary call that condenses the turns before
// through, or returns nil when the policy falls back to clearing (the
// summary request itself does not fit, or its reservation does not).
func (cp *contextPolicy) startSummary(s *State, start, through int, before int64, notes *[]Note) *Effect {
	req := cp.summaryRequest(s, start, through)
	est := cp.estimateFresh(s, req)
	if cp.estimate(s, req, est) > cp.cfg.Context.MaxInputTokens {
		*notes = append(*notes, Note{Kind: NoteContextCompacted, Warning: true, Turn: s.Turn + 1,
			Message: "The turns to summarise do not fit the context limit themselves: their tool results are cleared instead"})
		return nil
	}
	res := cp.summaryReservation(est.tokens)
	// The summary serves the turn being admitted, and is paid only when
	// that turn may follow it: the two are admitted together (seed 000,
	// step 0: nothing is paid to assemble a prompt that is never sent).
	// After compaction the turn's request is at most maxInputTokens, or
	// it is not sent at all.
	if rej := Admit(&cp.cfg.Budget, s.Usage, res.then(cp.cfg.modelReservation(cp.cfg.Context.MaxInputTokens))); rej != nil {
		*notes = append(*notes, Note{Kind: NoteContextCompacted, Warning: true, Turn: s.Turn + 1,
			Message: "A summary call and the turn it serves do not fit the budget together (" + rej.Reason + "): older tool results are cleared instead"})
		return nil
	}
	s.Reserved = res
	s.InFlight = est.sent
	s.Context.Pending = &PendingSummary{Through: through, Before: before}
	s.Phase = PhaseCompact
	return &Effect{Kind: EffectCallModel, Request: req}
}

// summaryRequest is the request's prefix up to the transcript's index
// through, then the instruction to condense it. It offers the same tools,
// so the prefix stays the one the provider has cached; the instruction
// asks for text.
func (cp *contextPolicy) summaryRequest(s *State, start, through int) *Request {
	req := cp.request(s, start, through)
	req.Messages = append(req.Messages, Message{Role: RoleUser, Turn: s.Turn + 1, Content: summaryInstruction})
	req.MaxOutputTokens, req.Summary = cp.cfg.Context.SummaryMaxOutputTokens, true
	return req
}

// summaryReservation is the exposure of a summary call: its input at the
// highest input rate (Pricing.inputRate), its maximum output at the output
// rate, the model deadline. It is no turn.
func (cp *contextPolicy) summaryReservation(input int64) Usage {
	p := cp.cfg.Model.Pricing
	out := cp.cfg.Context.SummaryMaxOutputTokens
	return Usage{InputTokens: input, OutputTokens: out, Cost: TokenCost(input, p.inputRate()) + TokenCost(out, p.Output),
		WallClock: cp.cfg.Model.Timeout}
}

// afterSummary compacts with the summary call's summary, or clears the
// older tool results instead when fallback says why there is none, then
// notes the compaction with the estimate of the request that follows.
func (cp *contextPolicy) afterSummary(s *State, start int, p *PendingSummary, summary, fallback string, notes *[]Note) {
	if fallback != "" {
		*notes = append(*notes, Note{Kind: NoteContextCompacted, Warning: true, Turn: s.Turn + 1, Message: "Older tool results are cleared instead of summarised: " + fallback})
		cp.clearThrough(s, start, p.Through, p.Before)
	} else {
		cp.takeSummary(s, start, p, summary)
	}
	req, est := cp.assemble(s)
	noteCompaction(s, cp.estimate(s, req, est), notes)
}

// takeSummary makes the summary stand in for the messages before through.
func (cp *contextPolicy) takeSummary(s *State, start int, p *PendingSummary, summary string) {
	c := s.Context
	if c.Start != start {
		*c = ContextState{Compactions: c.Compactions, LastCompactionTurn: c.LastCompactionTurn, Start: start,
			CountedBound: c.CountedBound, CountedTokens: c.CountedTokens}
	}
	from := max(c.SummaryThrough, start)
	turns := 0
	for i := from; i < p.Through; i++ {
		if s.Transcript[i].Role == RoleAssistant {
			c.SummaryAnswers++
			turns++
		}
	}
	c.Summary = cut(summary, int(4*cp.cfg.Context.SummaryMaxOutputTokens))
	c.SummaryThrough = p.Through
	c.ClearedThrough = max(c.ClearedThrough, p.Through)
	cp.recordCompaction(s, fmt.Sprintf("summarised %d more turn(s) before turn %d into %d bytes", turns, turnAt(s, p.Through), len(c.Summary)), p.Before)
}

// lengthExceeded ends the run whose request the provider refused
// as longer than the model's window.
func (cp *contextPolicy) lengthExceeded(s *State, err error) (next, bool) {
	var ce ContextLengthError
	if !errors.As(err, &ce) || !ce.ContextLengthExceeded() {
		return next{}, false
	}
	p := &cp.cfg.Context
	s.Usage.Turns++
	return finishWith(BudgetExhausted, fmt.Sprintf(
		"the model's provider refused the request of turn %d as longer than the model's context window (the engine estimated about %d input tokens; "+
			"the context limit was %d, %s): set spec.context.maxInputTokens below the model's window so that older turns are compacted in time",
		s.Turn, max(s.Context.last(), s.Reserved.InputTokens), p.MaxInputTokens, contextSource(p.Source))), true
}

// calibrate keeps the provider's count of the request just answered
// against its bound, for contextPolicy.estimate.
func (s *State) calibrate(tokens int64) {
	c, sent := s.Context, s.InFlight
	if c == nil || sent == nil || sent.Bound <= 0 || tokens <= 0 {
		return
	}
	c.CountedBound, c.CountedTokens, c.LastInputTokens = sent.Bound, tokens, tokens
}

// turnAt is the turn of the transcript's message i (the next turn past
// its end).
func turnAt(s *State, i int) int {
	if i < len(s.Transcript) {
		return s.Transcript[i].Turn
	}
	return s.Turn + 1
}
