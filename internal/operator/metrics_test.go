package operator

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/internal/budget"
	"github.com/agentrun/agentrun/internal/controller"
	"github.com/agentrun/agentrun/internal/controller/agentbudget"
	"github.com/agentrun/agentrun/internal/controller/agentschedule"
	"github.com/agentrun/agentrun/internal/notify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// everything is the operator's whole set, a notifier's included.
func everything() []prometheus.Collector {
	n := notify.New(func(context.Context, string) (notify.Target, error) { return notify.Target{}, nil })
	return served(newClientMetrics(), controller.NewMetrics(), budget.NewLedgers(), agentbudget.NewMetrics(), agentschedule.NewMetrics(nil), n)
}

// families is the names of the families reg holds.
func families(t *testing.T, reg prometheus.Gatherer) []string {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fams {
		out = append(out, f.GetName())
	}
	return out
}

// qpsLimit is agentrun_client_qps_limit at v in the text format.
func qpsLimit(v int) string {
	return `# HELP agentrun_client_qps_limit The operator's API client rate limit in queries per second: fixed by --kube-api-qps, or adapted to the runs in flight.
# TYPE agentrun_client_qps_limit gauge
agentrun_client_qps_limit ` + strconv.Itoa(v) + "\n"
}

// Issue 28, 44.6: the operator registers every collector it serves in one
// place, where it serves metrics, and unregisters them when it stops, so
// that one process can start the operator again; a registry holds one set
// at a time, and a second is refused whole.
func TestRegister_allOrNoneThenAgain(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	first := everything()
	unregister, err := register(reg, first)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"agentrun_client_qps_limit", "agentrun_client_throttle_seconds"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 1 {
			t.Errorf("%s: %d series (%v), want 1", name, n, err)
		}
	}

	// A second set (an operator started while the last has not stopped)
	// is refused, and leaves none of itself there.
	second := everything()
	second[len(second)-1].(prometheus.Gauge).Set(42) // its agentrun_client_qps_limit
	if _, err := register(reg, second); !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		t.Fatalf("registering a second set: %v, want AlreadyRegisteredError", err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(qpsLimit(0)), "agentrun_client_qps_limit"); err != nil {
		t.Errorf("the registry does not serve the first set alone: %v", err)
	}

	unregister()
	if left := families(t, reg); len(left) != 0 {
		t.Errorf("still registered after unregister: %v", left)
	}
	// The next operator of the process registers its own set.
	unregister, err = register(reg, second)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(qpsLimit(42)), "agentrun_client_qps_limit"); err != nil {
		t.Error(err)
	}
	unregister()
}

// Issue 33.6: every series the operator serves is described in
// docs/observability.md's table (which hack/promrules reads to check that
// every alert and dashboard query names an exported series).
func TestMetrics_everySeriesIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	fqName := regexp.MustCompile(`fqName: "([a-z_:]+)"`)
	n := 0
	for _, c := range everything() {
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("no name in %s", d)
			}
			n++
			if !strings.Contains(string(doc), "`"+m[1]+"`") {
				t.Errorf("%s is exported but docs/observability.md does not describe it", m[1])
			}
		}
	}
	if n < 23 {
		t.Errorf("only %d series described by the collectors", n)
	}
}
