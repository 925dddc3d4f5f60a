package loop

import (
	"fmt"
	"strings"
	"testing"
)

// Issue 43, item 6: a model that changes an irrelevant argument on every
// retry (seed 000: "disguised as exploration") was counted as making
// progress until a per-tool limit ended the run BudgetExhausted, blaming
// capacity. With loopDetection.similarity set, it ends LoopDetected.
func TestNearRepeat_anIrrelevantArgumentChangedOnEveryRetryIsALoop(t *testing.T) {
	retry := func(n int) ScriptEntry {
		return calls(call("search_logs", fmt.Sprintf(`{"query":"checkout errors in the last hour","request_id":"req-%d"}`, n)))
	}
	script := func(r *run) *run {
		r.readTool("search_logs").then(retry(1), retry(2), retry(3), retry(4), answer("never reached"))
		r.cfg.Budget.PerTool = map[string]int{"search_logs": 3}
		return r
	}
	// Off (the default): every retry is a new signature, and the per-tool
	// limit ends the run.
	s := script(makeRun(t)).go_()
	expectOutcome(t, s, BudgetExhausted)
	if !strings.Contains(s.Reason, "per-tool limit of search_logs") {
		t.Fatalf("without the detector: %s", s.Reason)
	}
	// On: the third retry is the third call of one intent.
	r := script(makeRun(t))
	r.cfg.Loop.Similarity = 0.9
	s = r.go_()
	expectOutcome(t, s, LoopDetected)
	if s.Usage.ToolCalls != 2 || !strings.Contains(s.Reason, "3 calls of search_logs") || !strings.Contains(s.Reason, "reworded arguments") {
		t.Fatalf("after %d tool calls: %s", s.Usage.ToolCalls, s.Reason)
	}
}

// Looking up one thing after another is progress: ids that differ keep
// the calls apart at the threshold the docs suggest, and calls of another
// tool never count.
func TestNearRepeat_lookingUpDifferentThingsIsProgress(t *testing.T) {
	r := makeRun(t).readTool("lookup_order").readTool("refund_status").then(
		calls(call("lookup_order", `{"order":"A-17"}`)),
		calls(call("refund_status", `{"order":"A-17"}`)),
		calls(call("lookup_order", `{"order":"A-18"}`)),
		calls(call("lookup_order", `{"order":"A-19"}`)),
		answer("Three orders, one refund."))
	r.cfg.Loop.Similarity = 0.9
	expectOutcome(t, r.go_(), Completed)
}

// The window bounds what is compared: a near repeat that fell out of the
// last Window calls no longer counts, and the state keeps no more.
func TestNearRepeat_theWindowBoundsWhatIsKept(t *testing.T) {
	cfg := LoopDetection{Threshold: 3, Window: 4, MaxPeriod: 1, Similarity: 0.9}
	s := &State{}
	same := []byte(`{"query":"checkout errors","request_id":"req-1"}`)
	other := func(i int) []byte { return []byte(fmt.Sprintf(`{"order":"B-%d"}`, 100+i*37)) }
	if why := s.recordNear(cfg, "search", same); why != "" {
		t.Fatal(why)
	}
	for i := range 4 {
		if why := s.recordNear(cfg, "search", other(i)); why != "" {
			t.Fatalf("call %d: %s", i, why)
		}
	}
	if why := s.recordNear(cfg, "search", same); why != "" {
		t.Fatalf("a repeat outside the window counted: %s", why)
	}
	if len(s.Near) != cfg.Window {
		t.Fatalf("kept %d calls, want the window's %d", len(s.Near), cfg.Window)
	}
}

func TestNearRepeat_similarityMustBeAFraction(t *testing.T) {
	for _, v := range []float64{-0.1, 1.5} {
		cfg := Config{Goal: "g", Budget: Budget{MaxTurns: 1}, Loop: LoopDetection{Similarity: v}}
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "loopDetection.similarity") {
			t.Errorf("similarity %v: %v, want an error naming loopDetection.similarity", v, err)
		}
	}
}
