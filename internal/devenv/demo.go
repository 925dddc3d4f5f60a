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
	"k8s.io/apimachinery/pkg/util/wait"
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

// Sample is what the demo follows: an AgentRun it applied, an
// AgentSchedule, whose first run it follows once the schedule creates it,
// or an AgentEvaluation, followed until it has scored its runs.
type Sample struct {
	client.ObjectKey
	Schedule   bool
	Evaluation bool
}

// Apply creates every document of the YAML files in dir (not its
// subdirectories) and returns the AgentRuns, AgentSchedules and
// AgentEvaluations it created.
func Apply(ctx context.Context, c client.Client, dir, namespace string) ([]Sample, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var runs []Sample
	for _, f := range files {
		objs, err := testenv.ReadObjects(f)
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(namespace)
			}
			if err := create(ctx, c, obj); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("%s: %s %s: %w", f, obj.GetKind(), obj.GetName(), err)
			}
			switch obj.GetKind() {
			case "AgentRun":
				runs = append(runs, Sample{ObjectKey: client.ObjectKeyFromObject(obj)})
			case "AgentSchedule":
				runs = append(runs, Sample{ObjectKey: client.ObjectKeyFromObject(obj), Schedule: true})
			case "AgentEvaluation":
				runs = append(runs, Sample{ObjectKey: client.ObjectKeyFromObject(obj), Evaluation: true})
			}
		}
	}
	return runs, nil
}

// create creates obj, again while the API server answers 503: a control
// plane that has just started serves a CRD before its admission policies
// know the kind ("There can be a delay between when
// CustomResourceDefinitions are created and when they are available"), and
// refuses its objects as unavailable until they do.
func create(ctx context.Context, c client.Client, obj client.Object) error {
	var err error
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err = c.Create(ctx, obj)
		return !apierrors.IsServiceUnavailable(err), nil
	})
	return err
}

// Result is how one sample ended.
type Result struct {
	Name, Expected string
	// Outcome is a run's outcome, or an evaluation's phase once it has
	// scored every run (Passed or Failed).
	Outcome string
	Reason  string
}

// OK reports whether the sample ended as its manifest expects.
func (r Result) OK() bool { return string(r.Outcome) == r.Expected }

// Watch follows the runs until each has ended (or the timeout passes),
// printing progress and answering approvals the samples ask the demo to
// give.
func Watch(ctx context.Context, c client.Client, samples []Sample, out io.Writer, timeout time.Duration) ([]Result, error) {
	deadline := time.Now().Add(timeout)
	seen := map[string]string{}
	answered := map[string]bool{}
	results := map[string]Result{}
	keys := make([]client.ObjectKey, len(samples))
	for i, s := range samples {
		keys[i] = s.ObjectKey
	}
	for len(results) < len(keys) {
		if time.Now().After(deadline) {
			break
		}
		for i := range keys {
			if samples[i].Schedule && keys[i] == samples[i].ObjectKey {
				// Follow the schedule's first run once it exists.
				first, err := firstRunOf(ctx, c, samples[i].ObjectKey)
				if err != nil {
					return nil, err
				}
				if first == nil {
					if seen[keys[i].Name] == "" {
						fmt.Fprintf(out, "%-22s AgentSchedule, waiting for its first run\n", keys[i].Name)
						seen[keys[i].Name] = "waiting"
					}
					continue
				}
				fmt.Fprintf(out, "%-22s AgentSchedule created %s for %s\n", keys[i].Name, first.Name, first.Annotations[v1alpha1.AnnotationScheduledTime])
				keys[i] = client.ObjectKeyFromObject(first)
			}
			k := keys[i]
			if _, ok := results[k.Name]; ok {
				continue
			}
			if samples[i].Evaluation {
				if err := followEvaluation(ctx, c, k, out, seen, results); err != nil {
					return nil, err
				}
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
				given := answerFor(run, p.CallID)
				if given == "" || answered[id] {
					continue
				}
				answered[id] = true
				ans, err := v1alpha1.ParseApprovalAnswer(given)
				if err != nil {
					return nil, fmt.Errorf("%s: the annotation %s answers %s with %w", run.Name, Answers, p.CallID, err)
				}
				a := ans.String()
				fmt.Fprintf(out, "%-22s answering %s (%s) with %q, as `kubectl annotate agentrun %s %s%s=%s` would\n",
					run.Name, p.CallID, p.Tool, a, run.Name, v1alpha1.ApprovalAnnotationPrefix, p.CallID, a)
				body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.ApprovalAnnotationPrefix + p.CallID: a}}})
				if err := c.Patch(ctx, run, client.RawPatch("application/merge-patch+json", body), client.FieldOwner("agentrun-demo")); err != nil {
					return nil, err
				}
			}
			if run.Status.Outcome != "" {
				results[k.Name] = Result{Name: run.Name, Expected: run.Annotations[ExpectedOutcome], Outcome: string(run.Status.Outcome), Reason: run.Status.Reason}
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
		if _, ok := results[k.Name]; !ok && seen[k.Name] == "waiting" {
			out2 = append(out2, Result{Name: k.Name, Reason: "the schedule created no run within " + timeout.String()})
			continue
		}
		r, ok := results[k.Name]
		if !ok {
			r = Result{Name: k.Name, Reason: "did not end within " + timeout.String()}
		}
		out2 = append(out2, r)
	}
	return out2, nil
}

// followEvaluation prints an evaluation's progress when it changes, and
// its result once it has scored every run: its phase, and the first
// failing case's reason.
func followEvaluation(ctx context.Context, c client.Client, k client.ObjectKey, out io.Writer, seen map[string]string, results map[string]Result) error {
	e := &v1alpha1.AgentEvaluation{}
	if err := c.Get(ctx, k, e); err != nil {
		return err
	}
	passed, total := int32(0), int32(0)
	if t := e.Status.Totals; t != nil {
		passed, total = t.Passed, t.Runs
	}
	line := fmt.Sprintf("%-22s AgentEvaluation %-9s %d of %d runs passed", e.Name, e.Status.Phase, passed, total)
	if seen[k.Name] != line {
		fmt.Fprintln(out, line)
		seen[k.Name] = line
	}
	if p := e.Status.Phase; p != "" && p != v1alpha1.EvaluationRunning {
		reason := fmt.Sprintf("%d of %d runs passed", passed, total)
		for _, cs := range e.Status.Cases {
			if cs.FailureReason != "" {
				reason += "; " + cs.Name + ": " + cs.FailureReason
				break
			}
		}
		results[k.Name] = Result{Name: e.Name, Expected: e.Annotations[ExpectedOutcome], Outcome: string(p), Reason: reason}
	}
	return nil
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

// firstRunOf is the oldest run the schedule created, or nil.
func firstRunOf(ctx context.Context, c client.Client, schedule client.ObjectKey) (*v1alpha1.AgentRun, error) {
	var list v1alpha1.AgentRunList
	if err := c.List(ctx, &list, client.InNamespace(schedule.Namespace), client.MatchingLabels{v1alpha1.LabelSchedule: schedule.Name}); err != nil {
		return nil, err
	}
	var first *v1alpha1.AgentRun
	for i := range list.Items {
		if r := &list.Items[i]; first == nil || r.CreationTimestamp.Before(&first.CreationTimestamp) ||
			(r.CreationTimestamp.Equal(&first.CreationTimestamp) && r.Name < first.Name) {
			first = r
		}
	}
	return first, nil
}
