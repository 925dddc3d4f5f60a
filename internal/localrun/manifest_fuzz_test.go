package localrun

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseManifest feeds the manifest reader arbitrary files, seeded with
// the samples: it must never panic, and a manifest it accepts holds one
// AgentRun with a name and a goal.
func FuzzParseManifest(f *testing.F) {
	samples, _ := filepath.Glob("../../config/samples/*.yaml")
	for _, p := range samples {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		"", "---\n", "null", "[]", "{}", "kind: AgentRun\n",
		"apiVersion: agents.agentrun.dev/v1alpha1\nkind: AgentRun\nmetadata: {name: x}\nspec: {goal: g, model: {provider: scripted, script: [{content: hi}]}, budget: {maxTurns: 1}}\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {k: v}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
		"a: &a [*a, *a]\n", "x: !!binary AAAA\n", "{\"apiVersion\": 1}",
	} {
		f.Add([]byte(s))
	}
	check, err := NewChecker()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := check.ParseManifest(bytes.NewReader(data))
		if err != nil {
			return
		}
		if m.Run == nil || m.Run.Name == "" || m.Run.Spec.Goal == "" || m.Secrets == nil {
			t.Fatalf("accepted a manifest without a named AgentRun and a goal: %+v", m)
		}
	})
}
