package loop

import (
	"bytes"
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
	prefixLen  int64
	// The planner's and the solver's prompts of a planExecute run.
	planSystem, solveSystem       string
	planOffered                   []ToolSchema
	planPrefixLen, solvePrefixLen int64
}

// Option configures an Engine.
type Option func(*Engine)

// WithClock injects the clock (time.Now by default).
func WithClock(now func() time.Time) Option { return func(e *Engine) { e.clock = now } }

// WithEstimator sets the token estimator used for admission. Without one,
// the engine counts one token per byte of everything sent plus a small
// overhead per message, which is never below what providers report for
// ordinary text.
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
	if err := e.compileVerify(); err != nil {
		return nil, err
	}
	e.system = systemPreamble
	if s := strings.TrimSpace(cfg.Instructions); s != "" {
		e.system += "\n\n" + s
	}
	e.goal = Message{Role: RoleUser, Content: cfg.Goal}
	e.prefixLen = int64(len(e.system) + len(e.goal.Content))
	for _, t := range e.offered {
		e.prefixLen += int64(len(t.Name)+len(t.Description)+len(t.Parameters)) + perMessageTokenOverhead
	}
	if err := e.compilePlan(); err != nil {
		return nil, err
	}
	return e, nil
}

// Config returns the normalised configuration the engine runs.
func (e *Engine) Config() *Config { return &e.cfg }

func (e *Engine) tool(name string) *ToolSpec {
	if t := e.tools[name]; t != nil {
		return t
	}
	return &ToolSpec{Name: name}
}

// Request assembles the prompt for the state's next model call: the
// byte-stable prefix (system prompt, tool schemas, goal) first, then the
// transcript of the current trial (all of it, without a verifier).
func (e *Engine) Request(s *State) *Request {
	if s.Plan != nil {
		if s.Plan.Stage == StageSolving {
			return e.solveRequest(s)
		}
		return e.planRequest(s)
	}
	start := s.trialStart()
	msgs := make([]Message, 0, 1+len(s.Transcript)-start)
	msgs = append(msgs, e.goal)
	msgs = append(msgs, s.Transcript[start:]...)
	return &Request{Model: e.cfg.Model.Name, System: e.system, Tools: e.offered, Messages: msgs, MaxOutputTokens: e.cfg.Model.MaxOutputTokens,
		EarlierAnswers: s.answersBefore(start)}
}

func (e *Engine) estimate(req *Request) int64 {
	if e.estimator != nil {
		return e.estimator.EstimateInputTokens(req)
	}
	n := e.prefixLen
	switch req.System {
	case e.planSystem:
		n = e.planPrefixLen
	case e.solveSystem:
		n = e.solvePrefixLen
	}
	for i := 1; i < len(req.Messages); i++ {
		m := &req.Messages[i]
		n += int64(len(m.Content)) + perMessageTokenOverhead
		for _, c := range m.ToolCalls {
			n += int64(len(c.Name)+len(c.Arguments)) + perMessageTokenOverhead
		}
	}
	return n
}

// Step advances the run by one phase: it applies the input to the state
// and says what the caller must do next. Starting a run is stepping the
// zero State; resuming is stepping a reloaded one: there is one code path.
func (e *Engine) Step(s *State, in Input) Effect {
	now := e.clock()
	if s.RunID == "" {
		s.RunID = e.cfg.RunID
		if s.RunID == "" {
			s.RunID = randomRunID()
		}
	}
	notes := e.staleAnswers(s, in.Answers)
	if s.Done() {
		return Effect{Kind: EffectFinish, Notes: notes}
	}
	e.tick(s, now)
	var eff Effect
	switch {
	case in.Cancel:
		if s.Phase == PhaseModel {
			switch {
			case in.Reply != nil:
				e.settleReply(s, in.Reply)
			case s.RetryAt != nil:
				// Waiting out a retry's backoff: no call is in flight.
			default:
				// Stopped or failed mid-call: what it spent is unknown.
				e.chargeLostModelCall(s)
			}
		}
		if s.Phase == PhaseAct && len(in.Results) > 0 {
			e.applyResults(s, in.Results, now, &notes)
		}
		reason := in.CancelReason
		if reason == "" {
			reason = "the run was cancelled (spec.cancel is true)"
		}
		e.finish(s, ApprovalDenied, reason, &notes)
		eff = Effect{Kind: EffectFinish}
	case s.Phase == PhaseAdmit:
		eff = e.admitTurn(s, now, &notes)
	case s.Phase == PhaseModel:
		switch {
		case in.ModelErr != nil:
			eff = e.onModelError(s, in.ModelErr, now, &notes)
		case in.Reply != nil:
			eff = e.onReply(in.context(), s, in.Reply, now, &notes)
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
			eff = e.admitTurn(s, now, &notes)
			if eff.Kind == EffectCallModel {
				s.Attempt = prev + 1
			}
		}
	case s.Phase == PhasePlanWave:
		eff = e.startWave(in.context(), s, now, &notes)
	case s.Phase == PhaseApproval:
		eff = e.onAnswers(s, in.Answers, now, &notes)
	case s.Phase == PhaseAct:
		if len(in.Results) == 0 {
			eff = e.onLostResults(s, now, &notes)
		} else {
			e.applyResults(s, in.Results, now, &notes)
			e.takeVerdict(s, in.Results, &notes)
			if !s.Done() {
				eff = e.dispatchNext(s, now, &notes)
			}
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
