package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// randomRun builds a scripted run from a seed: tools that read, write
// reversibly and write irreversibly (so ASKs happen), arguments from a
// small set (so loops happen), and answers of every kind.
func randomRun(seed uint64) (Config, []ScriptEntry) {
	rng := rand.New(rand.NewPCG(seed, seed*7+1))
	cfg := Config{
		RunID:  fmt.Sprintf("seed-%d", seed),
		Goal:   "Explain the double charge.",
		Budget: Budget{MaxTurns: 2 + rng.IntN(10), MaxTokens: 1_000_000, MaxCost: new(MustMoney("5")), MaxToolCalls: new(5 + rng.IntN(20))},
		Model:  ModelConfig{Pricing: Pricing{Input: MustMoney("3"), Output: MustMoney("15"), CachedInput: MustMoney("0.3")}},
		Tools: []ToolSpec{
			{Name: "lookup", Parameters: json.RawMessage(`{"type":"object"}`), MaxCost: MustMoney("0.001")},
			{Name: "search", Parameters: json.RawMessage(`{"type":"object"}`)},
			{Name: "note", Mutates: true, Reversible: true},
			{Name: "refund", Mutates: true, Reversible: false, MaxCost: MustMoney("0.01")},
		},
		Policy: Policy{Default: Allow, Rules: []Rule{{Tools: []string{"search"}, When: "has(args.q) && args.q == 'secret'", Decision: Deny, Reason: "not that"}}},
	}
	names := []string{"lookup", "search", "note", "refund", "missing"}
	var script []ScriptEntry
	for range 1 + rng.IntN(12) {
		u := TokenUsage{InputTokens: int64(500 + rng.IntN(3000)), OutputTokens: int64(10 + rng.IntN(200))}
		u.CachedInputTokens = u.InputTokens / int64(1+rng.IntN(4))
		switch k := rng.IntN(20); {
		case k == 0:
			script = append(script, ScriptEntry{Content: "partial", Truncated: true, Usage: u})
		case k == 1:
			script = append(script, ScriptEntry{Refusal: "no", Usage: u})
		case k == 2:
			script = append(script, ScriptEntry{Error: "HTTP 500"})
		case k < 5:
			script = append(script, ScriptEntry{Content: fmt.Sprintf("answer %d", k), Usage: u})
		default:
			var cs []ToolCall
			for range 1 + rng.IntN(4) {
				args := []string{`{"q":"a"}`, `{"q":"b"}`, `{"q":"secret"}`, `{"id":1}`, `{"id":1.0,"x":[2,1]}`}[rng.IntN(5)]
				cs = append(cs, call(names[rng.IntN(len(names))], args))
			}
			script = append(script, ScriptEntry{ToolCalls: cs, Usage: u})
		}
	}
	return cfg, script
}

func propertyTools(clock *fakeClock) Toolbox {
	return ToolboxFunc(func(_ context.Context, inv Invocation) Result {
		// The call takes its time on the run's clock and says so, as an
		// executor does: the transcript's call records then measure the
		// same durations however busy the machine running the test is.
		d := time.Duration(len(inv.CallID)) * time.Second
		clock.Advance(d)
		if inv.Tool == "search" && len(inv.Arguments)%2 == 0 {
			return Result{Failure: &Failure{Kind: FailHTTP, Code: 503}, Output: []byte("busy"), Duration: d}
		}
		return Result{Output: []byte("result for " + inv.CallID + " " + string(inv.Arguments)), Duration: d}
	})
}

func propertyApprover(_ context.Context, pending []Call) map[string]Answer {
	out := map[string]Answer{}
	for _, c := range pending {
		out[c.ID] = []Answer{Approve, DenyAnswer, Approve}[len(c.Arguments)%3]
	}
	return out
}

// reloadingRun drives the same run as Runner, but keeps the state only as
// JSON between steps and builds a new Engine for every step, as an
// operator that persists at every phase boundary would.
func reloadingRun(t *testing.T, cfg Config, script []ScriptEntry, clock *fakeClock, lose map[int]bool) (*State, Money) {
	t.Helper()
	blob, _ := json.Marshal(&State{})
	model := &Scripted{Entries: script}
	tools := propertyTools(clock)
	in := Input{}
	var lost Money
	for step := 0; step < 500; step++ {
		e, err := New(cfg, WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		var s State
		if err := json.Unmarshal(blob, &s); err != nil {
			t.Fatal(err)
		}
		eff := e.Step(&s, in)
		if blob, err = json.Marshal(&s); err != nil {
			t.Fatal(err)
		}
		in = Input{}
		switch eff.Kind {
		case EffectFinish:
			return &s, lost
		case EffectCallModel:
			if lose[step] {
				lost += s.Reserved.Cost
				continue // the process died with the call in flight
			}
			reply, err := model.Complete(context.Background(), eff.Request)
			if err != nil {
				in.ModelErr = err
			} else {
				in.Reply = reply
			}
		case EffectAsk:
			in.Answers = propertyApprover(context.Background(), eff.Pending)
		case EffectRunTools:
			in.Results = ExecuteBatch(context.Background(), tools, eff.Calls, eff.Concurrent)
		case EffectWait:
			clock.Advance(eff.Until.Sub(clock.Now()))
		}
	}
	t.Fatal("the run did not end within 500 steps")
	return nil, 0
}

func TestProperty_reloadingAtEveryPhaseBoundaryChangesNothing(t *testing.T) {
	outcomes := map[Outcome]int{}
	for seed := uint64(1); seed <= 300; seed++ {
		cfg, script := randomRun(seed)

		c1 := newClock()
		straight := &State{}
		e, err := New(cfg, WithClock(c1.Now))
		if err != nil {
			t.Fatal(err)
		}
		(&Runner{Engine: e, Model: &Scripted{Entries: script}, Tools: propertyTools(c1), Approve: propertyApprover,
			Sleep: func(_ context.Context, d time.Duration) { c1.Advance(d) }}).Run(context.Background(), straight)

		reloaded, _ := reloadingRun(t, cfg, script, newClock(), nil)

		if diff := cmp.Diff(straight.Transcript, reloaded.Transcript); diff != "" {
			t.Fatalf("seed %d: transcripts differ (-straight +reloaded):\n%s", seed, diff)
		}
		if straight.Outcome != reloaded.Outcome || straight.Reason != reloaded.Reason || straight.Answer != reloaded.Answer {
			t.Fatalf("seed %d: outcome %s (%s) vs %s (%s)", seed, straight.Outcome, straight.Reason, reloaded.Outcome, reloaded.Reason)
		}
		if diff := cmp.Diff(straight.Usage, reloaded.Usage); diff != "" {
			t.Fatalf("seed %d: usage differs (-straight +reloaded):\n%s", seed, diff)
		}
		outcomes[straight.Outcome]++
	}
	// The generator must exercise more than the happy path.
	for _, o := range []Outcome{Completed, BudgetExhausted, GuardrailStop, LoopDetected, ToolFailure} {
		if outcomes[o] == 0 {
			t.Errorf("no generated run ended %s: %v", o, outcomes)
		}
	}
	t.Logf("outcomes over 300 runs: %v", outcomes)
}

func TestProperty_aCrashBetweenReservationAndSettlementNeverUnderCounts(t *testing.T) {
	compared := 0
	defer func() {
		if compared < 100 {
			t.Errorf("only %d runs compared", compared)
		}
	}()
	for seed := uint64(1); seed <= 200; seed++ {
		cfg, script := randomRun(seed)
		cfg.Budget.MaxTurns = 40 // room for the repeated calls
		straight, _ := reloadingRun(t, cfg, script, newClock(), nil)
		crashed, lost := reloadingRun(t, cfg, script, newClock(), map[int]bool{1: true, 4: true, 9: true})
		if crashed.Outcome != straight.Outcome {
			continue // a repeated call may legitimately change which ceiling stops the run
		}
		compared++
		// Every lost call is charged its whole reservation on top of what
		// the replayed calls really cost.
		if crashed.Usage.Cost < straight.Usage.Cost+lost || crashed.Usage.Turns < straight.Usage.Turns {
			t.Fatalf("seed %d: a crash under-counted spend: $%s < $%s + $%s lost", seed, crashed.Usage.Cost, straight.Usage.Cost, lost)
		}
	}
}
