package loop

// Accepting a plan: a submitted plan is read and checked as a whole (its
// shape, dependencies, every step it can vet now, and its reservation)
// before any step runs.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// onPlanCalls reads the planner's calls (or a solver's, which has no
// tools): a submit_plan call is checked as a whole and, accepted, starts
// its first steps; anything else is answered and, unless it escalates,
// counts as a refused plan.
func (pl *planner) onPlanCalls(ctx context.Context, s *State, calls []ToolCall, decoded []decodedArgs, now time.Time, notes *[]Note) next {
	p := s.Plan
	for _, c := range calls {
		if c.Name == EscalateTool {
			return finishWith(Escalated, "the model handed the task to a person: "+escalationReason(c.Arguments))
		}
	}
	if p.Stage == StageSolving {
		names := make([]string, len(calls))
		for i, c := range calls {
			names[i] = c.Name
			pl.answerCall(s, c, ObsInvalid, "Not run: the solver has no tools.")
		}
		return pl.replan(s, "", fmt.Sprintf("the solver asked to call %s instead of answering from the evidence", strings.Join(names, ", ")), Escalated, nil, notes)
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
		steps, why, halt, rej = pl.checkPlan(ctx, s, calls[plan], decoded[plan], now)
	}
	for i, c := range calls {
		if i != plan {
			pl.answerCall(s, c, ObsInvalid, fmt.Sprintf("Not run: a planner only submits a plan (%s); put tool calls in its steps.", PlanTool))
		}
	}
	if halt != "" {
		return finishWith(GuardrailStop, halt)
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
		return pl.replan(s, pc, "was refused: "+why, outcome, rej, notes)
	}
	p.Stage, p.At, p.CallID, p.Steps, p.Failure = StageExecuting, len(s.Transcript)-1, pc, steps, ""
	summary := make([]string, len(steps))
	for i, st := range steps {
		summary[i] = st.ID + " " + st.Tool
		if len(st.After) > 0 {
			summary[i] += " (after " + strings.Join(st.After, ", ") + ")"
		}
	}
	pl.answerCall(s, calls[plan], ObsOK, fmt.Sprintf("Plan %d accepted: %s. Its steps run now; you will then be asked to answer from their results.",
		p.Number, plural(len(steps), "step")))
	*notes = append(*notes, Note{Kind: NotePlanSubmitted, CallID: pc, Message: fmt.Sprintf("Plan %d accepted, %s: %s",
		p.Number, plural(len(steps), "step"), strings.Join(summary, "; "))})
	return pl.startWave(ctx, s, now, notes)
}

// answerCall records the harness's answer to a call of the model that does
// not run as a tool (a plan, or a call a planner may not make).
func (pl *planner) answerCall(s *State, c ToolCall, status ObsStatus, text string) {
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
func (pl *planner) checkPlan(ctx context.Context, s *State, c ToolCall, d decodedArgs, now time.Time) (steps []PlanStep, why, halt string, rej *Rejection) {
	ctx, cancel := pl.vetContext(ctx)
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
	case len(doc.Steps) > pl.cfg.Plan.MaxSteps:
		return nil, fmt.Sprintf("the plan has %d steps and plan.maxSteps is %d", len(doc.Steps), pl.cfg.Plan.MaxSteps), "", nil
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
		if pl.tools[st.Tool] == nil {
			return nil, fmt.Sprintf("step %s names tool %q, which is not declared; the tools are: %s", st.ID, cut(st.Tool, 64), strings.Join(pl.stepTools(), ", ")), "", nil
		}
		args := CallArguments(st.Arguments)
		da := decodeArgs(args, pl.cfg.Loop.IgnoreArguments)
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
			if g := pl.guardrail(st.Tool, da.full, da.value); g != nil && g.halt {
				return nil, "", fmt.Sprintf("guardrail %s halted the run at plan step %s (%s) before any step ran: %s",
					strings.TrimPrefix(g.rule, "guardrail:"), st.ID, st.Tool, g.reason), nil
			}
			continue
		}
		bc, h := pl.vetCall(ctx, call, da, now, &discard)
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
	res := pl.planReservation(steps, levels, c)
	if r := Admit(&pl.cfg.Budget, s.Usage, res); r != nil {
		return nil, "the plan does not fit the budget: " + r.Reason, "", r
	}
	return steps, "", "", nil
}

// guardrail is the first guardrail that matches a call, or nil.
func (pl *planner) guardrail(tool string, full []byte, args any) *verdict {
	for _, g := range pl.guardrails {
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

func (pl *planner) stepTools() []string {
	var names []string
	for _, t := range pl.offered {
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
func (pl *planner) planReservation(steps []PlanStep, levels map[string]int, plan ToolCall) Usage {
	r := Usage{PerTool: map[string]int{}}
	waves := map[int]*readWave{}
	for _, st := range steps {
		t := pl.tool(st.Tool)
		if !r.addCall(t, t.Child) {
			continue
		}
		w := waves[levels[st.ID]]
		if w == nil {
			w = &readWave{}
			waves[levels[st.ID]] = w
		}
		w.add(t.callDuration(t.Child))
	}
	for _, w := range waves {
		r.WallClock += w.duration()
	}
	solve := pl.cfg.modelReservation(pl.estimator.EstimateInputTokens(&Request{System: pl.solveSystem,
		Messages: []Message{pl.goal, {Role: RoleUser, Content: string(plan.Arguments)}}}))
	r.Turns += solve.Turns
	r.InputTokens += solve.InputTokens
	r.OutputTokens += solve.OutputTokens
	r.Cost += solve.Cost
	r.WallClock += solve.WallClock
	return r
}
