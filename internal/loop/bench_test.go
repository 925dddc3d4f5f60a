package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkTurn measures one engine turn: admission, a zero-latency
// scripted model answer with one read call, vetting, acting with a no-op
// tool and the observation. Target: under 20 µs and 100 allocations.
func BenchmarkTurn(b *testing.B) {
	h := newTurnHarness(b, 64)
	s := &State{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%8 == 0 { // a short run: the prompt (and its assembly) stays the size of a few turns
			s = &State{}
		}
		h.turn(b, s, i%64)
	}
}

// turnHarness is the harness task of the turn benchmarks: an engine with
// one read tool and room for any number of turns, a no-op toolbox, and
// replies that each call the tool with other arguments.
type turnHarness struct {
	e       *Engine
	noop    Toolbox
	replies []*Reply
}

func newTurnHarness(b *testing.B, replies int) *turnHarness {
	b.Helper()
	e, err := New(Config{
		Goal:   "Find out what happened.",
		Budget: Budget{MaxTurns: 1 << 30, MaxTokens: 1 << 50, MaxCost: new(MustMoney("1000000")), MaxToolCalls: new(1 << 30), DefaultToolLimit: new(1 << 30)},
		Model:  ModelConfig{Pricing: Pricing{Input: MustMoney("3"), Output: MustMoney("15")}},
		Tools:  []ToolSpec{{Name: "lookup", Parameters: json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer"}}}`)}},
		Loop:   LoopDetection{Threshold: 100, MaxPeriod: 1},
	})
	if err != nil {
		b.Fatal(err)
	}
	h := &turnHarness{e: e, replies: make([]*Reply, replies),
		noop: ToolboxFunc(func(context.Context, Invocation) Result { return Result{Output: []byte(`{"ok":true}`)} })}
	for i := range h.replies {
		h.replies[i] = &Reply{ToolCalls: []ToolCall{{Name: "lookup", Arguments: json.RawMessage(fmt.Sprintf(`{"id":%d}`, i))}}, Usage: TokenUsage{InputTokens: 1000, OutputTokens: 20}}
	}
	return h
}

// turn runs one turn of s: admission, the model's reply number i, its
// call through the no-op toolbox and the observation.
func (h *turnHarness) turn(b *testing.B, s *State, i int) {
	eff := h.e.Step(s, Input{})
	if eff.Kind != EffectCallModel {
		b.Fatalf("effect %s: %s", eff.Kind, s.Reason)
	}
	eff = h.e.Step(s, Input{Reply: h.replies[i]})
	results := ExecuteBatch(context.Background(), h.noop, eff.Calls, eff.Concurrent)
	if eff = h.e.Step(s, Input{Results: results}); eff.Kind != EffectContinue {
		b.Fatalf("effect %s", eff.Kind)
	}
}

// BenchmarkLoopDetection measures detection of one proposed call against
// a 1,000-call history.
func BenchmarkLoopDetection(b *testing.B) {
	cfg := LoopDetection{Threshold: 3, Window: 1000, MaxPeriod: 3}
	s := &State{}
	for i := range 1000 {
		raw := json.RawMessage(fmt.Sprintf(`{"id":%d}`, i))
		c, _ := Canonical(raw, nil)
		s.recordSignature(cfg, sigEntry(signature("lookup", c, raw)))
	}
	args := json.RawMessage(`{"id":5000, "page": 2, "request_id": "abc"}`)
	ignore := []string{"request_id"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := s.recordSignature(cfg, sigEntry(signature("lookup", decodeArgs(args, ignore).canon, args))); d != nil && i < 2 {
			b.Fatalf("detected too early: %s", d.reason(cfg))
		}
		s.Window = s.Window[:999*SigHashLen] // keep the window at 1,000 calls
	}
}

// BenchmarkTurnDepth measures the engine's cost per turn as a run grows:
// each iteration runs a whole run of T turns (the harness task of
// BenchmarkTurn) and the figure reported is ns/turn. Target: flat in T,
// the cost at T=200 within 1.5x of the cost at T=5.
func BenchmarkTurnDepth(b *testing.B) {
	for _, turns := range []int{5, 50, 200} {
		b.Run(fmt.Sprintf("T=%d", turns), func(b *testing.B) {
			h := newTurnHarness(b, turns)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				s := &State{}
				for t := range turns {
					h.turn(b, s, t)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*turns), "ns/turn")
		})
	}
}
