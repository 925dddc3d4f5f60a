package local

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/loop"
)

// The run: maxWallClock 2s and a tool that ignores SIGTERM. The
// kill grace is inside each call's reservation and the caller's deadline
// ends the call by then, so the run's worked time stays under the hard
// ceiling however the tool behaves: it is approached, never passed.
func TestRunner_toolIgnoringSIGTERMNeverPassesTheWallClockCeiling(t *testing.T) {
	const ceiling = 2 * time.Second
	cfg := loop.Config{Goal: "Wait for the stubborn tool.",
		Model:  loop.ModelConfig{Timeout: 200 * time.Millisecond},
		Budget: loop.Budget{MaxTurns: 10, MaxWallClock: ceiling},
		Tools:  []loop.ToolSpec{{Name: "stubborn", Timeout: 300 * time.Millisecond, KillGrace: 400 * time.Millisecond}},
	}
	e, err := loop.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var script []loop.ScriptEntry
	for range 5 {
		script = append(script, loop.ScriptEntry{ToolCalls: []loop.ToolCall{{Name: "stubborn", Arguments: []byte(`{}`)}}})
	}
	// The executor's own grace is longer than the call's: the call's wins.
	ex := helper(t, "stubborn", WithGracePeriod(5*time.Second))
	var handed []time.Duration
	tools := loop.ToolboxFunc(func(ctx context.Context, inv loop.Invocation) loop.Result {
		if dl, ok := ctx.Deadline(); ok {
			handed = append(handed, time.Until(dl))
		}
		return ex.Execute(ctx, inv)
	})
	s := &loop.State{}
	(&loop.Runner{Engine: e, Model: &loop.Scripted{Entries: script}, Tools: tools}).Run(context.Background(), s)

	t.Logf("outcome %s after %d tool calls, worked %s: %s", s.Outcome, s.Usage.ToolCalls, s.Usage.WallClock, s.Reason)
	// The run ends when the next attempt, or the next turn, no longer fits
	// the wall clock (BudgetExhausted), or when the tool stays unavailable
	// after its retries (ToolFailure): either way, inside the ceiling.
	if s.Outcome != loop.BudgetExhausted && s.Outcome != loop.ToolFailure {
		t.Fatalf("outcome %s (%s), want BudgetExhausted or ToolFailure", s.Outcome, s.Reason)
	}
	if s.Usage.WallClock > ceiling {
		t.Fatalf("worked %s, past the hard ceiling of %s", s.Usage.WallClock, ceiling)
	}
	if s.Usage.ToolCalls == 0 {
		t.Fatalf("no call ran: the reservation should fit one call of 700ms")
	}
	for i, d := range handed {
		if d > 700*time.Millisecond {
			t.Errorf("call %d was handed a deadline %s away, past its reservation (timeout 300ms + kill grace 400ms)", i+1, d)
		}
	}
	for _, m := range s.Transcript {
		if m.Role == loop.RoleTool && (!strings.Contains(m.Content, "Timeout") && !strings.Contains(m.Content, "time")) {
			t.Errorf("observation %q, want a timeout", m.Content)
		}
	}
}
