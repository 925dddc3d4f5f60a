package loop

import (
	"encoding/json"
	"strings"
	"testing"
)

// A call refused before policy (an unknown tool, arguments that are not a
// JSON object, arguments that break the tool's schema) is a vetting verdict
// like any other: it leaves a warning note, which the operator records as
// an event and agentrun local prints, not only a transcript entry.
func TestVetting_everyRefusalLeavesAWarningNote(t *testing.T) {
	cases := []struct {
		name string
		call ToolCall
		rule string
		says string
	}{
		{"unknown tool", call("nope", `{}`), "unknown-tool", `no tool is named "nope"`},
		{"invalid JSON", call("lookup", `{"q":`), "invalid-arguments", "the arguments were refused: arguments are not valid JSON"},
		{"not an object", call("lookup", `[1,2]`), "invalid-arguments", "the arguments were refused: they are not a JSON object"},
		{"schema mismatch", call("lookup", `{"q":7}`), "invalid-arguments", "do not match its parameters"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := makeRun(t)
			r.cfg.Tools = []ToolSpec{{Name: "lookup", Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)}}
			e := r.engine()
			s := &State{}
			e.Step(s, Input{})
			eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{tc.call}}})
			var got *Note
			for i := range eff.Notes {
				if n := &eff.Notes[i]; n.Kind == NoteCallVetted && n.CallID == "t1-c1" {
					got = n
				}
			}
			if got == nil {
				t.Fatalf("no CallVetted note for the refused call; notes: %+v", eff.Notes)
			}
			if !got.Warning || !strings.Contains(got.Message, "deny ("+tc.rule+")") || !strings.Contains(got.Message, tc.says) {
				t.Fatalf("note = %+v, want a warning naming %s and saying %q", got, tc.rule, tc.says)
			}
			if c := s.Calls[0]; c.Rule != tc.rule || !strings.Contains(c.Reason, tc.says) {
				t.Fatalf("call = rule %q reason %q", c.Rule, c.Reason)
			}
		})
	}
}

// Arguments that are not JSON are refused, and the state that records
// them still marshals (the operator persists it as JSON): the text is kept
// as a JSON string.
func TestVetting_argumentsThatAreNotJSONKeepTheStateMarshallable(t *testing.T) {
	r := makeRun(t).readTool("lookup")
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", `{"q":`)}}})
	if _, err := json.Marshal(s); err != nil {
		t.Fatalf("the state does not marshal: %v", err)
	}
	if got := string(s.Transcript[0].ToolCalls[0].Arguments); got != `"{\"q\":"` {
		t.Fatalf("recorded arguments = %s, want the text as a JSON string", got)
	}
	if c := s.Clone().Calls[0]; c.Rule != "invalid-arguments" || !strings.Contains(c.Reason, "not valid JSON") {
		t.Fatalf("call = rule %q reason %q", c.Rule, c.Reason)
	}
}
