package loop_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentrun/agentrun/internal/loop"
)

// A complete scripted run: the model looks an account up, then answers.
func Example() {
	engine, err := loop.New(loop.Config{
		Goal:   "Which account belongs to r.okafor@northwind.example?",
		Budget: loop.Budget{MaxTurns: 4, MaxCost: new(loop.MustMoney("0.10"))},
		Model:  loop.ModelConfig{Pricing: loop.Pricing{Input: loop.MustMoney("3"), Output: loop.MustMoney("15")}},
		Tools: []loop.ToolSpec{{
			Name: "identify_account",
			// A free read: declared, so the cost ceiling is known to cover it.
			CostDeclared: true,
			Parameters:   json.RawMessage(`{"type":"object","properties":{"email":{"type":"string"}},"required":["email"]}`),
		}},
	})
	if err != nil {
		panic(err)
	}
	model := &loop.Scripted{Entries: []loop.ScriptEntry{
		{ToolCalls: []loop.ToolCall{{Name: "identify_account", Arguments: json.RawMessage(`{"email":"r.okafor@northwind.example"}`)}},
			Usage: loop.TokenUsage{InputTokens: 1600, OutputTokens: 40}},
		{Content: "The account is acct_4b71c9e20d8af315.", Usage: loop.TokenUsage{InputTokens: 1700, OutputTokens: 20}},
	}}
	tools := loop.ToolboxFunc(func(_ context.Context, inv loop.Invocation) loop.Result {
		return loop.Result{Output: []byte(`{"account_id":"acct_4b71c9e20d8af315"}`)}
	})

	state := &loop.State{} // a new run is the zero state
	runner := &loop.Runner{Engine: engine, Model: model, Tools: tools, OnStep: func(s *loop.State, eff loop.Effect) {
		for _, n := range eff.Notes {
			if n.Kind != loop.NoteCallFinished { // those carry a duration
				fmt.Println(n.Message)
			}
		}
	}}
	runner.Run(context.Background(), state)
	fmt.Println(state.Outcome, "-", state.Answer)
	fmt.Println("cost $" + state.Usage.Cost.String())
	// Output:
	// Turn 1 started: reserved 5553 tokens, $0.065811 and 60s
	// Model answered turn 1 with 1 tool call(s) (1600 input, 40 output tokens, $0.0054)
	// t1-c1 identify_account: allow (policy.default)
	// Turn 2 started: reserved 5719 tokens, $0.066309 and 60s
	// Model answered turn 2 with a final answer (1700 input, 20 output tokens, $0.0054)
	// Completed: the model gave a final answer on turn 2
	// Completed - The account is acct_4b71c9e20d8af315.
	// cost $0.0108
}
