package openai

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/modeltest"
)

// A reasoning model behind the Responses API: the effort is sent with
// the encrypted reasoning asked back (nothing is stored at the provider),
// the reasoning item is kept with the reply, and the next turn passes it
// back, unchanged, before the call it preceded.
func TestResponses_reasoningItemsComeBackAndArePassedOn(t *testing.T) {
	recorded, err := os.ReadFile(filepath.Join("testdata", "responses", "response_reasoning_tool_call.json"))
	if err != nil {
		t.Fatal(err)
	}
	p := responsesProvider
	f := p.Fixture(t, func(c *model.Config) { c.ReasoningEffort = "high" }, modeltest.Reply(recorded), modeltest.Reply(recorded))
	reply, err := f.Model.Complete(context.Background(), p.Request())
	if err != nil {
		t.Fatal(err)
	}
	want := []loop.Reasoning{{Signature: "rs_68c0a1d1b2c3d4e5f60718293a4b5c6d", Redacted: "gAAAAABowKHRZW5jcnlwdGVkLXJlYXNvbmluZy1pdGVt",
		Text: "The account must be found before its invoices."}}
	if diff := cmp.Diff(want, reply.Reasoning); diff != "" {
		t.Errorf("reasoning (-want +got):\n%s", diff)
	}
	if reply.Usage.OutputTokens != 1064 || len(reply.ToolCalls) != 1 {
		t.Errorf("usage %+v, %d calls; want 1064 output tokens (1024 of them reasoning) and 1 call", reply.Usage, len(reply.ToolCalls))
	}
	sent := modeltest.Members(t, f.Srv.Requests()[0].Body)
	if got := string(sent["reasoning"]); got != `{"effort":"high"}` {
		t.Errorf("reasoning = %s, want {\"effort\":\"high\"}", got)
	}
	if got := string(sent["include"]); got != `["reasoning.encrypted_content"]` {
		t.Errorf("include = %s", got)
	}

	next := modeltest.AnsweredIdentify(p.Request(), reply.Reasoning)
	if _, err := f.Model.Complete(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	var body struct{ Input []map[string]any }
	if err := json.Unmarshal(f.Srv.Requests()[1].Body, &body); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, item := range body.Input {
		ty, _ := item["type"].(string)
		if ty == "" {
			ty = "message:" + item["role"].(string)
		}
		types = append(types, ty)
	}
	if diff := cmp.Diff([]string{"message:user", "reasoning", "function_call", "function_call_output"}, types); diff != "" {
		t.Fatalf("input items (-want +got):\n%s", diff)
	}
	r := body.Input[1]
	if r["id"] != want[0].Signature || r["encrypted_content"] != want[0].Redacted {
		t.Errorf("the reasoning item sent back is %v", r)
	}
}
