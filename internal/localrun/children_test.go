package localrun

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// Issue 45 item 5: agentrun local runs an agent tool's children in the
// same process, from the file's templates, with the operator's rules:
// the sample's triage run calls its investigator twice, each child's
// typed output is its call's result, the tree's use is the root's, and
// the triage run's own typed output validates.
func TestRun_agentToolsRunTheirChildrenInThisProcess(t *testing.T) {
	r := runPath(t, filepath.Join("..", "..", "config", "samples", "14-agent-tree.yaml"), Options{JSON: true})
	r.mustExit(t, 0)
	st := decodeStatus(t, r.stdout)
	if st.Outcome != v1alpha1.OutcomeCompleted || st.Output == nil {
		t.Fatalf("outcome %q, output %v: want Completed with a typed output\n%s", st.Outcome, st.Output, r.stdout)
	}
	var out struct {
		Decision string `json:"decision"`
		Invoice  string `json:"invoice"`
	}
	if err := json.Unmarshal(st.Output.Raw, &out); err != nil || out.Decision != "refund" || out.Invoice != "in_9f22" {
		t.Errorf("status.output %s: %v", st.Output.Raw, err)
	}
	if len(st.Children) != 2 {
		t.Fatalf("status.children %+v: want the two children", st.Children)
	}
	var turns int32
	for _, c := range st.Children {
		if c.Outcome != string(v1alpha1.OutcomeCompleted) || !strings.HasPrefix(c.Name, "refund-triage-") {
			t.Errorf("child %+v: want a Completed child named after its parent", c)
		}
		turns += c.Turns
	}
	// The root's use holds its own two turns and its children's.
	if st.Usage == nil || st.Usage.Turns != 2+turns || turns != 4 {
		t.Errorf("usage %+v with children's turns %d: want 2 + 4", st.Usage, turns)
	}
}

// A template the file does not hold is a readable refusal at start.
func TestRun_anAgentToolsTemplateMustBeInTheFile(t *testing.T) {
	r := run(t, `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: orphan}
spec:
  goal: "Ask the investigator."
  model: {provider: scripted, script: [{content: "done"}]}
  budget: {maxTurns: 2, maxCostUSD: "0.1"}
  tools:
  - name: investigate
    agent: {templateRef: {name: nowhere}, budget: {maxTurns: 1, maxCostUSD: "0.01"}}
`, Options{})
	if r.code == 0 || !strings.Contains(r.stderr, `AgentRunTemplate "nowhere" does not exist`) {
		t.Errorf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
}
