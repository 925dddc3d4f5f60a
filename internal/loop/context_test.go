package loop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/modeltest"
	"github.com/agentrun/agentrun/internal/model/openai"
)

// The window run of issue 29: 150 turns, a tool that returns 8 KB on
// every turn, an OpenAI-compatible server that refuses any request over
// 32,000 tokens.
const (
	windowTurns  = 150
	windowLimit  = 32_000
	windowResult = 8 << 10
)

// windowRun runs the window run with the context policy p and returns
// its final state and the server.
func windowRun(t testing.TB, p loop.ContextPolicy) (*loop.State, *modeltest.WindowServer) {
	t.Helper()
	srv := modeltest.NewWindowServer(t, windowLimit, "read_chunk", windowTurns)
	m, err := openai.New(model.Config{Model: "window", BaseURL: srv.URL, KeySource: model.StaticKey("sk-test"), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	e := windowEngine(t, p)
	tools := loop.ToolboxFunc(func(_ context.Context, inv loop.Invocation) loop.Result {
		return loop.Result{Output: bytes.Repeat([]byte{'a' + byte(len(inv.CallID)%26)}, windowResult)}
	})
	s := &loop.State{}
	(&loop.Runner{Engine: e, Model: m, Tools: tools, Sleep: func(context.Context, time.Duration) {}}).Run(context.Background(), s)
	return s, srv
}

func windowEngine(t testing.TB, p loop.ContextPolicy) *loop.Engine {
	t.Helper()
	e, err := loop.New(loop.Config{
		Goal: "Read every chunk with read_chunk, one per turn, then say that all the chunks are read.",
		Budget: loop.Budget{MaxTurns: windowTurns, MaxTokens: 1 << 40, MaxCost: new(loop.MustMoney("1000")),
			MaxToolCalls: new(2 * windowTurns), DefaultToolLimit: new(2 * windowTurns)},
		Model: loop.ModelConfig{Provider: "openai", Name: "window", Pricing: loop.Pricing{
			Input: loop.MustMoney("2"), Output: loop.MustMoney("8"), CachedInput: loop.MustMoney("0.5")}},
		Tools: []loop.ToolSpec{{Name: "read_chunk", Description: "Read chunk n.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)}},
		Context: p,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestContext_windowRunCompletesUnderEitherStrategy(t *testing.T) {
	for _, strategy := range []loop.ContextStrategy{loop.ContextClear, loop.ContextSummarize} {
		t.Run(string(strategy), func(t *testing.T) {
			s, srv := windowRun(t, loop.ContextPolicy{MaxInputTokens: 30_000, Strategy: strategy})
			if s.Outcome != loop.Completed {
				t.Fatalf("outcome %s: %s", s.Outcome, s.Reason)
			}
			if s.Usage.Turns != windowTurns {
				t.Errorf("usage.turns = %d, want %d (a summary call is no turn)", s.Usage.Turns, windowTurns)
			}
			var summaries int
			for i, r := range srv.Requests() {
				if r.Refused || r.Input > 30_000 {
					t.Fatalf("request %d was counted %d tokens, over the policy's 30000 (refused %v)", i+1, r.Input, r.Refused)
				}
				if r.Summary {
					summaries++
				}
			}
			c := s.Context
			if c == nil || c.Compactions < 2 || c.Compactions > windowTurns/2 {
				t.Fatalf("context state %+v: want compactions in steps, more than one and fewer than every other turn", c)
			}
			if want := strategy == loop.ContextSummarize; (summaries > 0) != want {
				t.Errorf("%d summary calls with strategy %s", summaries, strategy)
			}
			if strategy == loop.ContextSummarize && summaries != c.Compactions {
				t.Errorf("%d summary calls for %d compactions: each compaction is one call, never two", summaries, c.Compactions)
			}
			// The transcript keeps everything: every result whole, and a
			// marker for each compaction.
			var results, markers int
			for _, m := range s.Transcript {
				switch {
				case m.Role == loop.RoleTool && len(m.Content) == windowResult:
					results++
				case m.Role == loop.RoleContext:
					markers++
				}
			}
			if results != windowTurns-1 || markers != c.Compactions {
				t.Errorf("transcript holds %d whole results and %d markers, want %d and %d", results, markers, windowTurns-1, c.Compactions)
			}
			share := srv.CachedShare()
			t.Logf("%s: %d compactions, cached share of input %.2f, usage %+v", strategy, c.Compactions, share, s.Usage)
			if share < 0.5 {
				t.Errorf("cached share of input %.2f: the prefix is not stable between compactions", share)
			}
		})
	}
}

func TestContext_windowRunWithoutAFittingPolicyEndsWithAReasonAPersonReads(t *testing.T) {
	s, srv := windowRun(t, loop.ContextPolicy{MaxInputTokens: 200_000, Source: loop.ContextFromModel})
	if s.Outcome != loop.BudgetExhausted {
		t.Fatalf("outcome %s (%s), want BudgetExhausted", s.Outcome, s.Reason)
	}
	for _, want := range []string{"refused the request of turn", "longer than the model's context window", "spec.context.maxInputTokens"} {
		if !strings.Contains(s.Reason, want) {
			t.Errorf("reason %q does not say %q", s.Reason, want)
		}
	}
	if strings.Contains(s.Reason, "HTTP 400") {
		t.Errorf("reason %q is the raw provider error", s.Reason)
	}
	if last := srv.Requests()[len(srv.Requests())-1]; !last.Refused {
		t.Errorf("the last request was not refused: %+v", last)
	}
}

func TestContext_aRequestThatCannotFitEndsTheRunBeforeItIsSent(t *testing.T) {
	// Four recent turns of 8 KB each cannot fit in 6,000 tokens.
	s, srv := windowRun(t, loop.ContextPolicy{MaxInputTokens: 6_000, KeepRecentTurns: 4})
	if s.Outcome != loop.BudgetExhausted || !strings.Contains(s.Reason, "more than the context limit of 6000") {
		t.Fatalf("outcome %s: %s", s.Outcome, s.Reason)
	}
	for i, r := range srv.Requests() {
		if r.Input > 6_000 {
			t.Errorf("request %d of %d tokens was sent", i+1, r.Input)
		}
	}
}

// scriptedWindow is a scripted run of turns turns whose tool returns
// 2 KB a turn, held to a small context limit.
func scriptedWindow(t *testing.T, strategy loop.ContextStrategy, turns int) (*loop.Engine, loop.Model, loop.Toolbox) {
	t.Helper()
	script := make([]loop.ScriptEntry, turns)
	for i := range turns - 1 {
		script[i] = loop.ScriptEntry{ToolCalls: []loop.ToolCall{{Name: "read_chunk", Arguments: json.RawMessage(`{"n":` + strings.Repeat("1", i%9+1) + `}`)}},
			Usage: loop.TokenUsage{OutputTokens: 20}}
	}
	script[turns-1] = loop.ScriptEntry{Content: "done", Usage: loop.TokenUsage{OutputTokens: 5}}
	e := windowEngine(t, loop.ContextPolicy{MaxInputTokens: 4_000, KeepRecentTurns: 2, Strategy: strategy})
	tools := loop.ToolboxFunc(func(_ context.Context, inv loop.Invocation) loop.Result {
		return loop.Result{Output: bytes.Repeat([]byte("b"), 2<<10)}
	})
	return e, modeltest.Counting{Model: &loop.Scripted{Entries: script}}, tools
}

// sentWithoutTimes is req as JSON, with how long each call ran (the
// wall clock's, which a busy machine changes between two runs) taken out.
func sentWithoutTimes(t *testing.T, req *loop.Request) string {
	t.Helper()
	out := *req
	out.Messages = slices.Clone(req.Messages)
	for i, m := range out.Messages {
		if m.Record != nil {
			r := *m.Record
			r.DurationMs = 0
			out.Messages[i].Record = &r
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestContext_resumesExactlyAtEveryBoundary runs a compacting run once
// straight through and once saved and reloaded (its State through JSON)
// after every step: both send the same requests and end the same.
func TestContext_resumesExactlyAtEveryBoundary(t *testing.T) {
	for _, strategy := range []loop.ContextStrategy{loop.ContextClear, loop.ContextSummarize} {
		t.Run(string(strategy), func(t *testing.T) {
			run := func(reload bool) ([]string, *loop.State) {
				e, m, tools := scriptedWindow(t, strategy, 30)
				var sent []string
				s := &loop.State{}
				in := loop.Input{}
				for range 1000 {
					eff := e.Step(s, in)
					if reload {
						s = s.Clone()
					}
					in = loop.Input{}
					switch eff.Kind {
					case loop.EffectFinish:
						return sent, s
					case loop.EffectCallModel:
						sent = append(sent, sentWithoutTimes(t, eff.Request))
						in.Reply, in.ModelErr = m.Complete(context.Background(), eff.Request)
					case loop.EffectRunTools:
						in.Results = loop.ExecuteBatch(context.Background(), tools, eff.Calls, eff.Concurrent)
					}
				}
				t.Fatal("the run did not end")
				return nil, nil
			}
			want, ws := run(false)
			got, gs := run(true)
			if ws.Outcome != loop.Completed || ws.Context == nil || ws.Context.Compactions < 2 {
				t.Fatalf("the straight run: %s (%s), context %+v", ws.Outcome, ws.Reason, ws.Context)
			}
			if len(got) != len(want) {
				t.Fatalf("%d requests after reloads, %d straight", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("request %d differs after reloads", i+1)
				}
			}
			if gs.Usage.Cost != ws.Usage.Cost || gs.Context.Compactions != ws.Context.Compactions {
				t.Errorf("after reloads: cost %s, %d compactions; straight: %s, %d", gs.Usage.Cost, gs.Context.Compactions, ws.Usage.Cost, ws.Context.Compactions)
			}
		})
	}
}

// TestContext_aSummaryLostToACrashIsPaidOnceAndNotMadeAgain: a restart
// while the summary call was in flight charges its reservation once and
// clears the older turns instead of asking for the summary again.
func TestContext_aSummaryLostToACrashIsPaidOnceAndNotMadeAgain(t *testing.T) {
	e, m, tools := scriptedWindow(t, loop.ContextSummarize, 30)
	s := &loop.State{}
	in := loop.Input{}
	for range 1000 {
		eff := e.Step(s, in)
		in = loop.Input{}
		if eff.Kind == loop.EffectCallModel && eff.Request.Summary {
			break
		}
		switch eff.Kind {
		case loop.EffectFinish:
			t.Fatalf("the run ended before a summary call: %s", s.Reason)
		case loop.EffectCallModel:
			in.Reply, in.ModelErr = m.Complete(context.Background(), eff.Request)
		case loop.EffectRunTools:
			in.Results = loop.ExecuteBatch(context.Background(), tools, eff.Calls, eff.Concurrent)
		}
	}
	if s.Phase != loop.PhaseCompact {
		t.Fatalf("phase %q with a summary call in flight", s.Phase)
	}
	crashed := s.Clone()
	before, reserved, turns := crashed.Usage, crashed.Reserved, crashed.Usage.Turns
	eff := e.Step(crashed, loop.Input{}) // the reply is lost
	if eff.Kind != loop.EffectCallModel || eff.Request.Summary {
		t.Fatalf("after the lost summary: effect %s (summary %v), want the turn's model call", eff.Kind, eff.Request != nil && eff.Request.Summary)
	}
	if got := crashed.Usage.InputTokens - before.InputTokens; got != reserved.InputTokens {
		t.Errorf("charged %d input tokens for the lost summary, want its reservation %d", got, reserved.InputTokens)
	}
	if crashed.Usage.Turns != turns {
		t.Errorf("usage.turns went from %d to %d: a summary call is no turn", turns, crashed.Usage.Turns)
	}
	if c := crashed.Context; c.Summary != "" || c.ClearedThrough == 0 || c.Pending != nil {
		t.Errorf("context after the lost summary %+v: want the older turns cleared, no summary pending", c)
	}
	for _, m := range eff.Request.Messages {
		if m.Role == loop.RoleContext {
			t.Error("a compaction marker was sent to the model")
		}
	}
}

// BenchmarkContext_windowRun reports, for the window run of issue 29
// (150 turns of 8 KB results held to 30,000 input tokens) under each
// strategy, over the server's count of each request: the input tokens
// the engine reserved for it (est, mean and largest; "extending" only
// over the requests that extend the one counted before, the others being
// reserved at their whole bound), the estimate the context policy held
// it to (policy, turns' requests only), and the whole byte bound (what
// the engine reserved before its estimates built on the provider's
// counts); then the cached share of all input tokens, and the
// compactions. It measures estimates, not time.
func BenchmarkContext_windowRun(b *testing.B) {
	for _, strategy := range []loop.ContextStrategy{loop.ContextClear, loop.ContextSummarize} {
		b.Run(string(strategy), func(b *testing.B) {
			var est, bound, extending, pol, share float64
			var compactions int
			for b.Loop() {
				srv := modeltest.NewWindowServer(b, windowLimit, "read_chunk", windowTurns)
				m, err := openai.New(model.Config{Model: "window", BaseURL: srv.URL, KeySource: model.StaticKey("sk-test"), MaxRetries: -1})
				if err != nil {
					b.Fatal(err)
				}
				tools := loop.ToolboxFunc(func(_ context.Context, inv loop.Invocation) loop.Result {
					return loop.Result{Output: bytes.Repeat([]byte{'a' + byte(len(inv.CallID)%26)}, windowResult)}
				})
				var reserved, bounds, policy []int64
				s := &loop.State{}
				(&loop.Runner{Engine: windowEngine(b, loop.ContextPolicy{MaxInputTokens: 30_000, Strategy: strategy}), Model: m, Tools: tools,
					Sleep: func(context.Context, time.Duration) {},
					OnStep: func(s *loop.State, eff loop.Effect) {
						if eff.Kind == loop.EffectCallModel {
							reserved = append(reserved, s.Reserved.InputTokens)
							bounds = append(bounds, loop.ByteEstimator{}.EstimateInputTokens(eff.Request))
							p := int64(0)
							if !eff.Request.Summary && s.Context != nil {
								p = s.Context.LastInputTokens
							}
							policy = append(policy, p)
						}
					}}).Run(context.Background(), s)
				reqs := srv.Requests()
				if s.Outcome != loop.Completed || len(reqs) != len(reserved) {
					b.Fatalf("outcome %s (%s), %d requests for %d reservations", s.Outcome, s.Reason, len(reqs), len(reserved))
				}
				var sumEst, sumBound, sumPol float64
				var nPol int
				est, bound, extending, pol = 0, 0, 0, 0
				for i, r := range reqs {
					q, qb := float64(reserved[i])/float64(r.Input), float64(bounds[i])/float64(r.Input)
					sumEst, sumBound = sumEst+q, sumBound+qb
					est, bound = max(est, q), max(bound, qb)
					if reserved[i] < bounds[i] {
						extending = max(extending, q)
					}
					if policy[i] > 0 {
						qp := float64(policy[i]) / float64(r.Input)
						sumPol, nPol, pol = sumPol+qp, nPol+1, max(pol, qp)
					}
				}
				b.ReportMetric(sumEst/float64(len(reqs)), "est/actual-mean")
				b.ReportMetric(sumBound/float64(len(reqs)), "bound/actual-mean")
				b.ReportMetric(sumPol/float64(nPol), "policy/actual-mean")
				share, compactions = srv.CachedShare(), s.Context.Compactions
			}
			b.ReportMetric(est, "est/actual-max")
			b.ReportMetric(bound, "bound/actual-max")
			b.ReportMetric(extending, "est/actual-extending-max")
			b.ReportMetric(pol, "policy/actual-max")
			b.ReportMetric(share, "cached-share")
			b.ReportMetric(float64(compactions), "compactions")
		})
	}
}

// summaryRun drives a summarising run of 2 KB tool results a turn, held
// to a small context limit, with the given turn ceiling, to its end. It
// returns the final state and the turns the summaries it paid for served.
func summaryRun(t *testing.T, maxTurns int) (*loop.State, []int) {
	t.Helper()
	script := make([]loop.ScriptEntry, 30)
	for i := range script {
		script[i] = loop.ScriptEntry{ToolCalls: []loop.ToolCall{{Name: "read_chunk", Arguments: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}},
			Usage: loop.TokenUsage{OutputTokens: 20}}
	}
	e, err := loop.New(loop.Config{
		Goal: "Read every chunk with read_chunk, one per turn.",
		Budget: loop.Budget{MaxTurns: maxTurns, MaxTokens: 1 << 40, MaxCost: new(loop.MustMoney("1000")),
			MaxToolCalls: new(100), DefaultToolLimit: new(100)},
		Model: loop.ModelConfig{Provider: "openai", Name: "window", Pricing: loop.Pricing{Input: loop.MustMoney("2"), Output: loop.MustMoney("8")}},
		Tools: []loop.ToolSpec{{Name: "read_chunk", Description: "Read chunk n.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)}},
		Context: loop.ContextPolicy{MaxInputTokens: 4_000, KeepRecentTurns: 1, Strategy: loop.ContextSummarize},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := &loop.Scripted{Entries: script}
	tools := loop.ToolboxFunc(func(context.Context, loop.Invocation) loop.Result {
		return loop.Result{Output: bytes.Repeat([]byte("b"), 2<<10)}
	})
	var served []int
	s := &loop.State{}
	in := loop.Input{}
	for range 1000 {
		eff := e.Step(s, in)
		in = loop.Input{}
		switch eff.Kind {
		case loop.EffectFinish:
			return s, served
		case loop.EffectCallModel:
			if eff.Request.Summary {
				served = append(served, s.Turn+1)
				in.Reply = &loop.Reply{Content: "Every chunk read so far held only the letter b.", Usage: loop.TokenUsage{InputTokens: 100, OutputTokens: 20}}
				continue
			}
			in.Reply, in.ModelErr = m.Complete(context.Background(), eff.Request)
		case loop.EffectRunTools:
			in.Results = loop.ExecuteBatch(context.Background(), tools, eff.Calls, eff.Concurrent)
		}
	}
	t.Fatal("the run did not end")
	return nil, nil
}

// Issue 43, item 3: a run with no turn left whose next request needed
// compacting paid for a summary, then ended BudgetExhausted. The summary
// is admitted together with the turn it serves: under every turn ceiling,
// each summary paid for is followed by its turn, and a run that ends on
// its turn ceiling paid for no summary it could not use.
func TestContext_aSummaryIsNotPaidForATurnThatCannotBeAdmitted(t *testing.T) {
	summarised := 0
	for turns := 1; turns <= 12; turns++ {
		s, served := summaryRun(t, turns)
		if s.Outcome != loop.BudgetExhausted || !strings.Contains(s.Reason, "turns ceiling") {
			t.Fatalf("with %d turns: %s (%s), want BudgetExhausted on turns", turns, s.Outcome, s.Reason)
		}
		for _, turn := range served {
			if turn > s.Usage.Turns {
				t.Errorf("with %d turns: a summary was paid for turn %d, which was never admitted", turns, turn)
			}
		}
		summarised += len(served)
	}
	if summarised == 0 {
		t.Fatal("no run summarised: the test does not reach compaction")
	}
}
