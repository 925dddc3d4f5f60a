package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
)

// Issue 45, item 4: tree prints a run and its descendants, found by their
// labels, each with its phase, outcome, turns and cost.
func TestTree_printsTheRunAndItsDescendants(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	root := makeRun(ns, "triage").create(t)
	setStatus(t, root, func(s *v1alpha1.AgentRunStatus) {
		s.Phase, s.Outcome = v1alpha1.PhaseSucceeded, v1alpha1.OutcomeCompleted
		s.Usage = &v1alpha1.UsageStatus{Turns: 6, CostUSD: "0.0630"}
	})
	child := func(name string, parent *v1alpha1.AgentRun, call string, st v1alpha1.AgentRunStatus) *v1alpha1.AgentRun {
		b := makeRun(ns, name)
		b.run.Labels = map[string]string{v1alpha1.LabelParent: parent.Name, v1alpha1.LabelParentUID: string(parent.UID), v1alpha1.LabelRoot: "triage"}
		b.run.Annotations = map[string]string{v1alpha1.AnnotationParentCall: call}
		r := b.create(t)
		setStatus(t, r, func(s *v1alpha1.AgentRunStatus) { *s = st })
		return r
	}
	a := child("triage-a", root, "t1-c1/investigate", v1alpha1.AgentRunStatus{Phase: v1alpha1.PhaseSucceeded, Outcome: v1alpha1.OutcomeCompleted,
		Usage: &v1alpha1.UsageStatus{Turns: 3, CostUSD: "0.0310"}})
	child("triage-b", root, "t1-c2/investigate", v1alpha1.AgentRunStatus{Phase: v1alpha1.PhaseFailed, Outcome: v1alpha1.OutcomeBudgetExhausted,
		Usage: &v1alpha1.UsageStatus{Turns: 1, CostUSD: "0.0100"}})
	child("triage-a-1", a, "t2-c1/lookup", v1alpha1.AgentRunStatus{Phase: v1alpha1.PhaseRunning, Usage: &v1alpha1.UsageStatus{Turns: 1, CostUSD: "0.0050"}})
	makeRun(ns, "unrelated").create(t) // another tree's run is not listed

	var out bytes.Buffer
	if err := Tree(ctx, k8sClient, Ref{Namespace: ns, Name: "triage"}, OutputJSON, &out); err != nil {
		t.Fatal(err)
	}
	var got TreeRun
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("-o json is not a tree: %v\n%s", err, out.String())
	}
	want := TreeRun{Name: "triage", Phase: "Succeeded", Outcome: "Completed", Turns: 6, CostUSD: "0.0630", Children: []*TreeRun{
		{Name: "triage-a", Phase: "Succeeded", Outcome: "Completed", Call: "t1-c1/investigate", Turns: 3, CostUSD: "0.0310", Children: []*TreeRun{
			{Name: "triage-a-1", Phase: "Running", Call: "t2-c1/lookup", Turns: 1, CostUSD: "0.0050"},
		}},
		{Name: "triage-b", Phase: "Failed", Outcome: "BudgetExhausted", Call: "t1-c2/investigate", Turns: 1, CostUSD: "0.0100"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tree -o json (-want +got):\n%s", diff)
	}

	out.Reset()
	if err := Tree(ctx, k8sClient, Ref{Namespace: ns, Name: "triage"}, OutputText, &out); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " ")+indentOf(l))
	}
	wantLines := []string{
		"NAME PHASE OUTCOME TURNS COST CALL",
		"triage Succeeded Completed 6 $0.0630",
		"triage-a Succeeded Completed 3 $0.0310 t1-c1/investigate (indent 2)",
		"triage-a-1 Running 1 $0.0050 t2-c1/lookup (indent 4)",
		"triage-b Failed BudgetExhausted 1 $0.0100 t1-c2/investigate (indent 2)",
	}
	if diff := cmp.Diff(wantLines, lines); diff != "" {
		t.Errorf("tree (-want +got):\n%s\n%s", diff, out.String())
	}

	// A run in the middle of a tree shows the part below it.
	out.Reset()
	if err := Tree(ctx, k8sClient, Ref{Namespace: ns, Name: "triage-a"}, OutputJSON, &out); err != nil {
		t.Fatal(err)
	}
	got = TreeRun{}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Children) != 1 || got.Children[0].Name != "triage-a-1" || got.Call != "" {
		t.Errorf("tree triage-a: %s, want triage-a with its one child", out.String())
	}
}

// indentOf says how far a line of the tree is indented.
func indentOf(l string) string {
	if n := len(l) - len(strings.TrimLeft(l, " ")); n > 0 {
		return " (indent " + strconv.Itoa(n) + ")"
	}
	return ""
}

func TestTree_namesAMissingRunAndABadFormat(t *testing.T) {
	ns := newNamespace(t)
	var out bytes.Buffer
	if err := Tree(context.Background(), k8sClient, Ref{Namespace: ns, Name: "nope"}, OutputText, &out); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("tree of a missing run: %v, want an error naming it", err)
	}
	if err := Tree(context.Background(), k8sClient, Ref{Namespace: ns, Name: "nope"}, "yaml", &out); err == nil || !strings.Contains(err.Error(), `"yaml"`) {
		t.Errorf("tree -o yaml: %v, want an error naming the format", err)
	}
}
