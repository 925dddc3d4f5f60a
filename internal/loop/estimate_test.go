package loop

import (
	"encoding/json"
	"testing"
)

func TestByteEstimator_coversEveryByteAndGrowsWithTheTranscript(t *testing.T) {
	req := &Request{
		System: "You are a billing assistant.",
		Tools: []ToolSchema{{Name: "identify_account", Description: "Look up an account id by e-mail.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"email":{"type":"string"}}}`)}},
		Messages: []Message{{Role: RoleUser, Content: "Find out what happened."}},
	}
	bytes := len(req.System) + len(req.Tools[0].Name) + len(req.Tools[0].Description) + len(req.Tools[0].Parameters) + len(req.Messages[0].Content)
	first := ByteEstimator{}.EstimateInputTokens(req)
	if first < int64(bytes) {
		t.Errorf("estimate %d is below the %d bytes of text", first, bytes)
	}
	req.Messages = append(req.Messages, Message{Role: RoleAssistant,
		ToolCalls: []ToolCall{{ID: "t1-c1", Name: "identify_account", Arguments: json.RawMessage(`{"email":"a@b.example"}`)}}})
	if next := (ByteEstimator{}).EstimateInputTokens(req); next <= first {
		t.Errorf("estimate did not grow with the transcript: %d then %d", first, next)
	}
	if got := (ByteEstimator{}).EstimateInputTokens(nil); got != 0 {
		t.Errorf("nil request estimated at %d", got)
	}
}
