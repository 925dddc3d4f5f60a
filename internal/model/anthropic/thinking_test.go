package anthropic

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/modeltest"
)

// Claude's extended thinking, on every platform: the budget is sent with
// each call, the thinking that comes back is kept on the reply (its
// tokens are billed in output_tokens), and sent back first, unchanged,
// in the assistant turn whose tool calls the next request answers.
func TestComplete_thinkingIsSentKeptAndPassedBack(t *testing.T) {
	recorded := modeltest.File(t, "response_thinking_tool_use.json")
	for _, p := range []modeltest.Provider{provider, bedrockSigV4, vertexProvider} {
		t.Run(p.Name, func(t *testing.T) {
			f := p.Fixture(t, func(c *model.Config) { c.ThinkingBudget = 2048 },
				modeltest.Reply(recorded), modeltest.Reply(modeltest.File(t, "response_text.json")))
			req := p.Request()
			req.MaxOutputTokens = 8000
			reply, err := f.Model.Complete(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			first := modeltest.Members(t, f.Srv.Requests()[0].Body)
			if got := string(first["thinking"]); got != `{"budget_tokens":2048,"type":"enabled"}` {
				t.Errorf("thinking = %s, want the budget of 2048 tokens enabled", got)
			}
			if got := string(first["max_tokens"]); got != "8000" {
				t.Errorf("max_tokens = %s, want 8000: the budget is part of it", got)
			}
			want := []loop.Reasoning{
				{Text: "The customer gave an email address. To explain the August charges I first need the account it belongs to.",
					Signature: "EqQBCkYIBRgCKkBy4Q0mN3p8sVwZ1aTq6rH2fLk9dJc5xYb7uGe0iPo3nMs4tRv8wKz1yA6hUj2cXq5lBf9gDm7eSn0oRt3iWpVEgzYx1bN7cQm2vLr5tKsaDGh4jPq8wZn3rT6yUfIiMKq2bXo7vRs9nTc1eLw4hYg8uJp0mAz5dQk3fVb6sHj2xNr9oLt7cGe1wPy4zMiKhUqAXa0"},
				{Redacted: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB8="},
			}
			if len(reply.Reasoning) != 2 || reply.Reasoning[0] != want[0] || reply.Reasoning[1] != want[1] {
				t.Errorf("reasoning = %+v, want %+v", reply.Reasoning, want)
			}
			if reply.Usage.OutputTokens != 412 || len(reply.ToolCalls) != 1 {
				t.Errorf("output tokens = %d, calls = %d; want 412 (thinking included) and 1", reply.Usage.OutputTokens, len(reply.ToolCalls))
			}

			// The next turn, as the engine builds it.
			next := p.Request()
			next.MaxOutputTokens = 8000
			next.Messages = append(next.Messages,
				loop.Message{Role: loop.RoleAssistant, Turn: 1, Reasoning: reply.Reasoning, ToolCalls: []loop.ToolCall{
					{ID: "t1-c1", Name: "identify_account", Arguments: json.RawMessage(`{"email":"r.okafor@northwind.example"}`)}}},
				loop.Message{Role: loop.RoleTool, Turn: 1, CallID: "t1-c1", Tool: "identify_account", Content: `{"account":"A-1042"}`})
			if _, err := f.Model.Complete(context.Background(), next); err != nil {
				t.Fatal(err)
			}
			var msgs []struct {
				Role    string            `json:"role"`
				Content []json.RawMessage `json:"content"`
			}
			if err := json.Unmarshal(modeltest.Members(t, f.Srv.Requests()[1].Body)["messages"], &msgs); err != nil {
				t.Fatal(err)
			}
			if len(msgs) < 2 || msgs[1].Role != "assistant" || len(msgs[1].Content) != 3 {
				t.Fatalf("messages = %+v, want the assistant turn second with thinking, redacted thinking and tool_use", msgs)
			}
			wantBlocks := []string{
				`{"signature":"` + want[0].Signature + `","thinking":"` + want[0].Text + `","type":"thinking"}`,
				`{"data":"` + want[1].Redacted + `","type":"redacted_thinking"}`,
			}
			for i, w := range wantBlocks {
				if diff := modeltest.JSONDiff(t, []byte(w), msgs[1].Content[i]); diff != "" {
					t.Errorf("block %d (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

// A budget that leaves the answer no room is refused before anything is
// sent (the engine may lower the output limit under an operator's cap).
func TestComplete_aThinkingBudgetNotBelowTheOutputLimitIsRefused(t *testing.T) {
	f := newFixture(t, func(c *model.Config) { c.ThinkingBudget = 4096 }, modeltest.Reply(modeltest.File(t, "response_text.json")))
	req := billingRequest()
	req.MaxOutputTokens = 4096
	_, err := f.Model.Complete(context.Background(), req)
	if err == nil || err.Error() != "anthropic: the thinking budget of 4096 tokens is not below the output limit of 4096 tokens" {
		t.Errorf("err = %v", err)
	}
	if n := len(f.Srv.Requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// Without a budget no thinking is asked for.
func TestComplete_noThinkingWithoutABudget(t *testing.T) {
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))
	if _, err := f.Model.Complete(context.Background(), billingRequest()); err != nil {
		t.Fatal(err)
	}
	if _, ok := modeltest.Members(t, f.Srv.Requests()[0].Body)["thinking"]; ok {
		t.Error("thinking was sent without a budget")
	}
}
