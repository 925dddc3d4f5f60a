package loop

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
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

func (e *Engine) admitTurn(s *State, now time.Time, notes *[]Note) Effect {
	if s.StartedAt == nil {
		t := now
		s.StartedAt, s.ActiveSince = &t, t
	}
	s.Calls = nil
	req := e.Request(s)
	res := e.modelReservation(e.estimate(req))
	if rej := Admit(&e.cfg.Budget, s.Usage, res); rej != nil {
		e.finish(s, BudgetExhausted, rej.Reason, notes)
		refusedBy(*notes, rej)
		return Effect{Kind: EffectFinish}
	}
	s.Turn++
	s.Attempt = 1
	s.Reserved = res
	s.Phase = PhaseModel
	*notes = append(*notes, Note{Kind: NoteTurnStarted, Message: fmt.Sprintf(
		"Turn %d started: reserved %d tokens, $%s and %ds", s.Turn, res.Tokens(), res.Cost, ceilSeconds(res.WallClock))})
	return Effect{Kind: EffectCallModel, Request: req}
}

func (e *Engine) chargeLostModelCall(s *State) {
	r := s.Reserved
	s.Usage.Turns += r.Turns
	s.Usage.InputTokens += r.InputTokens
	s.Usage.OutputTokens += r.OutputTokens
	s.Usage.Cost += r.Cost - e.cfg.ToolAllowance.Cost
	s.Reserved = Usage{}
}

// settleReply replaces the model call's reservation by what the provider
// reported, keeping the per-turn tool allowance reserved. It returns the
// call's cost.
func (e *Engine) settleReply(s *State, r *Reply) Money {
	cost := e.modelCost(r.Usage)
	s.Usage.Turns++
	s.Usage.InputTokens += r.Usage.InputTokens
	s.Usage.OutputTokens += r.Usage.OutputTokens
	s.Usage.CachedInputTokens += r.Usage.CachedInputTokens
	s.Usage.Cost += cost
	a := e.cfg.ToolAllowance
	s.Reserved = Usage{ToolCalls: a.Calls, Cost: a.Cost, WallClock: a.WallClock}
	return cost
}

func (e *Engine) onReply(ctx context.Context, s *State, r *Reply, now time.Time, notes *[]Note) Effect {
	cost := e.settleReply(s, r)
	what := "a final answer"
	switch {
	case r.Refusal != "":
		what = "a refusal"
	case r.Truncated:
		what = "a truncated answer"
	case len(r.ToolCalls) > 0:
		what = fmt.Sprintf("%d tool call(s)", len(r.ToolCalls))
	}
	*notes = append(*notes, Note{Kind: NoteModelAnswered, Message: fmt.Sprintf("Model answered turn %d with %s (%d input, %d output tokens, $%s)",
		s.Turn, what, r.Usage.InputTokens, r.Usage.OutputTokens, cost)})

	switch {
	case r.Refusal != "":
		e.finish(s, GuardrailStop, "the model refused: "+cut(strings.TrimSpace(r.Refusal), 400), notes)
		return Effect{Kind: EffectFinish}
	case r.Truncated:
		s.Transcript = append(s.Transcript,
			Message{Role: RoleAssistant, Turn: s.Turn, Content: r.Content},
			Message{Role: RoleUser, Turn: s.Turn, Content: fmt.Sprintf("Your answer was cut off at the output limit of %d tokens "+
				"and was not accepted. Answer again, more briefly, or call one tool at a time.", e.cfg.Model.MaxOutputTokens)})
		return e.endTurn(s)
	case len(r.ToolCalls) == 0 && strings.TrimSpace(r.Content) == "":
		s.Transcript = append(s.Transcript,
			Message{Role: RoleAssistant, Turn: s.Turn},
			Message{Role: RoleUser, Turn: s.Turn, Content: "Your answer was empty. Give the final answer, or call a tool."})
		return e.endTurn(s)
	case len(r.ToolCalls) == 0:
		s.Transcript = append(s.Transcript, Message{Role: RoleAssistant, Turn: s.Turn, Content: r.Content})
		s.Answer = cut(r.Content, maxAnswerBytes)
		if e.cfg.Verify != nil {
			return e.verifyAnswer(s, notes)
		}
		e.finish(s, Completed, fmt.Sprintf("the model gave a final answer on turn %d", s.Turn), notes)
		return Effect{Kind: EffectFinish}
	}

	// Decode every call's arguments once: the canonical form serves loop
	// detection and guardrails, the value serves the schema and CEL.
	calls := make([]ToolCall, len(r.ToolCalls))
	decoded := make([]decodedArgs, len(calls))
	for i, c := range r.ToolCalls {
		calls[i] = ToolCall{ID: fmt.Sprintf("t%d-c%d", s.Turn, i+1), Name: c.Name, Arguments: c.Arguments}
		if len(bytes.TrimSpace(calls[i].Arguments)) == 0 {
			calls[i].Arguments = json.RawMessage("{}")
		}
		decoded[i] = decodeArgs(calls[i].Arguments, e.cfg.Loop.IgnoreArguments)
		// The state is a JSON document: arguments that are not JSON are
		// kept as a JSON string of the text the model sent (the call is
		// refused below, saying they were not JSON).
		calls[i].Arguments = CallArguments(calls[i].Arguments)
	}
	s.Transcript = append(s.Transcript, Message{Role: RoleAssistant, Turn: s.Turn, Content: r.Content, ToolCalls: calls})

	// Loop detection names a stuck run before anything else can stop it.
	for i, c := range calls {
		if d := s.observeSignature(e.cfg.Loop, sigEntry(signature(c.Name, decoded[i].canon, c.Arguments))); d != nil {
			e.finish(s, LoopDetected, d.reason(e.cfg.Loop), notes)
			return Effect{Kind: EffectFinish}
		}
	}

	// Vet the whole batch before anything runs.
	batch := make([]Call, len(calls))
	asks := 0
	for i, c := range calls {
		bc := &batch[i]
		bc.ToolCall, bc.State = c, CallProposed
		if c.Name == EscalateTool {
			e.finish(s, Escalated, "the model handed the task to a person: "+escalationReason(c.Arguments), notes)
			return Effect{Kind: EffectFinish}
		}
		tool := e.tools[c.Name]
		if tool == nil {
			e.refuse(bc, "unknown-tool", fmt.Sprintf("no tool is named %q", c.Name),
				fmt.Sprintf("There is no tool named %q. The tools are: %s.", c.Name, e.toolNames()), notes)
			continue
		}
		bc.Mutates = tool.Mutates
		args, err := decoded[i].value, decoded[i].err
		if err != nil {
			e.refuse(bc, "invalid-arguments", fmt.Sprintf("the arguments were refused: %v", err),
				fmt.Sprintf("The arguments of %s were refused: %v. Send a JSON object that matches its parameters.", c.Name, err), notes)
			continue
		}
		if sch := e.schemas[c.Name]; sch != nil {
			if err := sch.Validate(args); err != nil {
				why := schemaError(err)
				e.refuse(bc, "invalid-arguments", "the arguments do not match its parameters: "+why,
					fmt.Sprintf("The arguments of %s do not match its parameters: %s. Fix them and call again.", c.Name, why), notes)
				continue
			}
		}
		v := e.vet(ctx, tool, c.Name, decoded[i].full, args)
		bc.Rule, bc.Reason = v.rule, v.reason
		switch {
		case v.halt:
			e.finish(s, GuardrailStop, fmt.Sprintf("guardrail %s halted the run at call %s (%s) before any call of the batch ran: %s",
				strings.TrimPrefix(v.rule, "guardrail:"), c.ID, c.Name, v.reason), notes)
			return Effect{Kind: EffectFinish}
		case v.block:
			e.reject(bc, Deny, v.rule, ObsBlocked, fmt.Sprintf("Blocked by guardrail %s: %s. This call will not run; change the arguments or take another route.",
				strings.TrimPrefix(v.rule, "guardrail:"), v.reason))
			bc.Verdict, bc.Reason = "block", v.reason
		case v.decision == Deny:
			e.reject(bc, Deny, v.rule, ObsDenied, fmt.Sprintf("Denied by policy (%s)%s. This call will not run; choose another route.", v.rule, suffix(v.reason)))
			bc.Reason = v.reason
		case v.decision == Ask:
			bc.Verdict = Ask
			t := now
			bc.RequestedAt = &t
			asks++
		default:
			bc.Verdict = Allow
		}
		*notes = append(*notes, vettedNote(bc))
	}
	s.Calls = batch
	if asks > 0 {
		s.Phase = PhaseApproval
		return Effect{Kind: EffectAsk, Pending: s.PendingCalls()}
	}
	return e.startActing(s, notes)
}

// CallArguments returns a tool call's arguments as a JSON value that the
// engine, the state and both provider APIs accept: "{}" when empty, the
// text itself when it is valid JSON, and otherwise the text as a JSON
// string (a model can emit broken JSON; keeping it as a string lets the
// engine refuse it as an invalid call instead of failing to record it).
func CallArguments(raw []byte) json.RawMessage {
	trimmed := bytes.TrimSpace(raw)
	switch {
	case len(trimmed) == 0:
		return json.RawMessage("{}")
	case json.Valid(trimmed):
		return json.RawMessage(trimmed)
	}
	q, _ := json.Marshal(string(raw))
	return q
}

func (e *Engine) reject(c *Call, v Decision, rule, status, obs string) {
	c.Verdict, c.Rule, c.State, c.ObsStatus, c.Observation = v, rule, CallDone, status, obs
}

// refuse denies a call that cannot be vetted at all (an unknown tool,
// arguments that are not an object or break the tool's schema). Such a
// refusal is noted like any other verdict, so a person sees it where
// denials and approvals are (an event, a line of the local stream), not
// only in the transcript.
func (e *Engine) refuse(c *Call, rule, reason, obs string, notes *[]Note) {
	e.reject(c, Deny, rule, ObsInvalid, obs)
	c.Reason = reason
	*notes = append(*notes, vettedNote(c))
}

// vettedNote records a call's verdict; anything but allow is a warning.
func vettedNote(c *Call) Note {
	return Note{Kind: NoteCallVetted, CallID: c.ID, Warning: c.Verdict != Allow,
		Message: fmt.Sprintf("%s %s: %s (%s)%s", c.ID, c.Name, c.Verdict, c.Rule, suffix(c.Reason))}
}

func (e *Engine) toolNames() string {
	names := make([]string, 0, len(e.offered))
	for _, t := range e.offered {
		names = append(names, t.Name)
	}
	return strings.Join(names, ", ")
}

func escalationReason(args json.RawMessage) string {
	var a struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(args, &a)
	if strings.TrimSpace(a.Reason) == "" {
		return "no reason given"
	}
	return cut(strings.TrimSpace(a.Reason), 400)
}

type decodedArgs struct {
	// canon is the canonical form without the ignored argument names, for
	// loop detection; nil when the arguments are not JSON.
	canon []byte
	// full is the canonical form with every argument, for guardrails.
	full []byte
	// value is the decoded object, for the schema and policy conditions;
	// nil when err is set.
	value any
	err   error
}

// decodeArgs parses a call's arguments once. Arguments that are not a JSON
// object, or that hold a number beyond 1e±maxArgumentExponent, are refused
// (err set); their canonical form still serves loop detection.
func decodeArgs(raw json.RawMessage, ignore []string) decodedArgs {
	v, err := decodeJSON(raw)
	if err != nil {
		return decodedArgs{err: err}
	}
	c := canonicalOf(v, ignore, len(raw))
	if c.err != nil {
		return decodedArgs{err: c.err}
	}
	d := decodedArgs{canon: c.buf.Bytes(), full: c.buf.Bytes()}
	if len(ignore) > 0 {
		d.full = canonicalOf(v, nil, len(raw)).buf.Bytes()
	}
	_, isObject := v.(map[string]any)
	switch {
	case !isObject:
		d.err = errors.New("they are not a JSON object")
	case c.outOfRange != "":
		d.err = fmt.Errorf("the number %s is out of range: numbers must lie between 1e-%d and 1e%d", cut(c.outOfRange, 40), maxArgumentExponent, maxArgumentExponent)
	default:
		d.value = v
	}
	return d
}

var englishPrinter = message.NewPrinter(language.English)

func schemaError(err error) string {
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		var leaves []string
		var walk func(*jsonschema.ValidationError)
		walk = func(v *jsonschema.ValidationError) {
			if len(v.Causes) == 0 {
				loc := "/" + strings.Join(v.InstanceLocation, "/")
				leaves = append(leaves, fmt.Sprintf("at %s: %s", loc, v.ErrorKind.LocalizedString(englishPrinter)))
			}
			for _, c := range v.Causes {
				walk(c)
			}
		}
		walk(ve)
		if len(leaves) > 0 {
			return cut(strings.Join(leaves, "; "), 400)
		}
	}
	return cut(err.Error(), 400)
}

// PendingCalls returns the calls waiting for a person.
func (s *State) PendingCalls() []Call {
	var out []Call
	for _, c := range s.Calls {
		if c.Verdict == Ask && c.Answer == "" && c.State == CallProposed {
			out = append(out, c)
		}
	}
	return out
}

func (e *Engine) onAnswers(s *State, answers map[string]Answer, now time.Time, notes *[]Note) Effect {
	waiting := 0
	var oldest *Call
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.Verdict != Ask || c.Answer != "" || c.State != CallProposed {
			continue
		}
		a, ok := answers[c.ID]
		if !ok {
			waiting++
			if oldest == nil || c.RequestedAt.Before(*oldest.RequestedAt) {
				oldest = c
			}
			continue
		}
		c.Answer = a
		*notes = append(*notes, Note{Kind: NoteApproval, CallID: c.ID, Warning: a != Approve,
			Message: fmt.Sprintf("A person answered %s for %s (%s)", a, c.ID, c.Name)})
		switch a {
		case Stop:
			e.finish(s, ApprovalDenied, fmt.Sprintf("a person stopped the run when asked to approve %s (%s)", c.ID, c.Name), notes)
			return Effect{Kind: EffectFinish}
		case DenyAnswer:
			c.State, c.ObsStatus = CallDone, ObsDeclined
			c.Observation = fmt.Sprintf("A person declined this call to %s. It did not run; choose another route.", c.Name)
		}
	}
	if waiting > 0 {
		if oldest.RequestedAt != nil && now.Sub(*oldest.RequestedAt) > e.cfg.ApprovalTimeout {
			e.finish(s, Escalated, fmt.Sprintf("call %s (%s) waited more than approvalTimeout (%s) for a person",
				oldest.ID, oldest.Name, e.cfg.ApprovalTimeout), notes)
			return Effect{Kind: EffectFinish}
		}
		return Effect{Kind: EffectAsk, Pending: s.PendingCalls()}
	}
	s.ActiveSince = now
	return e.startActing(s, notes)
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

func (e *Engine) startActing(s *State, notes *[]Note) Effect {
	res := e.batchReservation(s.Calls)
	if rej := Admit(&e.cfg.Budget, s.Usage, res); rej != nil {
		e.finish(s, BudgetExhausted, rej.Reason, notes)
		refusedBy(*notes, rej)
		return Effect{Kind: EffectFinish}
	}
	s.Reserved = res
	s.Phase = PhaseAct
	return e.dispatchNext(s, e.clock(), notes)
}

// dispatchNext hands out the next group: every approved read at once
// (concurrently), then the approved writes one at a time in proposal
// order. Calls waiting for a retry go again, as one group, once their
// backoff has passed, before anything after them. When nothing is left it
// appends the observations, in proposal order, and ends the turn.
func (e *Engine) dispatchNext(s *State, now time.Time, notes *[]Note) Effect {
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
		return Effect{Kind: EffectRunTools, Calls: reads, Concurrent: len(reads) > 1}
	}
	if inflight {
		return Effect{Kind: EffectRunTools}
	}
	if w := retryWait(s, now); w != nil {
		return *w
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
		return Effect{Kind: EffectRunTools, Calls: again, Concurrent: len(again) > 1 && !writes}
	}
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.State == CallProposed && c.Approved() {
			return Effect{Kind: EffectRunTools, Calls: []Invocation{e.dispatch(s, c)}}
		}
	}
	if c := s.verifierCall(); c != nil {
		return e.judge(s, c, notes)
	}
	for i := range s.Calls {
		c := &s.Calls[i]
		s.Transcript = append(s.Transcript, Message{Role: RoleTool, Turn: s.Turn, CallID: c.ID, Tool: c.Name, Content: c.Observation, Status: c.ObsStatus})
	}
	return e.endTurn(s)
}

func (e *Engine) endTurn(s *State) Effect {
	s.Phase = PhaseAdmit
	s.Reserved = Usage{}
	return Effect{Kind: EffectContinue}
}

// dispatch marks c dispatched as its next attempt and returns its invocation.
func (e *Engine) dispatch(s *State, c *Call) Invocation {
	c.State = CallDispatched
	c.Attempts++
	return e.invocation(s, c)
}

func (e *Engine) invocation(s *State, c *Call) Invocation {
	t := e.tool(c.Name)
	return Invocation{CallID: c.ID, Tool: c.Name, Arguments: c.Arguments, IdempotencyKey: IdempotencyKey(s.RunID, c.ID),
		Attempt: max(c.Attempts, 1), Timeout: t.Timeout, StartupGrace: t.StartupGrace, KillGrace: t.KillGrace, MaxResultBytes: t.MaxResultBytes}
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

// applyResults records a group's results. A call whose attempt failed
// transiently is retried or ends the run (see scheduleRetries); every
// other call gets its observation.
func (e *Engine) applyResults(s *State, results []Result, now time.Time, notes *[]Note) {
	var retry []retryCandidate
	for _, r := range results {
		for i := range s.Calls {
			c := &s.Calls[i]
			if c.ID != r.CallID || c.State != CallDispatched {
				continue
			}
			t := e.tool(c.Name)
			e.settleCall(s, t, c.Attempts <= 1)
			if r.Failure.Transient() {
				c.State, c.LastFailure = CallRetrying, failureSummary(r.Failure)
				retry = append(retry, retryCandidate{call: c, retryAfter: r.Failure.RetryAfter, failure: r})
				continue
			}
			c.Observation, c.ObsStatus = Observe(c.Name, t.MaxResultBytes, r)
			c.State = CallDone
			msg := fmt.Sprintf("%s %s: %s", c.ID, c.Name, c.ObsStatus)
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
	if len(retry) > 0 {
		e.scheduleRetries(s, retry, now, notes)
	}
}

// settleCall moves one executed attempt from reserved to consumed. A
// tool's declared maxCostUSD is what it costs: tools do not report spend,
// so the declared ceiling is charged (never under-counted). Every attempt
// is a tool call; only a call's first attempt counts against its tool's
// perTool limit, which bounds distinct calls, not retries of one.
func (e *Engine) settleCall(s *State, t *ToolSpec, first bool) {
	s.Usage.ToolCalls++
	if s.Usage.PerTool == nil {
		s.Usage.PerTool = map[string]int{}
	}
	s.Usage.Cost += t.MaxCost
	s.Reserved.ToolCalls = max(0, s.Reserved.ToolCalls-1)
	s.Reserved.Cost = max(0, s.Reserved.Cost-t.MaxCost)
	if !first {
		return
	}
	s.Usage.PerTool[t.Name]++
	if s.Reserved.PerTool[t.Name] > 0 {
		s.Reserved.PerTool[t.Name]--
	}
}

// onLostResults handles a restart while calls were dispatched: a call that
// may safely run again (read-only, or an executor that adopts the earlier
// attempt) is dispatched again; any other call is never repeated and its
// observation says its outcome is unknown.
func (e *Engine) onLostResults(s *State, now time.Time, notes *[]Note) Effect {
	var again []Invocation
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.State != CallDispatched {
			continue
		}
		t := e.tool(c.Name)
		if t.Repeatable {
			if !t.Mutates {
				s.Usage.Cost += t.MaxCost // the lost attempt may have spent
			}
			inv := e.invocation(s, c)
			inv.Resumed = true
			again = append(again, inv)
			continue
		}
		c.State, c.ObsStatus = CallDone, ObsFailed
		c.Observation, _ = Observe(c.Name, t.MaxResultBytes, Result{Failure: &Failure{Kind: FailUnknown}})
		e.settleCall(s, t, c.Attempts <= 1)
		*notes = append(*notes, Note{Kind: NoteCallFinished, CallID: c.ID, Warning: true,
			Message: fmt.Sprintf("%s %s: outcome unknown after a restart; not repeated", c.ID, c.Name)})
	}
	if len(again) > 0 {
		return Effect{Kind: EffectRunTools, Calls: again, Concurrent: len(again) > 1}
	}
	return e.dispatchNext(s, now, notes)
}
