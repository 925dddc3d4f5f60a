package controller

import (
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gathered is reg's families by name.
func gathered(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// Issue 28: the domain metrics are a set the operator builds and
// registers where it serves metrics (internal/operator registers its
// Collectors, and proves a second set is refused whole); what the
// reconcilers record is gathered from it.
func TestMetrics_countAndGather(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics()
	reg.MustRegister(m.Collectors()...)

	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "r"}}
	run.Spec.Model = v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted, Name: "m1"}}
	run.Status.Outcome = v1alpha1.OutcomeCompleted
	m.record(change{run: run, notes: []loop.Note{{Kind: loop.NoteTurnStarted}}, inputTokens: 100, outputTokens: 7, ended: true})
	m.panicked("work")

	fams := gathered(t, reg)
	labels := map[string]string{"namespace": "team-a", "provider": "scripted", "model": "m1"}
	g.Expect(sample(fams, "agentrun_turns_total", labels)).To(Equal(1.0))
	labels["type"] = "output"
	g.Expect(sample(fams, "agentrun_tokens_total", labels)).To(Equal(7.0))
	g.Expect(sample(fams, "agentrun_runs_finished_total", map[string]string{"namespace": "team-a", "provider": "scripted", "model": "m1",
		"outcome": "Completed", "reason": "Completed", "template": ""})).To(Equal(1.0))
	g.Expect(sample(fams, "agentrun_panics_total", map[string]string{"where": "work"})).To(Equal(1.0))

	// Another set counts on its own, from zero.
	other := NewMetrics()
	other.panicked("work")
	g.Expect(sample(gathered(t, reg), "agentrun_panics_total", map[string]string{"where": "work"})).To(Equal(1.0))
}

// A reconciler built without metrics (a test's) counts nothing and does
// not fail: every method of a nil *Metrics does nothing.
func TestMetrics_nilCountsNothing(t *testing.T) {
	var m *Metrics
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "r"}}
	run.Status.Outcome = v1alpha1.OutcomeError
	m.record(change{run: run, notes: []loop.Note{{Kind: loop.NoteTurnStarted}}, inputTokens: 1, ended: true})
	m.endedError(run)
	m.panicked("reconcile")
	m.archiveWrote()
	m.archiveFailed()
	if got := m.NamespaceLabel("team-a"); got != "" {
		t.Errorf("a nil set labels a namespace %q", got)
	}
	m.unclaimed(map[string]int{"a": 1})
	m.watchRuns(nil, nil)
	if obs := m.calls("scripted", "m1"); obs != nil {
		t.Errorf("a nil set observes calls: %T", obs)
	}
	if cs := m.Collectors(); len(cs) != 0 {
		t.Errorf("a nil set has %d collectors", len(cs))
	}
}

// A model call that billed more than it reserved (loop's
// CostAboveReservation note) is counted in dollars, by the run's
// namespace, provider and model, as the save that recorded it is saved.
func TestMetrics_dollarsAboveAReservationAreCounted(t *testing.T) {
	m := NewMetrics()
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "r"}}
	run.Spec.Model = v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: "scripted", Name: "m1"}}
	over := loop.Note{Kind: loop.NoteCostAboveReservation, Warning: true, Amount: loop.MustMoney("0.25")}
	m.record(change{run: run, notes: []loop.Note{over, over, {Kind: loop.NoteTurnStarted}}})
	labels := map[string]string{"namespace": nsLabel(m, "team-a"), "provider": "scripted", "model": m.labels.model("m1")}
	if got := sample(scrape(t, m), "agentrun_reservation_overrun_usd_total", labels); got != 0.5 {
		t.Fatalf("agentrun_reservation_overrun_usd_total = %v, want 0.5", got)
	}
}
