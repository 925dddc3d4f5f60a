package loop

import (
	"strings"
	"testing"
)

// dispatchFirstCall steps a fresh run until its first tool call is
// dispatched and returns the state and that invocation.
func dispatchFirstCall(t *testing.T, e *Engine) (*State, Invocation) {
	t.Helper()
	s := &State{}
	e.Step(s, Input{})
	eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("refund", `{"invoice":"in_8c04"}`)}}})
	if eff.Kind != EffectRunTools || len(eff.Calls) != 1 {
		t.Fatalf("effect = %+v", eff)
	}
	return s, eff.Calls[0]
}

func TestIdempotencyKey_twoRunsWithTheSameCallIDGetDifferentKeys(t *testing.T) {
	for _, ids := range [][2]string{{"uid-a", "uid-b"}, {"", ""}} {
		keys := map[string]bool{}
		for _, id := range ids {
			r := makeRun(t).tool("refund", true, true)
			r.cfg.RunID = id
			_, inv := dispatchFirstCall(t, r.engine())
			if inv.CallID != "t1-c1" {
				t.Fatalf("call id = %q", inv.CallID)
			}
			if !strings.HasSuffix(inv.IdempotencyKey, "/t1-c1") || inv.IdempotencyKey == "/t1-c1" {
				t.Fatalf("key = %q, want <run id>/t1-c1", inv.IdempotencyKey)
			}
			if id != "" && inv.IdempotencyKey != id+"/t1-c1" {
				t.Fatalf("key = %q, want %s/t1-c1", inv.IdempotencyKey, id)
			}
			keys[inv.IdempotencyKey] = true
		}
		if len(keys) != 2 {
			t.Fatalf("run ids %q: both runs sent the same key %v", ids, keys)
		}
	}
}

func TestIdempotencyKey_sameRunAcrossARestartKeepsItsKey(t *testing.T) {
	for _, id := range []string{"uid-a", ""} {
		r := makeRun(t).readTool("lookup")
		r.cfg.RunID = id
		s := &State{}
		e := r.engine()
		e.Step(s, Input{})
		eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", `{}`)}}})
		before := eff.Calls[0].IdempotencyKey

		// The process dies while the read runs; a new engine (built from
		// the same configuration) resumes from the persisted state.
		s = s.Clone()
		eff = r.engine().Step(s, Input{})
		if eff.Kind != EffectRunTools || len(eff.Calls) != 1 {
			t.Fatalf("resume: effect = %+v", eff)
		}
		if after := eff.Calls[0].IdempotencyKey; after != before {
			t.Fatalf("run id %q: key before the restart %q, after %q", id, before, after)
		}
	}
}
