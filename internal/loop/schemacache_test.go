package loop

import (
	"encoding/json"
	"testing"
	"time"
)

// Issue 13, item 5: every engine compiled its own copy of each tool's
// parameter schema (about 11 KiB a run for three tools), though a platform
// starts its runs with the same tools. Engines given the same Schemas
// (issue 44: a value their builder owns, no package cache) share a
// compiled schema of the same tool name and bytes, and still validate with
// it.
func TestNew_enginesShareCompiledSchemas(t *testing.T) {
	params := json.RawMessage(`{"type":"object","properties":{"id":{"type":"string","maxLength":8}},"required":["id"],"additionalProperties":false}`)
	var shared Schemas
	build := func(p json.RawMessage, opts ...Option) *Engine {
		e, err := New(Config{Goal: "g", Budget: Budget{MaxTurns: 2}, Model: ModelConfig{Timeout: time.Second},
			Tools: []ToolSpec{{Name: "get_order", Parameters: p}}}, append([]Option{WithSchemas(&shared)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := build(params), build(append(json.RawMessage{}, params...))
	if a.schemas["get_order"] == nil || a.schemas["get_order"] != b.schemas["get_order"] {
		t.Fatalf("two engines with the same tool compiled two schemas")
	}
	other := build(json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer"}}}`))
	if other.schemas["get_order"] == a.schemas["get_order"] {
		t.Fatalf("a different schema was given the shared one")
	}
	if err := b.schemas["get_order"].Validate(map[string]any{"id": "too-long-an-id"}); err == nil {
		t.Fatalf("the shared schema accepts what it forbids")
	}
	if own := build(params, WithSchemas(nil)); own.schemas["get_order"] == a.schemas["get_order"] {
		t.Fatalf("an engine given no Schemas was given another engine's schema")
	}
}
