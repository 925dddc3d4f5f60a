package model

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/agentrun/agentrun/internal/loop"
)

// OrderToolResults returns the messages with the results of every
// assistant message's tool calls placed right after it, in the order of
// its calls, which is what both APIs expect: between an assistant message
// with calls and the next assistant message, tool messages come first
// (sorted by call), then any other message in its original order. Results
// whose call id the assistant message does not name keep their relative
// place after the others. The input is not modified.
func OrderToolResults(msgs []loop.Message) []loop.Message {
	out := make([]loop.Message, 0, len(msgs))
	for i := 0; i < len(msgs); {
		m := msgs[i]
		out = append(out, m)
		i++
		if m.Role != loop.RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		end := i
		for end < len(msgs) && msgs[end].Role != loop.RoleAssistant {
			end++
		}
		out = append(out, orderSegment(msgs[i:end], m.ToolCalls)...)
		i = end
	}
	return out
}

// orderSegment puts the tool messages of seg first, in the order of calls,
// and the other messages after them.
func orderSegment(seg []loop.Message, calls []loop.ToolCall) []loop.Message {
	sorted := make([]loop.Message, 0, len(seg))
	placed := make([]bool, len(seg))
	for _, c := range calls {
		for j, m := range seg {
			if !placed[j] && m.Role == loop.RoleTool && m.CallID == c.ID {
				sorted = append(sorted, m)
				placed[j] = true
			}
		}
	}
	for j, m := range seg {
		if !placed[j] && m.Role == loop.RoleTool {
			sorted = append(sorted, m)
			placed[j] = true
		}
	}
	for j, m := range seg {
		if !placed[j] {
			sorted = append(sorted, m)
		}
	}
	return sorted
}

// Arguments returns a tool call's arguments as a JSON value both APIs and
// the engine accept (loop.CallArguments).
func Arguments(raw []byte) json.RawMessage { return loop.CallArguments(raw) }

// Schema splits a tool's JSON Schema into its top-level members, keeping
// every member's bytes as written (so the serialized schema is the same
// on every turn). An empty schema becomes an object without properties;
// a schema that is not a JSON object is an error.
func Schema(params json.RawMessage) (map[string]json.RawMessage, error) {
	if len(bytes.TrimSpace(params)) == 0 {
		return map[string]json.RawMessage{
			"type":       json.RawMessage(`"object"`),
			"properties": json.RawMessage(`{}`),
		}, nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(params, &members); err != nil || members == nil {
		return nil, fmt.Errorf("tool parameters are not a JSON Schema object")
	}
	if _, ok := members["type"]; !ok {
		members["type"] = json.RawMessage(`"object"`)
	}
	return members, nil
}
