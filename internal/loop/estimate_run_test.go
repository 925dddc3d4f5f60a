package loop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model/modeltest"
)

// estimateSample is one model call of a measured run: the input tokens
// the engine reserved for it, the whole bound of its request (what
// ByteEstimator gives for all of it, which was the reservation before
// estimates built on the provider's counts), and the provider's count.
type estimateSample struct {
	reserved, bound, actual int64
}

// measureRun runs e to its end with the model m, reporting the input counts
// of modeltest.InputTokens, and returns a sample for every model call.
func measureRun(tb testing.TB, e *loop.Engine, m loop.Model, tools loop.Toolbox, approve loop.Approver) ([]estimateSample, *loop.State) {
	tb.Helper()
	var samples []estimateSample
	s := &loop.State{}
	(&loop.Runner{Engine: e, Model: modeltest.Counting{Model: m}, Tools: tools, Approve: approve,
		Sleep: func(context.Context, time.Duration) {},
		OnStep: func(s *loop.State, eff loop.Effect) {
			if eff.Kind == loop.EffectCallModel {
				samples = append(samples, estimateSample{reserved: s.Reserved.InputTokens,
					bound: loop.ByteEstimator{}.EstimateInputTokens(eff.Request), actual: modeltest.InputTokens(eff.Request)})
			}
		}}).Run(context.Background(), s)
	return samples, s
}

// estimateRatios sums up a measured run's estimate over actual count: for
// the first request (before which nothing was counted), the largest of
// the later requests and of those from the 20th on, the mean over all
// requests, and the last.
type estimateRatios struct {
	first, maxRest, max20, mean, last float64
}

func ratiosOf(samples []estimateSample, estimate func(estimateSample) int64) estimateRatios {
	var r estimateRatios
	for i, x := range samples {
		q := float64(estimate(x)) / float64(x.actual)
		switch {
		case i == 0:
			r.first = q
		case i >= 19:
			r.max20 = max(r.max20, q)
			fallthrough
		default:
			r.maxRest = max(r.maxRest, q)
		}
		r.mean += q / float64(len(samples))
		r.last = q
	}
	return r
}

func reservedOf(x estimateSample) int64 { return x.reserved }
func boundOf(x estimateSample) int64    { return x.bound }

// report adds a run's ratios to a benchmark's output, named by prefix.
func (r estimateRatios) report(b *testing.B, prefix string) {
	b.ReportMetric(r.first, prefix+"-first")
	b.ReportMetric(r.maxRest, prefix+"-max-after-1st")
	b.ReportMetric(r.max20, prefix+"-max-from-20th")
	b.ReportMetric(r.mean, prefix+"-mean")
	b.ReportMetric(r.last, prefix+"-last")
}

const longRunInstructions = "You are a support engineer for a billing platform. Answer from what the tools return, " +
	"never from memory. Quote ticket ids and invoice ids exactly as the tools give them. When two sources disagree, " +
	"say so and name both. Keep the final answer under 200 words, with the evidence first and the conclusion last. " +
	"Do not call a tool that changes an account; none is offered."

// longRun is a ReAct run of the given number of turns: the model calls
// one or two of three read tools on every turn but the last, with other
// arguments each time, and the tools return results of 150 to 1,550
// bytes; the last turn answers.
func longRun(tb testing.TB, turns int) (*loop.Engine, loop.Model, loop.Toolbox) {
	tb.Helper()
	schema := func(props string) json.RawMessage {
		return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":["id"]}`)
	}
	e, err := loop.New(loop.Config{
		Goal:         "A customer reports being charged twice for the same invoice in March. Find out what happened and whether a refund is due.",
		Instructions: longRunInstructions,
		Budget: loop.Budget{MaxTurns: turns, MaxTokens: 1 << 40, MaxCost: new(loop.MustMoney("1000")),
			MaxToolCalls: new(4 * turns), DefaultToolLimit: new(4 * turns)},
		Model: loop.ModelConfig{Provider: "scripted", Pricing: loop.Pricing{Input: loop.MustMoney("3"), Output: loop.MustMoney("15")}},
		Tools: []loop.ToolSpec{
			{Name: "search_tickets", Description: "Search support tickets by free text; returns ids, titles and dates.",
				Parameters: schema(`"id":{"type":"integer"},"query":{"type":"string"}`)},
			{Name: "read_ticket", Description: "Read one ticket with its messages.",
				Parameters: schema(`"id":{"type":"integer"}`)},
			{Name: "account_history", Description: "List an account's invoices, payments and refunds in a date range.",
				Parameters: schema(`"id":{"type":"integer"},"from":{"type":"string"},"to":{"type":"string"}`)},
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	tools := []string{"search_tickets", "read_ticket", "account_history"}
	script := make([]loop.ScriptEntry, turns)
	for i := range turns - 1 {
		var calls []loop.ToolCall
		for j := range 1 + i%4/3 { // two calls on every fourth turn
			n := 2*i + j
			calls = append(calls, loop.ToolCall{Name: tools[n%3],
				Arguments: json.RawMessage(fmt.Sprintf(`{"id":%d,"query":"double charge March invoice %d","from":"2026-03-01","to":"2026-03-31"}`, n, n))})
		}
		script[i] = loop.ScriptEntry{Content: "Checking the next source.", ToolCalls: calls, Usage: loop.TokenUsage{OutputTokens: 40}}
	}
	script[turns-1] = loop.ScriptEntry{Content: "Invoice in_0312 was paid twice; refund the second payment.", Usage: loop.TokenUsage{OutputTokens: 30}}
	toolbox := loop.ToolboxFunc(func(_ context.Context, inv loop.Invocation) loop.Result {
		var n int
		if _, err := fmt.Sscanf(inv.CallID, "t%d", &n); err != nil {
			return loop.Result{Output: []byte(`{"error":"unexpected call id"}`)}
		}
		size := 150 + (n*379)%1400
		row := fmt.Sprintf(`{"id":"in_%04d","date":"2026-03-%02d","amount_minor":%d,"status":"paid"},`, n, 1+n%28, 1000+n*7)
		out := `{"rows":[` + strings.Repeat(row, size/len(row)+1)[:size] + `]}`
		return loop.Result{Output: []byte(out)}
	})
	return e, &loop.Scripted{Entries: script}, toolbox
}

// BenchmarkEstimate_longRun reports, for a 100-turn run whose provider
// reports realistic input counts (modeltest.InputTokens, about a token
// per four bytes), the input estimate over the reported count per
// request: "est/actual" is what the engine reserves, "bound/actual" the
// whole bound of each request, which is what it reserved before its
// estimates built on the provider's counts. It measures estimates, not
// time.
func BenchmarkEstimate_longRun(b *testing.B) {
	e, m, tools := longRun(b, 100)
	var samples []estimateSample
	for b.Loop() {
		var s *loop.State
		samples, s = measureRun(b, e, m, tools, nil)
		if s.Outcome != loop.Completed || len(samples) != 100 {
			b.Fatalf("outcome %s (%s) after %d model calls", s.Outcome, s.Reason, len(samples))
		}
	}
	ratiosOf(samples, reservedOf).report(b, "est/actual")
	ratiosOf(samples, boundOf).report(b, "bound/actual")
}

// TestEstimate_longRunTracksTheProviderCount: over a 100-turn run whose
// provider's counts are consistent (modeltest.InputTokens), every
// request's estimate from the second on is the count of the request
// before plus the bound of only what was added since, so it stays above
// the count and, past the first few turns, within 1.3 times it; before,
// the whole bound ran three to four times the count.
func TestEstimate_longRunTracksTheProviderCount(t *testing.T) {
	const turns = 100
	e, m, tools := longRun(t, turns)
	samples, s := measureRun(t, e, m, tools, nil)
	if s.Outcome != loop.Completed || len(samples) != turns {
		t.Fatalf("outcome %s (%s) after %d model calls, want Completed after %d", s.Outcome, s.Reason, len(samples), turns)
	}
	for i, x := range samples {
		want := x.bound // the first request: nothing counted yet
		if i > 0 {
			prev := samples[i-1]
			// The bound is a sum over the request's parts, so what it
			// adds from one request to the next is the new messages'.
			want = min(x.bound, prev.actual+x.bound-prev.bound)
		}
		if x.reserved != want {
			t.Errorf("request %d: reserved %d input tokens, want %d (count before %s)", i+1, x.reserved, want, countBefore(samples, i))
		}
		if x.reserved < x.actual {
			t.Errorf("request %d: reserved %d input tokens, below the provider's count of %d", i+1, x.reserved, x.actual)
		}
	}
	after, before := ratiosOf(samples, reservedOf), ratiosOf(samples, boundOf)
	if after.max20 > 1.3 || after.mean > 1.3 || after.last > 1.1 {
		t.Errorf("estimate/actual: at most %.3f from the 20th request on, mean %.3f, last %.3f; want at most 1.3, 1.3 and 1.1",
			after.max20, after.mean, after.last)
	}
	t.Logf("estimate/actual over %d requests: first %.2f, then at most %.2f (from the 20th, %.2f), mean %.3f, last %.3f; whole bounds: mean %.2f, last %.2f",
		turns, after.first, after.maxRest, after.max20, after.mean, after.last, before.mean, before.last)
}

func countBefore(samples []estimateSample, i int) string {
	if i == 0 {
		return "none"
	}
	return fmt.Sprint(samples[i-1].actual)
}
