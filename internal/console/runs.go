package console

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// scope is where a user's lists are read: every namespace at once (All),
// or the namespaces named.
type scope struct {
	All bool
	// Listed: scopeOf's own list across every namespace succeeded, and the
	// caller's list holds its items; nothing needs listing again.
	Listed     bool
	Namespaces []string
	// Note says why the lists are narrower than the cluster, if they are.
	Note string
}

// scopeOf finds where the user may list objects of list's kind: the
// namespace asked for; else every namespace if the user may list there;
// else each namespace the user may list namespaces to find (keeping those
// where listing is allowed); else the configured namespace. Its try across
// every namespace is made with opts, and when it succeeds list holds what
// it read (Listed), so a page lists once.
func (s *Server) scopeOf(ctx context.Context, u *user, namespace string, list client.ObjectList, opts ...client.ListOption) (scope, error) {
	if namespace != "" {
		return scope{Namespaces: []string{namespace}}, nil
	}
	err := u.c.List(ctx, list, opts...)
	if err == nil {
		return scope{All: true, Listed: true}, nil
	}
	if !forbidden(err) {
		return scope{}, err
	}
	var nss corev1.NamespaceList
	if err := u.c.List(ctx, &nss); err == nil {
		sc := scope{Note: "You may not list these in every namespace at once: shown are the namespaces where you may."}
		for _, ns := range nss.Items {
			if err := u.c.List(ctx, list, client.InNamespace(ns.Name), client.Limit(1)); err == nil {
				sc.Namespaces = append(sc.Namespaces, ns.Name)
			}
		}
		return sc, nil
	}
	ns := s.o.Namespace
	if ns == "" {
		// A ServiceAccount's own namespace is where it most likely works.
		if parts := strings.Split(s.whoami(ctx, u), ":"); len(parts) == 4 && parts[0] == "system" && parts[1] == "serviceaccount" {
			ns = parts[2]
		}
	}
	if ns == "" {
		return scope{Note: "You may not list these in every namespace nor list namespaces: name a namespace in the filter."}, nil
	}
	return scope{Namespaces: []string{ns},
		Note: fmt.Sprintf("You may not list these in every namespace nor list namespaces: shown is namespace %q. Choose another with the namespace filter.", ns)}, nil
}

// listRuns lists the runs of a scope matching sel; listed holds them
// already when scopeOf read them (sc.Listed).
func listRuns(ctx context.Context, u *user, sc scope, sel labels.Selector, listed *v1alpha1.AgentRunList) ([]v1alpha1.AgentRun, error) {
	if sc.Listed {
		return listed.Items, nil
	}
	var out []v1alpha1.AgentRun
	list := func(opts ...client.ListOption) error {
		var l v1alpha1.AgentRunList
		if err := u.c.List(ctx, &l, append(opts, client.MatchingLabelsSelector{Selector: sel})...); err != nil {
			return err
		}
		out = append(out, l.Items...)
		return nil
	}
	if sc.All {
		return out, list()
	}
	for _, ns := range sc.Namespaces {
		if err := list(client.InNamespace(ns)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// runFilter is the runs page's filter, from its query.
type runFilter struct {
	Namespace, Phase, Outcome, Label, Template string
}

func filterOf(q url.Values) runFilter {
	return runFilter{Namespace: q.Get("namespace"), Phase: q.Get("phase"), Outcome: q.Get("outcome"),
		Label: q.Get("label"), Template: q.Get("template")}
}

// Query is the filter as a query string (without "?").
func (f runFilter) Query() string {
	v := url.Values{}
	for k, s := range map[string]string{"namespace": f.Namespace, "phase": f.Phase, "outcome": f.Outcome, "label": f.Label, "template": f.Template} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v.Encode()
}

func (f runFilter) keep(run *v1alpha1.AgentRun) bool {
	return (f.Phase == "" || string(run.Status.Phase) == f.Phase || (f.Phase == "Pending" && run.Status.Phase == "")) &&
		(f.Outcome == "" || string(run.Status.Outcome) == f.Outcome) &&
		(f.Template == "" || templateOf(run) == f.Template)
}

func templateOf(run *v1alpha1.AgentRun) string {
	if run.Spec.TemplateRef != nil {
		return run.Spec.TemplateRef.Name
	}
	if run.Status.Template != nil {
		return run.Status.Template.Name
	}
	return ""
}

// runRow is one line of the runs page.
type runRow struct {
	Key, Namespace, Name      string
	Phase, Outcome, Reason    string
	Template, Age, Turn, Cost string
	Pending                   int32
	// UID is the run's, for its Cancel button; CanCancel: it has not
	// ended, and no one has asked it to stop.
	UID       string
	CanCancel bool
	created   time.Time
}

type runsData struct {
	Filter   runFilter
	Rows     []runRow
	Note     string
	Problem  string
	Phases   []string
	Outcomes []string
	// Result is what a Cancel from this page did, or why it was refused.
	Result *result
}

// phases are offered by the filter, with the engine's outcomes.
var phases = []string{"Pending", "Running", "AwaitingApproval", "Succeeded", "Failed"}

// outcomeNames are the engine's outcomes (loop.Outcomes), for the filter.
func outcomeNames() []string {
	out := make([]string, len(loop.Outcomes))
	for i, o := range loop.Outcomes {
		out[i] = string(o)
	}
	return out
}

func (s *Server) runs(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	return s.runsView(r, u, filterOf(r.URL.Query()), nil)
}

func (s *Server) runsView(r *http.Request, u *user, f runFilter, res *result) (view, error) {
	d := runsData{Filter: f, Phases: phases, Outcomes: outcomeNames(), Result: res}
	q := f.Query()
	v := view{Title: "Runs", Page: "runs", Data: &d, Live: "/?" + join(q, "fragment=1"), Events: "/events?" + join(q, "kind=runs")}
	sel, err := labels.Parse(f.Label)
	if err != nil {
		d.Problem = "The label filter is not a label selector: " + err.Error()
		v.Status = http.StatusBadRequest
		return v, nil
	}
	var all v1alpha1.AgentRunList
	sc, err := s.scopeOf(r.Context(), u, f.Namespace, &all, client.MatchingLabelsSelector{Selector: sel})
	if err != nil {
		return v, err
	}
	d.Note = sc.Note
	runs, err := listRuns(r.Context(), u, sc, sel, &all)
	if err != nil {
		return v, err
	}
	now := time.Now()
	for i := range runs {
		run := &runs[i]
		if !f.keep(run) {
			continue
		}
		row := runRow{Key: run.Namespace + "/" + run.Name, Namespace: run.Namespace, Name: run.Name,
			Phase: string(run.Status.Phase), Outcome: string(run.Status.Outcome), Reason: oneLine(run.Status.Reason),
			Template: templateOf(run), Pending: int32(len(run.Status.PendingApprovals)),
			Age: duration.HumanDuration(now.Sub(run.CreationTimestamp.Time)), created: run.CreationTimestamp.Time,
			UID: string(run.UID), CanCancel: run.Status.Outcome == "" && !run.Spec.Cancel}
		if row.Phase == "" {
			row.Phase = "Pending"
		}
		if run.Status.Turn > 0 {
			row.Turn = fmt.Sprint(run.Status.Turn)
		}
		if us := run.Status.Usage; us != nil && us.CostUSD != "" {
			row.Cost = "$" + us.CostUSD
		}
		d.Rows = append(d.Rows, row)
	}
	// Newest first.
	slices.SortStableFunc(d.Rows, func(a, b runRow) int { return cmp.Or(b.created.Compare(a.created), cmp.Compare(a.Key, b.Key)) })
	return v, nil
}

// join joins query strings.
func join(qs ...string) string {
	return strings.Join(slices.DeleteFunc(qs, func(s string) bool { return s == "" }), "&")
}
