package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRun_doubleChargeReActRunCompletesOnTurnFour(t *testing.T) {
	r := makeRun(t).readTool("identify_account").readTool("find_invoices").readTool("plan_changes").
		then(
			ScriptEntry{ToolCalls: []ToolCall{call("identify_account", `{"email":"r.okafor@northwind.example"}`)}, Usage: usage(1600, 40)},
			ScriptEntry{ToolCalls: []ToolCall{call("find_invoices", `{"account_id":"acct_4b71c9e20d8af315","from_date":"2026-08-01","to_date":"2026-08-31"}`)}, Usage: usage(1700, 60)},
			ScriptEntry{ToolCalls: []ToolCall{call("plan_changes", `{"account_id":"acct_4b71c9e20d8af315","from_date":"2026-08-01","to_date":"2026-08-31"}`)}, Usage: usage(1900, 60)},
			ScriptEntry{Content: "Two separate charges: the subscription and a prorated upgrade.", Usage: usage(2100, 60)},
		).
		output("identify_account", func(Invocation) Result { return Result{Output: []byte(`{"account_id":"acct_4b71c9e20d8af315"}`)} })
	s := r.go_()
	expectOutcome(t, s, Completed)
	if s.Turn != 4 || s.Usage.Turns != 4 {
		t.Fatalf("turn = %d, usage.turns = %d, want 4 and 4", s.Turn, s.Usage.Turns)
	}
	if diff := cmp.Diff([]string{"t1-c1:identify_account", "t2-c1:find_invoices", "t3-c1:plan_changes"}, r.tools.Ran()); diff != "" {
		t.Fatalf("calls run (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(s.Answer, "Two separate charges") {
		t.Fatalf("answer = %q", s.Answer)
	}
	if s.Usage.InputTokens != 7300 || s.Usage.OutputTokens != 220 || s.Usage.ToolCalls != 3 {
		t.Fatalf("usage = %+v", s.Usage)
	}
	// Every proposed call has exactly one observation, right after the
	// assistant message that proposed it.
	tools := 0
	for _, m := range s.Transcript {
		if m.Role == RoleTool {
			tools++
		}
	}
	if tools != 3 {
		t.Fatalf("tool observations = %d, want 3", tools)
	}
}

// One forced path per outcome.
func TestRun_eachOutcomeHasAForcedPath(t *testing.T) {
	errTool := func(Invocation) Result { return Result{} }
	_ = errTool
	cases := []struct {
		name  string
		setup func(r *run)
		want  Outcome
		// reason must contain this
		reason string
	}{
		{"completed", func(r *run) { r.then(answer("done")) }, Completed, "final answer on turn 1"},
		{"budget: turns", func(r *run) {
			r.readTool("a").maxTurns(2).then(calls(call("a", `{"n":1}`)), calls(call("a", `{"n":2}`)), answer("late"))
		}, BudgetExhausted, "turns ceiling: 2 consumed + 1 reserved = 3 > 2"},
		{"guardrail: halt", func(r *run) {
			r.readTool("a")
			r.cfg.Guardrails = []Guardrail{{Name: "no-cards", Tools: []string{"*"}, Pattern: `\b\d{13,19}\b`, Severity: Halt, Reason: "card numbers stay here"}}
			r.then(calls(call("a", `{"card":"4111111111111111"}`)))
		}, GuardrailStop, "guardrail no-cards halted the run at call t1-c1"},
		{"guardrail: refusal", func(r *run) { r.then(ScriptEntry{Refusal: "I can't help with that."}) }, GuardrailStop, "the model refused: I can't help with that."},
		{"loop", func(r *run) {
			r.readTool("a").then(calls(call("a", `{}`)), calls(call("a", `{}`)), calls(call("a", `{}`)))
		}, LoopDetected, "proposed 3 times"},
		{"approval: stop", func(r *run) {
			r.tool("refund", true, false).then(calls(call("refund", `{"amount_minor":8240}`)))
			r.approve = func(context.Context, []Call) map[string]Answer { return map[string]Answer{"t1-c1": Stop} }
		}, ApprovalDenied, "a person stopped the run when asked to approve t1-c1 (refund)"},
		{"escalated: by the model", func(r *run) {
			r.then(calls(call(EscalateTool, `{"reason":"needs a refund decision"}`)))
		}, Escalated, "handed the task to a person: needs a refund decision"},
		{"tool failure: provider", func(r *run) { r.then(ScriptEntry{Error: "HTTP 503 after 4 attempts"}) }, ToolFailure, "HTTP 503 after 4 attempts"},
		{"tool failure: script exhausted", func(r *run) {}, ToolFailure, "script exhausted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := makeRun(t)
			tc.setup(r)
			s := r.go_()
			expectOutcome(t, s, tc.want)
			if !strings.Contains(s.Reason, tc.reason) {
				t.Fatalf("reason %q does not contain %q", s.Reason, tc.reason)
			}
		})
	}
}

func TestStep_unknownPhaseIsAnError(t *testing.T) {
	e := makeRun(t).then(answer("x")).engine()
	s := &State{Phase: "Sideways", Turn: 2}
	eff := e.Step(s, Input{})
	if eff.Kind != EffectFinish {
		t.Fatalf("effect = %s", eff.Kind)
	}
	expectOutcome(t, s, Error)
}

func TestStep_approvalTimeoutEscalates(t *testing.T) {
	r := makeRun(t).tool("refund", true, false).then(calls(call("refund", `{}`)))
	r.cfg.ApprovalTimeout = time.Hour
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("refund", `{}`)}}})
	if eff.Kind != EffectAsk || len(eff.Pending) != 1 || eff.Pending[0].Rule != "tool.irreversible" {
		t.Fatalf("effect = %+v", eff)
	}
	if got, want := e.ApprovalDeadline(s), r.clock.Now().Add(time.Hour); !got.Equal(want) {
		t.Fatalf("deadline = %s, want %s", got, want)
	}
	r.clock.Advance(59 * time.Minute)
	if eff = e.Step(s, Input{}); eff.Kind != EffectAsk {
		t.Fatalf("before the timeout: effect = %s", eff.Kind)
	}
	r.clock.Advance(2 * time.Minute)
	e.Step(s, Input{})
	expectOutcome(t, s, Escalated)
	if !strings.Contains(s.Reason, "t1-c1 (refund) waited more than approvalTimeout (1h0m0s)") {
		t.Fatalf("reason = %q", s.Reason)
	}
	// Waiting for a person is not work: the wall clock did not count the hour.
	if s.Usage.WallClock > time.Minute {
		t.Fatalf("wall clock counted the wait: %s", s.Usage.WallClock)
	}
}

func TestStep_cancelEndsTheRunAtTheNextBoundary(t *testing.T) {
	r := makeRun(t).readTool("a").then(calls(call("a", `{}`)), answer("x"))
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("a", `{}`)}, Usage: usage(10, 1)}})
	e.Step(s, Input{Cancel: true, Results: []Result{{CallID: "t1-c1", Output: []byte("ok")}}})
	expectOutcome(t, s, ApprovalDenied)
	if s.Usage.ToolCalls != 1 {
		t.Fatalf("the finished call was not settled: %+v", s.Usage)
	}
}

func TestPrecedence(t *testing.T) {
	t.Run("loop detection names a stuck run before the turn ceiling", func(t *testing.T) {
		r := makeRun(t).readTool("read_file").maxTurns(9)
		for range 10 {
			r.then(calls(call("read_file", `{"path":"/tmp/example.txt"}`)))
		}
		s := r.go_()
		expectOutcome(t, s, LoopDetected)
		if s.Turn != 3 {
			t.Fatalf("stopped on turn %d, want 3", s.Turn)
		}
	})
	t.Run("the turn ceiling wins when it comes first", func(t *testing.T) {
		r := makeRun(t).readTool("read_file").maxTurns(2)
		for range 10 {
			r.then(calls(call("read_file", `{"path":"/tmp/example.txt"}`)))
		}
		s := r.go_()
		expectOutcome(t, s, BudgetExhausted)
	})
	t.Run("a halt on the third call stops the batch before calls one and two run", func(t *testing.T) {
		r := makeRun(t).readTool("a").tool("b", true, true).readTool("c")
		r.cfg.Guardrails = []Guardrail{{Name: "no-drop", Tools: []string{"c"}, Pattern: "DROP", Severity: Halt, Reason: "no DDL"}}
		r.then(calls(call("a", `{}`), call("b", `{}`), call("c", `{"q":"DROP TABLE x"}`)))
		s := r.go_()
		expectOutcome(t, s, GuardrailStop)
		if ran := r.tools.Ran(); len(ran) != 0 {
			t.Fatalf("calls ran before the halt: %v", ran)
		}
	})
	t.Run("a per-call deny leaves the batch's other approved calls eligible", func(t *testing.T) {
		r := makeRun(t).readTool("a").readTool("b")
		r.cfg.Policy.Rules = []Rule{{Tools: []string{"b"}, Decision: Deny, Reason: "b is off today"}}
		r.then(calls(call("a", `{}`), call("b", `{}`)), answer("done"))
		s := r.go_()
		expectOutcome(t, s, Completed)
		if diff := cmp.Diff([]string{"t1-c1:a"}, r.tools.Ran()); diff != "" {
			t.Fatalf("ran (-want +got):\n%s", diff)
		}
		obs := toolMessages(s)
		if obs[1].Status != ObsDenied || !strings.Contains(obs[1].Content, "b is off today") {
			t.Fatalf("denied call's observation = %+v", obs[1])
		}
	})
	t.Run("a truncated answer is not Completed", func(t *testing.T) {
		s := makeRun(t).then(ScriptEntry{Content: "The answer is", Truncated: true}, answer("The answer is 42.")).go_()
		expectOutcome(t, s, Completed)
		if s.Turn != 2 || s.Answer != "The answer is 42." {
			t.Fatalf("turn %d answer %q: the truncated answer was accepted", s.Turn, s.Answer)
		}
	})
	t.Run("a truncated answer at the last turn ends BudgetExhausted, not Completed", func(t *testing.T) {
		s := makeRun(t).maxTurns(1).then(ScriptEntry{Content: "The answer is", Truncated: true}).go_()
		expectOutcome(t, s, BudgetExhausted)
	})
}

func toolMessages(s *State) []Message {
	return keep(s.Transcript, func(m Message) bool { return m.Role == RoleTool })
}

func TestVetting(t *testing.T) {
	r := makeRun(t).readTool("lookup").tool("issue_refund", true, false).tool("note", true, true)
	r.cfg.Policy = Policy{Default: Allow, Rules: []Rule{
		{Tools: []string{"issue_refund"}, When: "args.amount_minor > 5000", Decision: Ask, Reason: "Refunds above 50.00 need a person."},
		{Tools: []string{"issue_refund"}, Decision: Allow},
	}}
	r.cfg.Guardrails = []Guardrail{{Name: "no-cards", Tools: []string{"*"}, Pattern: `\b\d{13,19}\b`, Severity: Block, Reason: "Card numbers must not leave the cluster."}}
	e := r.engine()
	cases := []struct {
		name     string
		call     ToolCall
		grants   []string
		verdict  Decision
		rule     string
		obsState CallState
	}{
		{"read allowed by default", call("lookup", `{"q":"x"}`), nil, Allow, "policy.default", CallProposed},
		{"guardrail block comes before policy", call("lookup", `{"card":"4111111111111111"}`), nil, Blocked, "guardrail:no-cards", CallDone},
		{"CEL condition true asks", call("issue_refund", `{"amount_minor":8240}`), nil, Ask, "policy.rules[0]", CallProposed},
		{"CEL condition false falls through, then irreversible tightens allow to ask", call("issue_refund", `{"amount_minor":100}`), nil, Ask, "tool.irreversible", CallProposed},
		{"a grant waives the irreversible ask", call("issue_refund", `{"amount_minor":100}`), []string{"issue_refund"}, Allow, "policy.grants", CallProposed},
		{"a reversible mutation is allowed", call("note", `{}`), nil, Allow, "policy.default", CallProposed},
		{"unknown tool", call("nope", `{}`), nil, Deny, "unknown-tool", CallDone},
		{"arguments not an object", call("lookup", `[1,2]`), nil, Deny, "invalid-arguments", CallDone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.cfg.Policy.Grants = tc.grants
			s := &State{}
			e.Step(s, Input{})
			e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{tc.call}}})
			c := s.Calls[0]
			if c.Verdict != tc.verdict || c.Rule != tc.rule || (c.State == CallDone) != (tc.obsState == CallDone) {
				t.Fatalf("call = verdict %s rule %s state %s, want %s %s %s (reason %q, obs %q)",
					c.Verdict, c.Rule, c.State, tc.verdict, tc.rule, tc.obsState, c.Reason, c.Observation)
			}
		})
	}
}

func TestVetting_schemaViolationIsAnObservation(t *testing.T) {
	r := makeRun(t)
	r.cfg.Tools = []ToolSpec{{Name: "identify_account", Parameters: json.RawMessage(`{"type":"object","properties":{"email":{"type":"string"}},"required":["email"]}`)}}
	r.then(calls(call("identify_account", `{"mail":"x"}`)), answer("gave up"))
	s := r.go_()
	expectOutcome(t, s, Completed)
	obs := toolMessages(s)[0]
	if obs.Status != ObsInvalid || !strings.Contains(obs.Content, "email") {
		t.Fatalf("observation = %+v", obs)
	}
	if len(r.tools.Ran()) != 0 {
		t.Fatalf("an invalid call ran")
	}
}

func TestVetting_badCELIsAConfigError(t *testing.T) {
	r := makeRun(t).readTool("a")
	r.cfg.Policy.Rules = []Rule{{Tools: []string{"a"}, When: "args.x >", Decision: Deny}}
	if _, err := New(r.cfg); err == nil || !strings.Contains(err.Error(), "policy.rules[0].when") {
		t.Fatalf("err = %v", err)
	}
}

func TestApproval_approveRunsDenyDeclines(t *testing.T) {
	r := makeRun(t).tool("refund", true, false).tool("close", true, false).
		then(calls(call("refund", `{"id":1}`), call("close", `{"id":1}`)), answer("ok"))
	asked := 0
	r.approve = func(_ context.Context, p []Call) map[string]Answer {
		asked++
		if len(p) != 2 {
			t.Fatalf("pending = %d calls, want the whole batch's 2", len(p))
		}
		return map[string]Answer{"t1-c1": Approve, "t1-c2": DenyAnswer}
	}
	s := r.go_()
	expectOutcome(t, s, Completed)
	if diff := cmp.Diff([]string{"t1-c1:refund"}, r.tools.Ran()); diff != "" {
		t.Fatalf("ran (-want +got):\n%s", diff)
	}
	obs := toolMessages(s)
	if obs[1].Status != ObsDeclined || !strings.Contains(obs[1].Content, "A person declined") {
		t.Fatalf("observation = %+v", obs[1])
	}
}

func TestApproval_nothingRunsUntilEveryAskIsAnswered(t *testing.T) {
	r := makeRun(t).readTool("read").tool("refund", true, false).tool("close", true, false)
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("read", `{}`), call("refund", `{}`), call("close", `{}`)}}})
	if eff.Kind != EffectAsk {
		t.Fatalf("effect = %s", eff.Kind)
	}
	eff = e.Step(s, Input{Answers: map[string]Answer{"t1-c2": Approve}})
	if eff.Kind != EffectAsk || len(eff.Pending) != 1 || eff.Pending[0].ID != "t1-c3" {
		t.Fatalf("after one answer: %+v", eff)
	}
	eff = e.Step(s, Input{Answers: map[string]Answer{"t1-c2": Approve, "t1-c3": Approve, "t9-c9": Approve}})
	if eff.Kind != EffectRunTools || len(eff.Calls) != 1 || eff.Calls[0].CallID != "t1-c1" {
		t.Fatalf("after all answers: %+v", eff)
	}
	stale := 0
	for _, n := range eff.Notes {
		if n.Kind == NoteStaleApproval && n.CallID == "t9-c9" {
			stale++
		}
	}
	if stale != 1 {
		t.Fatalf("the answer for t9-c9 was not reported stale: %+v", eff.Notes)
	}
}

func TestActing_mixedBatchRunsReadsFirstThenWritesInOrder(t *testing.T) {
	r := makeRun(t).tool("w", true, true).readTool("r").
		then(calls(call("w", `{"n":1}`), call("r", `{"n":2}`), call("w", `{"n":3}`), call("r", `{"n":4}`)), answer("done"))
	for _, n := range []string{"w", "r"} {
		r.output(n, func(inv Invocation) Result { return Result{Output: []byte("result of " + inv.CallID)} })
	}
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	eff := e.Step(s, Input{Reply: &Reply{ToolCalls: r.script[0].ToolCalls}})
	if eff.Kind != EffectRunTools || !eff.Concurrent || len(eff.Calls) != 2 || eff.Calls[0].CallID != "t1-c2" || eff.Calls[1].CallID != "t1-c4" {
		t.Fatalf("first group = %+v, want the two reads together", eff)
	}
	// Reads come back; then writes, one at a time, in proposal order.
	eff = e.Step(s, Input{Results: ExecuteBatch(context.Background(), r.tools, eff.Calls, true)})
	if len(eff.Calls) != 1 || eff.Calls[0].CallID != "t1-c1" {
		t.Fatalf("second group = %+v", eff.Calls)
	}
	eff = e.Step(s, Input{Results: ExecuteBatch(context.Background(), r.tools, eff.Calls, false)})
	if len(eff.Calls) != 1 || eff.Calls[0].CallID != "t1-c3" {
		t.Fatalf("third group = %+v", eff.Calls)
	}
	eff = e.Step(s, Input{Results: ExecuteBatch(context.Background(), r.tools, eff.Calls, false)})
	if eff.Kind != EffectContinue {
		t.Fatalf("effect = %s", eff.Kind)
	}
	var got []string
	for _, m := range toolMessages(s) {
		got = append(got, m.CallID+"="+m.Content)
	}
	want := []string{"t1-c1=result of t1-c1", "t1-c2=result of t1-c2", "t1-c3=result of t1-c3", "t1-c4=result of t1-c4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("observations (-want +got):\n%s", diff)
	}
}

func TestActing_batchIsReservedBeforeAnyMemberStarts(t *testing.T) {
	r := makeRun(t)
	r.cfg.Tools = []ToolSpec{{Name: "search", MaxCost: MustMoney("0.40")}}
	r.cfg.Budget.MaxCost = new(MustMoney("1"))
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	// Three searches at a declared $0.40 each cannot fit under $1: nothing
	// may start.
	eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("search", `{"q":1}`), call("search", `{"q":2}`), call("search", `{"q":3}`)}}})
	if eff.Kind != EffectFinish {
		t.Fatalf("effect = %s", eff.Kind)
	}
	expectOutcome(t, s, BudgetExhausted)
	if !strings.Contains(s.Reason, "cost ceiling: $0.0000 consumed + $1.2000 reserved = $1.2000 > $1.0000") {
		t.Fatalf("reason = %q", s.Reason)
	}
}

func TestBudget_eachDimensionCanBeExhausted(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(r *run)
		reason string
	}{
		{"turns", func(r *run) { r.maxTurns(1).then(calls(call("a", `{}`))) }, "turns ceiling"},
		{"tokens", func(r *run) {
			r.cfg.Budget.MaxTokens = 6000
			r.then(ScriptEntry{ToolCalls: []ToolCall{call("a", `{}`)}, Usage: usage(1500, 100)})
		}, "tokens ceiling"},
		{"wall clock", func(r *run) {
			r.cfg.Budget.MaxWallClock = 100 * time.Second
			r.cfg.Model.Timeout = 30 * time.Second
			r.tools.took = 80 * time.Second
			r.then(calls(call("a", `{}`)))
		}, "wallClock ceiling: 80s consumed + 30s reserved = 110s > 100s"},
		{"cost", func(r *run) {
			r.cfg.Model.Pricing = Pricing{Input: MustMoney("3"), Output: MustMoney("15")}
			r.cfg.Budget.MaxCost = new(MustMoney("0.10"))
			// $0.051 spent, then the next turn's $0.066 reservation passes $0.10.
			r.then(ScriptEntry{ToolCalls: []ToolCall{call("a", `{}`)}, Usage: usage(2000, 3000)})
		}, "cost ceiling"},
		{"tool calls", func(r *run) {
			r.cfg.Budget.MaxToolCalls = new(2)
			r.then(calls(call("a", `{"n":1}`), call("a", `{"n":2}`)), calls(call("a", `{"n":3}`)))
		}, "toolCalls ceiling: 2 consumed + 1 reserved = 3 > 2"},
		{"per tool", func(r *run) {
			r.cfg.Budget.PerTool = map[string]int{"a": 1}
			r.then(calls(call("a", `{"n":1}`)), calls(call("a", `{"n":2}`)))
		}, "per-tool limit of a: 1 calls made + 1 in this batch = 2 > 1"},
		{"default tool limit", func(r *run) {
			r.cfg.Budget.DefaultToolLimit = new(2)
			r.then(calls(call("a", `{"n":1}`), call("a", `{"n":2}`), call("a", `{"n":3}`)))
		}, "per-tool limit of a: 0 calls made + 3 in this batch = 3 > 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := makeRun(t).readTool("a")
			tc.setup(r)
			s := r.go_()
			expectOutcome(t, s, BudgetExhausted)
			if !strings.Contains(s.Reason, tc.reason) {
				t.Fatalf("reason %q does not contain %q", s.Reason, tc.reason)
			}
		})
	}
}

func TestBudget_softCeilingsWarnOnceAt80And100AndNeverStop(t *testing.T) {
	r := makeRun(t).readTool("a").maxTurns(5)
	r.cfg.Budget.Soft = []Dimension{DimTurns}
	for i := range 6 {
		r.then(calls(call("a", fmt.Sprintf(`{"n":%d}`, i))))
	}
	r.then(answer("done"))
	e := r.engine()
	var warnings []string
	s := &State{}
	(&Runner{Engine: e, Model: &Scripted{Entries: r.script}, Tools: r.tools, OnStep: func(_ *State, eff Effect) {
		for _, n := range eff.Notes {
			if n.Kind == NoteBudgetWarning {
				warnings = append(warnings, n.Message)
			}
		}
	}}).Run(context.Background(), s)
	expectOutcome(t, s, Completed)
	if s.Usage.Turns != 7 {
		t.Fatalf("turns = %d, want 7 (past the soft ceiling of 5)", s.Usage.Turns)
	}
	want := []string{
		"Soft ceiling turns reached 80% (the run goes on: soft ceilings only warn)",
		"Soft ceiling turns reached 100% (the run goes on: soft ceilings only warn)",
	}
	if diff := cmp.Diff(want, warnings); diff != "" {
		t.Fatalf("warnings (-want +got):\n%s", diff)
	}
}

// The turn-eleven admission table of the seeds, row by row.
func TestAdmission_turnElevenTable(t *testing.T) {
	b := Budget{MaxTurns: 12, MaxTokens: 1_000_000, MaxWallClock: 300 * time.Second, MaxCost: new(MustMoney("1.00")), MaxToolCalls: new(50), DefaultToolLimit: new(100)}
	consumed := Usage{Turns: 11, Cost: MustMoney("0.82"), WallClock: 287 * time.Second, ToolCalls: 47}
	// Reservation: 60,000 input tokens at $3/M, 4,096 output at $15/M, tools $0.04.
	cost := TokenCost(60000, MustMoney("3")) + TokenCost(4096, MustMoney("15")) + MustMoney("0.04")
	if cost != MustMoney("0.28144") {
		t.Fatalf("reserved cost = %s, want 0.28144", cost)
	}
	reserved := Usage{Turns: 1, Cost: cost, WallClock: 36 * time.Second, ToolCalls: 6}
	cases := []struct {
		dim    Dimension
		admit  bool
		reason string
	}{
		{DimTurns, true, ""},
		{DimCost, false, "cost ceiling: $0.8200 consumed + $0.28144 reserved = $1.10144 > $1.0000"},
		{DimWallClock, false, "wallClock ceiling: 287s consumed + 36s reserved = 323s > 300s"},
		{DimToolCalls, false, "toolCalls ceiling: 47 consumed + 6 reserved = 53 > 50"},
	}
	for _, tc := range cases {
		t.Run(string(tc.dim), func(t *testing.T) {
			// Check one dimension at a time by making the others soft.
			bb := b
			bb.Soft = nil
			for _, d := range []Dimension{DimTurns, DimTokens, DimWallClock, DimCost, DimToolCalls} {
				if d != tc.dim {
					bb.Soft = append(bb.Soft, d)
				}
			}
			rej := Admit(&bb, consumed, reserved)
			if tc.admit != (rej == nil) {
				t.Fatalf("admit = %v, want %v (%v)", rej == nil, tc.admit, rej)
			}
			if rej != nil && (rej.Dimension != tc.dim || !strings.Contains(rej.Reason, tc.reason)) {
				t.Fatalf("rejection = %+v, want %s with %q", rej, tc.dim, tc.reason)
			}
		})
	}
	// All hard: the first rejecting dimension, in the documented order, names it.
	if rej := Admit(&b, consumed, reserved); rej == nil || rej.Dimension != DimWallClock {
		t.Fatalf("first rejection = %+v, want wallClock (checked before cost)", rej)
	}
}

// The login-page incident: the same fetch three times, each HTML page with
// a fresh request id, is LoopDetected on turn 4 at $0.195.
func TestLoop_loginPageIncident(t *testing.T) {
	r := makeRun(t).readTool("read_incident").readTool("fetch_dashboard")
	// The seed's turn costs ($0.041, $0.049, $0.051, $0.054) at a price
	// that makes them usages this small prompt can have: a reply far above
	// what its call reserved would end the run Error.
	r.cfg.Model.Pricing = Pricing{Input: MustMoney("20"), Output: MustMoney("100")}
	r.then(
		ScriptEntry{ToolCalls: []ToolCall{call("read_incident", `{"id":"INC-2231"}`)}, Usage: usage(2000, 10)},
		ScriptEntry{ToolCalls: []ToolCall{call("fetch_dashboard", `{"deployment":"checkout-7f9c"}`)}, Usage: usage(2400, 10)},
		ScriptEntry{ToolCalls: []ToolCall{call("fetch_dashboard", `{"deployment":"checkout-7f9c"}`)}, Usage: usage(2500, 10)},
		ScriptEntry{ToolCalls: []ToolCall{call("fetch_dashboard", `{"deployment":"checkout-7f9c"}`)}, Usage: usage(2650, 10)},
		answer("never reached"),
	)
	n := 0
	r.output("fetch_dashboard", func(Invocation) Result {
		n++
		page := fmt.Sprintf(`<!DOCTYPE html><html><head><script>var rid="req-%d";</script></head><body><h1>Sign in</h1><form>Password</form><p>Request id req-%d at 10:0%d</p></body></html>`, n, n, n)
		return Result{Output: []byte(page), ContentType: "text/html"}
	})
	s := r.go_()
	expectOutcome(t, s, LoopDetected)
	if s.Turn != 4 {
		t.Fatalf("turn = %d, want 4", s.Turn)
	}
	if s.Usage.Cost != MustMoney("0.195") {
		t.Fatalf("cost = %s, want 0.195", s.Usage.Cost)
	}
	if !strings.Contains(s.Reason, `fetch_dashboard{"deployment":"checkout-7f9c"}`) || !strings.Contains(s.Reason, "3 times") {
		t.Fatalf("reason = %q", s.Reason)
	}
	// The model was told what happened, in a sentence, not an HTML page.
	obs := toolMessages(s)[1].Content
	if strings.Contains(obs, "<") || !strings.Contains(obs, "retrying unchanged will return the same result") {
		t.Fatalf("observation = %q", obs)
	}
}

func TestLoop_periodTwoOscillation(t *testing.T) {
	r := makeRun(t).readTool("search_logs").readTool("fetch_dashboard")
	for range 6 {
		r.then(calls(call("search_logs", `{"q":"checkout 5xx"}`)), calls(call("fetch_dashboard", `{"id":"checkout"}`)))
	}
	s := r.go_()
	expectOutcome(t, s, LoopDetected)
	if !strings.Contains(s.Reason, "cycle of period 2") || !strings.Contains(s.Reason, "search_logs") || !strings.Contains(s.Reason, "fetch_dashboard") {
		t.Fatalf("reason = %q", s.Reason)
	}
	if s.Turn != 5 {
		t.Fatalf("turn = %d, want 5 (the third search_logs)", s.Turn)
	}
}

func TestLoop_periodThreeStopsAtTheThresholdDepth(t *testing.T) {
	r := makeRun(t).readTool("a").readTool("b").readTool("c")
	for range 3 {
		r.then(calls(call("a", `{}`)), calls(call("b", `{}`)), calls(call("c", `{}`)))
	}
	s := r.go_()
	expectOutcome(t, s, LoopDetected)
	// a,b,c,a,b,c,a: the third a is depth 3.
	if !strings.Contains(s.Reason, "cycle of period 3") || s.Turn != 7 || s.MaxDepth != 3 {
		t.Fatalf("turn %d depth %d reason %q", s.Turn, s.MaxDepth, s.Reason)
	}
}

// Issue 9, item 6: with threshold 5, an exact repeat and an A,B cycle both
// stop at depth 5 (turn 5 and turn 9), not earlier and not never.
func TestLoop_exactRepeatAndPeriodTwoCycleStopAtTheSameDepth(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sequence []string
		turn     int
		period   string
	}{
		{"exact repeat", []string{"a"}, 5, "the same call a{}"},
		{"period two", []string{"a", "b"}, 9, "cycle of period 2"},
		{"period three", []string{"a", "b", "c"}, 13, "cycle of period 3"},
	} {
		for _, window := range []int{0, 15, 40} { // 0: the default, threshold x maxPeriod
			t.Run(fmt.Sprintf("%s, window %d", tc.name, window), func(t *testing.T) {
				r := makeRun(t).readTool("a").readTool("b").readTool("c").maxTurns(40)
				r.cfg.Loop = LoopDetection{Threshold: 5, Window: window}
				for range 20 {
					for _, n := range tc.sequence {
						r.then(calls(call(n, `{}`)))
					}
				}
				s := r.go_()
				expectOutcome(t, s, LoopDetected)
				if s.Turn != tc.turn || s.MaxDepth != 5 || !strings.Contains(s.Reason, tc.period) {
					t.Fatalf("turn %d depth %d, want turn %d depth 5; reason %q", s.Turn, s.MaxDepth, tc.turn, s.Reason)
				}
			})
		}
	}
}

func TestLoop_windowTooSmallForThresholdAndPeriodIsRefused(t *testing.T) {
	r := makeRun(t).readTool("a")
	r.cfg.Loop = LoopDetection{Threshold: 3, Window: 3}
	_, err := New(r.cfg)
	if err == nil || !strings.Contains(err.Error(), "loopDetection.window (3) must be at least threshold x maxPeriod (3 x 3 = 9)") {
		t.Fatalf("err = %v", err)
	}
	r.cfg.Loop = LoopDetection{Threshold: 3, Window: 6, MaxPeriod: 2}
	if _, err := New(r.cfg); err != nil {
		t.Fatalf("window 6 = 3 x 2 was refused: %v", err)
	}
	r.cfg.Loop = LoopDetection{Threshold: 4, MaxPeriod: 2}
	e, err := New(r.cfg)
	if err != nil || e.Config().Loop.Window != 8 {
		t.Fatalf("default window: %v, err %v", e.Config().Loop, err)
	}
}

func TestLoop_volatileArgumentsAndCallIDsAreIgnored(t *testing.T) {
	r := makeRun(t).readTool("get")
	r.cfg.Loop.IgnoreArguments = []string{"request_id"}
	r.then(
		calls(call("get", `{"id":1,"request_id":"a"}`)),
		calls(call("get", `{"request_id":"b", "id":1.0}`)),
		calls(call("get", `{"id":1e0,"request_id":"c"}`)),
	)
	s := r.go_()
	expectOutcome(t, s, LoopDetected)
	if s.MaxDepth != 3 {
		t.Fatalf("repeated-intent depth = %d, want 3", s.MaxDepth)
	}
}

func TestLoop_differentArgumentsAreProgress(t *testing.T) {
	r := makeRun(t).readTool("page").maxTurns(20)
	for i := range 10 {
		r.then(calls(call("page", fmt.Sprintf(`{"n":%d}`, i))))
	}
	r.then(answer("read ten pages"))
	expectOutcome(t, r.go_(), Completed)
}

func TestModelLostAfterACrashIsChargedNotForgotten(t *testing.T) {
	r := makeRun(t).then(answer("done"))
	r.cfg.Model.Pricing = Pricing{Input: MustMoney("3"), Output: MustMoney("15")}
	e := r.engine()
	s := &State{}
	eff := e.Step(s, Input{})
	if eff.Kind != EffectCallModel {
		t.Fatalf("effect = %s", eff.Kind)
	}
	reserved := s.Reserved.Cost
	// The process dies with the call in flight; a new one resumes from the
	// persisted state with no reply.
	s = s.Clone()
	eff = e.Step(s, Input{})
	if eff.Kind != EffectCallModel || s.Attempt != 2 || s.Turn != 1 {
		t.Fatalf("after the lost call: effect %s attempt %d turn %d", eff.Kind, s.Attempt, s.Turn)
	}
	if s.Usage.Cost != reserved || s.Usage.Turns != 1 {
		t.Fatalf("lost call charged %s (turns %d), want the reservation %s", s.Usage.Cost, s.Usage.Turns, reserved)
	}
}

func TestLostToolResults_readsRunAgainWritesAreNeverRepeated(t *testing.T) {
	r := makeRun(t).readTool("read").tool("write", true, true)
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("read", `{}`), call("write", `{}`)}}})
	eff := e.Step(s, Input{Results: []Result{{CallID: "t1-c1", Output: []byte("r")}}})
	if len(eff.Calls) != 1 || eff.Calls[0].Tool != "write" {
		t.Fatalf("effect = %+v", eff)
	}
	// Crash while the write runs: resume with no results.
	s = s.Clone()
	eff = e.Step(s, Input{})
	if eff.Kind != EffectContinue {
		t.Fatalf("the write was dispatched again: %+v", eff)
	}
	obs := toolMessages(s)
	if obs[1].Status != ObsFailed || !strings.Contains(obs[1].Content, "whether it took effect is unknown") {
		t.Fatalf("observation = %+v", obs[1])
	}
	if s.Usage.ToolCalls != 2 {
		t.Fatalf("tool calls = %d, want 2 (the unknown write counted)", s.Usage.ToolCalls)
	}

	// A lost read is simply run again.
	s2 := &State{}
	e.Step(s2, Input{})
	e.Step(s2, Input{Reply: &Reply{ToolCalls: []ToolCall{call("read", `{}`)}}})
	s2 = s2.Clone()
	eff = e.Step(s2, Input{})
	if eff.Kind != EffectRunTools || len(eff.Calls) != 1 || eff.Calls[0].CallID != "t1-c1" {
		t.Fatalf("lost read: %+v", eff)
	}
}

func TestPreflightFailureEndsTheRunBeforeAnyModelCall(t *testing.T) {
	r := makeRun(t).then(answer("x"))
	s := &State{}
	model := &countingModel{Model: &Scripted{Entries: r.script}}
	(&Runner{Engine: r.engine(), Model: model, Tools: &preflightFail{}}).Run(context.Background(), s)
	expectOutcome(t, s, ToolFailure)
	if model.n != 0 || !strings.Contains(s.Reason, `does not offer tool "lookup"`) {
		t.Fatalf("model calls %d, reason %q", model.n, s.Reason)
	}
}

type preflightFail struct{ recorder }

func (*preflightFail) Preflight(context.Context) error {
	return errors.New(`MCP server http://mcp:8080/mcp does not offer tool "lookup"`)
}

type countingModel struct {
	Model
	n int
}

func (c *countingModel) Complete(ctx context.Context, r *Request) (*Reply, error) {
	c.n++
	return c.Model.Complete(ctx, r)
}

func TestPrompt_prefixIsByteStableAcrossTurns(t *testing.T) {
	r := makeRun(t).readTool("a")
	r.cfg.Instructions = "You are a billing assistant."
	e := r.engine()
	s := &State{}
	first := e.Step(s, Input{}).Request
	e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("a", `{}`)}}})
	e.Step(s, Input{Results: []Result{{CallID: "t1-c1", Output: []byte("x")}}})
	second := e.Step(s, Input{}).Request
	prefix := func(q *Request) string {
		b, _ := json.Marshal(struct {
			S string
			T []ToolSchema
			G Message
		}{q.System, q.Tools, q.Messages[0]})
		return string(b)
	}
	if prefix(first) != prefix(second) {
		t.Fatalf("prefix changed between turns")
	}
	if len(second.Messages) != 3 || second.Messages[0].Content != r.cfg.Goal {
		t.Fatalf("messages = %+v", second.Messages)
	}
	if !strings.Contains(first.System, "You are a billing assistant.") {
		t.Fatalf("instructions missing from the system prompt")
	}
}

func TestConvergence(t *testing.T) {
	r := makeRun(t).readTool("a").maxTurns(4).then(calls(call("a", `{}`)), calls(call("a", `{}`)), answer("ok"))
	s := r.go_()
	c := r.engine().Convergence(s)
	want := Convergence{TurnsToCompletion: 3, RepeatedIntentDepth: 2, Headroom: map[Dimension]string{
		DimTurns: "0.25", DimTokens: "1.00", DimWallClock: "1.00", DimCost: "1.00", DimToolCalls: "0.96"}}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Fatalf("convergence (-want +got):\n%s", diff)
	}
}
