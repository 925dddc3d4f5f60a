package console

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/safeterm"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// budgetRow is one AgentBudget: its cost and tokens against their limits,
// and its active runs.
type budgetRow struct {
	Namespace, Name string
	Bars            []bar
	Active, Window  string
	WindowStart     string
	Suspended       bool
	Conditions      []fact
}

type budgetsData struct {
	Namespace string
	Rows      []budgetRow
	Note      string
}

func (s *Server) budgets(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	ns := r.URL.Query().Get("namespace")
	q := url.Values{}
	if ns != "" {
		q.Set("namespace", ns)
	}
	d := &budgetsData{Namespace: ns}
	v := view{Title: "Budgets", Page: "budgets", Data: d, Live: "/budgets?" + join(q.Encode(), "fragment=1"),
		Events: "/events?" + join(q.Encode(), "kind=budgets")}
	var all v1alpha1.AgentBudgetList
	sc, err := s.scopeOf(r.Context(), u, ns, &all)
	if err != nil {
		return v, err
	}
	d.Note = sc.Note
	items := all.Items
	list := func(opts ...client.ListOption) error {
		var l v1alpha1.AgentBudgetList
		if err := u.c.List(r.Context(), &l, opts...); err != nil {
			return err
		}
		items = append(items, l.Items...)
		return nil
	}
	for _, n := range sc.Namespaces {
		if err == nil {
			err = list(client.InNamespace(n))
		}
	}
	if err != nil {
		return v, err
	}
	sort.Slice(items, func(i, j int) bool {
		return items[i].Namespace+"/"+items[i].Name < items[j].Namespace+"/"+items[j].Name
	})
	for i := range items {
		d.Rows = append(d.Rows, budgetRowOf(&items[i]))
	}
	return v, nil
}

func budgetRowOf(b *v1alpha1.AgentBudget) budgetRow {
	row := budgetRow{Namespace: b.Namespace, Name: b.Name, Suspended: b.Spec.Suspend, Active: fmt.Sprint(b.Status.ActiveRuns)}
	soft := map[string]bool{}
	for _, l := range b.Spec.Soft {
		soft[string(l)] = true
	}
	if b.Spec.MaxCostUSD != "" {
		money := func(s v1alpha1.USD) int64 {
			m, _ := loop.ParseMoney(string(s))
			return int64(m)
		}
		row.Bars = append(row.Bars, newBar("cost", "maxCostUSD", money(b.Status.ConsumedCostUSD), money(b.Status.ReservedCostUSD),
			money(b.Spec.MaxCostUSD), soft[string(v1alpha1.LimitCost)], func(n int64) string { return show(loop.UnitUSD, n) }))
	}
	if b.Spec.MaxTokens != nil {
		row.Bars = append(row.Bars, newBar("tokens", "maxTokens", b.Status.ConsumedTokens, b.Status.ReservedTokens,
			*b.Spec.MaxTokens, soft[string(v1alpha1.LimitTokens)], func(n int64) string { return fmt.Sprint(n) }))
	}
	if m := b.Spec.MaxConcurrentRuns; m != nil {
		row.Active += fmt.Sprintf(" of %d", *m)
	}
	if w := b.Spec.Window; w != nil {
		row.Window = w.Duration.String()
	}
	if t := b.Status.WindowStart; t != nil {
		row.WindowStart = stamp(t.Time)
	}
	for _, c := range b.Status.Conditions {
		row.Conditions = append(row.Conditions, fact{Name: c.Type + "=" + string(c.Status), Value: safeterm.Clean(c.Reason + ": " + c.Message)})
	}
	return row
}
