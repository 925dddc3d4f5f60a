package anthropic

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/internal/model/modeltest"
)

// Issue 45, item 1: a typed output reaches Claude through the system
// prompt the engine writes, not output_config, which accepts only a
// subset of JSON Schema and not on every model or cloud.
func TestComplete_typedOutputIsAskedForInTheSystemPrompt(t *testing.T) {
	f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))
	req := billingRequest()
	req.System += "\n\nJSON Schema of the final answer:\n{\"type\":\"object\"}"
	req.Output = json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":0}}}`)
	if _, err := f.Model.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	m := modeltest.Members(t, f.Srv.Requests()[0].Body)
	if oc, ok := m["output_config"]; ok {
		t.Errorf("output_config %s is sent", oc)
	}
	if !strings.Contains(string(m["system"]), `JSON Schema of the final answer`) {
		t.Errorf("system %s does not carry the request's system prompt", m["system"])
	}
}
