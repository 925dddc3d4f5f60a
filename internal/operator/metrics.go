package operator

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// served is every collector the operator serves beside controller-runtime's
// own: the owners' (the reconcilers' metrics for runs, budgets and
// schedules, the budget ledger's writes, the notifier's deliveries: none
// without a notifier), then the API client's rate limit. Each owner builds
// its own; register is the one place they are registered.
func served(client *clientMetrics, owners ...collected) []prometheus.Collector {
	var cs []prometheus.Collector
	for _, o := range owners {
		cs = append(cs, o.Collectors()...)
	}
	return append(cs, client.collectors()...)
}

// collected is what owns collectors; a nil owner of a nil-safe type has
// none.
type collected interface{ Collectors() []prometheus.Collector }

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
