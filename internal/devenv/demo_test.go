package devenv

import (
	"bytes"
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The samples are the demo: every one must end as its manifest says, on
// the same local control plane `make demo` starts.
func TestDemo_everySampleEndsAsItsManifestExpects(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	env, c := startEnv(t)
	expectChartPolicies(t, env)
	ctx := context.Background()
	keys, err := Apply(ctx, c, filepath.Join(root, "config", "samples"), "default")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 11 {
		t.Fatalf("applied %d AgentRuns, want the 11 samples", len(keys))
	}
	var out bytes.Buffer
	results, err := Watch(ctx, c, keys, &out, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	Print(&out, results)
	t.Log("\n" + out.String())
	for _, r := range results {
		if r.Expected == "" {
			t.Errorf("%s does not say which outcome it expects", r.Name)
		}
		if !r.OK() {
			t.Errorf("%s ended %s (%s), its manifest expects %s", r.Name, r.Outcome, r.Reason, r.Expected)
		}
	}
	planned := false
	for _, r := range results {
		planned = planned || (r.Name == "plan-execute" && r.OK())
	}
	if !planned {
		t.Errorf("the planExecute sample (plan-execute) did not run to Completed")
	}
	templated, scheduled := false, false
	for _, r := range results {
		templated = templated || (r.Name == "refund-t-1042" && r.OK())
		scheduled = scheduled || (strings.HasPrefix(r.Name, "refund-sweep-") && r.OK())
	}
	evaluated := false
	for _, r := range results {
		evaluated = evaluated || (r.Name == "refund-check" && r.OK())
	}
	if !evaluated {
		t.Errorf("the evaluation of the template (refund-check) did not end Passed")
	}
	if !templated || !scheduled {
		t.Errorf("the run made from a template (refund-t-1042: %v) or the schedule's first run (refund-sweep-*: %v) did not complete", templated, scheduled)
	}
	if !strings.Contains(out.String(), "answering t1-c1 (issue_refund) with \"approve\"") {
		t.Errorf("the demo did not answer the approval the refund sample asks for")
	}
	expectAgentTree(ctx, t, c)
	consoleOverTheDemo(ctx, t, env, c)
}

// expectAgentTree checks the sample of agents that call agents
// (14-agent-tree.yaml): refund-triage called the investigator template
// twice in one reply, both children completed with typed output that
// validates their schema, and the triage run's own status.output
// validates its schema and counts the children's use.
func expectAgentTree(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	parent := &v1alpha1.AgentRun{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "refund-triage"}, parent); err != nil {
		t.Fatal(err)
	}
	expectValidOutput(t, parent)
	var children v1alpha1.AgentRunList
	if err := c.List(ctx, &children, client.InNamespace("default"), client.MatchingLabels{v1alpha1.LabelParent: "refund-triage"}); err != nil {
		t.Fatal(err)
	}
	var invoices []string
	for i := range children.Items {
		child := &children.Items[i]
		if child.Status.Outcome != v1alpha1.OutcomeCompleted {
			t.Errorf("child %s ended %s (%s), want Completed", child.Name, child.Status.Outcome, child.Status.Reason)
			continue
		}
		got := expectValidOutput(t, child)
		inv, _ := got["invoice"].(string)
		invoices = append(invoices, inv)
	}
	sort.Strings(invoices)
	if diff := cmp.Diff([]string{"in_9f21", "in_9f22"}, invoices); diff != "" {
		t.Errorf("the invoices the children of refund-triage investigated (-want +got):\n%s", diff)
	}
	if cu := parent.Status.ChildUsage; cu == nil || cu.Turns != 4 {
		t.Errorf("refund-triage's status.childUsage = %+v, want the 4 turns of its two children", cu)
	}
}

// expectValidOutput checks that the run's status.output validates against
// its spec.output.schema, and returns it.
func expectValidOutput(t *testing.T, run *v1alpha1.AgentRun) map[string]any {
	t.Helper()
	if run.Spec.Output == nil || run.Status.Output == nil {
		t.Errorf("%s: spec.output %v, status.output %v: want both", run.Name, run.Spec.Output != nil, run.Status.Output != nil)
		return nil
	}
	schema, err := jsonschema.UnmarshalJSON(bytes.NewReader(run.Spec.Output.Schema.Raw))
	if err != nil {
		t.Fatal(err)
	}
	comp := jsonschema.NewCompiler()
	if err := comp.AddResource("output.json", schema); err != nil {
		t.Fatal(err)
	}
	sch, err := comp.Compile("output.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := jsonschema.UnmarshalJSON(bytes.NewReader(run.Status.Output.Raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(got); err != nil {
		t.Errorf("%s: status.output %s does not validate: %v", run.Name, run.Status.Output.Raw, err)
	}
	m, _ := got.(map[string]any)
	return m
}
