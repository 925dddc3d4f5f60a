package console

import (
	"cmp"
	"context"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// listKind reads the objects of one kind that u may list: in namespace ns,
// or for "" in every namespace scopeOf finds for them (the whole cluster
// in one list when they may). It returns them sorted by namespace and
// name, with scopeOf's note. newList makes an empty list of the kind, and
// items gives a list's objects.
func listKind[T any, PT interface {
	*T
	client.Object
}, L client.ObjectList](ctx context.Context, s *Server, u *user, ns string, newList func() L, items func(L) []T) ([]T, string, error) {
	all := newList()
	sc, err := s.scopeOf(ctx, u, ns, all)
	if err != nil {
		return nil, "", err
	}
	out := items(all)
	for _, n := range sc.Namespaces {
		l := newList()
		if err := u.c.List(ctx, l, client.InNamespace(n)); err != nil {
			return nil, sc.Note, err
		}
		out = append(out, items(l)...)
	}
	slices.SortFunc(out, func(a, b T) int {
		pa, pb := PT(&a), PT(&b)
		return cmp.Or(cmp.Compare(pa.GetNamespace(), pb.GetNamespace()), cmp.Compare(pa.GetName(), pb.GetName()))
	})
	return out, sc.Note, nil
}

// listData is a list page's data: the namespace asked for ("" for every
// namespace the user may list), a row for each object and scopeOf's note.
type listData[R any] struct {
	Namespace string
	Rows      []R
	Note      string
}

// listPage makes the list page v of one kind: it reads the objects the
// user may list in namespace ns (listKind) and makes a row of each, in
// listKind's order.
func listPage[T any, PT interface {
	*T
	client.Object
}, L client.ObjectList, R any](r *http.Request, s *Server, u *user, ns string, v view, newList func() L, items func(L) []T, row func(*T) R) (view, error) {
	d := &listData[R]{Namespace: ns}
	v.Data = d
	objs, note, err := listKind[T, PT](r.Context(), s, u, ns, newList, items)
	d.Note = note
	if err != nil {
		return v, err
	}
	for i := range objs {
		d.Rows = append(d.Rows, row(&objs[i]))
	}
	return v, nil
}

// listRuns lists the runs of a scope that opts select; listed, when not
// nil, is the list scopeOf read with the same opts, which holds them
// already when it read the whole scope (sc.Listed).
func listRuns(ctx context.Context, u *user, sc scope, listed *v1alpha1.AgentRunList, opts ...client.ListOption) ([]v1alpha1.AgentRun, error) {
	if sc.Listed && listed != nil {
		return listed.Items, nil
	}
	var out []v1alpha1.AgentRun
	list := func(extra ...client.ListOption) error {
		var l v1alpha1.AgentRunList
		if err := u.c.List(ctx, &l, append(extra, opts...)...); err != nil {
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

// pageSize is how many runs the runs page reads at a time: its list
// asks the API server for one page (limit/continue), so a request holds at
// most this many runs however many the cluster has.
const pageSize = 100

// runFilter is the runs page's filter, sort and place, from its query.
// Continue is the API server's continue token of the page shown; At, where
// the runs are read namespace by namespace, is the namespace it belongs to
// (empty with Continue: the list across every namespace).
type runFilter struct {
	Namespace, Phase, Outcome, Label, Template, Sort string
	Continue, At                                     string
}

func filterOf(q url.Values) runFilter {
	return runFilter{Namespace: q.Get("namespace"), Phase: q.Get("phase"), Outcome: q.Get("outcome"),
		Label: q.Get("label"), Template: q.Get("template"), Sort: q.Get("sort"),
		Continue: q.Get("continue"), At: q.Get("at")}
}

// Query is the filter as a query string (without "?").
func (f runFilter) Query() string {
	v := url.Values{}
	for k, s := range map[string]string{"namespace": f.Namespace, "phase": f.Phase, "outcome": f.Outcome, "label": f.Label,
		"template": f.Template, "sort": f.Sort, "continue": f.Continue, "at": f.At} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v.Encode()
}

// first is the filter at its first page.
func (f runFilter) first() runFilter {
	f.Continue, f.At = "", ""
	return f
}

// fields are the filters the API server applies through the CRD's
// selectable fields: an outcome, and a phase other than Pending (a run the
// operator has not seen yet has no phase, which no field selector
// matches). A page then holds only matching runs, however many others
// the list has.
func (f runFilter) fields() []client.ListOption {
	sel := client.MatchingFields{}
	if f.Outcome != "" {
		sel[v1alpha1.FieldOutcome] = f.Outcome
	}
	if f.Phase != "" && f.Phase != "Pending" {
		sel[v1alpha1.FieldPhase] = f.Phase
	}
	if len(sel) == 0 {
		return nil
	}
	return []client.ListOption{sel}
}

// narrowed: a filter the API server cannot apply (the template, which is
// in no label, or the Pending phase) narrows the page read, so a page
// can show fewer runs than it read.
func (f runFilter) narrowed() bool { return f.Template != "" || f.Phase == "Pending" }

// keep: the run passes the filters (the API server applied those of
// fields already; checking them again costs nothing).
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
	cost      *big.Rat // nil when the run has spent nothing yet
}

type runsData struct {
	Filter   runFilter
	Rows     []runRow
	Note     string
	Problem  string
	Phases   []string
	Outcomes []string
	Sorts    []string
	// Next is the URL of the page after this one ("" on the last); First,
	// the first page's, when this is a later one.
	Next, First string
	// Narrowed: a filter the API server cannot apply (the template, the
	// Pending phase) is set, so the page can hold fewer rows than it read.
	Narrowed bool
	PageSize int
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
	d := runsData{Filter: f, Phases: phases, Outcomes: outcomeNames(), Sorts: sorts, Result: res, PageSize: pageSize,
		Narrowed: f.narrowed()}
	q := f.Query()
	v := view{Title: "Runs", Page: "runs", Data: &d, Live: "/?" + join(q, "fragment=1"), Events: "/events?" + join(q, "kind=runs")}
	sel, err := labels.Parse(f.Label)
	if err != nil {
		d.Problem = "The label filter is not a label selector: " + err.Error()
		v.Status = http.StatusBadRequest
		return v, nil
	}
	sc, runs, next, err := s.runPage(r.Context(), u, f, sel)
	restarted := ""
	if err != nil && f.Continue != "" && (apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.IsBadRequest(err)) {
		// The API server keeps a list's place for a few minutes (etcd's
		// compaction): past that, or for a token it never gave, the
		// list starts again.
		why := "The place this page kept in the list has expired (the API server keeps it for a few minutes)"
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			why = "The place this page kept in the list is not one the API server gave"
		}
		f = f.first()
		d.Filter = f
		v.Live = "/?" + join(f.Query(), "fragment=1")
		sc, runs, next, err = s.runPage(r.Context(), u, f, sel)
		restarted = why + ": this is the first page again."
	}
	if err != nil {
		return v, err
	}
	d.Note = strings.TrimSpace(restarted + " " + sc.Note)
	if next != nil {
		d.Next = "/?" + next.Query()
	}
	if f.Continue != "" || f.At != "" {
		d.First = "/?" + f.first().Query()
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
			row.cost, _ = new(big.Rat).SetString(us.CostUSD)
		}
		d.Rows = append(d.Rows, row)
	}
	slices.SortStableFunc(d.Rows, orderOf(f.Sort))
	return v, nil
}

// sorts are the orders the runs page offers, within the page: newest
// first (""), by name, by cost (highest first).
var sorts = []string{"", "name", "cost"}

func orderOf(sort string) func(a, b runRow) int {
	byName := func(a, b runRow) int { return cmp.Compare(a.Key, b.Key) }
	switch sort {
	case "name":
		return byName
	case "cost":
		return func(a, b runRow) int {
			switch {
			case a.cost == nil && b.cost == nil:
			case a.cost == nil:
				return 1
			case b.cost == nil:
				return -1
			default:
				if c := b.cost.Cmp(a.cost); c != 0 {
					return c
				}
			}
			return byName(a, b)
		}
	}
	return func(a, b runRow) int { return cmp.Or(b.created.Compare(a.created), byName(a, b)) }
}

// runPage reads one page of the runs f selects: at most pageSize, from
// where f's continue token says. Where the user may list runs across the
// cluster, it is one list of the API server (scopeOf's own); else the
// namespaces of the scope are read in turn, a page going on into the next
// namespace when one ends. next is the filter of the page after it, nil on
// the last.
func (s *Server) runPage(ctx context.Context, u *user, f runFilter, sel labels.Selector) (scope, []v1alpha1.AgentRun, *runFilter, error) {
	opts := append([]client.ListOption{client.MatchingLabelsSelector{Selector: sel}, client.Limit(pageSize)}, f.fields()...)
	var list v1alpha1.AgentRunList
	probe := opts
	if f.At == "" && f.Continue != "" {
		probe = append(probe, client.Continue(f.Continue))
	}
	sc, err := s.scopeOf(ctx, u, f.Namespace, &list, probe...)
	if err != nil {
		return sc, nil, nil, err
	}
	if sc.Listed {
		// A token of a namespace's list (At) does not fit this one: the
		// probe read the first page.
		if list.Continue == "" {
			return sc, list.Items, nil, nil
		}
		next := f.first()
		next.Continue = list.Continue
		return sc, list.Items, &next, nil
	}
	i, tok := 0, ""
	if f.At != "" {
		if i = slices.Index(sc.Namespaces, f.At); i < 0 {
			i = 0 // not in the scope now: the first page
		} else {
			tok = f.Continue
		}
	}
	var runs []v1alpha1.AgentRun
	for ; i < len(sc.Namespaces); i++ {
		ns := sc.Namespaces[i]
		if len(runs) == pageSize {
			next := f.first()
			next.At = ns
			return sc, runs, &next, nil
		}
		var l v1alpha1.AgentRunList
		if err := u.c.List(ctx, &l, append([]client.ListOption{client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel},
			client.Limit(int64(pageSize - len(runs))), client.Continue(tok)}, f.fields()...)...); err != nil {
			return sc, nil, nil, err
		}
		tok = ""
		if runs == nil {
			runs = l.Items
		} else {
			runs = append(runs, l.Items...)
		}
		if l.Continue != "" {
			next := f.first()
			next.At, next.Continue = ns, l.Continue
			return sc, runs, &next, nil
		}
	}
	return sc, runs, nil, nil
}

// join joins query strings.
func join(qs ...string) string {
	return strings.Join(slices.DeleteFunc(qs, func(s string) bool { return s == "" }), "&")
}
