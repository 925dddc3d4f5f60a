package localeval

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
)

// overlap is an evaluation of three cases, two repeats each, two at once,
// whose template's one tool counts the runs in a call at the same moment:
// each call holds a directory of its own for a moment, and appends how
// many such directories it saw to the file counts.
const overlap = `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRunTemplate
metadata: {name: counter}
spec:
  parameters:
  - {name: who, required: true}
  run:
    goal: "Count the runs in a call, for $(params.who)."
    model:
      provider: scripted
      script:
      - toolCalls: [{name: count, arguments: {}}]
      - content: "Counted for $(params.who)."
    budget: {maxTurns: 3}
    tools:
    - name: count
      description: "Count the runs in a call."
      parameters: {type: object}
      job:
        image: busybox
        # The pause keeps the call in flight while the others start.
        command: [sh, -c, 'cat >/dev/null; mkdir in-call.$$; ls -d in-call.* | wc -l >>counts; sleep 0.3; rmdir in-call.$$; echo "{}"']
---
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentEvaluation
metadata: {name: overlap}
spec:
  templateRef: {name: counter}
  repeats: 2
  concurrency: 2
  cases:
  - {name: a, parameters: [{name: who, value: a}], expect: {answer: ['for a']}}
  - {name: b, parameters: [{name: who, value: b}], expect: {answer: ['for b']}}
  - {name: c, parameters: [{name: who, value: c}], expect: {answer: ['for c']}}
`

// Issue 48: an evaluation never has more than concurrency runs going at
// once, with no cluster as in one, and every case's runs are scored.
func TestRun_neverMoreThanConcurrencyAtOnce(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "evaluation.yaml")
	if err := os.WriteFile(file, []byte(overlap), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Run(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "counts"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	most := 0
	for _, l := range lines {
		n, err := strconv.Atoi(l)
		if err != nil {
			t.Fatalf("counts holds %q", b)
		}
		most = max(most, n)
	}
	if len(lines) != 6 || most > 2 || most < 1 {
		t.Errorf("the six calls saw %q runs in a call at once; want six counts of at most 2 (spec.concurrency)", lines)
	}
	st := res.Evaluation.Status
	got := []any{st.Phase, st.Totals.Passed, len(st.Cases), res.Evaluation.Status.Cases[2].Results[1].Run}
	if diff := cmp.Diff([]any{v1alpha1.EvaluationPassed, int32(6), 3, "overlap-c-2"}, got); diff != "" {
		t.Errorf("(phase, passed, cases, the last run) (-want +got):\n%s", diff)
	}
}
