package agentbudget

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/budget"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Metrics is the AgentBudgets' metrics beside the ledger's writes (which
// budget.Ledgers counts): soft limits reached, and each budget's limits,
// consumption, reservations and active runs. The operator builds one set
// (NewMetrics), gives it to the reconciler and registers its Collectors
// with the rest it serves. A nil *Metrics counts nothing.
type Metrics struct {
	softLimitReached *prometheus.CounterVec
	// gauges reports each AgentBudget from the informer cache at each
	// scrape.
	gauges *budgetCollector
}

// NewMetrics builds the budgets' metrics, registered nowhere.
func NewMetrics() *Metrics {
	return &Metrics{
		softLimitReached: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Subsystem: "budget", Name: "soft_limit_reached_total",
			Help: "Soft AgentBudget limits that reached a threshold in a window, by limit (maxCostUSD, maxTokens, maxConcurrentRuns) and percent (80 or 100).",
		}, []string{"limit", "percent"}),
		gauges: &budgetCollector{
			limit: prometheus.NewDesc("agentrun_budget_limit", "An AgentBudget's limit per window, by ceiling (cost in US dollars, tokens, concurrentRuns); absent for a ceiling it does not set.",
				[]string{"namespace", "budget", "ceiling"}, nil),
			consumed: prometheus.NewDesc("agentrun_budget_consumed", "What an AgentBudget's runs have consumed in its window, by ceiling (cost in US dollars, tokens).",
				[]string{"namespace", "budget", "ceiling"}, nil),
			reserved: prometheus.NewDesc("agentrun_budget_reserved", "What an AgentBudget's runs hold reserved for steps in flight, by ceiling (cost in US dollars, tokens).",
				[]string{"namespace", "budget", "ceiling"}, nil),
			active: prometheus.NewDesc("agentrun_budget_active_runs", "Runs an AgentBudget counts as active.",
				[]string{"namespace", "budget"}, nil),
		},
	}
}

// Collectors is every collector of the set, for the operator to register
// with the others it serves. A nil set has none.
func (m *Metrics) Collectors() []prometheus.Collector {
	if m == nil {
		return nil
	}
	return []prometheus.Collector{m.gauges, m.softLimitReached}
}

// softLimit counts a soft AgentBudget limit reaching a threshold.
func (m *Metrics) softLimit(limit, percent string) {
	if m == nil {
		return
	}
	m.softLimitReached.WithLabelValues(limit, percent).Inc()
}

// watchBudgets makes the gauges of AgentBudgets read r (the manager's
// cache).
func (m *Metrics) watchBudgets(r client.Reader) {
	if m == nil {
		return
	}
	m.gauges.watch(r)
}

// MaxBudgetSeries bounds the AgentBudgets the budget gauges report (the
// first, by namespace and name): budgets are written by namespace
// administrators, not run authors, and an installation has few.
const MaxBudgetSeries = 200

type budgetCollector struct {
	limit, consumed, reserved, active *prometheus.Desc

	mu     sync.Mutex
	reader client.Reader
}

func (c *budgetCollector) watch(r client.Reader) {
	c.mu.Lock()
	c.reader = r
	c.mu.Unlock()
}

func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.limit
	ch <- c.consumed
	ch <- c.reserved
	ch <- c.active
}

func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	r := c.reader
	c.mu.Unlock()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list := &v1alpha1.AgentBudgetList{}
	if err := r.List(ctx, list); err != nil {
		return
	}
	items := list.Items
	slices.SortFunc(items, func(a, b v1alpha1.AgentBudget) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for i := range items[:min(len(items), MaxBudgetSeries)] {
		b := &items[i]
		gauge := func(d *prometheus.Desc, v float64, ceiling ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{b.Namespace, b.Name}, ceiling...)...)
		}
		if b.Spec.MaxCostUSD != "" {
			gauge(c.limit, dollars(b.Spec.MaxCostUSD), "cost")
		}
		if b.Spec.MaxTokens != nil {
			gauge(c.limit, float64(*b.Spec.MaxTokens), "tokens")
		}
		if b.Spec.MaxConcurrentRuns != nil {
			gauge(c.limit, float64(*b.Spec.MaxConcurrentRuns), "concurrentRuns")
		}
		st := &b.Status
		gauge(c.consumed, dollars(st.ConsumedCostUSD), "cost")
		gauge(c.consumed, float64(st.ConsumedTokens), "tokens")
		gauge(c.reserved, dollars(st.ReservedCostUSD), "cost")
		gauge(c.reserved, float64(st.ReservedTokens), "tokens")
		gauge(c.active, float64(st.ActiveRuns))
	}
}

// dollars is a USD amount as a float for a gauge (0 when empty or not a
// decimal).
func dollars(u v1alpha1.USD) float64 { return float64(budget.Money(u)) / 1e12 }
