package devenv

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/go-logr/logr"
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
	env, err := Start(filepath.Join(t.TempDir(), "kubeconfig"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping: %v", err)
		}
	}()
	expectChartPolicies(t, env)
	c, err := client.New(env.Config, client.Options{Scheme: kubescheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
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
	if !templated || !scheduled {
		t.Errorf("the run made from a template (refund-t-1042: %v) or the schedule's first run (refund-sweep-*: %v) did not complete", templated, scheduled)
	}
	if !strings.Contains(out.String(), "answering t1-c1 (issue_refund) with \"approve\"") {
		t.Errorf("the demo did not answer the approval the refund sample asks for")
	}
	readmeShowsWhatTheSamplesDo(t, ctx, c, root)
}

// readmeShowsWhatTheSamplesDo holds the README's worked example (the
// `kubectl get ar -o wide` output) to what the same samples did here: each
// ended run's outcome, turn, cost and reason as printed. A run the README
// shows still waiting (the demo answers it) is left out.
func readmeShowsWhatTheSamplesDo(t *testing.T, ctx context.Context, c client.Client, root string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), "$ kubectl get ar -o wide\n")
	if !ok {
		t.Fatal("README.md shows no `kubectl get ar -o wide`")
	}
	table, _, _ = strings.Cut(table, "```")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	cols := regexp.MustCompile(`\s{2,}`)
	checked := 0
	for _, line := range lines[1:] {
		f := cols.Split(line, 6)
		if len(f) < 6 || f[1] == "AwaitingApproval" {
			continue
		}
		// NAME PHASE OUTCOME [TURN] COST AGE REASON: TURN is blank before a first turn.
		f = cols.Split(line, -1)
		name, outcome, reason := f[0], f[2], f[len(f)-1]
		turn, cost := "", f[3]
		if len(f) == 7 {
			turn, cost = f[3], f[4]
		}
		run := &v1alpha1.AgentRun{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, run); err != nil {
			t.Errorf("README.md shows %s, which is not a sample: %v", name, err)
			continue
		}
		gotTurn := ""
		if run.Status.Turn > 0 {
			gotTurn = strconv.Itoa(int(run.Status.Turn))
		}
		gotCost := ""
		if run.Status.Usage != nil {
			gotCost = run.Status.Usage.CostUSD
		}
		if got := []string{string(run.Status.Outcome), gotTurn, gotCost, run.Status.Reason}; !slices.Equal(got, []string{outcome, turn, cost, reason}) {
			t.Errorf("README.md shows %s as\n\t%q\nbut the sample did\n\t%q", name, []string{outcome, turn, cost, reason}, got)
		}
		checked++
	}
	if checked < 3 {
		t.Errorf("checked %d runs of the README's example; want its 3 ended runs", checked)
	}
}
