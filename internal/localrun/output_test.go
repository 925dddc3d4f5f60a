package localrun

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// typedRun asks for a typed answer; its model first answers in prose,
// then with JSON that misses a required field, then with a valid object.
const typedRun = `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: typed}
spec:
  goal: "Decide the refund of ticket T-1."
  model:
    provider: scripted
    script:
    - content: "The refund is due: 12.50."
    - content: '{"decision": "refund"}'
    - content: '{"decision": "refund", "amountMinor": 1250, "note": "<b>duplicate</b>"}'
  budget: {maxTurns: 4}
  output:
    schema:
      type: object
      properties:
        decision: {enum: [refund, deny]}
        amountMinor: {type: integer, minimum: 0}
        note: {type: string}
      required: [decision, amountMinor]
`

// Issue 45, item 1, end to end through agentrun local: answers that do
// not validate cost their turns, and status.output holds the value that
// validated, with its digest.
func TestRun_typedOutputIsTheValidatedValue(t *testing.T) {
	r := run(t, typedRun, Options{JSON: true})
	r.mustExit(t, 0)
	st := decodeStatus(t, r.stdout)
	if st.Usage == nil || st.Usage.Turns != 3 {
		t.Errorf("usage %+v: want 3 turns (two answers did not validate)", st.Usage)
	}
	text := `{"decision": "refund", "amountMinor": 1250, "note": "<b>duplicate</b>"}`
	sum := sha256.Sum256([]byte(text))
	if st.Output == nil {
		t.Fatalf("status.output is not set: %s", r.stdout)
	}
	var got any
	if err := json.Unmarshal(st.Output.Raw, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"decision": "refund", "amountMinor": 1250.0, "note": "<b>duplicate</b>"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("status.output (-want +got):\n%s", d)
	}
	if st.OutputDigest != "sha256:"+hex.EncodeToString(sum[:]) || st.OutputBytes != int64(len(text)) {
		t.Errorf("outputDigest %q, outputBytes %d: want the answer's", st.OutputDigest, st.OutputBytes)
	}
	// The markup in the value is escaped in what is printed.
	if strings.Contains(r.stdout, "<b>") {
		t.Errorf("the printed status carries markup unescaped:\n%s", r.stdout)
	}

	// Without -o json, each refused answer is a warning that says why.
	r = run(t, typedRun, Options{})
	r.mustExit(t, 0)
	for _, w := range []string{"turn 1 does not validate against spec.output.schema (it is not JSON", "turn 2 does not validate", "missing property 'amountMinor'"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("the output does not say %q:\n%s", w, r.stdout)
		}
	}
}
