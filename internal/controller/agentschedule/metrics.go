package agentschedule

import "github.com/prometheus/client_golang/prometheus"

// Metrics is the AgentSchedules' metrics: the runs they created and the
// times they missed, by the schedule's namespace. The operator builds one
// set (NewMetrics), gives it to the reconciler and registers its
// Collectors with the rest it serves. A nil *Metrics counts nothing.
type Metrics struct {
	runsCreated, timesMissed *prometheus.CounterVec
	// namespace is the namespace label of a schedule's namespace.
	namespace func(ns string) string
}

// NewMetrics builds the schedules' metrics, registered nowhere. namespace
// gives the namespace label of a namespace: the operator passes the run
// metrics' (controller.Metrics.NamespaceLabel), so that both count the
// same bounded set of namespaces; nil labels each namespace by its name.
func NewMetrics(namespace func(ns string) string) *Metrics {
	if namespace == nil {
		namespace = func(ns string) string { return ns }
	}
	return &Metrics{
		namespace: namespace,
		runsCreated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Subsystem: "schedule", Name: "runs_created_total",
			Help: "AgentRuns that AgentSchedules created, by the schedule's namespace.",
		}, []string{"namespace"}),
		timesMissed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Subsystem: "schedule", Name: "missed_total",
			Help: "Scheduled times of AgentSchedules that passed without a run (the operator was down or the schedule suspended, and only the latest time runs; or the time was older than startingDeadlineSeconds), by the schedule's namespace.",
		}, []string{"namespace"}),
	}
}

// Collectors is every collector of the set, for the operator to register
// with the others it serves. A nil set has none.
func (m *Metrics) Collectors() []prometheus.Collector {
	if m == nil {
		return nil
	}
	return []prometheus.Collector{m.runsCreated, m.timesMissed}
}

// missed counts n scheduled times of a schedule in namespace ns that
// passed without a run.
func (m *Metrics) missed(ns string, n int64) {
	if m == nil {
		return
	}
	m.timesMissed.WithLabelValues(m.namespace(ns)).Add(float64(n))
}

// created counts a run a schedule in namespace ns created.
func (m *Metrics) created(ns string) {
	if m == nil {
		return
	}
	m.runsCreated.WithLabelValues(m.namespace(ns)).Inc()
}
