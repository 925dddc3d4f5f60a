package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestByteEstimator_coversEveryByteAndGrowsWithTheTranscript(t *testing.T) {
	req := &Request{
		System: "You are a billing assistant.",
		Tools: []ToolSchema{{Name: "identify_account", Description: "Look up an account id by e-mail.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"email":{"type":"string"}}}`)}},
		Messages: []Message{{Role: RoleUser, Content: "Find out what happened."}},
	}
	bytes := len(req.System) + len(req.Tools[0].Name) + len(req.Tools[0].Description) + len(req.Tools[0].Parameters) + len(req.Messages[0].Content)
	first := ByteEstimator{}.EstimateInputTokens(req)
	if first < int64(bytes) {
		t.Errorf("estimate %d is below the %d bytes of text", first, bytes)
	}
	req.Messages = append(req.Messages, Message{Role: RoleAssistant,
		ToolCalls: []ToolCall{{ID: "t1-c1", Name: "identify_account", Arguments: json.RawMessage(`{"email":"a@b.example"}`)}}})
	if next := (ByteEstimator{}).EstimateInputTokens(req); next <= first {
		t.Errorf("estimate did not grow with the transcript: %d then %d", first, next)
	}
	if got := (ByteEstimator{}).EstimateInputTokens(nil); got != 0 {
		t.Errorf("nil request estimated at %d", got)
	}
}

// modelCall is one model call of a run: the input tokens reserved for it
// and the whole bound of its request (ByteEstimator's, which is what
// every call reserved before estimates were built on counts).
type modelCall struct {
	reserved, whole int64
}

// goCalls runs the fixture straight through, reloading the State from
// its JSON form and building a new Engine before every step when reload
// is set (as an operator that persists at every boundary does), and
// returns the final state and every model call made.
func (r *run) goCalls(reload bool) (*State, []modelCall) {
	r.t.Helper()
	model := &Scripted{Entries: r.script}
	var seen []modelCall
	s := &State{}
	in := Input{}
	e := r.engine()
	for range 500 {
		if reload {
			e, s = r.engine(), s.Clone()
		}
		eff := e.Step(s, in)
		in = Input{}
		switch eff.Kind {
		case EffectFinish:
			return s, seen
		case EffectCallModel:
			seen = append(seen, modelCall{reserved: s.Reserved.InputTokens, whole: ByteEstimator{}.EstimateInputTokens(eff.Request)})
			in.Reply, in.ModelErr = model.Complete(context.Background(), eff.Request)
		case EffectRunTools:
			in.Results = ExecuteBatch(context.Background(), r.tools, eff.Calls, eff.Concurrent)
		case EffectWait:
			r.clock.Advance(eff.Until.Sub(r.clock.Now()))
		}
	}
	r.t.Fatal("the run did not end in 500 steps")
	return nil, nil
}

// builtOnCount is the estimate of call i built on count, the provider's
// count of call i-1: the count plus the bound of what call i added (the
// whole bound is a sum over a request's parts), never above the whole.
func builtOnCount(calls []modelCall, i int, count int64) int64 {
	return min(calls[i].whole, count+calls[i].whole-calls[i-1].whole)
}

func TestEstimate_buildsOnTheLastCountOrBoundsTheRequestWhole(t *testing.T) {
	r := makeRun(t).readTool("lookup").then(
		ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"id":1}`)}, Usage: usage(0, 10)}, // no count reported
		ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"id":2}`)}, Usage: usage(500, 10)},
		ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"id":3}`)}, Usage: usage(540, 10)},
		ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"id":4}`)}, Usage: usage(580, 10)},
		ScriptEntry{Content: "done", Usage: usage(620, 10)})
	s, calls := r.goCalls(false)
	expectOutcome(t, s, Completed)
	if len(calls) != 5 {
		t.Fatalf("%d model calls, want 5", len(calls))
	}
	want := []int64{
		calls[0].whole,              // nothing counted yet
		calls[1].whole,              // call 1 reported no count
		builtOnCount(calls, 2, 500), // extends call 2
		builtOnCount(calls, 3, 540), // extends call 3
		builtOnCount(calls, 4, 580)} // extends call 4
	for i, c := range calls {
		if c.reserved != want[i] {
			t.Errorf("call %d reserved %d input tokens, want %d (whole bound %d)", i+1, c.reserved, want[i], c.whole)
		}
	}
	if calls[2].reserved >= calls[2].whole || s.WholeEstimates {
		t.Errorf("call 3 reserved %d, not below the whole bound %d (wholeEstimates %v)", calls[2].reserved, calls[2].whole, s.WholeEstimates)
	}
}

func TestEstimate_inconsistentCountsBoundTheRestOfTheRunWhole(t *testing.T) {
	for _, tc := range []struct {
		name string
		// second is the count reported for the call built on 600.
		second TokenUsage
	}{
		{"a count that fell while the prompt grew", usage(300, 10)},
		{"no count for a call built on one", usage(0, 10)},
		{"a count above the estimate built on the count before", usage(2000, 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := makeRun(t).readTool("lookup").then(
				ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"id":1}`)}, Usage: usage(600, 10)},
				ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"id":2}`)}, Usage: tc.second},
				ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"id":3}`)}, Usage: usage(900, 10)},
				answer("done"))
			s, calls := r.goCalls(false)
			expectOutcome(t, s, Completed)
			if calls[1].reserved != builtOnCount(calls, 1, 600) {
				t.Fatalf("call 2 reserved %d, want %d", calls[1].reserved, builtOnCount(calls, 1, 600))
			}
			for i := 2; i < len(calls); i++ {
				if calls[i].reserved != calls[i].whole {
					t.Errorf("call %d reserved %d input tokens, want the whole bound %d", i+1, calls[i].reserved, calls[i].whole)
				}
			}
			if !s.WholeEstimates || s.Counted != nil {
				t.Errorf("wholeEstimates %v, counted %+v; want every later request bounded whole", s.WholeEstimates, s.Counted)
			}
		})
	}
}

// TestEstimate_countAboveTheBuiltEstimateIsChargedNotStopped: a server
// whose count jumps past the estimate built on its count before (it had
// counted only what it had not cached) is held, as before estimates were
// built on counts, to twice the whole bound: charged, not stopped.
func TestEstimate_countAboveTheBuiltEstimateIsChargedNotStopped(t *testing.T) {
	r := makeRun(t).readTool("lookup").then(
		ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"id":1}`)}, Usage: usage(40, 10)},
		ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"id":2}`)}, Usage: usage(1500, 10)},
		answer("done"))
	r.cfg.Model.Pricing = usagePricing
	s, notes, _ := usageRun(r)
	expectOutcome(t, s, Completed)
	if s.Usage.InputTokens < 1540 || !s.WholeEstimates {
		t.Errorf("input %d, wholeEstimates %v; want the jump charged and later requests bounded whole", s.Usage.InputTokens, s.WholeEstimates)
	}
	for _, n := range notes {
		if n.Kind == NoteUsageAboveReservation {
			t.Errorf("unexpected note: %s", n.Message)
		}
	}

	// Past twice the whole bound, the run stops as it always did; the
	// warning names the bound it was held to.
	r = makeRun(t).readTool("lookup").then(
		ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"id":1}`)}, Usage: usage(40, 10)},
		ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"id":2}`)}, Usage: usage(100_000, 10)},
		answer("never read"))
	s, notes, _ = usageRun(r)
	expectOutcome(t, s, Error)
	var warned bool
	for _, n := range notes {
		warned = warned || n.Kind == NoteUsageAboveReservation && strings.Contains(n.Message, "the bound of the whole request's input")
	}
	if !warned {
		t.Errorf("no warning naming the whole request's bound among %v", noteKinds(notes))
	}
}

func TestEstimate_callMadeAgainAfterALostCallIsBoundedWhole(t *testing.T) {
	r := makeRun(t).readTool("lookup")
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", `{"id":1}`)}, Usage: usage(500, 10)}})
	e.Step(s, Input{Results: ExecuteBatch(context.Background(), r.tools, eff.Calls, eff.Concurrent)})
	if eff = e.Step(s, Input{}); eff.Kind != EffectCallModel {
		t.Fatalf("effect %s: %s", eff.Kind, s.Reason)
	}
	whole := ByteEstimator{}.EstimateInputTokens(eff.Request)
	if s.Reserved.InputTokens >= whole || s.InFlight == nil || s.InFlight.Base != 500 {
		t.Fatalf("turn 2 reserved %d of a whole %d, in flight %+v; want it built on the count 500", s.Reserved.InputTokens, whole, s.InFlight)
	}
	// The operator restarts with the call in flight: its reply is lost.
	s = s.Clone()
	if eff = e.Step(s, Input{}); eff.Kind != EffectCallModel {
		t.Fatalf("effect %s after the lost call: %s", eff.Kind, s.Reason)
	}
	if s.Reserved.InputTokens != whole || s.Counted != nil || s.InFlight.Base != 0 {
		t.Errorf("the call made again reserved %d (whole bound %d), counted %+v, in flight %+v; want it bounded whole",
			s.Reserved.InputTokens, whole, s.Counted, s.InFlight)
	}
}

func TestEstimate_newTrialAndOtherStagesAreBoundedWhole(t *testing.T) {
	t.Run("a new trial", func(t *testing.T) {
		r := makeRun(t).readTool("lookup").verifier("check", 2, 0, 0, fail("wrong"), pass("right")).
			then(ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"id":1}`)}, Usage: usage(500, 10)},
				ScriptEntry{Content: "a1", Usage: usage(540, 10)},
				ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"id":2}`)}, Usage: usage(550, 10)},
				ScriptEntry{Content: "a2", Usage: usage(590, 10)})
		s, calls := r.goCalls(false)
		expectOutcome(t, s, Completed)
		want := []int64{calls[0].whole, builtOnCount(calls, 1, 500), calls[2].whole, builtOnCount(calls, 3, 550)}
		for i, c := range calls {
			if c.reserved != want[i] {
				t.Errorf("call %d reserved %d input tokens, want %d (whole bound %d)", i+1, c.reserved, want[i], c.whole)
			}
		}
	})
	t.Run("planner and solver", func(t *testing.T) {
		r := planRun(t).readTool("export_all")
		r.cfg.Policy.Rules = []Rule{{Tools: []string{"export_all"}, Decision: Deny, Reason: "bulk exports are not allowed"}}
		refused := submit(`{"steps":[{"id":"E1","tool":"export_all","arguments":{}}]}`)
		refused.Usage = usage(500, 10)
		plan := submit(`{"steps":[{"id":"E1","tool":"identify_account","arguments":{"email":"a@b.example"}}]}`)
		plan.Usage = usage(600, 10)
		replan := ScriptEntry{Content: "[replan] the invoices are missing", Usage: usage(300, 10)}
		plan2 := submit(`{"steps":[{"id":"E1","tool":"identify_account","arguments":{"email":"c@d.example"}}]}`)
		plan2.Usage = usage(700, 10)
		r.cfg.Plan = PlanConfig{MaxReplans: new(2)}
		r.then(refused, plan, replan, plan2, ScriptEntry{Content: "The account is acct_4b71c9e20d8af315.", Usage: usage(350, 10)})
		s, calls := r.goCalls(false)
		expectOutcome(t, s, Completed)
		if len(calls) != 5 {
			t.Fatalf("%d model calls, want 5", len(calls))
		}
		// The planner's second call extends its first (the refused plan
		// and why); the solver and the planner after it do not.
		want := []int64{calls[0].whole, builtOnCount(calls, 1, 500), calls[2].whole, calls[3].whole, calls[4].whole}
		for i, c := range calls {
			if c.reserved != want[i] {
				t.Errorf("call %d reserved %d input tokens, want %d (whole bound %d)", i+1, c.reserved, want[i], c.whole)
			}
		}
	})
}

func TestEstimate_requestThatDoesNotExtendTheCountedOneIsBoundedWhole(t *testing.T) {
	r := makeRun(t).readTool("lookup")
	e := r.engine()
	s := &State{}
	for i := range 2 {
		e.Step(s, Input{})
		eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", fmt.Sprintf(`{"id":%d}`, i))}, Usage: usage(int64(500+40*i), 10)}})
		e.Step(s, Input{Results: ExecuteBatch(context.Background(), r.tools, eff.Calls, eff.Concurrent)})
	}
	whole := func(e *Engine, s *State) int64 { return ByteEstimator{}.EstimateInputTokens(e.Request(s)) }
	if _, est := e.request(s); est.tokens >= whole(e, s) {
		t.Fatalf("estimate %d not built on the count (whole bound %d)", est.tokens, whole(e, s))
	}
	// reconfigured is the engine of the run with its configuration changed
	// by f (as an operator upgraded or an edited manifest would have it).
	reconfigured := func(f func(c *Config)) *Engine {
		saved := r.cfg
		defer func() { r.cfg = saved }()
		f(&r.cfg)
		return r.engine()
	}
	same := func(*State) {}
	for _, tc := range []struct {
		name   string
		engine *Engine
		change func(s *State)
	}{
		{"messages removed", e, func(s *State) { s.Transcript = s.Transcript[:1] }},
		{"a message changed", e, func(s *State) { s.Transcript[1].Content = "edited" }},
		{"another count's prefix", e, func(s *State) { s.Counted.Prefix = strings.Repeat("0", 32) }},
		{"another model", reconfigured(func(c *Config) { c.Model.Name = "another-model" }), same},
		{"other instructions", reconfigured(func(c *Config) { c.Instructions = "Be brief." }), same},
		{"another tool", reconfigured(func(c *Config) { c.Tools = append([]ToolSpec{{Name: "search"}}, c.Tools...) }), same},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := s.Clone()
			tc.change(c)
			if _, est := tc.engine.request(c); est.tokens != whole(tc.engine, c) || est.sent.Base != 0 {
				t.Errorf("estimate %d (built on %d), want the whole bound %d", est.tokens, est.sent.Base, whole(tc.engine, c))
			}
		})
	}
}

func TestEstimate_resumedRunEstimatesAsTheStraightOne(t *testing.T) {
	mk := func() *run {
		r := makeRun(t).readTool("lookup")
		for i := range 8 {
			r.then(ScriptEntry{ToolCalls: []ToolCall{call("lookup", fmt.Sprintf(`{"id":%d}`, i))}, Usage: usage(int64(400+50*i), 10)})
		}
		return r.then(answer("done"))
	}
	straight, want := mk().goCalls(false)
	resumed, got := mk().goCalls(true)
	expectOutcome(t, straight, Completed)
	expectOutcome(t, resumed, Completed)
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(modelCall{})); diff != "" {
		t.Fatalf("model calls (-straight +resumed):\n%s", diff)
	}
	if want[len(want)-1].reserved >= want[len(want)-1].whole {
		t.Fatalf("the last call reserved its whole bound: nothing was built on a count")
	}
}

func TestState_withoutPromptCountsLoadsAndBoundsTheNextRequestWhole(t *testing.T) {
	blob, err := json.Marshal(&State{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"inFlight", "counted", "wholeEstimates"} {
		if strings.Contains(string(blob), key) {
			t.Errorf("the zero State's JSON %s has %q", blob, key)
		}
	}

	// A checkpoint saved by an operator before requests were identified,
	// with a model call in flight.
	r := makeRun(t).readTool("lookup")
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	var old map[string]any
	blob, _ = json.Marshal(s)
	if err := json.Unmarshal(blob, &old); err != nil {
		t.Fatal(err)
	}
	delete(old, "inFlight")
	blob, _ = json.Marshal(old)
	s = &State{}
	if err := json.Unmarshal(blob, s); err != nil {
		t.Fatal(err)
	}
	eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", `{"id":1}`)}, Usage: usage(500, 10)}})
	e.Step(s, Input{Results: ExecuteBatch(context.Background(), r.tools, eff.Calls, eff.Concurrent)})
	if s.Counted != nil {
		t.Fatalf("counted %+v for a request the State did not identify", s.Counted)
	}
	eff = e.Step(s, Input{})
	if whole := (ByteEstimator{}).EstimateInputTokens(eff.Request); s.Reserved.InputTokens != whole {
		t.Errorf("reserved %d, want the whole bound %d", s.Reserved.InputTokens, whole)
	}
	// From its reply on, estimates are built on counts again.
	eff = e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", `{"id":2}`)}, Usage: usage(600, 10)}})
	e.Step(s, Input{Results: ExecuteBatch(context.Background(), r.tools, eff.Calls, eff.Concurrent)})
	eff = e.Step(s, Input{})
	if whole := (ByteEstimator{}).EstimateInputTokens(eff.Request); s.Reserved.InputTokens >= whole || s.InFlight.Base != 600 {
		t.Errorf("reserved %d of a whole %d, in flight %+v; want it built on the count 600", s.Reserved.InputTokens, whole, s.InFlight)
	}
}
