package loop

import (
	"context"
	"encoding/json"
	"errors"
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
	got := c
	got.Context = ContextFigures{}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("convergence (-want +got):\n%s", diff)
	}
	// No spec.context and a model whose window is not known: the default
	// limit, nothing compacted, the last request's count.
	ctx := c.Context
	if ctx.MaxInputTokens != DefaultMaxInputTokens || ctx.Source != ContextFromDefault || ctx.Strategy != ContextClear ||
		ctx.Compactions != 0 || ctx.LastInputTokens != s.Context.LastInputTokens || ctx.LastInputTokens <= 0 {
		t.Errorf("context figures %+v; want the default policy, no compaction and the last request's input tokens", ctx)
	}
}
