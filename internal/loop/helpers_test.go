package loop

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock the tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock { return &fakeClock{now: time.Date(2026, 8, 14, 10, 7, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// recorder is a toolbox that records what ran, in order, and answers from
// a table of outputs by tool name.
type recorder struct {
	mu      sync.Mutex
	ran     []string
	outputs map[string]func(inv Invocation) Result
	clock   *fakeClock
	took    time.Duration
}

func (r *recorder) Execute(_ context.Context, inv Invocation) Result {
	r.mu.Lock()
	r.ran = append(r.ran, inv.CallID+":"+inv.Tool)
	r.mu.Unlock()
	if r.clock != nil && r.took > 0 {
		r.clock.Advance(r.took)
	}
	if f := r.outputs[inv.Tool]; f != nil {
		return f(inv)
	}
	return Result{Output: []byte(`{"ok":true}`)}
}

func (r *recorder) Ran() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ran...)
}

// run is a test fixture that reads like a manifest.
type run struct {
	t       testing.TB
	cfg     Config
	script  []ScriptEntry
	clock   *fakeClock
	tools   *recorder
	approve Approver
}

// keep returns, in order, the elements of xs that f is true of.
func keep[T any](xs []T, f func(T) bool) []T {
	var out []T
	for _, x := range xs {
		if f(x) {
			out = append(out, x)
		}
	}
	return out
}

func makeRun(t testing.TB) *run {
	c := newClock()
	return &run{t: t, clock: c, tools: &recorder{outputs: map[string]func(Invocation) Result{}, clock: c},
		cfg: Config{Goal: "Find out what happened.", Budget: Budget{MaxTurns: 12, MaxTokens: 1_000_000, MaxCost: new(MustMoney("10"))}}}
}

func (r *run) maxTurns(n int) *run { r.cfg.Budget.MaxTurns = n; return r }

func (r *run) tool(name string, mutates, reversible bool) *run {
	r.cfg.Tools = append(r.cfg.Tools, ToolSpec{Name: name, Mutates: mutates, Reversible: reversible,
		Parameters: json.RawMessage(`{"type":"object"}`)})
	return r
}

func (r *run) readTool(name string) *run { return r.tool(name, false, true) }

func (r *run) then(entries ...ScriptEntry) *run { r.script = append(r.script, entries...); return r }

func (r *run) output(tool string, f func(Invocation) Result) *run {
	r.tools.outputs[tool] = f
	return r
}

func (r *run) engine() *Engine {
	r.t.Helper()
	e, err := New(r.cfg, WithClock(r.clock.Now))
	if err != nil {
		r.t.Fatalf("New: %v", err)
	}
	return e
}

// go runs the fixture straight through and returns the final state.
func (r *run) go_() *State {
	r.t.Helper()
	s := &State{}
	(&Runner{Engine: r.engine(), Model: &Scripted{Entries: r.script}, Tools: r.tools, Approve: r.approve,
		Sleep: func(_ context.Context, d time.Duration) { r.clock.Advance(d) }}).Run(context.Background(), s)
	return s
}

func call(name, args string) ToolCall { return ToolCall{Name: name, Arguments: json.RawMessage(args)} }

func calls(cs ...ToolCall) ScriptEntry { return ScriptEntry{ToolCalls: cs} }

func answer(s string) ScriptEntry { return ScriptEntry{Content: s} }

func usage(in, out int64) TokenUsage { return TokenUsage{InputTokens: in, OutputTokens: out} }

func expectOutcome(t testing.TB, s *State, want Outcome) {
	t.Helper()
	if s.Outcome != want {
		t.Fatalf("outcome = %s (%s), want %s", s.Outcome, s.Reason, want)
	}
	if s.Reason == "" {
		t.Fatalf("outcome %s has no reason", s.Outcome)
	}
}

func toolMessages(s *State) []Message {
	return keep(s.Transcript, func(m Message) bool { return m.Role == RoleTool })
}
