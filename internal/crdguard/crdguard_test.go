package crdguard

import "testing"

// Unguard gives back the rule Guard wrapped; a rule Guard did not wrap is
// left alone.
func TestUnguardUndoesGuard(t *testing.T) {
	s := map[string]any{"x-kubernetes-validations": []any{
		map[string]any{"rule": "self.size() > 0"},
		map[string]any{"rule": "self == oldSelf"},
	}}
	if n := Guard(s); n != 1 {
		t.Fatalf("Guard wrapped %d rules, want 1", n)
	}
	rules := s["x-kubernetes-validations"].([]any)
	if got, ok := Unwrapped(rules[0].(map[string]any)["rule"].(string)); !ok || got != "self.size() > 0" {
		t.Errorf("Unwrapped = %q, %v; want the rule as written", got, ok)
	}
	for _, r := range rules {
		Unguard(r.(map[string]any))
	}
	for i, want := range []string{"self.size() > 0", "self == oldSelf"} {
		r := rules[i].(map[string]any)
		if r["rule"] != want || r["optionalOldSelf"] != nil {
			t.Errorf("rule %d after Unguard = %v, want %q without optionalOldSelf", i, r, want)
		}
	}
}
