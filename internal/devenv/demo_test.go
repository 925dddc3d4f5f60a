package devenv

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
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
	if !templated || !scheduled {
		t.Errorf("the run made from a template (refund-t-1042: %v) or the schedule's first run (refund-sweep-*: %v) did not complete", templated, scheduled)
	}
	if !strings.Contains(out.String(), "answering t1-c1 (issue_refund) with \"approve\"") {
		t.Errorf("the demo did not answer the approval the refund sample asks for")
	}
}
