package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// countingEstimator estimates like the default but message by message,
// and counts the messages it was asked about.
type countingEstimator struct{ messages int }

func (c *countingEstimator) EstimateInputTokens(req *Request) int64 {
	n := int64(len(req.System))
	for i := range req.Messages {
		n += c.EstimateMessageTokens(&req.Messages[i])
	}
	return n
}

func (c *countingEstimator) EstimateMessageTokens(m *Message) int64 {
	c.messages++
	return int64(len(m.Content)+len(m.Tool)) + 7
}

// TestRequest_promptKeptAsTranscriptGrows: the request and estimate the
// engine keeps across turns (built on the provider's last count) are
// those built afresh from a reloaded state, and each message is estimated
// once, not once per turn.
func TestRequest_promptKeptAsTranscriptGrows(t *testing.T) {
	for _, name := range []string{"default", "estimator"} {
		t.Run(name, func(t *testing.T) {
			est := &countingEstimator{}
			var opts []Option
			if name == "estimator" {
				opts = append(opts, WithEstimator(est))
			}
			e, err := New(Config{
				Goal:   "Find out what happened.",
				Budget: Budget{MaxTurns: 100, MaxTokens: 1 << 50, MaxCost: new(MustMoney("1000000")), MaxToolCalls: new(1000), DefaultToolLimit: new(1000)},
				Tools:  []ToolSpec{{Name: "lookup"}},
			}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			noop := ToolboxFunc(func(context.Context, Invocation) Result { return Result{Output: []byte(`{"ok":true}`)} })
			s := &State{}
			fresh := 0 // messages estimated for the reloaded states
			const turns = 40
			for i := range turns {
				if eff := e.Step(s, Input{}); eff.Kind != EffectCallModel {
					t.Fatalf("turn %d: effect %s: %s", i, eff.Kind, s.Reason)
				}
				reloaded := s.Clone()
				got, gotTokens := e.request(s)
				before := est.messages
				want, wantTokens := e.request(reloaded)
				fresh += est.messages - before
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("turn %d: request (-fresh +kept):\n%s", i, diff)
				}
				if diff := cmp.Diff(wantTokens, gotTokens, cmp.AllowUnexported(inputEstimate{})); diff != "" {
					t.Fatalf("turn %d: estimate (-fresh +kept):\n%s", i, diff)
				}
				if i > 0 && gotTokens.sent.Base == 0 {
					t.Fatalf("turn %d: the estimate is not built on the count of turn %d", i, i-1)
				}
				eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{{Name: "lookup", Arguments: json.RawMessage(fmt.Sprintf(`{"id":%d}`, i))}},
					Usage: TokenUsage{InputTokens: int64(100 + 10*i)}}})
				if eff = e.Step(s, Input{Results: ExecuteBatch(context.Background(), noop, eff.Calls, eff.Concurrent)}); eff.Kind != EffectContinue {
					t.Fatalf("turn %d: effect %s", i, eff.Kind)
				}
			}
			if name == "estimator" {
				// Without the running total, the kept state's estimates
				// cover about turns² messages; with it, each message a few
				// times (once, and again when the transcript moves to a
				// larger array: amortised constant).
				kept := est.messages - fresh
				if limit := 6 * turns; kept > limit {
					t.Fatalf("estimated %d messages over %d turns, want at most %d", kept, turns, limit)
				}
			}
		})
	}
}
