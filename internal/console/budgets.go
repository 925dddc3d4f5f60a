package console

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/safeterm"
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

// budgets lists the AgentBudgets the user may list, each with its bars,
// live.
func (s *Server) budgets(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	ns := r.URL.Query().Get("namespace")
	q := url.Values{}
	if ns != "" {
		q.Set("namespace", ns)
	}
	v := view{Title: "Budgets", Page: "budgets", Live: "/budgets?" + join(q.Encode(), "fragment=1"),
		Events: "/events?" + join(q.Encode(), "kind=budgets")}
	return listPage(r, s, u, ns, v,
		func() *v1alpha1.AgentBudgetList { return &v1alpha1.AgentBudgetList{} },
		func(l *v1alpha1.AgentBudgetList) []v1alpha1.AgentBudget { return l.Items },
		budgetRowOf)
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
