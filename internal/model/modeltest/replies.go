package modeltest

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun/agentrun/internal/loop"
)

// The replies and requests every provider's testdata describes the same
// way: the example run's first turn answered in text, its calls, its
// round trip, its cached usage, a truncated answer and refusals. The
// files request_first_turn.json, request_round_trip.json,
// response_text.json and response_usage_cached.json have those names in
// every adapter's testdata; the others are named in Provider (Text is
// response_text.json).

// textAnswer is what the example run's text answer (response_text.json)
// becomes.
var textAnswer = &loop.Reply{
	Content: "Two separate charges of 82.40 were made on 3 and 4 August; the second one is a duplicate.",
	Usage:   loop.TokenUsage{InputTokens: 2100, OutputTokens: 60},
}

// textAnswerSendsTheFirstTurn: one request to the endpoint with the tools,
// the system prompt and the goal, as request_first_turn.json has them;
// the text answer comes back whole.
func textAnswerSendsTheFirstTurn(t *testing.T, p Provider) {
	f := p.Fixture(t, nil, Reply(p.file(t, p.Text)))
	got, err := f.Model.Complete(context.Background(), p.Request())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(textAnswer, got); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	reqs := f.Srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("got %d requests, want 1", len(reqs))
	}
	if reqs[0].Method != http.MethodPost || reqs[0].Path != p.Endpoint {
		t.Errorf("request went to %s %s, want POST %s", reqs[0].Method, reqs[0].Path, p.Endpoint)
	}
	if diff := JSONDiff(t, p.file(t, "request_first_turn.json"), reqs[0].Body); diff != "" {
		t.Errorf("request body (-want +got):\n%s", diff)
	}
}

// toolCallsBecomeOneBatchInOrder: one call, and several calls with text,
// become the reply's batch in the order the model gave them.
func toolCallsBecomeOneBatchInOrder(t *testing.T, p Provider) {
	for _, tc := range []struct {
		name, file string
		want       *loop.Reply
	}{
		{"one call", p.ToolCall, &loop.Reply{
			ToolCalls: []loop.ToolCall{{Name: "identify_account", Arguments: json.RawMessage(`{"email":"r.okafor@northwind.example"}`)}},
			Usage:     loop.TokenUsage{InputTokens: 1600, OutputTokens: 40},
		}},
		{"several calls", p.ToolCalls, &loop.Reply{
			Content: "Looking at both months.",
			ToolCalls: []loop.ToolCall{
				{Name: "find_invoices", Arguments: json.RawMessage(`{"account_id":"acct_7731","month":"2025-08"}`)},
				{Name: "find_invoices", Arguments: json.RawMessage(`{"account_id":"acct_7731","month":"2025-07"}`)},
			},
			Usage: loop.TokenUsage{InputTokens: 1810, CachedInputTokens: 1536, OutputTokens: 71},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := p.Fixture(t, nil, Reply(p.file(t, tc.file)))
			got, err := f.Model.Complete(context.Background(), p.Request())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(sameJSON)); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
		})
	}
}

// sameJSON compares arguments by value: an SDK may keep the response's
// bytes, spacing included.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return cmp.Equal(x, y)
}

// toolResultsFollowTheirCalls: the round trip's results go back in call
// order, whatever order they were recorded in (request_round_trip.json).
func toolResultsFollowTheirCalls(t *testing.T, p Provider) {
	f := p.Fixture(t, nil, Reply(p.file(t, "response_text.json")))
	if _, err := f.Model.Complete(context.Background(), p.RoundTrip()); err != nil {
		t.Fatal(err)
	}
	if diff := JSONDiff(t, p.file(t, "request_round_trip.json"), f.Srv.Requests()[0].Body); diff != "" {
		t.Errorf("request body (-want +got):\n%s", diff)
	}
}

// cachedUsageIsReportedWhole: input tokens count cache reads and writes,
// and both are reported apart as well (response_usage_cached.json).
func cachedUsageIsReportedWhole(t *testing.T, p Provider) {
	f := p.Fixture(t, nil, Reply(p.file(t, "response_usage_cached.json")))
	got, err := f.Model.Complete(context.Background(), p.RoundTrip())
	if err != nil {
		t.Fatal(err)
	}
	want := loop.TokenUsage{InputTokens: 5300, CachedInputTokens: 4864, CacheWriteTokens: 256, OutputTokens: 140}
	if p.CachedUsage != nil {
		want = *p.CachedUsage
	}
	if diff := cmp.Diff(want, got.Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

// truncatedAndRefusedAnswersSaySo: an answer cut at the output limit is
// Truncated; a refusal carries its text.
func truncatedAndRefusedAnswersSaySo(t *testing.T, p Provider) {
	cases := map[string]*loop.Reply{p.Truncated: {Truncated: true}}
	for file, refusal := range p.Refusals {
		cases[file] = &loop.Reply{Refusal: refusal}
	}
	for file, want := range cases {
		t.Run(file, func(t *testing.T) {
			f := p.Fixture(t, nil, Reply(p.file(t, file)))
			got, err := f.Model.Complete(context.Background(), p.Request())
			if err != nil {
				t.Fatal(err)
			}
			if got.Truncated != want.Truncated || got.Refusal != want.Refusal {
				t.Errorf("got Truncated=%v Refusal=%q, want %v %q", got.Truncated, got.Refusal, want.Truncated, want.Refusal)
			}
		})
	}
}
