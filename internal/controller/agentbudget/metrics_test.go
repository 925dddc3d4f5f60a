package agentbudget

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/testenv"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Issue 33.1: an AgentBudget's gauges, read from the manager's cache at
// each scrape.
func TestMetrics_budgetGauges(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	m := NewMetrics()
	testenv.StartManager(t, cluster.Config, ns, func(mgr ctrl.Manager) error {
		return NewReconciler(Config{Base: reconcilers.Base{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}, Metrics: m}).SetupWithManager(mgr)
	})
	b := &v1alpha1.AgentBudget{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Namespace: ns},
		Spec: v1alpha1.AgentBudgetSpec{MaxCostUSD: "5", MaxTokens: ptr.To(int64(100000)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}}
	if err := cluster.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP agentrun_budget_limit An AgentBudget's limit per window, by ceiling (cost in US dollars, tokens, concurrentRuns); absent for a ceiling it does not set.
# TYPE agentrun_budget_limit gauge
agentrun_budget_limit{budget="team-a",ceiling="cost",namespace="NS"} 5
agentrun_budget_limit{budget="team-a",ceiling="tokens",namespace="NS"} 100000
# HELP agentrun_budget_reserved What an AgentBudget's runs hold reserved for steps in flight, by ceiling (cost in US dollars, tokens).
# TYPE agentrun_budget_reserved gauge
agentrun_budget_reserved{budget="team-a",ceiling="cost",namespace="NS"} 0
agentrun_budget_reserved{budget="team-a",ceiling="tokens",namespace="NS"} 0
`
	want = strings.ReplaceAll(want, "NS", ns)
	NewWithT(t).Eventually(func() error {
		return testutil.CollectAndCompare(m.gauges, strings.NewReader(want), "agentrun_budget_limit", "agentrun_budget_reserved")
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
}

// A reconciler built without metrics (a test's) counts nothing and does
// not fail: every method of a nil *Metrics does nothing.
func TestMetrics_nilCountsNothing(t *testing.T) {
	var m *Metrics
	m.softLimit("maxCostUSD", "80")
	m.watchBudgets(nil)
	if cs := m.Collectors(); len(cs) != 0 {
		t.Errorf("a nil set has %d collectors", len(cs))
	}
}
