package loop

// Plan then execute (ReWOO): with Config.Strategy PlanExecute the model is
// asked for the whole plan in one call (a submit_plan call whose steps may
// name earlier steps' results as placeholders), the steps run without the
// model in dependency order, and one more model call (the solver) answers
// from the goal and the evidence. Every step is a call like any other:
// vetted (policy, guardrails, irreversible tightening, per-tool limits),
// reserved against the ceilings, asked about, retried and keyed for
// idempotency exactly as a proposed call is. The state keeps where the
// plan and each step's result are in the transcript, never a copy of them.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Strategy is how a run reaches its goal.
type Strategy string

// Strategies.
const (
	// ReAct interleaves model calls and tool calls (the default).
	ReAct Strategy = "react"
	// PlanExecute plans, runs the plan, then answers from its evidence.
	PlanExecute Strategy = "planExecute"
)

// PlanTool is the harness's tool a planner submits its plan with. It is
// offered only to the planner of a planExecute run.
const PlanTool = "submit_plan"

// ReplanMarker opens a solver's answer that says the evidence is not
// enough: the text after it says what is missing, and the planner is
// asked for a new plan.
const ReplanMarker = "[replan]"

// Defaults and bounds of PlanConfig (part of the API contract, documented
// on spec.plan).
const (
	DefaultPlanMaxSteps = 8
	PlanMaxStepsLimit   = 32
	DefaultMaxReplans   = 1
	MaxReplansLimit     = 5
)

// PlanConfig bounds the plans of a planExecute run.
type PlanConfig struct {
	// MaxSteps is the most steps one plan may hold.
	MaxSteps int
	// MaxReplans is how many new plans may be asked for after a plan was
	// refused, a step failed, or the solver found the evidence lacking.
	// Nil is unset (the default applies); zero means none.
	MaxReplans *int
}

func (p PlanConfig) normalize() PlanConfig {
	if p.MaxSteps <= 0 {
		p.MaxSteps = DefaultPlanMaxSteps
	}
	if p.MaxReplans == nil || *p.MaxReplans < 0 {
		p.MaxReplans = new(DefaultMaxReplans)
	}
	return p
}

// PlanStage is where a plan stands.
type PlanStage string

// Plan stages.
const (
	// StagePlanning: the planner is asked for a plan (the zero stage).
	StagePlanning PlanStage = ""
	// StageExecuting: the plan was accepted and its steps are running.
	StageExecuting PlanStage = "Executing"
	// StageSolving: every step has its result; the solver is asked.
	StageSolving PlanStage = "Solving"
)

// PhasePlanWave: the steps run so far are recorded and the next steps
// whose dependencies are met are due to be vetted and run.
const PhasePlanWave Phase = "PlanWave"

// Plan is the plan-then-execute part of the State.
type Plan struct {
	// Number is the plan in progress (1-based): each replan, and each new
	// trial under a verifier, starts the next.
	Number int `json:"number"`
	// Replans counts the replans made.
	Replans int       `json:"replans,omitempty"`
	Stage   PlanStage `json:"stage,omitempty"`
	// At is the transcript index of the planner's message that holds the
	// accepted plan, CallID the id of its submit_plan call.
	At     int    `json:"at,omitempty"`
	CallID string `json:"callID,omitempty"`
	// Steps are the accepted plan's steps, in the plan's order.
	Steps []PlanStep `json:"steps,omitempty"`
	// Failure says why the running steps stopped (a step that failed after
	// its retries), while the other steps in flight finish.
	Failure string `json:"failure,omitempty"`
}

// PlanStep is one step of an accepted plan.
type PlanStep struct {
	ID   string `json:"id"`
	Tool string `json:"tool"`
	// After are the steps whose results its arguments name.
	After []string `json:"after,omitempty"`
	// At is the transcript index of the step's result once it has one
	// (results are never at index 0, which holds the plan).
	At int `json:"at,omitempty"`
}

func (p *Plan) step(id string) *PlanStep {
	for i := range p.Steps {
		if p.Steps[i].ID == id {
			return &p.Steps[i]
		}
	}
	return nil
}

// StepCallID is the call id of a plan's step: "p<plan>-<step>", such as
// "p1-E2". Plan step ids never collide with the model's calls (t<turn>-c<n>).
func StepCallID(plan int, step string) string { return fmt.Sprintf("p%d-%s", plan, step) }

// isStepCall reports whether a call id is a plan step's.
func isStepCall(id string) bool { return strings.HasPrefix(id, "p") }

func stepOf(callID string) string {
	_, id, _ := strings.Cut(callID, "-")
	return id
}

func (e *Engine) planMode() bool { return e.cfg.Strategy == PlanExecute }

// stepIDPattern is what a step id may be: a letter, then letters, digits
// or underscores ("E1"). Dots separate a placeholder's path.
var stepIDPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,31}$`)

// looksLikeStepRef matches strings that can only be meant as placeholders
// ("#E7", "#E7.account_id"): one that names no step refuses the plan.
var looksLikeStepRef = regexp.MustCompile(`^#E[0-9]+(\..*)?$`)

const planPreamble = "You are the planner of an agent run by AgentRun. Do not answer the goal given in the first user message and do not " +
	"call its tools yourself: write the whole plan now, in one call to " + PlanTool + ". Each step has an id (E1, E2, ...), names one " +
	"of the tools listed below, and gives its arguments. Where an argument needs a result you do not have yet, write the string " +
	"\"#E1\" for the whole JSON result of step E1, or \"#E1.account_id\" for a value inside it (a dot path; a number indexes a list): " +
	"the step then runs after E1, with the value in place. Steps that do not depend on each other run at the same time. You will " +
	"not see the results: once the steps have run, you will be asked to answer from them. If the goal needs no tool, answer it in " +
	"plain text. If you cannot go on without a person, call " + EscalateTool + " with the reason."

const solvePreamble = "You are the solver of an agent run by AgentRun. A plan was made for the goal given in the first user message and " +
	"its steps have run; the next message holds their results (the evidence), each once. Answer the goal from the evidence, as " +
	"plain text; you cannot call tools. If the evidence is not enough to answer, reply with a first line that starts with " +
	ReplanMarker + " followed by what is missing: a new plan will be made."

// compilePlan prepares a planExecute run: the planner's prompt lists the
// declared tools (as documentation) and offers submit_plan, the solver's
// offers nothing.
func (e *Engine) compilePlan() error {
	switch e.cfg.Strategy {
	case "", ReAct:
		e.cfg.Strategy = ReAct
		return nil
	case PlanExecute:
	default:
		return fmt.Errorf("strategy %q is not one of react, planExecute", e.cfg.Strategy)
	}
	p := e.cfg.Plan
	switch {
	case p.MaxSteps > PlanMaxStepsLimit:
		return fmt.Errorf("plan.maxSteps is %d; a plan may hold at most %d steps", p.MaxSteps, PlanMaxStepsLimit)
	case *p.MaxReplans > MaxReplansLimit:
		return fmt.Errorf("plan.maxReplans is %d; at most %d replans are allowed", *p.MaxReplans, MaxReplansLimit)
	case e.tools[PlanTool] != nil:
		return fmt.Errorf("tool name %q is reserved for the harness in a planExecute run", PlanTool)
	}
	var doc strings.Builder
	var names []string
	doc.WriteString(planPreamble)
	doc.WriteString("\n\nThe tools a step may name, each with its description and the JSON Schema of its arguments:")
	for _, t := range e.offered {
		if t.Name == EscalateTool {
			continue
		}
		names = append(names, t.Name)
		fmt.Fprintf(&doc, "\n- %s: %s\n  arguments: %s", t.Name, strings.TrimSpace(t.Description), compactJSON(t.Parameters))
	}
	e.planSystem, e.solveSystem = doc.String(), solvePreamble
	if s := strings.TrimSpace(e.cfg.Instructions); s != "" {
		e.planSystem += "\n\n" + s
		e.solveSystem += "\n\n" + s
	}
	toolEnum, _ := json.Marshal(names)
	if len(names) == 0 {
		toolEnum = []byte(`[]`)
	}
	schema := fmt.Sprintf(`{"type":"object","properties":{"steps":{"type":"array","minItems":1,"maxItems":%d,"items":{"type":"object",`+
		`"properties":{"id":{"type":"string","description":"The step's id: E1, E2, ... unique in the plan."},`+
		`"tool":{"type":"string","enum":%s},"arguments":{"type":"object","description":"The tool's arguments; a string \"#E1\" or \"#E1.path\" stands for a result of an earlier step."}},`+
		`"required":["id","tool","arguments"]}}},"required":["steps"]}`, p.MaxSteps, toolEnum)
	e.planOffered = []ToolSchema{
		{Name: PlanTool, Description: "Submit the whole plan: the steps to run, in order, with their arguments.", Parameters: json.RawMessage(schema)},
		{Name: EscalateTool, Description: "Hand the task to a person when you cannot finish it safely; this ends the run.", Parameters: escalateSchema},
	}
	return nil
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// planRequest is the planner's prompt: the goal, then the current trial's
// conversation with the planner (its plans and what became of them),
// without the steps' results, which it does not read.
func (e *Engine) planRequest(s *State) *Request {
	start := s.trialStart()
	msgs := []Message{e.goal}
	for _, m := range s.Transcript[start:] {
		if m.Role == RoleTool && isStepCall(m.CallID) {
			continue
		}
		msgs = append(msgs, m)
	}
	return &Request{Model: e.cfg.Model.Name, System: e.planSystem, Tools: e.planOffered, Messages: msgs,
		MaxOutputTokens: e.cfg.Model.MaxOutputTokens, EarlierAnswers: s.answersBefore(start)}
}

// solveRequest is the solver's prompt: the goal and the evidence, each
// step's result once. No tool is offered.
func (e *Engine) solveRequest(s *State) *Request {
	ev := "The steps of the plan have run. Their results:\n\n" + e.evidence(s)
	return &Request{Model: e.cfg.Model.Name, System: e.solveSystem, Messages: []Message{e.goal, {Role: RoleUser, Turn: s.Turn, Content: ev}},
		MaxOutputTokens: e.cfg.Model.MaxOutputTokens, EarlierAnswers: s.answersBefore(len(s.Transcript))}
}

// planDoc is the submit_plan call's arguments.
type planDoc struct {
	Steps []planStepDoc `json:"steps"`
}

type planStepDoc struct {
	ID        string          `json:"id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

func (d *planDoc) step(id string) *planStepDoc {
	for i := range d.Steps {
		if d.Steps[i].ID == id {
			return &d.Steps[i]
		}
	}
	return nil
}

// acceptedPlan reads the accepted plan from the transcript.
func (e *Engine) acceptedPlan(s *State) (*planDoc, error) {
	p := s.Plan
	if p == nil || p.At < 0 || p.At >= len(s.Transcript) {
		return nil, errors.New("the plan's message is not in the transcript")
	}
	for _, tc := range s.Transcript[p.At].ToolCalls {
		if tc.ID == p.CallID && tc.Name == PlanTool {
			var d planDoc
			if err := json.Unmarshal(tc.Arguments, &d); err != nil {
				return nil, fmt.Errorf("the plan's arguments cannot be read: %v", err)
			}
			return &d, nil
		}
	}
	return nil, fmt.Errorf("the plan's call %s is not in the transcript", p.CallID)
}

// placeholder is one "#E1.path" string found in a step's arguments.
type placeholder struct {
	step string
	path []string
}

// parsePlaceholder reads a string as a placeholder when it names a step of
// ids; err is set when it can only be meant as one but names no step.
func parsePlaceholder(v string, ids map[string]bool) (ph placeholder, ok bool, err error) {
	if !strings.HasPrefix(v, "#") {
		return ph, false, nil
	}
	parts := strings.Split(v[1:], ".")
	if !ids[parts[0]] {
		if looksLikeStepRef.MatchString(v) {
			return ph, false, fmt.Errorf("%q names step %s, which the plan does not have", cut(v, 80), parts[0])
		}
		return ph, false, nil
	}
	for _, seg := range parts[1:] {
		if seg == "" {
			return ph, false, fmt.Errorf("%q has an empty segment in its path", cut(v, 80))
		}
	}
	return placeholder{step: parts[0], path: parts[1:]}, true, nil
}

// walkStrings calls fn on every string value of v (not on object keys);
// fn returns the value to put in its place.
func walkStrings(v any, fn func(string) (any, error)) (any, error) {
	switch x := v.(type) {
	case string:
		return fn(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := walkStrings(e, fn)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := walkStrings(e, fn)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

// dependencies lists the steps a step's arguments name, in first-use order.
func dependencies(args any, ids map[string]bool) ([]string, error) {
	var deps []string
	_, err := walkStrings(args, func(v string) (any, error) {
		ph, ok, err := parsePlaceholder(v, ids)
		if err != nil {
			return nil, err
		}
		if ok && !slices.Contains(deps, ph.step) {
			deps = append(deps, ph.step)
		}
		return v, nil
	})
	return deps, err
}

// MaxStepArgumentBytes bounds a plan step's arguments once its
// placeholders are replaced by the results they name.
const MaxStepArgumentBytes = 256 << 10

// jsonSize is the size of v as JSON (strings as their length plus quotes:
// an upper bound is not needed, only a measure that grows with v).
func jsonSize(v any) int {
	switch x := v.(type) {
	case string:
		return len(x) + 2
	case map[string]any:
		n := 2
		for k, e := range x {
			n += len(k) + 4 + jsonSize(e)
		}
		return n
	case []any:
		n := 2
		for _, e := range x {
			n += 1 + jsonSize(e)
		}
		return n
	case json.Number:
		return len(x)
	default:
		return 5
	}
}

// resolve follows a placeholder's path into a step's result.
func resolve(result string, ph placeholder) (any, error) {
	v, err := decodeJSON(json.RawMessage(result))
	if err != nil {
		if len(ph.path) == 0 {
			return result, nil // a result that is not JSON stands as a string
		}
		return nil, fmt.Errorf("the result of %s is not JSON, so #%s.%s has nothing to point into", ph.step, ph.step, strings.Join(ph.path, "."))
	}
	for i, seg := range ph.path {
		where := "#" + ph.step + "." + strings.Join(ph.path[:i+1], ".")
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[seg]
			if !ok {
				return nil, fmt.Errorf("%s: the result has no field %q there", where, seg)
			}
			v = e
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(x) {
				return nil, fmt.Errorf("%s: the result has a list of %d there, and %q is not an index of it", where, len(x), seg)
			}
			v = x[n]
		default:
			return nil, fmt.Errorf("%s: the result has a single value before %q", where, seg)
		}
	}
	return v, nil
}

// stepCall builds a step's call: its planned arguments with every
// placeholder replaced by the result it names (read from the transcript).
func (e *Engine) stepCall(s *State, d *planDoc, st *PlanStep) (ToolCall, error) {
	sd := d.step(st.ID)
	if sd == nil {
		return ToolCall{}, fmt.Errorf("step %s is not in the plan", st.ID)
	}
	tc := ToolCall{ID: StepCallID(s.Plan.Number, st.ID), Name: sd.Tool, Arguments: CallArguments(sd.Arguments)}
	if len(st.After) == 0 {
		return tc, nil
	}
	args, err := decodeJSON(tc.Arguments)
	if err != nil {
		return tc, err
	}
	ids := map[string]bool{}
	for _, p := range s.Plan.Steps {
		ids[p.ID] = true
	}
	// Each placeholder adds up to a whole result: the substituted
	// arguments are bounded as they grow, so that a plan repeating a
	// placeholder cannot multiply a result into megabytes.
	size := len(tc.Arguments)
	out, err := walkStrings(args, func(v string) (any, error) {
		ph, ok, err := parsePlaceholder(v, ids)
		if err != nil || !ok {
			return v, err
		}
		dep := s.Plan.step(ph.step)
		if dep == nil || dep.At <= 0 || dep.At >= len(s.Transcript) {
			return nil, fmt.Errorf("step %s has no result yet", ph.step)
		}
		r, err := resolve(s.Transcript[dep.At].Content, ph)
		if err != nil {
			return nil, err
		}
		if size += jsonSize(r); size > MaxStepArgumentBytes {
			return nil, fmt.Errorf("with its placeholders replaced, the step's arguments would pass %d bytes", MaxStepArgumentBytes)
		}
		return r, nil
	})
	if err != nil {
		return tc, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return tc, err
	}
	tc.Arguments = json.RawMessage(bytes.TrimSpace(b.Bytes()))
	return tc, nil
}

// PlanStepCall is the call the engine makes for a step of the accepted
// plan (call id "p<plan>-<step>"), rebuilt from the plan in the transcript
// and the results it names: a caller resuming from a saved state can
// check that a step about to run is this one, as it checks the model's
// proposals. ok is false when the id names no step with its dependencies
// met.
func (e *Engine) PlanStepCall(s *State, callID string) (ToolCall, bool) {
	if s.Plan == nil || s.Plan.Stage != StageExecuting || !strings.HasPrefix(callID, fmt.Sprintf("p%d-", s.Plan.Number)) {
		return ToolCall{}, false
	}
	st := s.Plan.step(stepOf(callID))
	if st == nil {
		return ToolCall{}, false
	}
	d, err := e.acceptedPlan(s)
	if err != nil {
		return ToolCall{}, false
	}
	tc, err := e.stepCall(s, d, st)
	return tc, err == nil
}

// onPlanCalls reads the planner's calls (or a solver's, which has no
// tools): a submit_plan call is checked as a whole and, accepted, starts
// its first steps; anything else is answered and, unless it escalates,
// counts as a refused plan.
func (e *Engine) onPlanCalls(ctx context.Context, s *State, calls []ToolCall, decoded []decodedArgs, now time.Time, notes *[]Note) Effect {
	p := s.Plan
	for _, c := range calls {
		if c.Name == EscalateTool {
			e.finish(s, Escalated, "the model handed the task to a person: "+escalationReason(c.Arguments), notes)
			return Effect{Kind: EffectFinish}
		}
	}
	if p.Stage == StageSolving {
		names := make([]string, len(calls))
		for i, c := range calls {
			names[i] = c.Name
			e.answerCall(s, c, ObsInvalid, "Not run: the solver has no tools.")
		}
		return e.replan(s, "", fmt.Sprintf("the solver asked to call %s instead of answering from the evidence", strings.Join(names, ", ")), Escalated, nil, notes)
	}
	plan := -1
	for i, c := range calls {
		if c.Name == PlanTool && plan < 0 {
			plan = i
		}
	}
	why, halt := "", ""
	var steps []PlanStep
	var rej *Rejection
	switch {
	case plan < 0:
		why = fmt.Sprintf("the planner called %s instead of submitting a plan with %s", calls[0].Name, PlanTool)
	case len(calls) > 1:
		why = fmt.Sprintf("the planner made %d calls; a plan is submitted in exactly one call to %s", len(calls), PlanTool)
	default:
		steps, why, halt, rej = e.checkPlan(ctx, s, calls[plan], decoded[plan], now)
	}
	for i, c := range calls {
		if i != plan {
			e.answerCall(s, c, ObsInvalid, fmt.Sprintf("Not run: a planner only submits a plan (%s); put tool calls in its steps.", PlanTool))
		}
	}
	if halt != "" {
		e.finish(s, GuardrailStop, halt, notes)
		return Effect{Kind: EffectFinish}
	}
	pc := ""
	if plan >= 0 {
		pc = calls[plan].ID
	}
	if why != "" {
		*notes = append(*notes, Note{Kind: NotePlanRefused, CallID: pc, Warning: true, Message: fmt.Sprintf("Plan %d refused: %s", p.Number, why)})
		outcome := Escalated
		if rej != nil {
			outcome = BudgetExhausted
		}
		return e.replan(s, pc, "was refused: "+why, outcome, rej, notes)
	}
	p.Stage, p.At, p.CallID, p.Steps, p.Failure = StageExecuting, len(s.Transcript)-1, pc, steps, ""
	summary := make([]string, len(steps))
	for i, st := range steps {
		summary[i] = st.ID + " " + st.Tool
		if len(st.After) > 0 {
			summary[i] += " (after " + strings.Join(st.After, ", ") + ")"
		}
	}
	e.answerCall(s, calls[plan], ObsOK, fmt.Sprintf("Plan %d accepted: %s. Its steps run now; you will then be asked to answer from their results.",
		p.Number, plural(len(steps), "step")))
	*notes = append(*notes, Note{Kind: NotePlanSubmitted, CallID: pc, Message: fmt.Sprintf("Plan %d accepted, %s: %s",
		p.Number, plural(len(steps), "step"), strings.Join(summary, "; "))})
	return e.startWave(ctx, s, now, notes)
}

// answerCall records the harness's answer to a call of the model that does
// not run as a tool (a plan, or a call a planner may not make).
func (e *Engine) answerCall(s *State, c ToolCall, status ObsStatus, text string) {
	s.Transcript = append(s.Transcript, Message{Role: RoleTool, Turn: s.Turn, CallID: c.ID, Tool: c.Name, Content: text, Status: status})
}

// checkPlan checks a submitted plan as a whole before anything runs: its
// shape (ids unique, at most maxSteps, tools declared), its dependencies
// (every placeholder names a step, no cycle), every step without
// placeholders vetted like a proposed call (a step with placeholders gets
// its guardrails now and the rest of its vetting once substituted), and
// the whole plan with the solver's call reserved against every hard
// ceiling. why says why the plan is refused; halt is set when a guardrail
// with severity halt matched (the run ends); rej is the ceiling that
// refused it, if one did.
func (e *Engine) checkPlan(ctx context.Context, s *State, c ToolCall, d decodedArgs, now time.Time) (steps []PlanStep, why, halt string, rej *Rejection) {
	ctx, cancel := e.vetContext(ctx)
	defer cancel()
	if d.err != nil {
		return nil, "its arguments were refused: " + d.err.Error(), "", nil
	}
	var doc planDoc
	if err := json.Unmarshal(c.Arguments, &doc); err != nil {
		return nil, "its arguments do not hold a list of steps: " + cut(err.Error(), 200), "", nil
	}
	switch {
	case len(doc.Steps) == 0:
		return nil, "the plan has no steps (answer in plain text when no tool is needed)", "", nil
	case len(doc.Steps) > e.cfg.Plan.MaxSteps:
		return nil, fmt.Sprintf("the plan has %d steps and plan.maxSteps is %d", len(doc.Steps), e.cfg.Plan.MaxSteps), "", nil
	}
	ids := map[string]bool{}
	for _, st := range doc.Steps {
		switch {
		case !stepIDPattern.MatchString(st.ID):
			return nil, fmt.Sprintf("step id %q is not a letter followed by letters, digits or underscores (such as E1)", cut(st.ID, 40)), "", nil
		case ids[st.ID]:
			return nil, fmt.Sprintf("step id %s is used twice", st.ID), "", nil
		}
		ids[st.ID] = true
	}
	var discard []Note
	steps = make([]PlanStep, len(doc.Steps))
	for i, st := range doc.Steps {
		steps[i] = PlanStep{ID: st.ID, Tool: st.Tool}
		if e.tools[st.Tool] == nil {
			return nil, fmt.Sprintf("step %s names tool %q, which is not declared; the tools are: %s", st.ID, cut(st.Tool, 64), strings.Join(e.stepTools(), ", ")), "", nil
		}
		args := CallArguments(st.Arguments)
		da := decodeArgs(args, e.cfg.Loop.IgnoreArguments)
		if da.err != nil {
			return nil, fmt.Sprintf("step %s (%s): the arguments were refused: %v", st.ID, st.Tool, da.err), "", nil
		}
		deps, err := dependencies(da.value, ids)
		if err != nil {
			return nil, fmt.Sprintf("step %s (%s): placeholder %v", st.ID, st.Tool, err), "", nil
		}
		steps[i].After = deps
		call := ToolCall{ID: StepCallID(s.Plan.Number, st.ID), Name: st.Tool, Arguments: args}
		if len(deps) > 0 {
			// Its policy and schema are checked on the substituted
			// arguments; a halting guardrail is checked now as well.
			if g := e.guardrail(st.Tool, da.full, da.value); g != nil && g.halt {
				return nil, "", fmt.Sprintf("guardrail %s halted the run at plan step %s (%s) before any step ran: %s",
					strings.TrimPrefix(g.rule, "guardrail:"), st.ID, st.Tool, g.reason), nil
			}
			continue
		}
		bc, h := e.vetCall(ctx, call, da, now, &discard)
		if h != "" {
			return nil, "", h + " before any step of the plan ran: " + bc.Reason, nil
		}
		if bc.State == CallDone {
			return nil, fmt.Sprintf("step %s (%s) was refused (%s): %s", st.ID, st.Tool, bc.Rule, cut(bc.Reason, 300)), "", nil
		}
	}
	levels, cycle := planLevels(steps)
	if cycle != "" {
		return nil, "the steps' placeholders form a cycle: " + cycle, "", nil
	}
	res := e.planReservation(steps, levels, c)
	if r := Admit(&e.cfg.Budget, s.Usage, res); r != nil {
		return nil, "the plan does not fit the budget: " + r.Reason, "", r
	}
	return steps, "", "", nil
}

// guardrail is the first guardrail that matches a call, or nil.
func (e *Engine) guardrail(tool string, full []byte, args any) *verdict {
	for _, g := range e.guardrails {
		if matchesTool(g.Tools, tool) && guardrailMatches(g.re, full, args) {
			v := &verdict{rule: "guardrail:" + g.Name, reason: g.Reason, halt: g.Severity == Halt, block: g.Severity != Halt}
			if v.reason == "" {
				v.reason = "the arguments match guardrail " + g.Name
			}
			return v
		}
	}
	return nil
}

func (e *Engine) stepTools() []string {
	var names []string
	for _, t := range e.offered {
		if t.Name != EscalateTool {
			names = append(names, t.Name)
		}
	}
	return names
}

// planLevels gives every step its level (0 for a step that names no other,
// else one more than the highest level it names), or describes a cycle.
func planLevels(steps []PlanStep) (map[string]int, string) {
	level := map[string]int{}
	state := map[string]int{} // 1 visiting, 2 done
	by := map[string]*PlanStep{}
	for i := range steps {
		by[steps[i].ID] = &steps[i]
	}
	var path []string
	var visit func(id string) string
	visit = func(id string) string {
		switch state[id] {
		case 2:
			return ""
		case 1:
			i := slices.Index(path, id)
			return strings.Join(append(path[i:], id), " -> ")
		}
		state[id] = 1
		path = append(path, id)
		l := 0
		for _, d := range by[id].After {
			if c := visit(d); c != "" {
				return c
			}
			l = max(l, level[d]+1)
		}
		path = path[:len(path)-1]
		state[id], level[id] = 2, l
		return ""
	}
	for _, st := range steps {
		if c := visit(st.ID); c != "" {
			return nil, c
		}
	}
	return level, ""
}

// planReservation is the exposure of a whole plan: every step's declared
// cost and a call of its tool; on the wall clock, level by level, the
// longest read once per wave of concurrent reads plus every write; and the
// solver's model call, its input estimated from what is known now (the
// prompt without the results, which do not exist yet).
func (e *Engine) planReservation(steps []PlanStep, levels map[string]int, plan ToolCall) Usage {
	r := Usage{PerTool: map[string]int{}}
	waves := map[int]*readWave{}
	for _, st := range steps {
		t := e.tool(st.Tool)
		if !r.addCall(t) {
			continue
		}
		w := waves[levels[st.ID]]
		if w == nil {
			w = &readWave{}
			waves[levels[st.ID]] = w
		}
		w.add(t)
	}
	for _, w := range waves {
		r.WallClock += w.duration()
	}
	solve := e.modelReservation(e.estimate(&Request{System: e.solveSystem,
		Messages: []Message{e.goal, {Role: RoleUser, Content: string(plan.Arguments)}}}))
	r.Turns += solve.Turns
	r.InputTokens += solve.InputTokens
	r.OutputTokens += solve.OutputTokens
	r.Cost += solve.Cost
	r.WallClock += solve.WallClock
	return r
}

// startWave vets and starts every step whose dependencies have their
// results, with its placeholders replaced; when no step is left, the
// solver is due.
func (e *Engine) startWave(ctx context.Context, s *State, now time.Time, notes *[]Note) Effect {
	ctx, cancel := e.vetContext(ctx)
	defer cancel()
	p := s.Plan
	s.Calls, s.Reserved = nil, Usage{}
	doc, err := e.acceptedPlan(s)
	if err != nil {
		e.finish(s, Error, fmt.Sprintf("plan %d cannot go on: %v", p.Number, err), notes)
		return Effect{Kind: EffectFinish}
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
		tc, err := e.stepCall(s, doc, st)
		if err != nil {
			bc := Call{ToolCall: tc, State: CallProposed}
			refuse(&bc, rejection{rule: RulePlaceholder, reason: "a placeholder cannot be resolved: " + err.Error(),
				observation: fmt.Sprintf("Step %s (%s) did not run: a placeholder cannot be resolved: %v.", st.ID, tc.Name, err)}, notes)
			batch = append(batch, bc)
			refused = true
			continue
		}
		bc, halt := e.vetCall(ctx, tc, decodeArgs(tc.Arguments, e.cfg.Loop.IgnoreArguments), now, notes)
		if halt != "" {
			e.finish(s, GuardrailStop, halt+" before the step ran: "+bc.Reason, notes)
			return Effect{Kind: EffectFinish}
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
		return e.endTurn(s)
	}
	s.Calls = batch
	if refused {
		return e.waveDone(s, notes)
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
		return Effect{Kind: EffectAsk, Pending: s.PendingCalls()}
	}
	return e.startActing(s, notes)
}

// RulePlaceholder is the rule recorded on a step whose placeholder could
// not be resolved against the results it names.
const RulePlaceholder = "plan.placeholder"

// stopFailedWave, once a step of the running wave has failed or was
// refused, drops the steps that have not started (the plan is going to be
// replaced) and gives up the retries still due.
func (e *Engine) stopFailedWave(s *State) {
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
func (e *Engine) waveDone(s *State, notes *[]Note) Effect {
	p := s.Plan
	var failed *Call
	for i := range s.Calls {
		c := &s.Calls[i]
		s.Transcript = append(s.Transcript, Message{Role: RoleTool, Turn: s.Turn, CallID: c.ID, Tool: c.Name, Content: c.Observation, Status: c.ObsStatus})
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
		return e.replan(s, "", "stopped: "+why, outcome, nil, notes)
	}
	s.Phase = PhasePlanWave
	return Effect{Kind: EffectContinue}
}

// replan asks the planner for a new plan, saying what became of this one
// (what says it: "was refused: ...", "stopped: ..."), with the evidence
// so far; answer is the submit_plan call to answer (a refused plan), else
// the message is the user's. With no replan left the run ends with
// outcome.
func (e *Engine) replan(s *State, answer, what string, outcome Outcome, rej *Rejection, notes *[]Note) Effect {
	p := s.Plan
	max := *e.cfg.Plan.MaxReplans
	var b strings.Builder
	what = strings.TrimRight(what, ". ")
	fmt.Fprintf(&b, "Plan %d %s.", p.Number, what)
	if ev := e.evidence(s); ev != "" {
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
		e.finish(s, outcome, fmt.Sprintf("plan %d %s; no replan is left (plan.maxReplans is %d)", p.Number, cut(what, 600), max), notes)
		refusedBy(*notes, rej)
		return Effect{Kind: EffectFinish}
	}
	p.Replans++
	e.nextPlan(p)
	*notes = append(*notes, Note{Kind: NoteReplanned, Warning: true, Message: fmt.Sprintf("Plan %d %s; plan %d is asked for (replan %d of %d)",
		p.Number-1, cut(what, 400), p.Number, p.Replans, max)})
	return e.endTurn(s)
}

// nextPlan starts the next plan's planning.
func (e *Engine) nextPlan(p *Plan) {
	p.Number++
	p.Stage, p.At, p.CallID, p.Steps, p.Failure = StagePlanning, 0, "", nil, ""
}

// evidence lists the results of the current plan's steps that ran, each
// once, with the step's planned call.
func (e *Engine) evidence(s *State) string {
	p := s.Plan
	if p == nil || len(p.Steps) == 0 {
		return ""
	}
	doc, _ := e.acceptedPlan(s)
	var b strings.Builder
	for _, st := range p.Steps {
		if st.At <= 0 || st.At >= len(s.Transcript) {
			continue
		}
		args := "{}"
		if doc != nil {
			if sd := doc.step(st.ID); sd != nil {
				args = compactJSON(CallArguments(sd.Arguments))
			}
		}
		fmt.Fprintf(&b, "#%s = %s(%s):\n%s\n\n", st.ID, st.Tool, args, s.Transcript[st.At].Content)
	}
	return strings.TrimRight(b.String(), "\n")
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
