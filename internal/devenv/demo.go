package devenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/testenv"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Annotations a sample uses to say what the demo should expect of it.
const (
	// ExpectedOutcome is the outcome the sample must end with.
	ExpectedOutcome = "demo.agentrun.dev/expected-outcome"
	// Answers are what the demo answers, as a person would, when the run
	// asks: "t1-c1=approve,t2-c1=deny".
	Answers = "demo.agentrun.dev/answers"
)

// Apply creates every document of the YAML files in dir (not its
// subdirectories) and returns the AgentRuns it created.
func Apply(ctx context.Context, c client.Client, dir, namespace string) ([]client.ObjectKey, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var runs []client.ObjectKey
	for _, f := range files {
		objs, err := testenv.ReadObjects(f)
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(namespace)
			}
			if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("%s: %s %s: %w", f, obj.GetKind(), obj.GetName(), err)
			}
			if obj.GetKind() == "AgentRun" {
				runs = append(runs, client.ObjectKeyFromObject(obj))
			}
		}
	}
	return runs, nil
}

// Result is how one sample ended.
type Result struct {
	Name, Expected string
	Outcome        v1alpha1.Outcome
	Reason         string
}

// OK reports whether the sample ended as its manifest expects.
func (r Result) OK() bool { return string(r.Outcome) == r.Expected }

// Watch follows the runs until each has ended (or the timeout passes),
// printing progress and answering approvals the samples ask the demo to
// give.
func Watch(ctx context.Context, c client.Client, keys []client.ObjectKey, out io.Writer, timeout time.Duration) ([]Result, error) {
	deadline := time.Now().Add(timeout)
	seen := map[string]string{}
	answered := map[string]bool{}
	results := map[string]Result{}
	for len(results) < len(keys) {
		if time.Now().After(deadline) {
			break
		}
		for _, k := range keys {
			if _, ok := results[k.Name]; ok {
				continue
			}
			run := &v1alpha1.AgentRun{}
			if err := c.Get(ctx, k, run); err != nil {
				return nil, err
			}
			line := fmt.Sprintf("%-22s %-16s turn %-3d cost $%s", run.Name, run.Status.Phase, run.Status.Turn, cost(run))
			if seen[k.Name] != line {
				fmt.Fprintln(out, line)
				seen[k.Name] = line
			}
			for _, p := range run.Status.PendingApprovals {
				id := k.Name + "/" + p.CallID
				a := answerFor(run, p.CallID)
				if a == "" || answered[id] {
					continue
				}
				answered[id] = true
				fmt.Fprintf(out, "%-22s answering %s (%s) with %q, as `kubectl annotate agentrun %s %s%s=%s` would\n",
					run.Name, p.CallID, p.Tool, a, run.Name, v1alpha1.ApprovalAnnotationPrefix, p.CallID, a)
				body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.ApprovalAnnotationPrefix + p.CallID: a}}})
				if err := c.Patch(ctx, run, client.RawPatch("application/merge-patch+json", body), client.FieldOwner("agentrun-demo")); err != nil {
					return nil, err
				}
			}
			if run.Status.Outcome != "" {
				results[k.Name] = Result{Name: run.Name, Expected: run.Annotations[ExpectedOutcome], Outcome: run.Status.Outcome, Reason: run.Status.Reason}
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	out2 := make([]Result, 0, len(keys))
	for _, k := range keys {
		r, ok := results[k.Name]
		if !ok {
			r = Result{Name: k.Name, Reason: "did not end within " + timeout.String()}
		}
		out2 = append(out2, r)
	}
	return out2, nil
}

// Print writes the outcome table.
func Print(out io.Writer, results []Result) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tOUTCOME\tEXPECTED\tREASON")
	for _, r := range results {
		mark := ""
		if !r.OK() {
			mark = "  <- unexpected"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s%s\n", r.Name, r.Outcome, r.Expected, clip.Cut(r.Reason, 90, "…"), mark)
	}
	tw.Flush()
}

func answerFor(run *v1alpha1.AgentRun, callID string) string {
	for _, a := range strings.Split(run.Annotations[Answers], ",") {
		id, v, ok := strings.Cut(strings.TrimSpace(a), "=")
		if ok && id == callID {
			return v
		}
	}
	return ""
}

func cost(run *v1alpha1.AgentRun) string {
	if run.Status.Usage == nil || run.Status.Usage.CostUSD == "" {
		return "0"
	}
	return run.Status.Usage.CostUSD
}
