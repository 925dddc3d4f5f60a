package loop

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

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

// Only a group of reads that a lost result lets run again and that
// reserves nothing may run before the step that dispatched it is saved.
func TestConfig_rerunnable(t *testing.T) {
	cfg := Config{Tools: []ToolSpec{
		{Name: "read"},
		{Name: "other_read"},
		{Name: "write", Mutates: true},
		{Name: "priced", MaxCost: MustMoney("0.01")},
		{Name: "child", Child: &ChildBudget{Turns: 1}},
		{Name: "ask", AsksPerson: true},
	}}.Normalize()
	calls := func(names ...string) []Invocation {
		var out []Invocation
		for _, n := range names {
			out = append(out, Invocation{CallID: n, Tool: n})
		}
		return out
	}
	for _, c := range []struct {
		calls []string
		want  bool
	}{
		{[]string{"read"}, true},
		{[]string{"read", "other_read"}, true},
		{nil, false},
		{[]string{"read", "write"}, false},
		{[]string{"priced"}, false},
		{[]string{"child"}, false},
		{[]string{"ask"}, false},
		{[]string{"unknown"}, false},
	} {
		if got := cfg.Rerunnable(calls(c.calls...)); got != c.want {
			t.Errorf("Rerunnable(%v) = %v, want %v", c.calls, got, c.want)
		}
	}
}
