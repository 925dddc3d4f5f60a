package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/safeterm"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TreeRun is one run of a tree of runs (agent tools), as tree -o json
// prints it: the run, then the runs its calls made.
type TreeRun struct {
	Name    string `json:"name"`
	Phase   string `json:"phase"`
	Outcome string `json:"outcome,omitempty"`
	// Call is the parent's call that made the run (CALLID/TOOL); empty
	// for the run tree was asked about.
	Call string `json:"call,omitempty"`
	// Turns and CostUSD are the run's status.usage: its own and its
	// children's.
	Turns    int32      `json:"turns"`
	CostUSD  string     `json:"costUSD"`
	Children []*TreeRun `json:"children,omitempty"`
}

// Tree prints the run ref and every run below it: the runs its agent
// tools' calls made, theirs, and so on, found by their labels in the
// run's namespace (agents.agentrun.dev/root, and parent-uid to link each
// to its parent). The text format is a table, a run's children indented
// under it; the json format is the TreeRun.
func Tree(ctx context.Context, c client.Reader, ref Ref, format string, w io.Writer) error {
	if err := textOrJSON(format); err != nil {
		return err
	}
	run, err := getRun(ctx, c, ref)
	if err != nil {
		return err
	}
	// Every run of a tree names its root, when the name fits a label;
	// otherwise every run that has a parent is read.
	sel := []client.ListOption{client.InNamespace(ref.Namespace)}
	root := run.Labels[v1alpha1.LabelRoot]
	if root == "" && run.Labels[v1alpha1.LabelParentUID] == "" {
		root = run.Name
	}
	if root != "" && len(root) <= 63 {
		sel = append(sel, client.MatchingLabels{v1alpha1.LabelRoot: root})
	} else {
		sel = append(sel, client.HasLabels{v1alpha1.LabelParentUID})
	}
	var l v1alpha1.AgentRunList
	if err := c.List(ctx, &l, sel...); err != nil {
		return fmt.Errorf("listing the runs below %s: %w", ref, explain(err, ref))
	}
	kids := map[types.UID][]*v1alpha1.AgentRun{}
	for i := range l.Items {
		r := &l.Items[i]
		p := types.UID(r.Labels[v1alpha1.LabelParentUID])
		kids[p] = append(kids[p], r)
	}
	for _, k := range kids {
		slices.SortFunc(k, func(a, b *v1alpha1.AgentRun) int {
			if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
	}
	seen := map[types.UID]bool{}
	var build func(r *v1alpha1.AgentRun) *TreeRun
	build = func(r *v1alpha1.AgentRun) *TreeRun {
		seen[r.UID] = true
		n := &TreeRun{Name: r.Name, Phase: string(r.Status.Phase), Outcome: string(r.Status.Outcome),
			Call: r.Annotations[v1alpha1.AnnotationParentCall], CostUSD: "0"}
		if n.Phase == "" {
			n.Phase = string(v1alpha1.PhasePending)
		}
		if u := r.Status.Usage; u != nil {
			n.Turns = u.Turns
			if u.CostUSD != "" {
				n.CostUSD = u.CostUSD
			}
		}
		for _, k := range kids[r.UID] {
			if !seen[k.UID] {
				n.Children = append(n.Children, build(k))
			}
		}
		return n
	}
	tree := build(run)
	tree.Call = ""

	w = safeterm.Writer(w)
	if format == OutputJSON {
		out, err := json.MarshalIndent(tree, "", "  ")
		if err != nil {
			return err
		}
		printf(w, "%s\n", out)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	printf(tw, "NAME\tPHASE\tOUTCOME\tTURNS\tCOST\tCALL\n")
	var print func(n *TreeRun, depth int)
	print = func(n *TreeRun, depth int) {
		printf(tw, "%s%s\t%s\t%s\t%d\t$%s\t%s\n", strings.Repeat("  ", depth), n.Name, n.Phase, n.Outcome, n.Turns, n.CostUSD, n.Call)
		for _, k := range n.Children {
			print(k, depth+1)
		}
	}
	print(tree, 0)
	return tw.Flush()
}
