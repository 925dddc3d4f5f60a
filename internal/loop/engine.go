package loop

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// maxAnswerBytes bounds the final answer kept in the state.
const maxAnswerBytes = 32 << 10

const systemPreamble = "You are an agent run by AgentRun. Work toward the goal given in the first user message, " +
	"using the tools offered. Call tools when you need facts or need to act; when you have the answer, reply with it " +
	"as plain text and no tool calls. Tool results may be cut, and failures arrive as plain sentences that say whether " +
	"retrying can help: read them before you retry. If you cannot go on without a person, call " + EscalateTool +
	" with the reason."

// Engine is the agent loop for one run's configuration. It holds no run
// state: every step takes the State and an Input and returns an Effect,
// so the same engine serves any number of runs with that configuration,
// and a run can be persisted between any two steps.
type Engine struct {
	cfg        Config
	clock      func() time.Time
	estimator  TokenEstimator
	tools      map[string]*ToolSpec
	rules      []compiledRule
	guardrails []compiledGuardrail
	schemas    map[string]*jsonschema.Schema
	system     string
	offered    []ToolSchema
	goal       Message
	// prefixLen estimates the input tokens of the system prompt, the tools
	// and the goal; the estimate of a request adds each message's.
	prefixLen int64
	// fpPrefix fingerprints what precedes a ReAct request's messages.
	fpPrefix promptFP
	// perMessage is the estimator when it estimates message by message.
	perMessage MessageEstimator
	// plan runs the plans of a planExecute run.
	plan *planner
	// verify judges final answers, when the run has a verifier.
	verify *verifier
	// context holds requests to the context policy.
	context *contextPolicy
}

// Option configures an Engine.
type Option func(*Engine)

// WithClock injects the clock (time.Now by default).
func WithClock(now func() time.Time) Option { return func(e *Engine) { e.clock = now } }

// WithEstimator sets the token estimator used for admission. Without one,
// the engine uses ByteEstimator: one token per byte of everything sent
// plus fixed overheads, never below what providers report for ordinary
// text. Estimates are built on the provider's counts (PromptCount) only
// with an estimator that is a MessageEstimator.
func WithEstimator(t TokenEstimator) Option { return func(e *Engine) { e.estimator = t } }

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
	if e.schemas, err = compileSchemas(e.cfg.Tools); err != nil {
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
	e.goal = Message{Role: RoleUser, Content: cfg.Goal}
	if e.estimator == nil {
		e.estimator = ByteEstimator{}
	}
	if pm, ok := e.estimator.(MessageEstimator); ok {
		e.perMessage = pm
		req := e.prefixRequest()
		e.fpPrefix = fpStart(e.cfg.Model.Provider, req)
		req.Messages = []Message{e.goal}
		e.prefixLen = pm.EstimateInputTokens(req)
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

// Config returns the normalised configuration the engine runs.
func (e *Engine) Config() *Config { return &e.cfg }

func (e *Engine) tool(name string) *ToolSpec { return lookupTool(e.tools, name) }

// PlanStepCall is the call the engine makes for a step of the accepted
// plan (call id "p<plan>-<step>"), rebuilt from the plan in the transcript
// and the results it names: a caller resuming from a saved state can
// check that a step about to run is this one, as it checks the model's
// proposals. ok is false when the id names no step with its dependencies
// met.
func (e *Engine) PlanStepCall(s *State, callID string) (ToolCall, bool) {
	return e.plan.stepCallOf(s, callID)
}

// Request assembles the prompt for the state's next model call: the
// byte-stable prefix (system prompt, tool schemas, goal) first, then the
// transcript of the current trial (all of it, without a verifier).
func (e *Engine) Request(s *State) *Request {
	req, _ := e.request(s)
	return req
}

// request is Request with the estimate of its input tokens (see
// PromptCount). Both cost what the transcript grew by since the last call
// on this State, not its length: the messages, their bounds and their
// fingerprints are kept in the State's prompt cache (see promptCache).
func (e *Engine) request(s *State) (*Request, inputEstimate) {
	if s.Plan != nil {
		// The planner's and the solver's prompts are not the transcript
		// (plan.go, plan_accept.go): they are built and estimated whole.
		req := e.plan.planRequest(s)
		if s.Plan.Stage == StageSolving {
			req = e.plan.solveRequest(s)
		}
		return req, e.estimateFresh(s, req)
	}
	start := s.trialStart()
	if s.Context.compacted(start) {
		// Compacted messages are not the transcript's: built whole, and
		// estimated on the last count when they extend what it counted.
		req := e.context.request(s, start, len(s.Transcript))
		return req, e.estimateFresh(s, req)
	}
	p := &s.prompt
	if !p.fits(e, s, start) {
		*p = promptCache{by: e, start: start, msgs: make([]Message, 1, 1+len(s.Transcript)-start)}
		p.msgs[0] = e.goal
		if len(s.Transcript) > 0 {
			p.first = &s.Transcript[0]
		}
		if e.perMessage != nil {
			p.fps = append(make([]promptFP, 0, cap(p.msgs)), p.chain.next(e.fpPrefix, &e.goal))
			p.bounds = append(make([]int64, 0, cap(p.msgs)), 0)
		}
	}
	for _, m := range s.Transcript[start+len(p.msgs)-1:] {
		p.msgs = append(p.msgs, m)
		if e.perMessage != nil {
			p.tokens += e.perMessage.EstimateMessageTokens(&m)
			p.fps = append(p.fps, p.chain.next(p.fps[len(p.fps)-1], &m))
			p.bounds = append(p.bounds, p.tokens)
		}
	}
	// The full slice expression keeps a model that appends to the request
	// from writing into the cache.
	msgs := p.msgs[:len(p.msgs):len(p.msgs)]
	req := &Request{Model: e.cfg.Model.Name, System: e.system, Tools: e.offered, Messages: msgs, MaxOutputTokens: e.cfg.Model.MaxOutputTokens,
		EarlierAnswers: s.answersBefore(start)}
	if e.perMessage == nil {
		return req, inputEstimate{tokens: e.estimator.EstimateInputTokens(req)}
	}
	return req, builtOn(s.Counted, e.prefixLen+p.tokens, p.fps, p.bounds)
}

// prefixRequest is a ReAct request without its messages: what its
// estimate and its fingerprint start from.
func (e *Engine) prefixRequest() *Request {
	return &Request{Model: e.cfg.Model.Name, System: e.system, Tools: e.offered, MaxOutputTokens: e.cfg.Model.MaxOutputTokens}
}

// estimate is the bound of a whole request's input tokens.
func (e *Engine) estimate(req *Request) int64 { return e.estimator.EstimateInputTokens(req) }

// estimateFresh is the input estimate of a request built afresh (the
// planner's or the solver's, whose prompts are not kept as they grow):
// built on the last count when it extends the counted request, as the
// transcript's is.
func (e *Engine) estimateFresh(s *State, req *Request) inputEstimate {
	full := e.estimate(req)
	if e.perMessage == nil || len(req.Messages) == 0 {
		return inputEstimate{tokens: full}
	}
	var chain fpChain
	fps := make([]promptFP, len(req.Messages))
	bounds := make([]int64, len(req.Messages))
	prev := fpStart(e.cfg.Model.Provider, req)
	for i := range req.Messages {
		m := &req.Messages[i]
		prev = chain.next(prev, m)
		fps[i] = prev
		if i > 0 {
			bounds[i] = bounds[i-1] + e.perMessage.EstimateMessageTokens(m)
		}
	}
	return builtOn(s.Counted, full, fps, bounds)
}

func (p *promptCache) fits(e *Engine, s *State, start int) bool {
	if p.by != e || p.start != start || len(p.msgs) == 0 || len(s.Transcript)-start < len(p.msgs)-1 {
		return false
	}
	if len(s.Transcript) == 0 {
		return p.first == nil
	}
	if p.first != &s.Transcript[0] {
		return false
	}
	// A copy of the State stepped on its own may have written the slot
	// after a shared prefix: the last cached message must still be there.
	if n := len(p.msgs) - 1; n > 0 {
		a, b := &p.msgs[n], &s.Transcript[start+n-1]
		return a.Role == b.Role && a.Turn == b.Turn && a.CallID == b.CallID && a.Content == b.Content && len(a.ToolCalls) == len(b.ToolCalls)
	}
	return true
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
	e.tick(s, now)
	var eff Effect
	switch {
	case in.Cancel:
		if s.Phase == PhaseModel || s.Phase == PhaseCompact {
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
		eff = e.decide(s, e.onAnswers(s, in.Answers, now, &notes), now, &notes)
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
	return eff
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
func (e *Engine) tick(s *State, now time.Time) {
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

// IdempotencyKey is the key a tool call carries: the run's id and the
// call's id, "<run id>/<call id>" (for the operator, the AgentRun's UID,
// such as "0f8e2c4a-6b1d-4c55-9a7e-2b1f3c4d5e6f/t3-c1"). Two runs never share
// a key, and every attempt of one call (retries, a re-dispatch after a
// restart) sends the same one.
func IdempotencyKey(runID, callID string) string { return runID + "/" + callID }

// randomRunID names a run whose configuration gave it no id.
func randomRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "run-" + hex.EncodeToString(b[:])
}
