package loop

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// Issue 13, item 7: a window of 1,000 calls is checkpointed in status on
// every write; it must stay a small part of a 32 KiB object whatever the
// calls' arguments.
func TestLoop_aWindowOfAThousandCallsStaysSmall(t *testing.T) {
	cfg := LoopDetection{Threshold: 3, Window: 1000, MaxPeriod: 10}
	s := &State{}
	long := strings.Repeat("a long argument value ", 20)
	for i := range 1500 {
		raw := json.RawMessage(fmt.Sprintf(`{"q":%q,"n":%d}`, long, i))
		c, _ := Canonical(raw, nil)
		if d := s.recordSignature(cfg, sigEntry(signature("lookup", c, raw))); d != nil {
			t.Fatalf("call %d: distinct calls detected as a loop: %s", i, d.reason(cfg))
		}
	}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 16<<10 {
		t.Fatalf("the state of a run with a window of 1,000 calls takes %d bytes, want at most 16 KiB", len(raw))
	}
	// The window still holds 1,000 calls: a call made 990 calls ago and
	// proposed twice more is a loop; one made 1,001 calls ago is not in it.
	again := func(i int) *detection {
		raw := json.RawMessage(fmt.Sprintf(`{"q":%q,"n":%d}`, long, i))
		c, _ := Canonical(raw, nil)
		return s.recordSignature(cfg, sigEntry(signature("lookup", c, raw)))
	}
	if d := again(510); d != nil {
		t.Fatalf("a call 990 calls back counted as a repeat too early: %s", d.reason(cfg))
	}
	if d := again(510); d == nil || d.count != 3 || !strings.Contains(d.reason(cfg), "lookup{") {
		t.Fatalf("the third proposal of a call inside the window: %+v", d)
	}
	if d := again(499); d != nil && d.count > 1 {
		t.Fatalf("a call that left the window was counted: %d", d.count)
	}
}

// The cycle a reason names starts with the call just proposed and goes on
// in the order the calls came.
func TestLoop_aCycleIsNamedInOrder(t *testing.T) {
	cfg := LoopDetection{Threshold: 3, Window: 9, MaxPeriod: 3}
	s := &State{}
	var d *detection
	for _, n := range []string{"x", "a", "b", "c", "a", "b", "c", "a"} {
		d = s.recordSignature(cfg, sigEntry(signature(n, []byte(`{}`), nil)))
	}
	if d == nil || d.period != 3 || !strings.Contains(d.reason(cfg), "a{} -> b{} -> c{}") {
		t.Fatalf("detection = %+v", d)
	}
}

// A run checkpointed by an operator that saved the window as full entries
// with 16-digit hashes keeps counting its repeats after an upgrade.
func TestLoop_resumesAWindowSavedByAnOlderOperator(t *testing.T) {
	h := sha256.Sum256([]byte("a{}"))
	old := hex.EncodeToString(h[:8])
	other := sha256.Sum256([]byte("b{}"))
	saved := fmt.Sprintf(`{"turn":3,"usage":{},"reserved":{},"recent":[{"h":%q,"t":"a{}"},{"h":%q,"t":"b{}"},{"h":%q,"t":"a{}"}],`+
		`"depth":{%q:2},"maxDepth":2}`, old, hex.EncodeToString(other[:8]), old, old)
	s := &State{}
	if err := json.Unmarshal([]byte(saved), s); err != nil {
		t.Fatal(err)
	}
	cfg := LoopDetection{Threshold: 3, Window: 9, MaxPeriod: 3}
	d := s.recordSignature(cfg, sigEntry(signature("a", []byte(`{}`), nil)))
	if d == nil || d.count != 3 || s.MaxDepth != 3 {
		t.Fatalf("the third a after the upgrade: detection %+v, depth %d", d, s.MaxDepth)
	}
	if len(s.Recent) != 0 || len(s.Window) != 4*SigHashLen || len(s.Depth) != 1 {
		t.Fatalf("the old window was not moved: recent %v, window %q, depth %v", s.Recent, s.Window, s.Depth)
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
