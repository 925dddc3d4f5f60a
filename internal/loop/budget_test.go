package loop

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A call may take its startup grace, its timeout and its kill grace before
// its result is in: all three are reserved on the wall clock, so a batch
// that cannot hold them is refused before anything runs.
func TestAdmission_batchReservesKillGraceAndStartupGrace(t *testing.T) {
	cases := []struct {
		name   string
		tool   ToolSpec
		admit  bool
		reason string
	}{
		{"timeout alone fits", ToolSpec{Name: "a", Timeout: time.Second}, true, ""},
		{"kill grace does not fit", ToolSpec{Name: "a", Timeout: time.Second, KillGrace: 2 * time.Second}, false,
			"wallClock ceiling: 0s consumed + 3s reserved = 3s > 2s"},
		{"startup grace does not fit", ToolSpec{Name: "a", Timeout: time.Second, StartupGrace: 5 * time.Minute, KillGrace: 5 * time.Second}, false,
			"wallClock ceiling: 0s consumed + 306s reserved = 306s > 2s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := makeRun(t)
			r.cfg.Budget.MaxWallClock = 2 * time.Second
			r.cfg.Model.Timeout = time.Second
			r.cfg.Tools = []ToolSpec{tc.tool}
			e := r.engine()
			s := &State{}
			e.Step(s, Input{})
			eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("a", `{}`)}}})
			if tc.admit {
				if eff.Kind != EffectRunTools || len(eff.Calls) != 1 {
					t.Fatalf("effect = %s, want the call dispatched (%s)", eff.Kind, s.Reason)
				}
				inv := eff.Calls[0]
				if inv.Timeout != tc.tool.Timeout || inv.KillGrace != tc.tool.KillGrace || inv.StartupGrace != tc.tool.StartupGrace {
					t.Fatalf("invocation = %+v, want the tool's timeout and graces", inv)
				}
				if s.Reserved.WallClock != tc.tool.MaxDuration() {
					t.Fatalf("reserved %s, want %s", s.Reserved.WallClock, tc.tool.MaxDuration())
				}
				return
			}
			expectOutcome(t, s, BudgetExhausted)
			if !strings.Contains(s.Reason, tc.reason) {
				t.Fatalf("reason %q does not contain %q", s.Reason, tc.reason)
			}
			if len(r.tools.Ran()) != 0 {
				t.Fatalf("a call ran: %v", r.tools.Ran())
			}
		})
	}
}

// Reads run at most eight at a time: a ninth read is a second wave, and
// the reservation counts it.
func TestAdmission_readsBeyondOneWaveAreReservedPerWave(t *testing.T) {
	r := makeRun(t)
	r.cfg.Tools = []ToolSpec{{Name: "a", Timeout: 10 * time.Second}}
	r.cfg.Budget.DefaultToolLimit = new(100)
	e := r.engine()
	for _, n := range []int{8, 9, 17} {
		calls := make([]Call, n)
		for i := range calls {
			calls[i] = Call{ToolCall: call("a", `{}`), Verdict: Allow, State: CallProposed}
		}
		waves := (n + 7) / 8
		if got, want := e.batchReservation(calls, Usage{}).WallClock, time.Duration(waves)*10*time.Second; got != want {
			t.Errorf("%d reads: reserved %s, want %s", n, got, want)
		}
	}
}

// ExecuteBatch hands each call a context that ends with its reservation:
// timeout + startup grace + kill grace, and no later.
func TestExecuteBatch_deadlineIsTheCallsReservation(t *testing.T) {
	inv := Invocation{CallID: "t1-c1", Tool: "a", Timeout: 3 * time.Second, StartupGrace: time.Second, KillGrace: 2 * time.Second}
	var left time.Duration
	tb := ToolboxFunc(func(ctx context.Context, _ Invocation) Result {
		dl, ok := ctx.Deadline()
		if !ok {
			t.Fatal("no deadline handed to the tool")
		}
		left = time.Until(dl)
		return Result{}
	})
	ExecuteBatch(context.Background(), tb, []Invocation{inv}, false)
	if left > inv.MaxDuration() || left < inv.MaxDuration()-time.Second {
		t.Fatalf("deadline %s away, want at most (and close to) %s", left, inv.MaxDuration())
	}
}

// Zero is a real ceiling for money, tool calls and the default per-tool
// limit: Normalize keeps it. Only an unset (nil) one takes the default.
func TestNormalize_zeroCeilingsStayZeroUnsetOnesTakeTheDefault(t *testing.T) {
	zero := Config{Budget: Budget{MaxCost: new(Money(0)), MaxToolCalls: new(0), DefaultToolLimit: new(0)}}.Normalize().Budget
	if *zero.MaxCost != 0 || *zero.MaxToolCalls != 0 || *zero.DefaultToolLimit != 0 {
		t.Fatalf("zero ceilings became %s, %d, %d", *zero.MaxCost, *zero.MaxToolCalls, *zero.DefaultToolLimit)
	}
	unset := Config{}.Normalize().Budget
	if *unset.MaxCost != DefaultMaxCost || *unset.MaxToolCalls != DefaultMaxToolCalls || *unset.DefaultToolLimit != DefaultToolLimit {
		t.Fatalf("unset ceilings became %s, %d, %d", *unset.MaxCost, *unset.MaxToolCalls, *unset.DefaultToolLimit)
	}
}

func TestBudget_zeroCeilingsStopTheFirstStepThatNeedsThem(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(r *run)
		reason string
	}{
		{"no tool calls", func(r *run) { r.cfg.Budget.MaxToolCalls = new(0) }, "toolCalls ceiling: 0 consumed + 1 reserved = 1 > 0"},
		{"no calls of tools outside perTool", func(r *run) { r.cfg.Budget.DefaultToolLimit = new(0) }, "per-tool limit of a: 0 calls made + 1 in this batch = 1 > 0"},
		{"no money", func(r *run) {
			r.cfg.Budget.MaxCost = new(Money(0))
			r.cfg.Model.Pricing = Pricing{Input: MustMoney("3"), Output: MustMoney("15")}
		}, "cost ceiling: $0.0000 consumed + $"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := makeRun(t).readTool("a").then(calls(call("a", `{}`)), answer("x"))
			tc.setup(r)
			s := r.go_()
			expectOutcome(t, s, BudgetExhausted)
			if !strings.Contains(s.Reason, tc.reason) || len(r.tools.Ran()) != 0 {
				t.Fatalf("reason %q (ran %v), want %q and nothing run", s.Reason, r.tools.Ran(), tc.reason)
			}
			if h := r.engine().Convergence(s).Headroom; tc.name == "no tool calls" && h[DimToolCalls] != "0.00" {
				t.Fatalf("headroom of a zero ceiling = %s, want 0.00", h[DimToolCalls])
			}
		})
	}
}

// ExecuteBatch stamps every result with its call's id (the engine joins
// results to calls by it) and a duration, whatever the toolbox returned;
// a duration the toolbox measured itself is kept.
func TestExecuteBatch_stampsCallIDAndDuration(t *testing.T) {
	tb := ToolboxFunc(func(_ context.Context, inv Invocation) Result {
		if inv.Tool == "measured" {
			return Result{CallID: "wrong", Duration: time.Hour}
		}
		return Result{}
	})
	calls := []Invocation{{CallID: "t1-c1", Tool: "plain", Timeout: time.Second}, {CallID: "t1-c2", Tool: "measured", Timeout: time.Second}}
	for _, concurrent := range []bool{false, true} {
		res := ExecuteBatch(context.Background(), tb, calls, concurrent)
		if res[0].CallID != "t1-c1" || res[0].Duration <= 0 || res[1].CallID != "t1-c2" || res[1].Duration != time.Hour {
			t.Errorf("concurrent %v: results %+v, want t1-c1 with a duration and t1-c2 with its own hour", concurrent, res)
		}
	}
}

// CallModel is the one place a model call gets its deadline: the model
// timeout of the normalised config.
func TestCallModel_deadlineIsTheModelTimeout(t *testing.T) {
	e, err := New(Config{Goal: "g", Budget: Budget{MaxTurns: 1}, Model: ModelConfig{Timeout: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	var left time.Duration
	m := modelFunc(func(ctx context.Context, _ *Request) (*Reply, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			t.Fatal("no deadline handed to the model")
		}
		left = time.Until(dl)
		return &Reply{}, nil
	})
	if _, err := e.CallModel(context.Background(), m, &Request{}); err != nil {
		t.Fatal(err)
	}
	if left > 3*time.Second || left < 2*time.Second {
		t.Fatalf("deadline %s away, want close to 3s", left)
	}
	e, _ = New(Config{Goal: "g", Budget: Budget{MaxTurns: 1}})
	if _, err := e.CallModel(context.Background(), m, &Request{}); err != nil {
		t.Fatal(err)
	}
	if left > DefaultModelTimeout || left < DefaultModelTimeout-time.Second {
		t.Fatalf("deadline %s away, want close to the default %s", left, DefaultModelTimeout)
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

// Issue 43, item 4: what a hard maxWallClock promises. No model or tool
// call is started unless its whole deadline fits in what is left of the
// ceiling, so none runs past it; the operator's own time between steps (a
// save, a requeue) is not reserved and counts as it passes, so a run that
// ends on the ceiling may show a little more than it, by that time only.
func TestWallClock_noCallRunsPastTheCeilingWhenStepsAreApart(t *testing.T) {
	const (
		ceiling = 100 * time.Second
		gap     = 3 * time.Second // the operator's time between two steps
	)
	r := makeRun(t).readTool("lookup")
	r.cfg.Budget.MaxWallClock = ceiling
	r.cfg.Model.Timeout = 20 * time.Second
	r.cfg.Tools[0].Timeout = 10 * time.Second
	for i := range 20 {
		r.then(calls(call("lookup", fmt.Sprintf(`{"q":%d}`, i))))
	}
	e := r.engine()
	s := &State{}
	in := Input{}
	calls := 0
	for range 200 {
		eff := e.Step(s, in)
		in = Input{}
		r.clock.Advance(gap)
		var reserved time.Duration
		switch eff.Kind {
		case EffectFinish:
			expectOutcome(t, s, BudgetExhausted)
			if !strings.Contains(s.Reason, "wallClock ceiling") {
				t.Fatalf("ended on %s", s.Reason)
			}
			if calls < 4 {
				t.Fatalf("only %d calls ran before the ceiling", calls)
			}
			if s.Usage.WallClock > ceiling+gap {
				t.Fatalf("wall clock %s: more than the ceiling %s plus the time between two steps", s.Usage.WallClock, ceiling)
			}
			return
		case EffectCallModel:
			reserved = e.cfg.Model.Timeout
			in.Reply = &Reply{ToolCalls: r.script[min(calls, len(r.script)-1)].ToolCalls, Usage: usage(100, 10)}
			// The call takes all but a second of its deadline.
			r.clock.Advance(reserved - time.Second)
		case EffectRunTools:
			reserved = eff.Calls[0].MaxDuration()
			r.clock.Advance(reserved - time.Second)
			for _, c := range eff.Calls {
				in.Results = append(in.Results, Result{CallID: c.CallID, Output: []byte(`{"ok":true}`)})
			}
		case EffectContinue:
			continue
		default:
			t.Fatalf("unexpected effect %s", eff.Kind)
		}
		calls++
		// Started now, with what the run has worked so far: the call's
		// whole deadline fits in the ceiling.
		if worked := s.Usage.WallClock; worked+reserved > ceiling {
			t.Fatalf("call %d started at %s worked with a deadline of %s: it may run past the ceiling of %s", calls, worked, reserved, ceiling)
		}
	}
	t.Fatal("the run did not end")
}
