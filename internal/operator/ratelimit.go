package operator

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/client-go/util/flowcontrol"
)

// Client limits. A turn costs the API server about three requests (the
// status patch, a transcript chunk, an event), so the adaptive limit gives
// each run in flight room for a few turns a second, between a floor that
// suits an idle operator and a ceiling that leaves the API server's own
// priority and fairness in charge of the rest.
const (
	// DefaultMinQPS is the adaptive limit with few runs in flight.
	DefaultMinQPS = 50
	// DefaultQPSPerRun is what each run in flight adds to the limit.
	DefaultQPSPerRun = 10
	// DefaultMaxQPS is the adaptive limit's ceiling.
	DefaultMaxQPS = 2000
)

// clientMetrics are the API client's rate limit as the operator serves
// it: the waits (agentrun_client_throttle_seconds) and the limit
// (agentrun_client_qps_limit). The operator builds them (newClientMetrics)
// and registers them with the rest it serves (register), with or without
// a limiter.
type clientMetrics struct {
	throttle prometheus.Histogram
	qps      prometheus.Gauge
}

func newClientMetrics() *clientMetrics {
	return &clientMetrics{
		throttle: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "agentrun", Name: "client_throttle_seconds",
			Help: "Time each request of the operator's API client waited for the client-side rate limit (--kube-api-qps, --kube-api-burst); " +
				"a sum that grows means the limit, not the API server, paces the runs.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
		qps: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "agentrun", Name: "client_qps_limit",
			Help: "The operator's API client rate limit in queries per second: fixed by --kube-api-qps, or adapted to the runs in flight.",
		}),
	}
}

func (m *clientMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.throttle, m.qps}
}

// clientLimiter is the operator client's token bucket (a
// flowcontrol.RateLimiter for rest.Config.RateLimiter). It observes every
// wait into agentrun_client_throttle_seconds and, unless its rate is
// fixed, follows the number of runs in flight.
type clientLimiter struct {
	lim *rate.Limiter
	// fixed rate and burst (QPS > 0); otherwise the rate is perRun per run
	// in flight within [min, max], with burst twice the rate unless set.
	fixed            bool
	burst            int
	min, perRun, max float64
	mu               sync.Mutex
	active           func() int
	adapted          time.Time
	metrics          *clientMetrics
}

// newClientLimiter limits to qps with burst (twice qps when burst is 0)
// when qps > 0; when qps is 0 the rate adapts to the runs in flight (see
// setActive). A negative qps means no limit (nil). Its waits and rate are
// observed into m.
func newClientLimiter(qps float32, burst int, m *clientMetrics) *clientLimiter {
	if qps < 0 {
		return nil
	}
	l := &clientLimiter{fixed: qps > 0, burst: burst, min: DefaultMinQPS, perRun: DefaultQPSPerRun, max: DefaultMaxQPS, metrics: m}
	r := float64(qps)
	if !l.fixed {
		r = l.min
	}
	l.lim = rate.NewLimiter(rate.Limit(r), l.burstFor(r))
	l.metrics.qps.Set(r)
	return l
}

func (l *clientLimiter) burstFor(r float64) int {
	if l.burst > 0 {
		return l.burst
	}
	return max(1, int(2*r))
}

// setActive gives the count of runs in flight that an adaptive limit
// follows.
func (l *clientLimiter) setActive(f func() int) {
	l.mu.Lock()
	l.active = f
	l.adapted = time.Time{}
	l.mu.Unlock()
}

// adapt sets the rate from the runs in flight, at most once a second.
func (l *clientLimiter) adapt() {
	if l.fixed {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.active == nil || now.Sub(l.adapted) < time.Second {
		return
	}
	l.adapted = now
	r := min(max(l.perRun*float64(l.active()), l.min), l.max)
	if rate.Limit(r) != l.lim.Limit() {
		l.lim.SetLimitAt(now, rate.Limit(r))
		l.lim.SetBurstAt(now, l.burstFor(r))
		l.metrics.qps.Set(r)
	}
}

func (l *clientLimiter) Wait(ctx context.Context) error {
	l.adapt()
	start := time.Now()
	err := l.lim.Wait(ctx)
	l.metrics.throttle.Observe(time.Since(start).Seconds())
	return err
}

func (l *clientLimiter) Accept() { _ = l.Wait(context.Background()) }

func (l *clientLimiter) TryAccept() bool {
	l.adapt()
	return l.lim.Allow()
}

func (l *clientLimiter) QPS() float32 { return float32(l.lim.Limit()) }

func (l *clientLimiter) Stop() {}

var _ flowcontrol.RateLimiter = (*clientLimiter)(nil)
