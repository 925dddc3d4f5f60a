package controller

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/notify"
	. "github.com/onsi/gomega"
)

// notifyingOperator starts an operator whose notifier posts to the URL in
// the Secret agentrun-webhook of namespace ops, tries each post once and
// looks for undelivered messages every 100ms. stop ends both.
func notifyingOperator(t *testing.T, ops string) (stop func()) {
	t.Helper()
	var n *notify.Notifier
	_, stopManager := startWith(t, &kits{tools: newTools()}, managerSetup{config: func(c *Config) {
		res := &notify.SecretResolver{Reader: c.APIReader, Default: notify.SecretKey{Namespace: ops, Name: "agentrun-webhook", Key: "url"},
			Client: &http.Client{}}
		n = notify.New(res.Resolve)
		n.Attempts, n.Rescan = 1, 100*time.Millisecond
		n.Pending, n.Delivered = PendingNotifications(c.Client, c.APIReader, c.Keys), RecordDelivered(c.Client)
		c.Notifier = n
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Start(ctx) }()
	return func() { cancel(); <-done; stopManager() }
}

// receiver is a webhook on loopback that refuses every post while down
// and records the Finished messages it accepts, by run.
type receiver struct {
	mu      sync.Mutex
	down    bool
	refused int
	got     []notify.Message
}

func (h *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down {
		h.refused++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var m notify.Message
	_ = json.Unmarshal(body, &m)
	h.got = append(h.got, m)
}

// finished lists "run outcome id" of every Finished message accepted, in
// order.
func (h *receiver) finished() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, m := range h.got {
		if m.Event == notify.EventFinished {
			out = append(out, m.Run+" "+m.Outcome+" "+m.ID)
		}
	}
	sort.Strings(out)
	return out
}

// overBudget is a run of ns that ends BudgetExhausted: its model asks for
// a second turn, and it may have one.
func overBudget(ns, name string, labels map[string]string) *runBuilder {
	b := makeRun(ns, name).maxTurns(1).readTool("lookup").calls("lookup", `{}`).answer("done")
	b.r.Labels = labels
	return b
}

// Issue 46 item 6: an AgentRunPolicy tells the ends of the runs its
// notify rules pick, by label (team=billing) and by schedule
// (nightly-reconcile), and not of the runs they do not pick; a run whose
// own spec.notify and a rule both name its outcome is told once, also
// over many rescans.
func TestNotifications_aPolicyRuleTellsTheEndsOfTheRunsItPicksByLabelAndSchedule(t *testing.T) {
	ops := namespace(t)
	h := &receiver{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	webhookSecret(t, ops, "agentrun-webhook", "url", srv.URL)
	ns, _ := governedNamespace(t, v1alpha1.AgentRunPolicySpec{Notify: []v1alpha1.NotifyRule{
		{Outcomes: []v1alpha1.Outcome{v1alpha1.OutcomeBudgetExhausted, v1alpha1.OutcomeToolFailure, v1alpha1.OutcomeError},
			RunSelector: &v1alpha1.RunSelector{MatchLabels: map[string]v1alpha1.LabelValue{"team": "billing"}}},
		{Outcomes: []v1alpha1.Outcome{v1alpha1.OutcomeBudgetExhausted}, Schedules: []string{"nightly-reconcile"}},
	}})
	defer notifyingOperator(t, ops)()

	runs := []*v1alpha1.AgentRun{
		overBudget(ns, "billing", map[string]string{"team": "billing"}).create(t),
		overBudget(ns, "support", map[string]string{"team": "support"}).create(t),
		overBudget(ns, "nightly", map[string]string{v1alpha1.LabelSchedule: "nightly-reconcile"}).create(t),
		overBudget(ns, "weekly", map[string]string{v1alpha1.LabelSchedule: "weekly"}).create(t),
		overBudget(ns, "both", map[string]string{"team": "billing"}).with(func(s *v1alpha1.AgentRunSpec) {
			s.Notify = &v1alpha1.NotifySpec{Outcomes: []v1alpha1.Outcome{v1alpha1.OutcomeBudgetExhausted}}
		}).create(t),
	}
	want := map[string]bool{"billing": true, "nightly": true, "both": true}
	var told []string
	for _, run := range runs {
		if got := waitOutcome(t, run, 20*time.Second).Status.Outcome; got != v1alpha1.OutcomeBudgetExhausted {
			t.Fatalf("%s ended %s, want BudgetExhausted", run.Name, got)
		}
		if want[run.Name] {
			told = append(told, run.Name+" BudgetExhausted "+string(run.UID)+"/"+notify.EventFinished)
		}
	}
	sort.Strings(told)
	g := NewWithT(t)
	g.Eventually(h.finished, 20*time.Second, 20*time.Millisecond).Should(Equal(told))
	g.Consistently(h.finished, time.Second, 50*time.Millisecond).Should(Equal(told), "the messages over ten rescans")
	// Each told run records its message; the others have none.
	notes := map[string]string{}
	for _, run := range runs {
		if want[run.Name] {
			notes[run.Name] = notify.EventFinished
		}
	}
	g.Eventually(func() map[string]string {
		got := map[string]string{}
		for _, run := range runs {
			if a := get(t, run).Annotations[v1alpha1.AnnotationNotified]; a != "" {
				got[run.Name] = a
			}
		}
		return got
	}, 10*time.Second, 20*time.Millisecond).Should(Equal(notes), v1alpha1.AnnotationNotified)
}

// Issue 46 item 6: the end of a run made from a template whose notify
// names its outcome, which the webhook did not take before the operator
// stopped, is delivered by the next operator, which reads the run's
// resolved spec (the run's own spec names only the template).
func TestNotifications_aTemplatedRunsEndLeftBeforeARestartIsDeliveredAfterIt(t *testing.T) {
	ops, ns := namespace(t), namespace(t)
	h := &receiver{down: true}
	srv := httptest.NewServer(h)
	defer srv.Close()
	webhookSecret(t, ops, "agentrun-webhook", "url", srv.URL)
	makeTemplate(t, ns, "nightly", makeRun(ns, "").answer("All done.").with(func(s *v1alpha1.AgentRunSpec) {
		s.Notify = &v1alpha1.NotifySpec{Outcomes: []v1alpha1.Outcome{v1alpha1.OutcomeCompleted}}
	}))
	g := NewWithT(t)

	// The first operator: the webhook is down when the run ends.
	stop := notifyingOperator(t, ops)
	run := runOf(t, ns, "nightly-1", "nightly")
	expectOutcome(t, waitOutcome(t, run, 20*time.Second), v1alpha1.OutcomeCompleted, "")
	g.Eventually(func() int { h.mu.Lock(); defer h.mu.Unlock(); return h.refused }, 10*time.Second, 20*time.Millisecond).
		Should(BeNumerically(">=", 1), "the post refused before the restart")
	stop()

	// The next one delivers it, once.
	h.mu.Lock()
	h.down = false
	h.mu.Unlock()
	defer notifyingOperator(t, ops)()
	want := []string{"nightly-1 Completed " + string(run.UID) + "/" + notify.EventFinished}
	g.Eventually(h.finished, 20*time.Second, 20*time.Millisecond).Should(Equal(want), "the message after the restart")
	g.Consistently(h.finished, time.Second, 50*time.Millisecond).Should(Equal(want), "the message over ten rescans")
	got := get(t, run)
	if got.Spec.Notify != nil {
		t.Errorf("the run's own spec has notify %+v; the test needs it from the template only", got.Spec.Notify)
	}
	g.Eventually(func() string { return get(t, run).Annotations[v1alpha1.AnnotationNotified] }, 10*time.Second, 20*time.Millisecond).
		Should(Equal(notify.EventFinished), v1alpha1.AnnotationNotified)
}
