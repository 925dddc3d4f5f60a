package loop

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unique"
)

const systemPreamble = "You are an agent run by AgentRun. Work toward the goal given in the first user message, " +
	"using the tools offered. Call tools when you need facts or need to act; when you have the answer, reply with it " +
	"as plain text and no tool calls. Tool results may be cut, and failures arrive as plain sentences that say whether " +
	"retrying can help: read them before you retry. If you cannot go on without a person, call " + EscalateTool +
	" with the reason."

// New compiles a run's configuration: defaults applied, CEL conditions,
// guardrail patterns and tool parameter schemas compiled. An error names
// the field that is wrong.
func New(cfg Config, opts ...Option) (*Engine, error) {
	cfg = cfg.Normalize()
	if strings.TrimSpace(cfg.Goal) == "" {
		return nil, errors.New("goal is empty")
	}
	if cfg.Budget.MaxTurns < 1 {
		return nil, errors.New("budget.maxTurns must be at least 1")
	}
	if err := cfg.Loop.checkWindow(); err != nil {
		return nil, err
	}
	if s := cfg.Loop.Similarity; s < 0 || s > 1 {
		return nil, fmt.Errorf("loopDetection.similarity (%v) must be between 0 and 1", s)
	}
	if err := cfg.Context.check(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, clock: time.Now, tools: map[string]*ToolSpec{}}
	for _, o := range opts {
		o(e)
	}
	for i := range e.cfg.Tools {
		t := &e.cfg.Tools[i]
		if _, dup := e.tools[t.Name]; dup {
			return nil, fmt.Errorf("tool %q is declared twice", t.Name)
		}
		if t.Name == EscalateTool {
			return nil, fmt.Errorf("tool name %q is reserved for the harness", EscalateTool)
		}
		e.tools[t.Name] = t
		params := t.Parameters
		if len(bytes.TrimSpace(params)) == 0 {
			params = json.RawMessage(`{"type":"object"}`)
		}
		e.offered = append(e.offered, ToolSchema{Name: t.Name, Description: t.Description, Parameters: params})
	}
	e.offered = append(e.offered, ToolSchema{Name: EscalateTool,
		Description: "Hand the task to a person when you cannot finish it safely; this ends the run.", Parameters: escalateSchema})
	var err error
	if e.rules, err = compileRules(cfg.Policy); err != nil {
		return nil, err
	}
	e.vetContext = e.cfg.vetContext
	if !slices.ContainsFunc(e.rules, func(r compiledRule) bool { return r.prg != nil }) {
		e.vetContext = noVetDeadline
	}
	for _, r := range cfg.Policy.Rules {
		for _, n := range r.Tools {
			if n != "*" && e.tools[n] == nil {
				return nil, fmt.Errorf("a policy rule names tool %q, which is not declared", n)
			}
		}
	}
	if e.guardrails, err = compileGuardrails(cfg.Guardrails); err != nil {
		return nil, err
	}
	if e.schemas, err = e.shared.compile(e.cfg.Tools); err != nil {
		return nil, err
	}
	if e.output, err = newOutputSchema(&e.cfg); err != nil {
		return nil, err
	}
	if e.verify, err = newVerifier(&e.cfg, e.tools, e.vet, e.clock); err != nil {
		return nil, err
	}
	if e.verify != nil {
		offered := e.offered[:0]
		for _, t := range e.offered {
			if t.Name != e.verify.tool.Name {
				offered = append(offered, t)
			}
		}
		e.offered = offered
	}
	e.system = systemPreamble
	if s := strings.TrimSpace(cfg.Instructions); s != "" {
		e.system += "\n\n" + s
	}
	if e.output != nil {
		e.system += "\n\n" + outputInstructions + string(e.output.compact)
	}
	// Runs made from one manifest or template share one copy of it for
	// as long as any of them lives.
	e.system = unique.Make(e.system).Value()
	e.goal = Message{Role: RoleUser, Content: cfg.Goal}
	if cfg.FollowUp {
		e.goal.Content = followUpOpening
	}
	if e.estimator == nil {
		e.estimator = ByteEstimator{}
	}
	e.models = append([]ModelConfig{e.cfg.Model}, e.cfg.Fallbacks...)
	if pm, ok := e.estimator.(MessageEstimator); ok {
		e.perMessage = pm
		// A ReAct request without its messages, for each model: what its
		// estimate and its fingerprint start from.
		e.prefixes = make([]requestPrefix, len(e.models))
		for i, m := range e.models {
			req := &Request{Model: m.Name, System: e.system, Tools: e.offered, MaxOutputTokens: m.MaxOutputTokens, Output: e.outputSchema()}
			e.prefixes[i].fp = fpStart(m.Provider, req)
			req.Messages = []Message{e.goal}
			e.prefixes[i].tokens = pm.EstimateInputTokens(req)
		}
	}
	e.context = newContextPolicy(&e.cfg, e.goal, e.system, e.offered, e.estimator, e.request, e.estimateFresh)
	if e.plan, err = newPlanner(&e.cfg, e.goal, e.offered, e.tools, e.guardrails, e.estimator, e.vetContext, e.vetCall); err != nil {
		return nil, err
	}
	return e, nil
}

// VerifierCall is the call the engine makes to judge the current trial,
// rebuilt from the final answer in the transcript (the turn's last
// message from the model): a caller resuming from a saved state can check
// that the verifier call it is about to run is this one, as it checks the
// model's proposals. ok is false without a verifier or a final answer.
func (e *Engine) VerifierCall(s *State) (ToolCall, bool) {
	if e.verify == nil {
		return ToolCall{}, false
	}
	return e.verify.call(s)
}

// PlanStepCall is the call the engine makes for a step of the accepted
// plan (call id "p<plan>-<step>"), rebuilt from the plan in the transcript
// and the results it names: a caller resuming from a saved state can
// check that a step about to run is this one, as it checks the model's
// proposals. ok is false when the id names no step with its dependencies
// met.
func (e *Engine) PlanStepCall(s *State, callID string) (ToolCall, bool) {
	return e.plan.stepCallOf(s, callID)
}

// Step advances the run by one phase: it applies the input to the state
// and says what the caller must do next. Starting a run is stepping the
// zero State; resuming is stepping a reloaded one: there is one code path.
func (e *Engine) Step(s *State, in Input) Effect {
	now := e.clock()
	switch {
	case e.cfg.RunID != "":
		// The configured id (the run's UID) wins over a saved one: the
		// run's identity, in its idempotency keys, is never read from
		// stored state.
		s.RunID = e.cfg.RunID
	case s.RunID == "":
		s.RunID = randomRunID()
	}
	notes := e.staleAnswers(s, in.Answers)
	if s.Done() {
		return Effect{Kind: EffectFinish, Notes: notes}
	}
	if s.Model != e.active {
		if s.Model < 0 || s.Model >= len(e.models) {
			e.finish(s, Error, fmt.Sprintf("the run's state names model %d, and the run has %d", s.Model, len(e.models)), &notes)
			return Effect{Kind: EffectFinish, Notes: notes}
		}
		e.cfg.Model, e.active = e.models[s.Model], s.Model
	}
	s.tick(now)
	var eff Effect
	switch {
	case in.Cancel:
		if s.Phase.CallsModel() {
			switch {
			case in.Reply != nil:
				// Charged in full; a usage far above the reservation
				// is noted, and the run ends as cancelled all the same.
				e.settleReply(s, in.Reply, &notes)
			case s.RetryAt != nil:
				// Waiting out a retry's backoff: no call is in flight.
			default:
				// Stopped or failed mid-call: what it spent is unknown.
				e.abandonModelCall(s, &notes)
			}
		}
		if s.Phase == PhaseAct && len(in.Results) > 0 {
			if n := e.applyResults(s, in.Results, now, &notes); n.ends() {
				e.decide(s, n, now, &notes)
			}
		}
		// Calls still dispatched have no result, and none will come.
		e.abandonCalls(s, &notes)
		reason := in.CancelReason
		if reason == "" {
			reason = "the run was cancelled (spec.cancel is true)"
		}
		e.finish(s, ApprovalDenied, reason, &notes)
		eff = Effect{Kind: EffectFinish}
	case s.Phase == PhaseAdmit:
		eff = e.decide(s, e.admitTurn(s, now, &notes), now, &notes)
	case s.Phase == PhaseModel:
		switch {
		case in.ModelErr != nil:
			eff = e.decide(s, e.onModelError(s, in.ModelErr, now, &notes), now, &notes)
		case in.Reply != nil:
			eff = e.decide(s, e.onReply(in.context(), s, in.Reply, now, &notes), now, &notes)
		case s.RetryAt != nil:
			// A retry's backoff: wait for it, then call again.
			if w := retryWait(s, now); w != nil {
				eff = *w
			} else {
				eff = Effect{Kind: EffectCallModel, Request: e.Request(s)}
			}
		default:
			// The reply was lost (a crash while the call was in flight):
			// charge what was reserved, then call again in the same turn.
			e.chargeLostModelCall(s)
			notes = append(notes, Note{Kind: NoteModelLost, Warning: true,
				Message: fmt.Sprintf("The model call of turn %d was lost (a restart); its reservation is charged and the call is made again", s.Turn)})
			prev := s.Attempt
			s.Turn--
			s.Phase = PhaseAdmit
			eff = e.decide(s, e.admitTurn(s, now, &notes), now, &notes)
			if eff.Kind == EffectCallModel {
				s.Attempt = prev + 1
			}
		}
	case s.Phase == PhaseCompact:
		eff = e.decide(s, e.onSummary(s, in, &notes), now, &notes)
	case s.Phase == PhasePlanWave:
		eff = e.decide(s, e.plan.startWave(in.context(), s, now, &notes), now, &notes)
	case s.Phase == PhaseApproval:
		eff = e.decide(s, e.onAnswers(in.context(), s, &in, now, &notes), now, &notes)
	case s.Phase == PhaseAct:
		if len(in.Results) == 0 {
			eff = e.decide(s, e.onLostResults(s, now, &notes), now, &notes)
		} else {
			n := e.applyResults(s, in.Results, now, &notes)
			if e.verify != nil {
				e.verify.takeVerdict(s, in.Results, &n)
			}
			if !n.ends() {
				n = e.dispatchNext(s, now, &notes)
			}
			eff = e.decide(s, n, now, &notes)
		}
	default:
		e.finish(s, Error, fmt.Sprintf("the run's state has an unknown phase %q", s.Phase), &notes)
		eff = Effect{Kind: EffectFinish}
	}
	if s.Done() {
		eff = Effect{Kind: EffectFinish}
	}
	notes = append(notes, e.softWarnings(s)...)
	eff.Notes = notes
	if eff.Kind == EffectCallModel && eff.Request != nil {
		eff.Request.Fallback, eff.Request.Attempt = s.Model, s.Attempt
	}
	return eff
}

// admitTurn is step 0 of a turn (seed 000): the next request is
// assembled and held to the context policy (which may compact, or end the
// run when nothing more fits), then the model call's exposure is admitted
// against every hard ceiling before anything is paid.
func (e *Engine) admitTurn(s *State, now time.Time, notes *[]Note) next {
	if s.StartedAt == nil {
		t := now
		s.StartedAt, s.ActiveSince = &t, t
		if n := e.cfg.undeclaredToolCosts(); n != nil {
			*notes = append(*notes, *n)
		}
	}
	s.Calls = nil
	if e.cfg.Strategy == PlanExecute && s.Plan == nil {
		s.Plan = &Plan{Number: 1}
	}
	var (
		req   *Request
		est   inputEstimate
		res   Usage
		tried []string
	)
	for {
		req, est = e.request(s)
		if e.context.on(s) {
			var instead *next
			if req, est, instead = e.context.fit(s, req, est, notes); instead != nil {
				return *instead
			}
		}
		res = e.cfg.modelReservation(est.tokens)
		rej := Admit(&e.cfg.Budget, s.Usage, res)
		if rej == nil {
			break
		}
		tried = append(tried, e.cfg.Model.Name+" ("+rej.Reason+")")
		// With model.routeOnBudget, a request that does not fit the cost
		// or token ceiling goes to the next of the run's later models
		// (the others reserve the same turns and wall clock whatever the
		// model): built, fitted and admitted again as that model's.
		if !e.cfg.RouteOnBudget || !routable(rej.Dimension) || s.Model+1 >= len(e.models) {
			return refusal(s.withLastRejection(unrouted(rej, e.cfg.Model.Name, tried, e.models[s.Model+1:], e.cfg.RouteOnBudget)))
		}
		from := e.cfg.Model.Name
		s.Model++
		e.cfg.Model, e.active = e.models[s.Model], s.Model
		*notes = append(*notes, Note{Kind: NoteModelRouted, Turn: s.Turn + 1, Warning: true, Message: fmt.Sprintf(
			"Model %s's next request does not fit the %s ceiling (model.routeOnBudget); turn %d goes to fallback %d of %d, model %s",
			from, rej.Dimension, s.Turn+1, s.Model, len(e.models)-1, e.cfg.Model.Name)})
	}
	s.Turn++
	s.Attempt = 1
	s.Reserved = res
	s.InFlight = est.sent
	s.Phase = PhaseModel
	var buf [96]byte
	msg := text(buf[:0]).s("Turn ").n(int64(s.Turn)).s(" started: reserved ").n(res.Tokens()).
		s(" tokens, $").usd(res.Cost).s(" and ").n(ceilSeconds(res.WallClock)).s("s")
	*notes = append(*notes, Note{Kind: NoteTurnStarted, Turn: s.Turn, Message: string(msg)})
	return proceed(Effect{Kind: EffectCallModel, Request: req})
}

// onReply takes a model's reply. The order of the checks is the seed's
// (seed 000: ordering the stop conditions):
//
//  1. the reply is charged; a usage far above its reservation ends the
//     run Error, and nothing of the reply is read;
//  2. a refusal ends the run GuardrailStop;
//  3. a reply that cannot be read (cut off, too many calls, empty) ends
//     the turn;
//  4. a final answer: an output guardrail that halts (GuardrailStop),
//     then the solver's verdict on its evidence (a replan), then the
//     verifier, else the run is Completed;
//  5. proposed calls: loop detection first, so a stuck run is named
//     LoopDetected before any ceiling can call it BudgetExhausted; then
//     the tool-call ceiling, before any call is vetted; then the plan, or
//     vetting.
func (e *Engine) onReply(ctx context.Context, s *State, r *Reply, now time.Time, notes *[]Note) next {
	if stop := e.chargeReply(s, r, notes); stop != "" {
		return finishWith(Error, stop)
	}
	if r.Refusal != "" {
		return finishWith(GuardrailStop, "the model refused: "+cut(strings.TrimSpace(r.Refusal), 400))
	}
	if unreadable(s, r, e.cfg.Model.MaxOutputTokens, notes) {
		return turnOver()
	}
	solving := s.Plan != nil && s.Plan.Stage == StageSolving
	if len(r.ToolCalls) == 0 {
		content, halt := e.takeAnswer(s, r, notes)
		if halt != "" {
			return finishWith(GuardrailStop, fmt.Sprintf("guardrail %s halted the run: it matched the final answer of turn %d", halt, s.Turn))
		}
		if solving {
			if missing, ok := solverAnswer(content); !ok {
				return e.plan.replan(s, "", "ran, but the solver found its evidence not enough: "+cut(missing, 400), Escalated, nil, notes)
			}
		}
		if e.output != nil {
			out, why := e.output.check(content)
			if why != "" {
				return e.output.reject(s, why, notes)
			}
			s.Output, s.OutputRejected = out, nil
		}
		s.Answer = cut(content, maxAnswerBytes)
		if e.verify != nil {
			return e.verify.propose(ctx, s, notes)
		}
		reason := fmt.Sprintf("the model gave a final answer on turn %d", s.Turn)
		if solving {
			reason += fmt.Sprintf(" (the solver, from the evidence of plan %d)", s.Plan.Number)
		}
		return finishWith(Completed, reason)
	}
	calls, decoded := proposals(s, r, e.cfg.Loop.IgnoreArguments)
	// A planner's answer is a plan, not calls to repeat: it is checked as
	// a plan.
	if s.Plan == nil {
		for i, c := range calls {
			if d := s.recordSignature(e.cfg.Loop, sigEntry(signature(c.Name, decoded[i].canon, c.Arguments))); d != nil {
				return finishWith(LoopDetected, d.reason(e.cfg.Loop))
			}
			if why := s.recordNear(e.cfg.Loop, c.Name, decoded[i].canon); why != "" {
				return finishWith(LoopDetected, why)
			}
		}
	}
	// A batch that could not be admitted whatever its verdicts ends the
	// run before any of it is vetted: vetting costs the operator work
	// (schemas, CEL, guardrails) for each call.
	if rej := admitProposals(&e.cfg.Budget, s.Usage, len(r.ToolCalls)); rej != nil {
		return refusal(rej)
	}
	if s.Plan != nil {
		return e.plan.onPlanCalls(ctx, s, calls, decoded, now, notes)
	}
	return e.vetBatch(ctx, s, calls, decoded, now, notes)
}

// Revet vets again the calls of a batch that waits for people, under the
// engine's configuration as it is now, and keeps for each call the
// stricter of the saved verdict and the new one. A caller that resumes a
// run from storage calls it, so that a verdict read back counts only as
// far as vetting agrees with it now: after a platform policy or guardrail
// changed, a call it now denies or blocks does not run, a call it now
// asks about waits for a person (an answer given before stands only for a
// call that was asked about before), and a guardrail that now halts ends
// the run before any call of the batch runs.
//
// Only a batch in PhaseApproval is vetted again: nothing of it has run.
// In any other phase Revet changes nothing.
func (e *Engine) Revet(ctx context.Context, s *State, now time.Time) []Note {
	notes, n := e.revet(ctx, s, now)
	if n.ends() {
		e.decide(s, n, now, &notes)
	}
	return notes
}

// Refuse ends the run BudgetExhausted in place of the work the last step
// asked for (eff, not started): a limit outside the run, such as a shared
// tenant budget, does not cover the step's reservation. It is the same end
// as a refusal by the run's own ceilings: nothing of the step is spent, the
// reservation is dropped, and a turn that was only admitted is not
// counted. reason names the limit and its arithmetic.
func (e *Engine) Refuse(s *State, eff Effect, reason string) Effect {
	if s.Done() {
		return Effect{Kind: EffectFinish}
	}
	if eff.Kind == EffectCallModel && s.Phase == PhaseModel && s.Attempt == 1 && s.RetryAt == nil {
		s.Turn-- // admitted, never called
	}
	var notes []Note
	e.finish(s, BudgetExhausted, reason, &notes)
	return Effect{Kind: EffectFinish, Notes: notes}
}

// Abort ends a run from outside the turn contract (a tool that is not
// available at start, a defect found by the caller) with the given
// outcome and reason.
func (e *Engine) Abort(s *State, o Outcome, reason string) Effect {
	var notes []Note
	if !s.Done() {
		e.finish(s, o, reason, &notes)
	}
	return Effect{Kind: EffectFinish, Notes: notes}
}

// tick adds the time worked since the last step to the wall clock. Time
// spent waiting for a person is not work.
func (s *State) tick(now time.Time) {
	if s.ActiveSince.IsZero() || s.Phase == PhaseApproval {
		return
	}
	if d := now.Sub(s.ActiveSince); d > 0 {
		s.Usage.WallClock += d
	}
	s.ActiveSince = now
}

// decide carries out what a stage returned: only here, in engine.go, does
// a turn or a run end.
func (e *Engine) decide(s *State, n next, now time.Time, notes *[]Note) Effect {
	for {
		switch n.kind {
		case nextAdmit:
			n = e.admitTurn(s, now, notes)
		case nextAct:
			n = e.startActing(s, notes)
		case nextObserved:
			n = e.observed(s, notes)
		case nextFinish:
			e.finish(s, n.outcome, n.reason, notes)
			refusedBy(*notes, n.refused)
			return Effect{Kind: EffectFinish}
		case nextEndTurn:
			return e.endTurn(s)
		default:
			return n.eff
		}
	}
}

// observed goes on once every call of the batch has its result: the
// verifier's call ends a trial, a plan's steps end a wave, and anything
// else is observed by the model, in proposal order, on the next turn.
func (e *Engine) observed(s *State, notes *[]Note) next {
	if c := s.verifierCall(); c != nil && e.verify != nil {
		return e.verify.judge(s, c, notes)
	}
	if s.Plan != nil && s.Plan.Stage == StageExecuting {
		return e.plan.waveDone(s, notes)
	}
	appendObservations(s)
	return turnOver()
}

func (e *Engine) finish(s *State, o Outcome, reason string, notes *[]Note) {
	s.Phase = PhaseDone
	s.Outcome = o
	s.Reason = reason
	s.Reserved = Usage{}
	*notes = append(*notes, Note{Kind: NoteFinished, Warning: o != Completed, Message: string(o) + ": " + reason})
}

func (e *Engine) endTurn(s *State) Effect {
	s.Phase = PhaseAdmit
	s.Reserved = Usage{}
	return Effect{Kind: EffectContinue}
}

// randomRunID names a run whose configuration gave it no id.
func randomRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "run-" + hex.EncodeToString(b[:])
}
