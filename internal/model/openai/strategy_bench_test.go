package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
)

// The seed's double-charge task (identify the account, find the August
// invoices, look up the plan changes, answer), run both ways through this
// provider against a fake OpenAI-compatible server. The server counts the
// prompt it receives (system prompt, tool definitions and every message)
// with one rule for both strategies, a word-and-punctuation count that
// stands in for a tokenizer, and reports it as usage.prompt_tokens.
//
// The run's instructions are house rules of about 1,200 such tokens, so
// that the prefix sent on every call (instructions, tool definitions) is
// near the seed's 1,600. Every model call takes 20 ms at the server and
// every tool call 20 ms.
//
//	go test ./internal/model/openai -run '^$' -bench DoubleCharge -benchtime 20x

var tokenRE = regexp.MustCompile(`[A-Za-z0-9_]+|[^A-Za-z0-9_\s]`)

func countTokens(s string) int64 { return int64(len(tokenRE.FindAllStringIndex(s, -1))) }

const (
	benchModelLatency = 20 * time.Millisecond
	benchToolLatency  = 20 * time.Millisecond
	accountID         = "acct_4b71c9e20d8af315"
)

// fakeOpenAI answers the double-charge task from what each request holds:
// a planner (offered submit_plan) gets the plan, a request without tools
// (the solver) the answer, and a ReAct request the next step after the
// results it already has.
type fakeOpenAI struct {
	calls, prompt atomic.Int64
}

type chatRequest struct {
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// Everything the model reads: the messages and the tool definitions,
	// as sent (JSON syntax of the envelope aside, counted alike for both).
	prompt := countTokens(string(body))
	f.calls.Add(1)
	f.prompt.Add(prompt)
	time.Sleep(benchModelLatency)

	planner := false
	for _, t := range req.Tools {
		planner = planner || t.Function.Name == loop.PlanTool
	}
	results := 0
	for _, m := range req.Messages {
		if m.Role == "tool" {
			results++
		}
	}
	const dates = `"from_date":"2026-08-01","to_date":"2026-08-31"`
	var msg map[string]any
	call := func(name, args string) map[string]any {
		return map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": "call_1", "type": "function", "function": map[string]any{"name": name, "arguments": args}}}}
	}
	answer := map[string]any{"role": "assistant", "content": "Two separate charges: the monthly subscription of 82.40 on 1 August, " +
		"and 36.00 on 14 August covering the prorated upgrade from Team to Business."}
	switch {
	case planner:
		msg = call(loop.PlanTool, `{"steps":[{"id":"E1","tool":"identify_account","arguments":{"email":"r.okafor@northwind.example"}},`+
			`{"id":"E2","tool":"find_invoices","arguments":{"account_id":"#E1.account_id",`+dates+`}},`+
			`{"id":"E3","tool":"plan_changes","arguments":{"account_id":"#E1.account_id",`+dates+`}}]}`)
	case len(req.Tools) == 0 || results >= 3:
		msg = answer
	case results == 0:
		msg = call("identify_account", `{"email":"r.okafor@northwind.example"}`)
	case results == 1:
		msg = call("find_invoices", `{"account_id":"`+accountID+`",`+dates+`}`)
	default:
		msg = call("plan_changes", `{"account_id":"`+accountID+`",`+dates+`}`)
	}
	out, _ := json.Marshal(msg)
	completion := countTokens(string(out))
	finish := "stop"
	if _, ok := msg["tool_calls"]; ok {
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
	})
}

// billing answers the three tools with the seed's observations.
var billing = loop.ToolboxFunc(func(ctx context.Context, inv loop.Invocation) loop.Result {
	select {
	case <-time.After(benchToolLatency):
	case <-ctx.Done():
		return loop.Failed(loop.FailTimeout, 0, "stopped")
	}
	switch inv.Tool {
	case "identify_account":
		return loop.Result{Output: []byte(`{"account_id":"` + accountID + `"}`)}
	case "find_invoices":
		return loop.Result{Output: []byte(`{"count":2,"truncated":false,"invoices":[{"id":"in_9f21","date":"2026-08-01","total_minor":8240,"status":"paid"},` +
			`{"id":"in_8c04","date":"2026-08-14","total_minor":3600,"status":"paid"}]}`)}
	case "plan_changes":
		return loop.Result{Output: []byte(`{"changes":[{"on":"2026-08-14","from":"team","to":"business","prorated_minor":3600}]}`)}
	}
	return loop.Failed(loop.FailInvalid, 0, "no such tool")
})

// houseRules are the run's instructions: a billing assistant's rules,
// about 1,200 tokens by the server's count.
func houseRules() string {
	rules := []string{
		"Always identify the customer's account from the e-mail address on file before reading any billing record, and never guess an account id.",
		"Quote amounts in the account's currency with two decimals, and say whether a charge is a subscription renewal, a proration, a one-off fee or a refund.",
		"When a customer reports a double charge, compare the dates, the amounts and the invoice lines before concluding that anything was charged twice.",
		"Plan changes in the middle of a billing cycle produce prorated invoices; explain the proration with the dates and both plan names.",
		"Never promise a refund: refunds are decided by the billing team under the refund policy, version 7, section 3.",
		"Do not reveal internal identifiers other than invoice numbers, and never repeat card numbers, bank details or addresses back to the customer.",
		"If the records disagree with what the customer says, say what the records show and offer to hand the case to a person.",
		"Keep the answer under one hundred and twenty words, in plain language, without headings, and end with the next step the customer can take.",
	}
	var b strings.Builder
	b.WriteString("You are the billing assistant of Northwind Cloud. House rules, in order of precedence:\n")
	for i := 0; countTokens(b.String()) < 1200; i++ {
		fmt.Fprintf(&b, "%d. %s\n", i+1, rules[i%len(rules)])
	}
	return b.String()
}

func benchConfig(strategy loop.Strategy) loop.Config {
	tool := func(name, desc, params string) loop.ToolSpec {
		return loop.ToolSpec{Name: name, Description: desc, Parameters: json.RawMessage(params)}
	}
	span := `{"type":"object","properties":{"account_id":{"type":"string","description":"The account id from identify_account."},` +
		`"from_date":{"type":"string","format":"date"},"to_date":{"type":"string","format":"date"}},"required":["account_id","from_date","to_date"]}`
	return loop.Config{
		Goal:         "The customer says they were charged twice in August. Find out what happened and explain it.",
		Instructions: houseRules(),
		Model:        loop.ModelConfig{Name: "bench"},
		Budget:       loop.Budget{MaxTurns: 8, MaxTokens: 200_000},
		Strategy:     strategy,
		Tools: []loop.ToolSpec{
			tool("identify_account", "Look up a customer's account id by the e-mail address on file.",
				`{"type":"object","properties":{"email":{"type":"string","format":"email"}},"required":["email"]}`),
			tool("find_invoices", "List an account's invoices issued between two dates, newest first.", span),
			tool("plan_changes", "List an account's subscription plan changes between two dates.", span),
		},
	}
}

func BenchmarkDoubleCharge(b *testing.B) {
	for _, strategy := range []loop.Strategy{loop.ReAct, loop.PlanExecute} {
		b.Run(string(strategy), func(b *testing.B) {
			fake := &fakeOpenAI{}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			m, err := New(model.Config{BaseURL: srv.URL, Model: "bench", KeySource: model.StaticKey("k"), MaxRetries: -1})
			if err != nil {
				b.Fatal(err)
			}
			e, err := loop.New(benchConfig(strategy))
			if err != nil {
				b.Fatal(err)
			}
			var input int64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s := &loop.State{}
				(&loop.Runner{Engine: e, Model: m, Tools: billing}).Run(context.Background(), s)
				if s.Outcome != loop.Completed || !strings.Contains(s.Answer, "prorated upgrade") {
					b.Fatalf("outcome %s: %s", s.Outcome, s.Reason)
				}
				input += s.Usage.InputTokens
			}
			b.StopTimer()
			if input != fake.prompt.Load() {
				b.Fatalf("the run counted %d input tokens, the server %d", input, fake.prompt.Load())
			}
			b.ReportMetric(float64(input)/float64(b.N), "input-tokens/run")
			b.ReportMetric(float64(fake.calls.Load())/float64(b.N), "model-calls/run")
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/run")
		})
	}
}
