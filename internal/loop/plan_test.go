package loop

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The seed's double-charge task as a plan: E1 identifies the account, E2
// and E3 both name E1's account id and so run together after it.
const doubleChargePlan = `{"steps":[
 {"id":"E1","tool":"identify_account","arguments":{"email":"r.okafor@northwind.example"}},
 {"id":"E2","tool":"find_invoices","arguments":{"account_id":"#E1.account_id","from_date":"2026-08-01","to_date":"2026-08-31"}},
 {"id":"E3","tool":"plan_changes","arguments":{"account_id":"#E1.account_id","from_date":"2026-08-01","to_date":"2026-08-31"}}]}`

func planRun(t *testing.T) *run {
	r := makeRun(t).readTool("identify_account").readTool("find_invoices").readTool("plan_changes")
	r.cfg.Strategy = PlanExecute
	return r.output("identify_account", func(Invocation) Result { return Result{Output: []byte(`{"account_id":"acct_4b71c9e20d8af315"}`)} })
}

func submit(plan string) ScriptEntry { return calls(call(PlanTool, plan)) }

// barrier is a toolbox whose calls to the named tools each wait until all
// of them have started (or a bounded wait passes, and then fail): a run
// completes only when those calls ran at the same time.
type barrier struct {
	inner   Toolbox
	mu      sync.Mutex
	waiting map[string]bool
	started chan struct{}
	args    map[string]string
	n       int
}

func newBarrier(inner Toolbox, tools ...string) *barrier {
	b := &barrier{inner: inner, waiting: map[string]bool{}, started: make(chan struct{}), args: map[string]string{}, n: len(tools)}
	for _, t := range tools {
		b.waiting[t] = true
	}
	return b
}

func (b *barrier) Execute(ctx context.Context, inv Invocation) Result {
	b.mu.Lock()
	b.args[inv.CallID] = string(inv.Arguments)
	if !b.waiting[inv.Tool] {
		b.mu.Unlock()
		return b.inner.Execute(ctx, inv)
	}
	b.n--
	if b.n == 0 {
		close(b.started)
	}
	b.mu.Unlock()
	select {
	case <-b.started:
		return b.inner.Execute(ctx, inv)
	case <-time.After(5 * time.Second):
		return Failed(FailTool, 0, "the other step never started while this one ran")
	}
}

func TestPlan_threeStepsWithPlaceholdersRunInTwoModelCallsTheIndependentTogether(t *testing.T) {
	r := planRun(t).then(submit(doubleChargePlan), answer("Two separate charges: the subscription and a prorated upgrade."))
	b := newBarrier(r.tools, "find_invoices", "plan_changes")
	s := &State{}
	var reqs []*Request
	(&Runner{Engine: r.engine(), Model: modelFunc(func(ctx context.Context, req *Request) (*Reply, error) {
		reqs = append(reqs, req)
		return (&Scripted{Entries: r.script}).Complete(ctx, req)
	}), Tools: b}).Run(context.Background(), s)
	expectOutcome(t, s, Completed)
	if s.Usage.Turns != 2 || s.Usage.ToolCalls != 3 {
		t.Fatalf("usage = %+v, want 2 model calls and 3 tool calls", s.Usage)
	}
	if !strings.Contains(s.Reason, "final answer on turn 2 (the solver, from the evidence of plan 1)") {
		t.Fatalf("reason = %q", s.Reason)
	}
	want := `{"account_id":"acct_4b71c9e20d8af315","from_date":"2026-08-01","to_date":"2026-08-31"}`
	for _, id := range []string{"p1-E2", "p1-E3"} {
		if b.args[id] != want {
			t.Errorf("%s ran with %s, want %s", id, b.args[id], want)
		}
	}
	// The planner sees the tools as documentation and may only submit a
	// plan (or escalate); the solver is offered nothing and reads each
	// result once.
	if got := toolNames(reqs[0].Tools); !cmp.Equal(got, []string{PlanTool, EscalateTool}) {
		t.Errorf("planner tools = %v", got)
	}
	if !strings.Contains(reqs[0].System, "- find_invoices:") {
		t.Errorf("planner system prompt does not list the tools:\n%s", reqs[0].System)
	}
	if len(reqs[1].Tools) != 0 || len(reqs[1].Messages) != 2 {
		t.Fatalf("solver request: %d tools, %d messages; want 0 and 2", len(reqs[1].Tools), len(reqs[1].Messages))
	}
	ev := reqs[1].Messages[1].Content
	if n := strings.Count(ev, "acct_4b71c9e20d8af315"); n != 1 {
		t.Errorf("the solver reads E1's result %d times, want once:\n%s", n, ev)
	}
	for _, step := range []string{"#E1 = identify_account", "#E2 = find_invoices", "#E3 = plan_changes"} {
		if !strings.Contains(ev, step) {
			t.Errorf("evidence lacks %q:\n%s", step, ev)
		}
	}
}

type modelFunc func(ctx context.Context, req *Request) (*Reply, error)

func (f modelFunc) Complete(ctx context.Context, req *Request) (*Reply, error) { return f(ctx, req) }

func toolNames(ts []ToolSchema) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

func TestPlan_refusedStepTriggersOneReplan(t *testing.T) {
	r := planRun(t).readTool("export_all")
	r.cfg.Policy.Rules = []Rule{{Tools: []string{"export_all"}, Decision: Deny, Reason: "bulk exports are not allowed"}}
	r.then(
		submit(`{"steps":[{"id":"E1","tool":"export_all","arguments":{}},{"id":"E2","tool":"identify_account","arguments":{"email":"a@b.example"}}]}`),
		submit(`{"steps":[{"id":"E1","tool":"identify_account","arguments":{"email":"a@b.example"}}]}`),
		answer("The account is acct_4b71c9e20d8af315."))
	s := r.go_()
	expectOutcome(t, s, Completed)
	if s.Plan.Replans != 1 || s.Plan.Number != 2 || s.Usage.Turns != 3 {
		t.Fatalf("plan = %+v, turns = %d; want plan 2 after one replan, 3 model calls", s.Plan, s.Usage.Turns)
	}
	if diff := cmp.Diff([]string{"p2-E1:identify_account"}, r.tools.Ran()); diff != "" {
		t.Fatalf("nothing of the refused plan may run (-want +got):\n%s", diff)
	}
	refusal := s.Transcript[1]
	if refusal.Role != RoleTool || refusal.CallID != "t1-c1" || !strings.Contains(refusal.Content, "Plan 1 was refused: step E1 (export_all) was refused (policy.rules[0]): bulk exports are not allowed") {
		t.Fatalf("the planner is told why: %+v", refusal)
	}
}

func TestPlan_refusedPlans(t *testing.T) {
	cases := []struct {
		name, plan, why string
	}{
		{"unknown tool", `{"steps":[{"id":"E1","tool":"wire_money","arguments":{}}]}`, `names tool "wire_money", which is not declared`},
		{"duplicate ids", `{"steps":[{"id":"E1","tool":"identify_account","arguments":{}},{"id":"E1","tool":"find_invoices","arguments":{}}]}`, "step id E1 is used twice"},
		{"cycle", `{"steps":[{"id":"E1","tool":"find_invoices","arguments":{"a":"#E2"}},{"id":"E2","tool":"plan_changes","arguments":{"a":"#E1.x"}}]}`, "form a cycle: E1 -> E2 -> E1"},
		{"missing step", `{"steps":[{"id":"E1","tool":"find_invoices","arguments":{"a":"#E7.account_id"}}]}`, "names step E7, which the plan does not have"},
		{"too many steps", `{"steps":[{"id":"E1","tool":"find_invoices","arguments":{}},{"id":"E2","tool":"find_invoices","arguments":{}},{"id":"E3","tool":"find_invoices","arguments":{}}]}`, "the plan has 3 steps and plan.maxSteps is 2"},
		{"no steps", `{"steps":[]}`, "the plan has no steps"},
		{"per-tool limit", `{"steps":[{"id":"E1","tool":"plan_changes","arguments":{}},{"id":"E2","tool":"plan_changes","arguments":{"b":1}}]}`, "per-tool limit of plan_changes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := planRun(t).then(submit(tc.plan))
			r.cfg.Plan = PlanConfig{MaxSteps: 2, MaxReplans: new(0)}
			r.cfg.Budget.PerTool = map[string]int{"plan_changes": 1}
			s := r.go_()
			want := Escalated
			if tc.name == "per-tool limit" {
				want = BudgetExhausted
			}
			expectOutcome(t, s, want)
			if !strings.Contains(s.Reason, tc.why) || !strings.Contains(s.Reason, "no replan is left") {
				t.Fatalf("reason = %q, want it to say %q", s.Reason, tc.why)
			}
			if len(r.tools.Ran()) != 0 {
				t.Fatalf("ran %v; nothing of a refused plan may run", r.tools.Ran())
			}
		})
	}
}

func TestPlan_askStepWaitsAndApprovalResumesThePlan(t *testing.T) {
	r := planRun(t).tool("refund", true, false)
	r.cfg.Tools[len(r.cfg.Tools)-1].Parameters = json.RawMessage(`{"type":"object","properties":{"account_id":{"type":"string"}},"required":["account_id"]}`)
	r.then(submit(`{"steps":[{"id":"E1","tool":"identify_account","arguments":{"email":"a@b.example"}},
		{"id":"E2","tool":"refund","arguments":{"account_id":"#E1.account_id","amount_minor":3600}}]}`),
		answer("Refunded 36.00."))
	e, m := r.engine(), &Scripted{Entries: r.script}
	s := &State{}
	eff := drive(t, e, m, r.tools, s, Input{})
	if eff.Kind != EffectAsk || len(eff.Pending) != 1 || eff.Pending[0].ID != "p1-E2" {
		t.Fatalf("effect = %s %+v, want an ask for p1-E2", eff.Kind, eff.Pending)
	}
	// The person sees the arguments after substitution.
	if got := string(eff.Pending[0].Arguments); got != `{"account_id":"acct_4b71c9e20d8af315","amount_minor":3600}` {
		t.Fatalf("pending arguments = %s", got)
	}
	if got := e.Step(s, Input{}); got.Kind != EffectAsk {
		t.Fatalf("without an answer the step keeps waiting, got %s", got.Kind)
	}
	eff = drive(t, e, m, r.tools, s, Input{Answers: map[string]Answer{"p1-E2": Approve}})
	if eff.Kind != EffectFinish {
		t.Fatalf("effect = %s", eff.Kind)
	}
	expectOutcome(t, s, Completed)
	if diff := cmp.Diff([]string{"p1-E1:identify_account", "p1-E2:refund"}, r.tools.Ran()); diff != "" {
		t.Fatalf("calls run (-want +got):\n%s", diff)
	}
}

// drive steps the engine, doing what it asks, until it asks a person or
// finishes.
func drive(t *testing.T, e *Engine, m Model, tb Toolbox, s *State, in Input) Effect {
	t.Helper()
	for range 100 {
		eff := e.Step(s, in)
		in = Input{}
		switch eff.Kind {
		case EffectFinish, EffectAsk:
			return eff
		case EffectCallModel:
			reply, err := m.Complete(context.Background(), eff.Request)
			in.Reply, in.ModelErr = reply, err
		case EffectRunTools:
			in.Results = ExecuteBatch(context.Background(), tb, eff.Calls, eff.Concurrent)
		}
	}
	t.Fatal("the run did not settle in 100 steps")
	return Effect{}
}

func TestPlan_failedStepWithNoReplansLeftEndsToolFailure(t *testing.T) {
	r := planRun(t).output("find_invoices", func(Invocation) Result { return Failed(FailExit, 2, "billing database is read-only") }).
		then(submit(doubleChargePlan), submit(doubleChargePlan))
	r.cfg.Plan.MaxReplans = new(1)
	s := r.go_()
	expectOutcome(t, s, ToolFailure)
	if !strings.Contains(s.Reason, "plan 2 stopped: step E2 (find_invoices) failed") || !strings.Contains(s.Reason, "plan.maxReplans is 1") {
		t.Fatalf("reason = %q", s.Reason)
	}
	// The replan got the evidence so far: E1's result and E3's.
	var replan string
	for _, m := range s.Transcript {
		if m.Role == RoleUser && strings.HasPrefix(m.Content, "Plan 1 stopped") {
			replan = m.Content
		}
	}
	if !strings.Contains(replan, "#E1 = identify_account") || !strings.Contains(replan, "replan 1 of 1") {
		t.Fatalf("replan message = %q", replan)
	}
	if s.Usage.Turns != 2 {
		t.Fatalf("turns = %d, want 2 (two planners, no solver)", s.Usage.Turns)
	}
}

func TestPlan_transientStepFailureAfterRetriesStopsThePlan(t *testing.T) {
	r := planRun(t).output("identify_account", func(Invocation) Result { return Failed(FailUnavailable, 0, "connection refused") }).
		then(submit(doubleChargePlan))
	r.cfg.Plan.MaxReplans = new(0)
	s := r.go_()
	expectOutcome(t, s, ToolFailure)
	if !strings.Contains(s.Reason, "stayed unavailable after 3 attempts") {
		t.Fatalf("reason = %q", s.Reason)
	}
	if got := len(r.tools.Ran()); got != 3 {
		t.Fatalf("ran %d attempts, want 3", got)
	}
}

func TestPlan_solverAsksForAReplan(t *testing.T) {
	r := planRun(t).then(
		submit(`{"steps":[{"id":"E1","tool":"identify_account","arguments":{"email":"a@b.example"}}]}`),
		answer("[replan] the invoices of August are missing"),
		submit(doubleChargePlan),
		answer("Two separate charges."))
	s := r.go_()
	expectOutcome(t, s, Completed)
	if s.Plan.Number != 2 || s.Usage.Turns != 4 {
		t.Fatalf("plan %d, turns %d; want plan 2 and 4 model calls", s.Plan.Number, s.Usage.Turns)
	}
	if s.Answer != "Two separate charges." {
		t.Fatalf("answer = %q", s.Answer)
	}
}

func TestPlan_unresolvablePlaceholderStopsThePlan(t *testing.T) {
	r := planRun(t).then(submit(`{"steps":[{"id":"E1","tool":"identify_account","arguments":{}},
		{"id":"E2","tool":"find_invoices","arguments":{"account_id":"#E1.customer.id"}}]}`))
	r.cfg.Plan.MaxReplans = new(0)
	s := r.go_()
	expectOutcome(t, s, Escalated)
	if !strings.Contains(s.Reason, `#E1.customer: the result has no field "customer" there`) {
		t.Fatalf("reason = %q", s.Reason)
	}
}

func TestPlan_restartInTheMiddleRepeatsNothing(t *testing.T) {
	r := planRun(t).tool("refund", true, true).
		then(submit(`{"steps":[{"id":"E1","tool":"identify_account","arguments":{"email":"a@b.example"}},
			{"id":"E2","tool":"refund","arguments":{"account_id":"#E1.account_id"}},
			{"id":"E3","tool":"find_invoices","arguments":{"account_id":"#E1.account_id","refund":"#E2"}}]}`),
			answer("Refunded."))
	m := &Scripted{Entries: r.script}
	s := &State{}
	e := r.engine()
	// Run until the write (E2) is dispatched, then "crash": the saved
	// state is reloaded by a new engine.
	in := Input{}
	for {
		eff := e.Step(s, in)
		in = Input{}
		if eff.Kind == EffectRunTools && len(eff.Calls) == 1 && eff.Calls[0].CallID == "p1-E2" {
			in.Results = ExecuteBatch(context.Background(), r.tools, eff.Calls, false)
			break
		}
		switch eff.Kind {
		case EffectCallModel:
			in.Reply, in.ModelErr = m.Complete(context.Background(), eff.Request)
		case EffectRunTools:
			in.Results = ExecuteBatch(context.Background(), r.tools, eff.Calls, eff.Concurrent)
		case EffectContinue:
		default:
			t.Fatalf("unexpected effect %s", eff.Kind)
		}
	}
	// The write's result is recorded; the state is saved right after.
	e.Step(s, in)
	saved := s.Clone()
	s2 := saved.Clone()
	eff := drive(t, r.engine(), m, r.tools, s2, Input{})
	if eff.Kind != EffectFinish {
		t.Fatalf("effect %s", eff.Kind)
	}
	expectOutcome(t, s2, Completed)
	if diff := cmp.Diff([]string{"p1-E1:identify_account", "p1-E2:refund", "p1-E3:find_invoices"}, r.tools.Ran()); diff != "" {
		t.Fatalf("every step runs once (-want +got):\n%s", diff)
	}
}

func TestPlan_writeInFlightAtACrashIsNotRepeated(t *testing.T) {
	r := planRun(t).tool("refund", true, true).
		then(submit(`{"steps":[{"id":"E1","tool":"refund","arguments":{"account_id":"acct_1"}}]}`),
			submit(`{"steps":[{"id":"E1","tool":"identify_account","arguments":{"email":"a@b.example"}}]}`),
			answer("The refund's outcome is unknown; the account is acct_4b71c9e20d8af315."))
	m := &Scripted{Entries: r.script}
	e := r.engine()
	s := &State{}
	eff := e.Step(s, Input{})
	reply, _ := m.Complete(context.Background(), eff.Request)
	eff = e.Step(s, Input{Reply: reply})
	if eff.Kind != EffectRunTools || eff.Calls[0].CallID != "p1-E1" {
		t.Fatalf("effect %s %+v", eff.Kind, eff.Calls)
	}
	// Crash with the write dispatched: the reloaded run has no result.
	s2 := s.Clone()
	if eff := drive(t, r.engine(), m, r.tools, s2, Input{}); eff.Kind != EffectFinish {
		t.Fatalf("effect %s", eff.Kind)
	}
	expectOutcome(t, s2, Completed)
	if diff := cmp.Diff([]string{"p2-E1:identify_account"}, r.tools.Ran()); diff != "" {
		t.Fatalf("the write in flight is never repeated (-want +got):\n%s", diff)
	}
	if !strings.Contains(s2.Transcript[3].Content, "whether it took effect is unknown") {
		t.Fatalf("the step's outcome is reported unknown: %+v", s2.Transcript[3])
	}
}

func TestPlan_stepCallIsRebuiltFromThePlanAndTheEvidence(t *testing.T) {
	r := planRun(t).then(submit(doubleChargePlan))
	e, m := r.engine(), &Scripted{Entries: r.script}
	s := &State{}
	in := Input{}
	for {
		eff := e.Step(s, in)
		in = Input{}
		if eff.Kind == EffectCallModel {
			in.Reply, _ = m.Complete(context.Background(), eff.Request)
			continue
		}
		if eff.Kind == EffectContinue {
			continue
		}
		if eff.Kind != EffectRunTools {
			t.Fatalf("effect %s", eff.Kind)
		}
		if len(eff.Calls) == 2 {
			for _, inv := range eff.Calls {
				tc, ok := e.PlanStepCall(s, inv.CallID)
				if !ok || tc.Name != inv.Tool || string(tc.Arguments) != string(inv.Arguments) {
					t.Fatalf("PlanStepCall(%s) = %+v, %v; the engine dispatched %s %s", inv.CallID, tc, ok, inv.Tool, inv.Arguments)
				}
			}
			if _, ok := e.PlanStepCall(s, "p1-E9"); ok {
				t.Fatal("PlanStepCall found a step the plan does not have")
			}
			return
		}
		in.Results = ExecuteBatch(context.Background(), r.tools, eff.Calls, eff.Concurrent)
	}
}

func TestPlan_resolvePaths(t *testing.T) {
	result := `{"count":2,"invoices":[{"id":"in_9f21","total_minor":8240},{"id":"in_8c04"}]}`
	cases := []struct {
		ref  string
		want string
		err  string
	}{
		{"#E2", result, ""},
		{"#E2.count", "2", ""},
		{"#E2.invoices.1.id", `"in_8c04"`, ""},
		{"#E2.invoices.0", `{"id":"in_9f21","total_minor":8240}`, ""},
		{"#E2.invoices.2.id", "", `a list of 2 there, and "2" is not an index`},
		{"#E2.count.x", "", `a single value before "x"`},
	}
	for _, tc := range cases {
		ph, ok, err := parsePlaceholder(tc.ref, map[string]bool{"E2": true})
		if !ok || err != nil {
			t.Fatalf("%s: not a placeholder (%v)", tc.ref, err)
		}
		v, err := resolve(result, ph)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.ref, err, tc.err)
			}
			continue
		}
		got, _ := json.Marshal(v)
		var a, b any
		_ = json.Unmarshal(got, &a)
		_ = json.Unmarshal([]byte(tc.want), &b)
		if err != nil || !cmp.Equal(a, b) {
			t.Errorf("%s = %s, %v; want %s", tc.ref, got, err, tc.want)
		}
	}
	if _, ok, err := parsePlaceholder("#ff0000", map[string]bool{"E1": true}); ok || err != nil {
		t.Errorf("a colour is not a placeholder: %v %v", ok, err)
	}
}

func TestPlan_configIsChecked(t *testing.T) {
	cfg := Config{Goal: "g", Budget: Budget{MaxTurns: 3}, Strategy: PlanExecute, Plan: PlanConfig{MaxSteps: 33}}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "at most 32 steps") {
		t.Fatalf("err = %v", err)
	}
	cfg.Plan = PlanConfig{}
	cfg.Tools = []ToolSpec{{Name: PlanTool}}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("err = %v", err)
	}
	cfg.Strategy = "tree"
	if _, err := New(cfg); err == nil {
		t.Fatal("an unknown strategy was accepted")
	}
}

func TestPlan_substitutedArgumentsAreVettedBeforeTheStepRuns(t *testing.T) {
	r := planRun(t).then(submit(doubleChargePlan))
	r.cfg.Plan.MaxReplans = new(0)
	// The rule can only match once E1's result is in place.
	r.cfg.Policy.Rules = []Rule{{Tools: []string{"find_invoices"}, When: `args.account_id == "acct_4b71c9e20d8af315"`, Decision: Deny, Reason: "this account's invoices are sealed"}}
	s := r.go_()
	expectOutcome(t, s, Escalated)
	if !strings.Contains(s.Reason, "step E2 (find_invoices) did not run (denied, policy.rules[0]): this account's invoices are sealed") {
		t.Fatalf("reason = %q", s.Reason)
	}
	for _, ran := range r.tools.Ran() {
		if strings.HasSuffix(ran, ":find_invoices") || strings.HasSuffix(ran, ":plan_changes") {
			t.Fatalf("ran %v: the wave with a refused step runs none of it", r.tools.Ran())
		}
	}
}

func TestPlan_haltingGuardrailEndsTheRunBeforeAnyStepRuns(t *testing.T) {
	r := planRun(t).then(submit(`{"steps":[{"id":"E1","tool":"identify_account","arguments":{"email":"a@b.example"}},
		{"id":"E2","tool":"find_invoices","arguments":{"account_id":"#E1.account_id","card":"4111111111111111"}}]}`))
	r.cfg.Guardrails = []Guardrail{{Name: "no-cards", Tools: []string{"*"}, Pattern: `\b\d{13,19}\b`, Severity: Halt}}
	s := r.go_()
	expectOutcome(t, s, GuardrailStop)
	if !strings.Contains(s.Reason, "guardrail no-cards halted the run at plan step E2 (find_invoices) before any step ran") || len(r.tools.Ran()) != 0 {
		t.Fatalf("reason %q, ran %v", s.Reason, r.tools.Ran())
	}
}

func TestPlan_verifierJudgesTheSolversAnswerAndANewTrialPlansAfresh(t *testing.T) {
	r := planRun(t).readTool("check").
		then(submit(doubleChargePlan), answer("No idea."), submit(doubleChargePlan), answer("Two charges: in_9f21 and in_8c04.")).
		output("check", func(inv Invocation) Result {
			if strings.Contains(string(inv.Arguments), "in_8c04") {
				return Result{Output: []byte("names the invoices")}
			}
			return Failed(FailExit, 1, "name the invoices")
		})
	r.cfg.Verify = &Verify{Tool: "check", MaxTrials: 2}
	s := r.go_()
	expectOutcome(t, s, Completed)
	if s.Plan.Number != 2 || s.Plan.Replans != 0 || s.Verify.Trial != 2 || s.Usage.Turns != 4 {
		t.Fatalf("plan %+v, trial %d, turns %d", s.Plan, s.Verify.Trial, s.Usage.Turns)
	}
	if !strings.Contains(s.Reason, "verified by check") {
		t.Fatalf("reason = %q", s.Reason)
	}
}
