package loop

// A turn begins here: admission reserves the model call, and the reply is
// settled and read (a final answer, a refusal, or tool calls to vet).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// modelCallCost is the dollars a model call's reservation res holds for
// the call itself: a turn's reservation also holds the per-turn tool
// allowance, a summary's (phase PhaseCompact) holds only the call.
func (c *Config) modelCallCost(res Usage, phase Phase) Money {
	if phase == PhaseCompact {
		return res.Cost
	}
	return max(res.Cost-c.ToolAllowance.Cost, 0)
}

func (e *Engine) chargeLostModelCall(s *State) {
	r := s.Reserved
	s.Usage.Turns += r.Turns
	s.Usage.InputTokens += r.InputTokens
	s.Usage.OutputTokens += r.OutputTokens
	s.Usage.Cost += e.cfg.modelCallCost(r, s.Phase)
	s.Reserved = Usage{}
	// What the provider counted of the lost call is unknown: the call
	// made again is bounded whole.
	s.InFlight, s.Counted = nil, nil
}

// abandonModelCall charges the model call of a run cancelled while the
// call was in flight or lost to a restart: what it spent is unknown, so
// its reservation is charged, as chargeLostModelCall charges a call lost
// to a restart.
func (e *Engine) abandonModelCall(s *State, notes *[]Note) {
	before := s.Usage
	e.chargeLostModelCall(s)
	*notes = append(*notes, Note{Kind: NoteCallAbandoned, Turn: s.Turn, Warning: true, Message: fmt.Sprintf(
		"The model call of turn %d was in flight when the run was cancelled and its reply will not be read: what it spent is unknown, so its reservation is charged (%d tokens, $%s)",
		s.Turn, s.Usage.Tokens()-before.Tokens(), s.Usage.Cost-before.Cost)})
}

// A model call's reservation is what admission checked against the
// ceilings, and what a shared AgentBudget leased for it. A reply whose
// reported usage is far above that reservation is charged in full, but the
// run stops there: otherwise a model server that over-reports (a tenant's
// own baseURL, a misconfigured proxy) would spend past the ceilings call
// after call, each time by more than was reserved. Stopping bounds what
// any one run can pass its ceilings (or a shared budget) by to one call's
// excess.
//
// Reported input is far above the reservation when it exceeds
// InputToleranceFactor times the reserved input plus InputToleranceTokens;
// reported output, when it exceeds the reserved output, which is the most
// the request allowed (model.maxOutputTokens). When the input reserved
// was built on the provider's count of the request before (PromptCount),
// the reported input is held to the bound of the whole request instead,
// as it was before estimates were built on counts: a server whose counts
// are not consistent is not stopped for what the engine took on trust
// from it; its count is charged, and its later requests of the run are
// bounded whole (State.WholeEstimates). A server that over-reports is
// stopped at the same count as when every request was bounded whole.
const (
	// InputToleranceFactor bounds reported input tokens relative to the
	// bound of the request's input (ByteEstimator's, a token per byte,
	// whole or on top of an earlier count). That bound is meant to be
	// above what a provider counts, so twice it is already far past any
	// honest count.
	InputToleranceFactor = 2
	// InputToleranceTokens is added to the bound on reported input tokens
	// for what a server may add to a prompt that the estimate does not
	// see (a chat template's default system prompt), so that a small
	// prompt is not held to a bound of a few hundred tokens.
	InputToleranceTokens = 1024
)

// usageAboveReservation says how a reply's usage passed its reservation
// res beyond tolerance, its input held to inputBound (State.inputBound),
// or "" when it did not.
func usageAboveReservation(u TokenUsage, res Usage, inputBound int64) string {
	var over []string
	if inputBound <= (math.MaxInt64-InputToleranceTokens)/InputToleranceFactor &&
		u.InputTokens > InputToleranceFactor*inputBound+InputToleranceTokens {
		what := "the reserved input"
		if inputBound != res.InputTokens {
			what = fmt.Sprintf("the bound of the whole request's input (%d tokens)", inputBound)
		}
		over = append(over, fmt.Sprintf("input is more than %d times %s plus %d tokens", InputToleranceFactor, what, InputToleranceTokens))
	}
	if u.OutputTokens > res.OutputTokens {
		over = append(over, "output is more than the request allowed")
	}
	return strings.Join(over, ", and ")
}

// settleReply replaces the model call's reservation by what the provider
// reported, keeping the per-turn tool allowance reserved. It returns the
// call's cost and, when the reported usage is far above what the call
// reserved (usageAboveReservation), the reason the run must stop, having
// recorded a warning note that names both. Every path that reads a reply
// settles it here.
//
// Counts a provider reports below zero are taken as zero: a run's usage
// never goes down, whatever its model's server says. Counts far above the
// reservation are charged in full as well: the usage says what the
// provider says was spent.
func (e *Engine) settleReply(s *State, r *Reply, notes *[]Note) (cost Money, stop string) {
	u := &r.Usage
	u.InputTokens, u.OutputTokens = max(u.InputTokens, 0), max(u.OutputTokens, 0)
	u.CachedInputTokens, u.CacheWriteTokens = max(u.CachedInputTokens, 0), max(u.CacheWriteTokens, 0)
	res, bound := s.Reserved, s.inputBound()
	cost = e.cfg.modelCost(r.Usage)
	if s.Phase != PhaseCompact { // a summary call is no turn
		s.Usage.Turns++
	}
	s.Usage.InputTokens += r.Usage.InputTokens
	s.Usage.OutputTokens += r.Usage.OutputTokens
	s.Usage.CachedInputTokens += r.Usage.CachedInputTokens
	s.Usage.Cost += cost
	s.calibrate(r.Usage.InputTokens)
	s.countInput(r.Usage.InputTokens, res.InputTokens)
	a := e.cfg.ToolAllowance
	s.Reserved = Usage{ToolCalls: a.Calls, Cost: a.Cost, WallClock: a.WallClock}
	reservedCost := e.cfg.modelCallCost(res, s.Phase)
	why := usageAboveReservation(r.Usage, res, bound)
	if why == "" {
		if cost > reservedCost {
			// Within the tolerance of token counts (the estimate is a
			// bound, the provider's count the bill), but past the dollars
			// admission held: charged, and said.
			*notes = append(*notes, Note{Kind: NoteCostAboveReservation, Turn: s.Turn, Warning: true, Amount: cost - reservedCost, Message: fmt.Sprintf(
				"The model call of turn %d billed $%s against a reservation of $%s (%d input tokens counted, %d reserved): the excess $%s is charged",
				s.Turn, cost, reservedCost, r.Usage.InputTokens, res.InputTokens, cost-reservedCost)})
		}
		return cost, ""
	}
	*notes = append(*notes, Note{Kind: NoteUsageAboveReservation, Turn: s.Turn, Warning: true, Message: fmt.Sprintf(
		"The model call of turn %d reported %d input and %d output tokens ($%s) against a reservation of %d input and %d output tokens ($%s): "+
			"its %s. The whole reported usage is charged and the run stops",
		s.Turn, r.Usage.InputTokens, r.Usage.OutputTokens, cost, res.InputTokens, res.OutputTokens, reservedCost, why)})
	return cost, fmt.Sprintf("the provider reported %d input and %d output tokens ($%s) for a model call on turn %d reserved at %d and %d ($%s): "+
		"the run stops rather than spend past what it reserves (check the model's baseURL)",
		r.Usage.InputTokens, r.Usage.OutputTokens, cost, s.Turn, res.InputTokens, res.OutputTokens, reservedCost)
}

// onSummary takes the summary call's reply, its error, or the news that
// it was lost (a restart: in is empty). A summary is paid for once: a
// lost call is charged its reservation and never made again, and a call
// that failed or gave no summary leaves the older turns cleared instead.
func (e *Engine) onSummary(s *State, in Input, notes *[]Note) next {
	c := s.Context
	p := c.Pending
	start := s.trialStart()
	summary, fallback := "", ""
	switch {
	case p == nil:
	case in.Reply != nil:
		r := in.Reply
		if _, stop := e.settleReply(s, r, notes); stop != "" {
			c.Pending = nil
			return finishWith(Error, stop)
		}
		s.Reserved = Usage{}
		if r.Refusal != "" || len(r.ToolCalls) > 0 || len(r.Content) == 0 {
			fallback = "the summary call gave no summary"
		} else {
			summary = r.Content
		}
	case in.ModelErr != nil:
		// A provider that failed the call is not charged for it.
		s.Reserved, s.InFlight = Usage{}, nil
		fallback = "the summary call failed (" + cut(in.ModelErr.Error(), 200) + ")"
	default:
		e.chargeLostModelCall(s)
		fallback = "the summary call was lost (a restart); its reservation is charged and it is not made again"
	}
	c.Pending = nil
	s.Phase = PhaseAdmit
	if p != nil {
		e.context.afterSummary(s, start, p, summary, fallback, notes)
	}
	return admitNow()
}

// chargeReply charges a model's reply and notes what it answered. A
// usage far above the call's reservation is charged too, and stop says
// why the run must end.
func (e *Engine) chargeReply(s *State, r *Reply, notes *[]Note) (stop string) {
	settled := len(*notes)
	cost, stop := e.settleReply(s, r, notes)
	var buf [128]byte
	msg := text(buf[:0]).s("Model answered turn ").n(int64(s.Turn)).s(" with ")
	switch {
	case r.Refusal != "":
		msg = msg.s("a refusal")
	case r.Truncated:
		msg = msg.s("a truncated answer")
	case len(r.ToolCalls) > 0:
		msg = msg.n(int64(len(r.ToolCalls))).s(" tool call(s)")
	case strings.TrimSpace(r.Content) == "":
		msg = msg.s("an empty answer, not a final one")
	default:
		msg = msg.s("a final answer")
	}
	msg = msg.s(" (").n(r.Usage.InputTokens).s(" input, ").n(r.Usage.OutputTokens).s(" output tokens, $").usd(cost).s(")")
	// The answer's note comes before any note settling it wrote.
	*notes = slices.Insert(*notes, settled, Note{Kind: NoteModelAnswered, Turn: s.Turn, Message: string(msg)})
	return stop
}

// unreadable reports whether the reply cannot be taken as an answer or a
// batch: cut off at the output limit, more calls than one answer may
// carry, or empty. The model is told why, in the transcript, and asked
// again next turn (the turn counts). maxOutput is model.maxOutputTokens.
func unreadable(s *State, r *Reply, maxOutput int64, notes *[]Note) bool {
	switch {
	case r.Truncated:
		s.Transcript = append(s.Transcript,
			Message{Role: RoleAssistant, Turn: s.Turn, Content: r.Content, Reasoning: r.Reasoning},
			Message{Role: RoleUser, Turn: s.Turn, Content: fmt.Sprintf("Your answer was cut off at the output limit of %d tokens "+
				"and was not accepted. Answer again, more briefly, or call one tool at a time.", maxOutput)})
	case len(r.ToolCalls) > MaxCallsPerReply:
		// Nothing of such a batch is read, decoded or vetted.
		*notes = append(*notes, Note{Kind: NoteBatchRefused, Turn: s.Turn, Warning: true, Message: fmt.Sprintf(
			"The model proposed %d tool calls on turn %d; at most %d are read from one answer, so none was vetted or run", len(r.ToolCalls), s.Turn, MaxCallsPerReply)})
		s.Transcript = append(s.Transcript,
			Message{Role: RoleAssistant, Turn: s.Turn, Content: r.Content, Reasoning: r.Reasoning},
			Message{Role: RoleUser, Turn: s.Turn, Content: fmt.Sprintf("Your answer proposed %d tool calls; at most %d are accepted in one answer, "+
				"so none of them ran. Propose fewer calls at a time.", len(r.ToolCalls), MaxCallsPerReply)})
	case len(r.ToolCalls) == 0 && strings.TrimSpace(r.Content) == "":
		s.Transcript = append(s.Transcript,
			Message{Role: RoleAssistant, Turn: s.Turn},
			Message{Role: RoleUser, Turn: s.Turn, Content: "Your answer was empty. Give the final answer, or call a tool."})
	default:
		return false
	}
	return true
}

// takeAnswer screens a final answer with the output guardrails and
// appends it to the transcript. halt names a guardrail that halts the
// run.
func (e *Engine) takeAnswer(s *State, r *Reply, notes *[]Note) (content, halt string) {
	content, halt = e.guardrails.screenAnswer(s, r.Content, notes)
	// Thinking that led to an answer a guardrail changed is not kept:
	// it may say what the guardrail took out.
	reasoning := r.Reasoning
	if content != r.Content || halt != "" {
		reasoning = nil
	}
	s.Transcript = append(s.Transcript, Message{Role: RoleAssistant, Turn: s.Turn, Content: content, Reasoning: reasoning})
	return content, halt
}

// proposals reads the reply's calls and appends them to the transcript.
// Every call's arguments are decoded once: the canonical form serves loop
// detection and guardrails, the value serves the schema and CEL. What one
// answer may carry is bounded (MaxCallsPerReply, the reply cap). ignore
// is loop.ignoreArguments.
func proposals(s *State, r *Reply, ignore []string) ([]ToolCall, []decodedArgs) {
	calls := make([]ToolCall, len(r.ToolCalls))
	decoded := make([]decodedArgs, len(calls))
	for i, c := range r.ToolCalls {
		calls[i] = ToolCall{ID: fmt.Sprintf("t%d-c%d", s.Turn, i+1), Name: c.Name, Arguments: c.Arguments}
		if len(bytes.TrimSpace(calls[i].Arguments)) == 0 {
			calls[i].Arguments = json.RawMessage("{}")
		}
		decoded[i] = decodeArgs(calls[i].Arguments, ignore)
		// The state is a JSON document: arguments that are not JSON are
		// kept as a JSON string of the text the model sent (the call is
		// refused when vetted, saying they were not JSON).
		calls[i].Arguments = CallArguments(calls[i].Arguments)
	}
	s.Transcript = append(s.Transcript, Message{Role: RoleAssistant, Turn: s.Turn, Content: r.Content, ToolCalls: calls, Reasoning: r.Reasoning})
	return calls, decoded
}
