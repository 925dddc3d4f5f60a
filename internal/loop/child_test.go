package loop

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Issue 45, item 3: one budget for a tree of runs. A call of a tool that
// runs a child reserves the child's ceilings out of what the run has left
// and is charged what the child used.

// delegating is a run with tool "delegate", whose every call runs a child
// with ceilings c, and a toolbox that records each call's child budget
// and answers with spend(budget) as the child's usage.
func delegating(t *testing.T, budget Budget, c ChildBudget, spend func(*ChildBudget) *Usage) (*run, *[]ChildBudget) {
	r := makeRun(t)
	r.cfg.Budget = budget
	r.cfg.Tools = append(r.cfg.Tools, ToolSpec{Name: "delegate", Mutates: true, Reversible: true, Repeatable: true,
		Parameters: []byte(`{"type":"object"}`), Child: &c, MaxCost: c.Cost, CostDeclared: true, Timeout: c.WallClock,
		StartupGrace: 30 * time.Second, KillGrace: 15 * time.Second})
	var mu sync.Mutex
	var got []ChildBudget
	r.output("delegate", func(inv Invocation) Result {
		mu.Lock()
		defer mu.Unlock()
		if inv.Child == nil {
			t.Fatalf("call %s has no child budget", inv.CallID)
		}
		got = append(got, *inv.Child)
		return Result{Output: []byte(`{"outcome":"Completed"}`), Child: spend(inv.Child)}
	})
	return r, &got
}

// spendAll is a child that uses every ceiling it was given.
func spendAll(b *ChildBudget) *Usage {
	return &Usage{Turns: b.Turns, InputTokens: b.Tokens, ToolCalls: b.ToolCalls, Cost: b.Cost}
}

// A storm of children that each spend all they were given never takes
// the tree past any of the root's ceilings: each child's ceilings are
// capped by what the root has left once the calls before it are
// reserved.
func TestChild_aStormOfChildrenNeverPassesTheRootsCeilings(t *testing.T) {
	budget := Budget{MaxTurns: 12, MaxTokens: 50_000, MaxWallClock: time.Hour, MaxCost: new(MustMoney("1")), MaxToolCalls: new(40),
		DefaultToolLimit: new(100)}
	r, got := delegating(t, budget, ChildBudget{Turns: 3, Tokens: 8_000, WallClock: 5 * time.Minute, Cost: MustMoney("0.30"), ToolCalls: 5}, spendAll)
	for range 4 {
		r.then(calls(call("delegate", `{"n":1}`), call("delegate", `{"n":2}`), call("delegate", `{"n":3}`)))
	}
	r.then(answer("done"))
	s := r.go_()

	var sum Usage
	for _, b := range *got {
		sum = sum.then(Usage{Turns: b.Turns, InputTokens: b.Tokens, ToolCalls: b.ToolCalls, Cost: b.Cost})
	}
	if s.Outcome != BudgetExhausted || len(*got) < 3 {
		t.Logf("%s: %s", s.Outcome, s.Reason)
	}
	if len(*got) < 3 {
		t.Fatalf("only %d children ran; the test needs a storm", len(*got))
	}
	if s.Usage.Cost > MustMoney("1") || sum.Cost > MustMoney("1") {
		t.Fatalf("the tree spent $%s (children $%s), past the root's $1 (%s: %s)", s.Usage.Cost, sum.Cost, s.Outcome, s.Reason)
	}
	if s.Usage.Turns > 12 || s.Usage.Tokens() > 50_000 || s.Usage.ToolCalls > 40 {
		t.Fatalf("the tree used %d turns, %d tokens, %d tool calls, past the root's 12, 50000, 40", s.Usage.Turns, s.Usage.Tokens(), s.Usage.ToolCalls)
	}
	if diff := cmp.Diff(sum, s.Children.orZero()); diff != "" {
		t.Errorf("the children's part of usage (-want +got):\n%s", diff)
	}
}

// What a child used is charged, not what was reserved for it, and the
// reservation is released.
func TestChild_chargesWhatTheChildUsed(t *testing.T) {
	budget := Budget{MaxTurns: 10, MaxTokens: 100_000, MaxWallClock: time.Hour, MaxCost: new(MustMoney("2"))}
	used := &Usage{Turns: 2, InputTokens: 300, OutputTokens: 40, Cost: MustMoney("0.05"), ToolCalls: 1}
	r, got := delegating(t, budget, ChildBudget{Turns: 4, Tokens: 10_000, WallClock: 10 * time.Minute, Cost: MustMoney("0.50"), ToolCalls: 5},
		func(*ChildBudget) *Usage { return used })
	r.then(calls(call("delegate", `{}`)), answer("done"))
	s := r.go_()
	expectOutcome(t, s, Completed)

	want := ChildBudget{Turns: 4, Tokens: 10_000, WallClock: 10 * time.Minute, Cost: MustMoney("0.50"), ToolCalls: 5}
	if diff := cmp.Diff([]ChildBudget{want}, *got); diff != "" {
		t.Errorf("the child's ceilings (-want +got):\n%s", diff)
	}
	// The run's own two turns and one call, and the child's.
	if s.Usage.Turns != 2+2 || s.Usage.ToolCalls != 1+1 || s.Usage.Cost != MustMoney("0.05") {
		t.Errorf("usage: %d turns, %d tool calls, $%s; want 4, 2, $0.05", s.Usage.Turns, s.Usage.ToolCalls, s.Usage.Cost)
	}
	if s.Reserved.Cost != 0 || s.Reserved.Turns != 0 || s.Reserved.ToolCalls != 0 {
		t.Errorf("reservation left: %+v", s.Reserved)
	}
}

// A child whose use is unknown (its result was lost) is charged its whole
// reservation: spend is never under-counted.
func TestChild_unknownUseIsChargedInFull(t *testing.T) {
	budget := Budget{MaxTurns: 10, MaxTokens: 100_000, MaxWallClock: time.Hour, MaxCost: new(MustMoney("2"))}
	r, _ := delegating(t, budget, ChildBudget{Turns: 3, Tokens: 10_000, WallClock: 10 * time.Minute, Cost: MustMoney("0.50"), ToolCalls: 5},
		func(*ChildBudget) *Usage { return nil })
	r.then(calls(call("delegate", `{}`)), answer("done"))
	s := r.go_()
	expectOutcome(t, s, Completed)
	if s.Usage.Cost != MustMoney("0.50") || s.Usage.Turns != 2+3 {
		t.Errorf("usage: $%s, %d turns; want the whole reservation charged, $0.50 and 3 turns besides the run's 2", s.Usage.Cost, s.Usage.Turns)
	}
}

// The child's wall clock is capped by what the run has left, less the
// call's graces, so that the call fits in the run's wall clock.
func TestChild_wallClockFitsWhatTheRunHasLeft(t *testing.T) {
	budget := Budget{MaxTurns: 10, MaxTokens: 100_000, MaxWallClock: 15 * time.Minute, MaxCost: new(MustMoney("2"))}
	r, got := delegating(t, budget, ChildBudget{Turns: 3, Tokens: 10_000, WallClock: 15 * time.Minute, Cost: MustMoney("0.50"), ToolCalls: 5},
		func(*ChildBudget) *Usage { return &Usage{} })
	r.then(calls(call("delegate", `{}`)), answer("done"))
	s := r.go_()
	expectOutcome(t, s, Completed)
	if len(*got) != 1 {
		t.Fatalf("%d children, want 1", len(*got))
	}
	w := (*got)[0].WallClock
	if w <= 0 || w+45*time.Second > 15*time.Minute {
		t.Errorf("the child's wall clock is %s; want it within the run's 15m less the call's 45s of graces", w)
	}
}

// The children of one batch share what the run has left evenly, and leave
// the run its next turn: it reads their results and answers.
func TestChild_aBatchsChildrenShareWhatIsLeftAndTheRunAnswers(t *testing.T) {
	budget := Budget{MaxTurns: 8, MaxTokens: 100_000, MaxWallClock: time.Hour, MaxCost: new(MustMoney("1")), MaxToolCalls: new(20)}
	r, got := delegating(t, budget, ChildBudget{Turns: 10, Tokens: 1_000_000, WallClock: 10 * time.Minute, Cost: MustMoney("5"), ToolCalls: 50}, spendAll)
	r.cfg.Tools[0].Mutates = false // the children run together
	r.then(calls(call("delegate", `{"n":1}`), call("delegate", `{"n":2}`)), answer("done"))
	s := r.go_()
	expectOutcome(t, s, Completed)
	if len(*got) != 2 {
		t.Fatalf("%d children, want 2", len(*got))
	}
	a, b := (*got)[0], (*got)[1]
	if a.Turns != b.Turns || a.Turns < 1 || a.Turns+b.Turns > 8-1-1 {
		t.Errorf("turns %d and %d: want an even share of the 6 left once the run's two turns are kept", a.Turns, b.Turns)
	}
	if a.ToolCalls+b.ToolCalls > 20-2 || a.ToolCalls == 0 || b.ToolCalls == 0 {
		t.Errorf("tool calls %d and %d: want a share each of the 18 the two calls leave", a.ToolCalls, b.ToolCalls)
	}
}

// A child that would get no money of a cost its tool declares (the run
// keeps what is left for its next turn) gets no turn, so no child is made
// to end BudgetExhausted at once; a tool that declares $0 has a free child,
// which keeps its turns.
func TestChildBudget_noMoneyLeftForAPricedChildIsNoTurn(t *testing.T) {
	b := Budget{MaxTurns: 10, MaxTokens: 100_000, MaxWallClock: time.Hour, MaxCost: new(MustMoney("1")), MaxToolCalls: new(20)}
	kept := Usage{Turns: 1, Cost: MustMoney("1")} // the next turn keeps every cent
	for _, c := range []struct {
		name     string
		declared Money
		turns    int
	}{
		{"priced", MustMoney("0.30"), 0},
		{"free", 0, 3},
	} {
		tool := &ToolSpec{Name: "delegate", Child: &ChildBudget{Turns: 3, Tokens: 8_000, WallClock: 5 * time.Minute, Cost: c.declared, ToolCalls: 5}}
		got := b.childBudget(tool, kept, Usage{}, 0, 1)
		if got.Turns != c.turns || got.Cost != 0 {
			t.Errorf("%s child: %d turns and $%s; want %d turns and $0", c.name, got.Turns, got.Cost, c.turns)
		}
	}
}
