package loop

import (
	"context"
	"encoding/json"
	"testing"
)

// thinkingModel answers from replies in order and keeps every request.
type thinkingModel struct {
	replies  []*Reply
	requests []*Request
}

func (m *thinkingModel) Complete(_ context.Context, req *Request) (*Reply, error) {
	cp := *req
	cp.Messages = append([]Message(nil), req.Messages...)
	m.requests = append(m.requests, &cp)
	r := m.replies[0]
	m.replies = m.replies[1:]
	return r, nil
}

// A reasoning model's thinking is kept on the assistant message it came
// with, so the next request passes it back, and its tokens (which the
// providers count in the output) are priced and reserved as output.
func TestReasoning_isKeptPassedBackAndPricedAsOutput(t *testing.T) {
	thought := []Reasoning{{Text: "The account comes first.", Signature: "sig-1"}, {Redacted: "b3BhcXVl"}}
	m := &thinkingModel{replies: []*Reply{
		{ToolCalls: []ToolCall{call("lookup", `{"q":1}`)}, Reasoning: thought, Usage: usage(1000, 600)},
		{Content: "Two separate charges.", Reasoning: []Reasoning{{Text: "It is answered.", Signature: "sig-2"}}, Usage: usage(1200, 300)},
	}}
	r := makeRun(t).readTool("lookup")
	r.cfg.Model.Pricing = usagePricing
	r.cfg.Model.MaxOutputTokens = 8000
	var reserved []Usage
	s := &State{}
	(&Runner{Engine: r.engine(), Model: m, Tools: r.tools, OnStep: func(s *State, eff Effect) {
		if eff.Kind == EffectCallModel {
			reserved = append(reserved, s.Reserved)
		}
	}}).Run(context.Background(), s)
	expectOutcome(t, s, Completed)

	if len(m.requests) != 2 {
		t.Fatalf("%d model calls, want 2", len(m.requests))
	}
	var passed *Message
	for i := range m.requests[1].Messages {
		if msg := &m.requests[1].Messages[i]; msg.Role == RoleAssistant {
			passed = msg
		}
	}
	if passed == nil || len(passed.Reasoning) != 2 || passed.Reasoning[0] != thought[0] || passed.Reasoning[1] != thought[1] {
		t.Errorf("the second request's assistant message = %+v, want the first reply's thinking", passed)
	}
	var kept [][]Reasoning
	for _, msg := range s.Transcript {
		if msg.Role == RoleAssistant {
			kept = append(kept, msg.Reasoning)
		}
	}
	if len(kept) != 2 || len(kept[0]) != 2 || len(kept[1]) != 1 || kept[1][0].Signature != "sig-2" {
		t.Errorf("transcript reasoning = %+v, want both replies' thinking", kept)
	}
	// It survives the state's JSON (checkpoints, resumption).
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	var got []Reasoning
	for _, msg := range back.Transcript {
		if msg.Role == RoleAssistant {
			got = msg.Reasoning
			break
		}
	}
	if len(got) != 2 || got[0] != thought[0] || got[1] != thought[1] {
		t.Errorf("after a checkpoint the reasoning is %+v", got)
	}

	if s.Usage.OutputTokens != 900 {
		t.Errorf("output tokens = %d, want 900", s.Usage.OutputTokens)
	}
	want := TokenCost(2200, usagePricing.Input) + TokenCost(900, usagePricing.Output)
	if s.Usage.Cost != want {
		t.Errorf("cost = %s, want %s: thinking is priced at the output rate", s.Usage.Cost, want)
	}
	// Each call reserved the whole output limit, which thinking shares.
	for i, res := range reserved {
		if res.OutputTokens != 8000 {
			t.Errorf("call %d reserved %d output tokens, want 8000", i+1, res.OutputTokens)
		}
	}
}

// The thinking behind a final answer that a guardrail redacted or halted
// on is not kept: it may hold what the guardrail took out.
func TestReasoning_isDroppedWithAnAnswerAGuardrailChanged(t *testing.T) {
	for _, sev := range []Severity{Block, Halt} {
		m := &thinkingModel{replies: []*Reply{{Content: "Refund sent to card " + card + ".",
			Reasoning: []Reasoning{{Text: "The card is " + card + ".", Signature: "sig"}}, Usage: usage(100, 40)}}}
		r := makeRun(t)
		r.cfg.Guardrails = []Guardrail{cardGuardrail(sev, OnAnswer)}
		s := &State{}
		(&Runner{Engine: r.engine(), Model: m, Tools: r.tools}).Run(context.Background(), s)
		for _, msg := range s.Transcript {
			if len(msg.Reasoning) > 0 {
				t.Errorf("severity %s: reasoning %+v kept with a screened answer", sev, msg.Reasoning)
			}
		}
	}
	// An answer the guardrail let through keeps it.
	m := &thinkingModel{replies: []*Reply{{Content: "Two separate charges.",
		Reasoning: []Reasoning{{Text: "Both charges are real.", Signature: "sig"}}, Usage: usage(100, 40)}}}
	r := makeRun(t)
	r.cfg.Guardrails = []Guardrail{cardGuardrail(Block, OnAnswer)}
	s := &State{}
	(&Runner{Engine: r.engine(), Model: m, Tools: r.tools}).Run(context.Background(), s)
	if n := len(s.Transcript); n == 0 || len(s.Transcript[n-1].Reasoning) != 1 {
		t.Errorf("transcript %+v: want the answer's thinking kept", s.Transcript)
	}
}
