package openai

import (
	"context"
	"testing"

	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/modeltest"
)

// An OpenAI reasoning model, at OpenAI and on Azure: the effort is sent
// with every call, and the reasoning tokens, which completion_tokens
// already includes, are the reply's output tokens, priced and reserved
// as such (max_completion_tokens bounds them with the answer).
func TestComplete_reasoningEffortIsSentAndItsTokensAreOutput(t *testing.T) {
	recorded := modeltest.File(t, "response_reasoning_tool_call.json")
	for _, p := range []modeltest.Provider{provider, azureEntra, azureKey} {
		t.Run(p.Name+p.KeyHeader, func(t *testing.T) {
			f := p.Fixture(t, func(c *model.Config) { c.ReasoningEffort = "high" }, modeltest.Reply(recorded))
			req := p.Request()
			req.MaxOutputTokens = 8000
			reply, err := f.Model.Complete(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			sent := modeltest.Members(t, f.Srv.Requests()[0].Body)
			if got := string(sent["reasoning_effort"]); got != `"high"` {
				t.Errorf("reasoning_effort = %s, want \"high\"", got)
			}
			if got := string(sent["max_completion_tokens"]); got != "8000" {
				t.Errorf("max_completion_tokens = %s, want 8000", got)
			}
			if reply.Usage.OutputTokens != 1064 || reply.Usage.InputTokens != 1600 {
				t.Errorf("usage = %+v, want 1064 output tokens (1024 of them reasoning)", reply.Usage)
			}
			if len(reply.Reasoning) != 0 {
				t.Errorf("reasoning = %+v: Chat Completions returns none to keep", reply.Reasoning)
			}
		})
	}
}

func TestComplete_noReasoningEffortUnlessAsked(t *testing.T) {
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))
	if _, err := f.Model.Complete(context.Background(), billingRequest()); err != nil {
		t.Fatal(err)
	}
	if _, ok := modeltest.Members(t, f.Srv.Requests()[0].Body)["reasoning_effort"]; ok {
		t.Error("reasoning_effort was sent without being asked for")
	}
}
