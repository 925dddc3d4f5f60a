package loop

import (
	"context"
	"strings"
	"testing"
	"time"
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
		if got, want := e.batchReservation(calls).WallClock, time.Duration(waves)*10*time.Second; got != want {
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
