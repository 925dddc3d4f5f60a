package loop

import (
	"strings"
	"testing"
)

// When several stop conditions could end a run, the one that names the
// actual problem wins (seed 000, ordering the stop conditions). Each case
// is held both ways round: the condition that must win, and the other one
// when only it applies.

// A model repeating one call until maxToolCalls runs out is stuck, not
// short of capacity: with maxToolCalls 2 and a loop threshold of 3, the
// third identical call ends LoopDetected, not BudgetExhausted.
func TestOrdering_loopDetectionBeforeTheToolCallCeiling(t *testing.T) {
	same := call("lookup", `{"order":"A-17"}`)
	r := makeRun(t).readTool("lookup").then(calls(same), calls(same), calls(same), answer("never reached"))
	r.cfg.Budget.MaxToolCalls = new(2)
	r.cfg.Loop.Threshold = 3
	s := r.go_()
	expectOutcome(t, s, LoopDetected)
	if !strings.Contains(s.Reason, "3 times") {
		t.Fatalf("reason = %q, want it to name the repetition", s.Reason)
	}
	if s.Usage.ToolCalls != 2 {
		t.Fatalf("tool calls = %d, want 2 (the third was never run)", s.Usage.ToolCalls)
	}
}

// The other way round: the same ceiling with calls that differ ends the
// run BudgetExhausted on toolCalls; it is capacity, not a loop.
func TestOrdering_theToolCallCeilingWhenNothingRepeats(t *testing.T) {
	r := makeRun(t).readTool("lookup").then(
		calls(call("lookup", `{"order":"A-17"}`)),
		calls(call("lookup", `{"order":"A-18"}`)),
		calls(call("lookup", `{"order":"A-19"}`)),
		answer("never reached"))
	r.cfg.Budget.MaxToolCalls = new(2)
	r.cfg.Loop.Threshold = 3
	s := r.go_()
	expectOutcome(t, s, BudgetExhausted)
	if !strings.Contains(s.Reason, "toolCalls ceiling") {
		t.Fatalf("reason = %q, want the toolCalls ceiling", s.Reason)
	}
}

// Loop detection sees only what an admitted turn proposes: when the turn
// ceiling fires before the repeating call is proposed, the run ends
// BudgetExhausted on turns, and the model is not paid to propose it.
func TestOrdering_theTurnCeilingBeforeAProposalItWouldNotAdmit(t *testing.T) {
	same := call("lookup", `{"order":"A-17"}`)
	r := makeRun(t).maxTurns(2).readTool("lookup").then(calls(same), calls(same), calls(same), answer("never reached"))
	r.cfg.Loop.Threshold = 3
	s := r.go_()
	expectOutcome(t, s, BudgetExhausted)
	if !strings.Contains(s.Reason, "turns ceiling") {
		t.Fatalf("reason = %q, want the turns ceiling", s.Reason)
	}
	if s.Usage.Turns != 2 {
		t.Fatalf("turns = %d, want 2", s.Usage.Turns)
	}
}

// And the turn ceiling does not hide a loop reached within it: with room
// for the third turn, the same script ends LoopDetected.
func TestOrdering_loopDetectionWithinTheTurnCeiling(t *testing.T) {
	same := call("lookup", `{"order":"A-17"}`)
	r := makeRun(t).maxTurns(3).readTool("lookup").then(calls(same), calls(same), calls(same), answer("never reached"))
	r.cfg.Loop.Threshold = 3
	s := r.go_()
	expectOutcome(t, s, LoopDetected)
}

// A batch whose third call repeats past the threshold and whose size also
// passes maxToolCalls is named a loop: detection reads the whole batch
// before the batch is admitted.
func TestOrdering_loopDetectionBeforeABatchPastTheToolCallCeiling(t *testing.T) {
	same := call("lookup", `{"order":"A-17"}`)
	r := makeRun(t).readTool("lookup").then(calls(same, same, same, same), answer("never reached"))
	r.cfg.Budget.MaxToolCalls = new(3)
	r.cfg.Loop.Threshold = 3
	s := r.go_()
	expectOutcome(t, s, LoopDetected)
	if s.Usage.ToolCalls != 0 {
		t.Fatalf("tool calls = %d, want none run", s.Usage.ToolCalls)
	}
}
