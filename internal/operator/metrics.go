package operator

import (
	"fmt"

	"github.com/agentrun/agentrun/internal/controller"
	"github.com/agentrun/agentrun/internal/notify"
	"github.com/prometheus/client_golang/prometheus"
)

// served is every collector the operator serves beside controller-runtime's
// own: the reconcilers' (runs, budgets, schedules), the notifier's
// deliveries (none without a notifier) and the API client's rate limit.
// Each owner builds its own; register is the one place they are
// registered.
func served(domain *controller.Metrics, n *notify.Notifier, client *clientMetrics) []prometheus.Collector {
	var cs []prometheus.Collector
	cs = append(cs, domain.Collectors()...)
	cs = append(cs, n.Collectors()...)
	return append(cs, client.collectors()...)
}

// register registers cs with reg (controller-runtime's metrics.Registry),
// all or none: on an error (reg holds another operator's: one of this
// process has not stopped) those it registered are unregistered again.
// unregister removes them when the operator stops, so that the process can
// start the operator again (Options.AgainInProcess) with its own.
func register(reg prometheus.Registerer, cs []prometheus.Collector) (unregister func(), err error) {
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("registering the operator's metrics: %w", err)
		}
	}
	return func() {
		for _, c := range cs {
			reg.Unregister(c)
		}
	}, nil
}
