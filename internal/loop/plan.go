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
	"strings"
	"time"
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

func (p PlanConfig) normalize() PlanConfig {
	if p.MaxSteps <= 0 {
		p.MaxSteps = DefaultPlanMaxSteps
	}
	if p.MaxReplans == nil || *p.MaxReplans < 0 {
		p.MaxReplans = new(DefaultMaxReplans)
	}
	return p
}

// PhasePlanWave: the steps run so far are recorded and the next steps
// whose dependencies are met are due to be vetted and run.
const PhasePlanWave Phase = "PlanWave"

// StepCallID is the call id of a plan's step: "p<plan>-<step>", such as
// "p1-E2". Plan step ids never collide with the model's calls (t<turn>-c<n>).
func StepCallID(plan int, step string) string { return fmt.Sprintf("p%d-%s", plan, step) }

// isStepCall reports whether a call id is a plan step's.
func isStepCall(id string) bool { return strings.HasPrefix(id, "p") }

func stepOf(callID string) string {
	_, id, _ := strings.Cut(callID, "-")
	return id
}

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

// planner runs the plans of a planExecute run: it builds the planner's
// and the solver's prompts, accepts a submitted plan, runs its steps in
// waves, and replans.
type planner struct {
	cfg  *Config
	goal Message
	// offered are the tools a step may name (the ReAct run's offer);
	// tools and guardrails are the engine's, compiled.
	offered    []ToolSchema
	tools      map[string]*ToolSpec
	guardrails guardrailSet
	estimator  TokenEstimator
	// The planner's and the solver's prompts.
	planSystem, solveSystem string
	planOffered             []ToolSchema
	// vetContext and vetCall vet a step like a proposed call (vetting.go).
	vetContext func(context.Context) (context.Context, context.CancelFunc)
	vetCall    func(ctx context.Context, c ToolCall, d decodedArgs, now time.Time, notes *[]Note) (Call, string)
}

// newPlanner checks the strategy (a run without one is ReAct) and, for a
// planExecute run, prepares its prompts: the planner's lists the declared
// tools (as documentation) and offers submit_plan, the solver's offers
// nothing. A ReAct run's planner is never asked to plan.
func newPlanner(cfg *Config, goal Message, offered []ToolSchema, tools map[string]*ToolSpec, guardrails guardrailSet,
	estimator TokenEstimator, vetContext func(context.Context) (context.Context, context.CancelFunc),
	vetCall func(context.Context, ToolCall, decodedArgs, time.Time, *[]Note) (Call, string)) (*planner, error) {
	pl := &planner{cfg: cfg, goal: goal, offered: offered, tools: tools, guardrails: guardrails, estimator: estimator,
		vetContext: vetContext, vetCall: vetCall}
	switch cfg.Strategy {
	case "", ReAct:
		cfg.Strategy = ReAct
		return pl, nil
	case PlanExecute:
	default:
		return nil, fmt.Errorf("strategy %q is not one of react, planExecute", cfg.Strategy)
	}
	p := cfg.Plan
	switch {
	case p.MaxSteps > PlanMaxStepsLimit:
		return nil, fmt.Errorf("plan.maxSteps is %d; a plan may hold at most %d steps", p.MaxSteps, PlanMaxStepsLimit)
	case *p.MaxReplans > MaxReplansLimit:
		return nil, fmt.Errorf("plan.maxReplans is %d; at most %d replans are allowed", *p.MaxReplans, MaxReplansLimit)
	case tools[PlanTool] != nil:
		return nil, fmt.Errorf("tool name %q is reserved for the harness in a planExecute run", PlanTool)
	}
	var doc strings.Builder
	var names []string
	doc.WriteString(planPreamble)
	doc.WriteString("\n\nThe tools a step may name, each with its description and the JSON Schema of its arguments:")
	for _, t := range pl.offered {
		if t.Name == EscalateTool {
			continue
		}
		names = append(names, t.Name)
		fmt.Fprintf(&doc, "\n- %s: %s\n  arguments: %s", t.Name, strings.TrimSpace(t.Description), compactJSON(t.Parameters))
	}
	pl.planSystem, pl.solveSystem = doc.String(), solvePreamble
	if s := strings.TrimSpace(pl.cfg.Instructions); s != "" {
		pl.planSystem += "\n\n" + s
		pl.solveSystem += "\n\n" + s
	}
	toolEnum, _ := json.Marshal(names)
	if len(names) == 0 {
		toolEnum = []byte(`[]`)
	}
	schema := fmt.Sprintf(`{"type":"object","properties":{"steps":{"type":"array","minItems":1,"maxItems":%d,"items":{"type":"object",`+
		`"properties":{"id":{"type":"string","description":"The step's id: E1, E2, ... unique in the plan."},`+
		`"tool":{"type":"string","enum":%s},"arguments":{"type":"object","description":"The tool's arguments; a string \"#E1\" or \"#E1.path\" stands for a result of an earlier step."}},`+
		`"required":["id","tool","arguments"]}}},"required":["steps"]}`, p.MaxSteps, toolEnum)
	pl.planOffered = []ToolSchema{
		{Name: PlanTool, Description: "Submit the whole plan: the steps to run, in order, with their arguments.", Parameters: json.RawMessage(schema)},
		{Name: EscalateTool, Description: "Hand the task to a person when you cannot finish it safely; this ends the run.", Parameters: escalateSchema},
	}
	return pl, nil
}

// tool is the declared tool name, or an undeclared one's bare spec.
func (pl *planner) tool(name string) *ToolSpec { return lookupTool(pl.tools, name) }

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
func (pl *planner) planRequest(s *State) *Request {
	start := s.trialStart()
	msgs := []Message{pl.goal}
	for _, m := range s.Transcript[start:] {
		if m.Role == RoleTool && isStepCall(m.CallID) {
			continue
		}
		msgs = append(msgs, m)
	}
	return &Request{Model: pl.cfg.Model.Name, System: pl.planSystem, Tools: pl.planOffered, Messages: msgs,
		MaxOutputTokens: pl.cfg.Model.MaxOutputTokens, EarlierAnswers: s.answersBefore(start)}
}

// solveRequest is the solver's prompt: the goal and the evidence, each
// step's result once. No tool is offered.
func (pl *planner) solveRequest(s *State) *Request {
	ev := "The steps of the plan have run. Their results:\n\n" + pl.evidence(s)
	return &Request{Model: pl.cfg.Model.Name, System: pl.solveSystem, Messages: []Message{pl.goal, {Role: RoleUser, Turn: s.Turn, Content: ev}},
		MaxOutputTokens: pl.cfg.Model.MaxOutputTokens, EarlierAnswers: s.answersBefore(len(s.Transcript))}
}

// evidence lists the results of the current plan's steps that ran, each
// once, with the step's planned call.
func (pl *planner) evidence(s *State) string {
	p := s.Plan
	if p == nil || len(p.Steps) == 0 {
		return ""
	}
	doc, _ := pl.acceptedPlan(s)
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
func (pl *planner) acceptedPlan(s *State) (*planDoc, error) {
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
