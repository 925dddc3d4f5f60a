package operator

import (
	"context"
	"testing"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// throttled reads agentrun_client_throttle_seconds: waits observed and
// their sum.
func throttled(t *testing.T, l *clientLimiter) (count uint64, sum float64) {
	t.Helper()
	var m dto.Metric
	if err := l.metrics.throttle.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// TestClientLimiter_throttlingShowsInTheMetric: a client limited to 2
// requests a second (burst 1) makes five requests to the API server; each
// is observed, and the four that waited add about two seconds.
func TestClientLimiter_throttlingShowsInTheMetric(t *testing.T) {
	cfg := rest.CopyConfig(adminCfg)
	l := newClientLimiter(2, 1, newClientMetrics())
	cfg.RateLimiter = l
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	count0, sum0 := throttled(t, l)
	for range 5 {
		if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	count, sum := throttled(t, l)
	if got := count - count0; got < 5 {
		t.Fatalf("%d waits observed, want at least 5", got)
	}
	if waited := sum - sum0; waited < 1.5 {
		t.Fatalf("the throttled requests waited %.2fs in all, want about 2s", waited)
	}
}

// TestClientLimiter_adaptsToRunsInFlight: without a fixed rate, the limit
// is DefaultQPSPerRun per run in flight between its floor and ceiling; a
// fixed rate stays.
func TestClientLimiter_adaptsToRunsInFlight(t *testing.T) {
	for _, tc := range []struct {
		qps    float32
		burst  int
		active int
		want   float32
		wantB  int
	}{
		{qps: 0, active: 0, want: DefaultMinQPS, wantB: 2 * DefaultMinQPS},
		{qps: 0, active: 100, want: 100 * DefaultQPSPerRun, wantB: 200 * DefaultQPSPerRun},
		{qps: 0, burst: 7, active: 100, want: 100 * DefaultQPSPerRun, wantB: 7},
		{qps: 0, active: 100000, want: DefaultMaxQPS, wantB: 2 * DefaultMaxQPS},
		{qps: 20, burst: 30, active: 100, want: 20, wantB: 30},
	} {
		l := newClientLimiter(tc.qps, tc.burst, newClientMetrics())
		l.setActive(func() int { return tc.active })
		if !l.TryAccept() {
			t.Fatalf("%+v: the first request was refused", tc)
		}
		if l.QPS() != tc.want || l.lim.Burst() != tc.wantB {
			t.Errorf("%+v: qps %v burst %d, want %v and %d", tc, l.QPS(), l.lim.Burst(), tc.want, tc.wantB)
		}
	}
	if newClientLimiter(-1, 0, newClientMetrics()) != nil {
		t.Error("a negative qps should set no limiter")
	}
}
