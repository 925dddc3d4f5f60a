package agentschedule

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller/controllertest"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/schedtime"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/agentrun/agentrun/internal/transcript"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// fakeClock is the time a test's schedule reconcilers read; the test moves
// it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// get reads obj (a schedule, a run) as the API server has it now.
func get[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	return testenv.Get(t, cluster.Client, obj)
}

// scheduler is a schedule reconciler the test calls itself, against the
// API server directly (no cache), at the fake clock's time, with metrics of
// its own.
func scheduler(clock *fakeClock) (*Reconciler, *events.FakeRecorder) {
	rec := events.NewFakeRecorder(200)
	return NewReconciler(Config{Base: reconcilers.Base{Client: cluster.Client, APIReader: cluster.Client, Recorder: rec, Clock: clock.now}, Metrics: NewMetrics(nil)}), rec
}

// reconcileSchedule reconciles s once and fails the test on an error.
func reconcileSchedule(t *testing.T, r *Reconciler, s *v1alpha1.AgentSchedule) ctrl.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)})
	if err != nil {
		t.Fatalf("reconciling %s: %v", s.Name, err)
	}
	return res
}

// makeSchedule creates an every-minute schedule of runs made from a
// template, changed by edit, and returns it with the first scheduled time
// after its creation.
func makeSchedule(t *testing.T, ns, name string, edit func(*v1alpha1.AgentScheduleSpec)) (*v1alpha1.AgentSchedule, time.Time) {
	t.Helper()
	s := &v1alpha1.AgentSchedule{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.AgentScheduleSpec{Schedule: "* * * * *", TimeZone: ptr.To("UTC"),
			RunTemplate: v1alpha1.ScheduledRun{
				Metadata:    v1alpha1.ScheduledRunMetadata{Labels: map[string]string{"team": "payments"}, Annotations: map[string]string{"owner": "ops"}},
				TemplateRef: &v1alpha1.TemplateRef{Name: "refund-investigator"},
				Parameters:  []v1alpha1.ParameterValue{{Name: "ticket", Value: "T-1"}},
			}}}
	if edit != nil {
		edit(&s.Spec)
	}
	if err := cluster.Client.Create(context.Background(), s); err != nil {
		t.Fatalf("creating schedule %s: %v", name, err)
	}
	// A schedule left behind would create runs for a later test's
	// scheduler, which a later test's operator would then drive.
	t.Cleanup(func() {
		if err := cluster.Client.Delete(context.Background(), s); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting schedule %s: %v", name, err)
		}
	})
	return s, s.CreationTimestamp.Truncate(time.Minute).Add(time.Minute)
}

// scheduledRuns lists the runs labelled with the schedule's name.
func scheduledRuns(t *testing.T, s *v1alpha1.AgentSchedule) []v1alpha1.AgentRun {
	t.Helper()
	var l v1alpha1.AgentRunList
	if err := cluster.Client.List(context.Background(), &l, client.InNamespace(s.Namespace), client.MatchingLabels{v1alpha1.LabelSchedule: s.Name}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func runNames(runs []v1alpha1.AgentRun) []string {
	out := make([]string, 0, len(runs))
	for _, r := range runs {
		out = append(out, r.Name)
	}
	return out
}

func nameAt(s *v1alpha1.AgentSchedule, at time.Time) string {
	return s.Name + "-" + strconv.FormatInt(at.Unix()/60, 10)
}

func readyOf(t *testing.T, s *v1alpha1.AgentSchedule) *metav1.Condition {
	t.Helper()
	c := apimeta.FindStatusCondition(get(t, s).Status.Conditions, v1alpha1.ScheduleConditionReady)
	if c == nil {
		t.Fatalf("schedule %s has no Ready condition", s.Name)
	}
	return c
}

// finish ends a run as the AgentRun reconciler would have, at end.
func finish(t *testing.T, run *v1alpha1.AgentRun, o loop.Outcome, end time.Time) {
	t.Helper()
	controllertest.EndRun(t, cluster.Client, get(t, run), loop.State{Turn: 1, Phase: loop.PhaseDone, Outcome: o, Reason: "ended " + string(o)},
		loop.Convergence{}, end, func(st *v1alpha1.AgentRunStatus) { st.CompletionTime = &metav1.Time{Time: end.Truncate(time.Second)} })
}

// A scheduled time gets one run, named after it, carrying the schedule's
// label, the time, the template's metadata and an owner reference; a
// second reconciler at the same moment (an operator restarted before the
// first wrote its status) finds it and creates no other.
func TestSchedule_oneRunPerTimeAcrossRestarts(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	s, first := makeSchedule(t, ns, "nightly", nil)
	clock := &fakeClock{t: first.Add(-10 * time.Second)}
	r1, rec := scheduler(clock)

	res := reconcileSchedule(t, r1, s)
	if n := len(scheduledRuns(t, s)); n != 0 {
		t.Fatalf("%d runs before the first scheduled time", n)
	}
	if res.RequeueAfter != 10*time.Second {
		t.Fatalf("requeue after %s, want 10s (the next scheduled time)", res.RequeueAfter)
	}

	clock.set(first.Add(2 * time.Second))
	reconcileSchedule(t, r1, s)
	runs := scheduledRuns(t, s)
	if len(runs) != 1 || runs[0].Name != nameAt(s, first) {
		t.Fatalf("runs %v, want only %s", runNames(runs), nameAt(s, first))
	}
	run := runs[0]
	if !metav1.IsControlledBy(&run, get(t, s)) || run.Labels["team"] != "payments" || run.Annotations["owner"] != "ops" ||
		run.Annotations[v1alpha1.AnnotationScheduledTime] != first.UTC().Format(time.RFC3339) ||
		run.Spec.TemplateRef == nil || run.Spec.TemplateRef.Name != "refund-investigator" || len(run.Spec.Parameters) != 1 {
		t.Fatalf("the run is not the template's: %+v %+v", run.ObjectMeta, run.Spec)
	}
	got := get(t, s)
	if got.Status.LastScheduleTime == nil || !got.Status.LastScheduleTime.Equal(&metav1.Time{Time: first}) ||
		got.Status.ActiveCount != 1 || got.Status.Active[0].Name != run.Name || got.Status.ObservedGeneration != got.Generation {
		t.Fatalf("status %+v", got.Status)
	}
	if !strings.Contains(testenv.Drain(rec), "Scheduled Created run "+run.Name) {
		t.Fatal("no Scheduled event for the run")
	}

	// The status write is lost, as when the operator stops between
	// creating the run and recording it.
	got.Status.LastScheduleTime = nil
	if err := cluster.Client.Status().Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	r2, _ := scheduler(clock)
	var wg sync.WaitGroup
	for _, r := range []*Reconciler{r2, r1} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)})
		}()
	}
	wg.Wait()
	reconcileSchedule(t, r2, s) // one more after any conflict of the two
	if runs := scheduledRuns(t, s); len(runs) != 1 {
		t.Fatalf("runs %v after the restart, want one", runNames(runs))
	}
	// Counted by whichever of the two created it, once.
	created := func(r *Reconciler) float64 {
		return testutil.ToFloat64(r.Metrics.runsCreated.WithLabelValues(ns))
	}
	if got := created(r1) + created(r2); got != 1 {
		t.Fatalf("runs created counted %v, want 1", got)
	}
	if st := get(t, s).Status; st.LastScheduleTime == nil || !st.LastScheduleTime.Time.Equal(first) {
		t.Fatalf("lastScheduleTime %v, want %s", st.LastScheduleTime, first)
	}
}

// Forbid skips a time while a run of the schedule has not ended, and runs
// it once that run ended, as a CronJob does.
func TestSchedule_forbidSkipsWhileARunIsActive(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	s, first := makeSchedule(t, ns, "forbid", func(sp *v1alpha1.AgentScheduleSpec) { sp.ConcurrencyPolicy = v1alpha1.ForbidConcurrent })
	clock := &fakeClock{t: first.Add(time.Second)}
	r, rec := scheduler(clock)
	reconcileSchedule(t, r, s)
	clock.set(first.Add(time.Minute + time.Second))
	reconcileSchedule(t, r, s)
	if runs := scheduledRuns(t, s); len(runs) != 1 {
		t.Fatalf("runs %v while the first is active, want only the first", runNames(runs))
	}
	if ev := testenv.Drain(rec); !strings.Contains(ev, "SkippedConcurrent") || !strings.Contains(ev, nameAt(s, first)) {
		t.Fatalf("no SkippedConcurrent event naming the active run: %q", ev)
	}
	finish(t, &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nameAt(s, first)}}, loop.Completed, first.Add(time.Minute+5*time.Second))
	clock.set(first.Add(time.Minute + 10*time.Second))
	reconcileSchedule(t, r, s)
	runs := scheduledRuns(t, s)
	if len(runs) != 2 {
		t.Fatalf("runs %v once the first ended, want two", runNames(runs))
	}
	st := get(t, s).Status
	if st.ActiveCount != 1 || st.Active[0].Name != nameAt(s, first.Add(time.Minute)) || st.LastSuccessfulTime == nil {
		t.Fatalf("status %+v", st)
	}
}

// Replace cancels the run still going when the next time comes, with the
// annotation that makes its reason name the schedule (the AgentRun
// reconciler's cancelReason), and creates the new run; the run's spec is
// runTemplate.spec.
func TestSchedule_replaceCancelsTheActiveRun(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	spec := v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{Goal: "Wait for a person.", Budget: v1alpha1.BudgetSpec{MaxTurns: 3},
		Model: v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted}, Script: []v1alpha1.ScriptStep{{Content: "Done."}}}}}
	var tpl v1alpha1.TemplateRunSpec
	raw, _ := json.Marshal(spec)
	if err := json.Unmarshal(raw, &tpl); err != nil {
		t.Fatal(err)
	}
	s, first := makeSchedule(t, ns, "replace", func(sp *v1alpha1.AgentScheduleSpec) {
		sp.ConcurrencyPolicy = v1alpha1.ReplaceConcurrent
		sp.RunTemplate.TemplateRef, sp.RunTemplate.Parameters, sp.RunTemplate.Spec = nil, nil, &tpl
	})
	clock := &fakeClock{t: first.Add(time.Second)}
	r, rec := scheduler(clock)
	reconcileSchedule(t, r, s)
	old := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nameAt(s, first)}}
	if got := get(t, old); got.Spec.Goal != spec.Goal || got.Spec.Budget.MaxTurns != 3 || got.Spec.Cancel {
		t.Fatalf("the run's spec is not runTemplate.spec: %+v", got.Spec)
	}

	clock.set(first.Add(time.Minute + time.Second))
	reconcileSchedule(t, r, s)
	if got := get(t, old); !got.Spec.Cancel || got.Annotations[v1alpha1.AnnotationCancelledBy] != "AgentSchedule/replace" {
		t.Fatalf("the replaced run: spec.cancel %v, cancelled-by %q; want true, AgentSchedule/replace", got.Spec.Cancel, got.Annotations[v1alpha1.AnnotationCancelledBy])
	}
	if runs := scheduledRuns(t, s); len(runs) != 2 {
		t.Fatalf("runs %v, want the cancelled one and its replacement", runNames(runs))
	}
	if !strings.Contains(testenv.Drain(rec), "Replaced Cancelled run "+old.Name) {
		t.Fatal("no Replaced event")
	}
}

// Finished runs beyond the history limits are deleted, the oldest first,
// with their transcript Secrets; the newest are kept with theirs.
func TestSchedule_historyLimitsDeleteOldestRunsAndSecrets(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	s, first := makeSchedule(t, ns, "history", func(sp *v1alpha1.AgentScheduleSpec) {
		sp.Suspend = ptr.To(true) // only the history is at work
		sp.SuccessfulRunsHistoryLimit = ptr.To[int32](2)
	})
	s = get(t, s)
	type made struct {
		run  *v1alpha1.AgentRun
		keep bool
	}
	var all []made
	mk := func(i int, o loop.Outcome, keep bool) {
		run, err := runFor(testenv.Scheme, s, "history-"+strconv.Itoa(i), first)
		if err != nil {
			t.Fatal(err)
		}
		if err := cluster.Client.Create(context.Background(), run); err != nil {
			t.Fatal(err)
		}
		finish(t, run, o, first.Add(time.Duration(i)*time.Minute))
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: run.Name + "-transcript", Namespace: ns,
			Labels: map[string]string{transcript.LabelRunUID: string(run.UID)}}}
		if err := cluster.Client.Create(context.Background(), sec); err != nil {
			t.Fatal(err)
		}
		all = append(all, made{run, keep})
	}
	// Completed at minutes 1, 2 (deleted), 5, 6 (kept); failed at 3
	// (deleted) and 4 (kept, the newest).
	mk(1, loop.Completed, false)
	mk(2, loop.Completed, false)
	mk(3, loop.Error, false)
	mk(4, loop.BudgetExhausted, true)
	mk(5, loop.Completed, true)
	mk(6, loop.Completed, true)
	// A run that only wears the label is not the schedule's to delete.
	stray, err := runFor(testenv.Scheme, s, "stray", first)
	if err != nil {
		t.Fatal(err)
	}
	stray.OwnerReferences = nil
	if err := cluster.Client.Create(context.Background(), stray); err != nil {
		t.Fatal(err)
	}
	finish(t, stray, loop.Error, first)

	clock := &fakeClock{t: first.Add(10 * time.Minute)}
	r, rec := scheduler(clock)
	reconcileSchedule(t, r, s)
	for _, m := range all {
		runErr := cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(m.run), &v1alpha1.AgentRun{})
		var secs corev1.SecretList
		if err := cluster.Client.List(context.Background(), &secs, client.InNamespace(ns), client.MatchingLabels{transcript.LabelRunUID: string(m.run.UID)}); err != nil {
			t.Fatal(err)
		}
		if m.keep && (runErr != nil || len(secs.Items) != 1) {
			t.Errorf("%s (%s) should be kept with its Secret: %v, %d Secrets", m.run.Name, m.run.Status.Outcome, runErr, len(secs.Items))
		}
		if !m.keep && (runErr == nil || len(secs.Items) != 0) {
			t.Errorf("%s (%s) should be deleted with its Secret: still there: run %v, %d Secrets", m.run.Name, m.run.Status.Outcome, runErr == nil, len(secs.Items))
		}
	}
	if err := cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(stray), &v1alpha1.AgentRun{}); err != nil {
		t.Errorf("the stray run was deleted: %v", err)
	}
	if ev := testenv.Drain(rec); strings.Count(ev, "DeletedHistory") != 3 {
		t.Errorf("want 3 DeletedHistory events: %q", ev)
	}
	if st := get(t, s).Status; st.LastSuccessfulTime == nil || !st.LastSuccessfulTime.Time.Equal(first.Add(6*time.Minute)) {
		t.Errorf("lastSuccessfulTime %v, want the newest completion %s", st.LastSuccessfulTime, first.Add(6*time.Minute))
	}
}

// Times older than startingDeadlineSeconds are skipped and counted once;
// after an outage without a deadline only the latest time runs and the
// others are counted.
func TestSchedule_missedTimes(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	s, first := makeSchedule(t, ns, "deadline", func(sp *v1alpha1.AgentScheduleSpec) { sp.StartingDeadlineSeconds = ptr.To[int64](30) })
	// Down for the times at 0, 1, 2 and 3 minutes; the last is 40 s old.
	clock := &fakeClock{t: first.Add(3*time.Minute + 40*time.Second)}
	r, rec := scheduler(clock)
	missed := func() float64 { return testutil.ToFloat64(r.Metrics.timesMissed.WithLabelValues(ns)) }
	base := missed()
	reconcileSchedule(t, r, s)
	reconcileSchedule(t, r, s) // the same times are not counted again
	if runs := scheduledRuns(t, s); len(runs) != 0 {
		t.Fatalf("runs %v past the deadline", runNames(runs))
	}
	if got := missed() - base; got != 4 {
		t.Fatalf("missed %v, want 4", got)
	}
	if st := get(t, s).Status; st.LastMissedTime == nil || !st.LastMissedTime.Time.Equal(first.Add(3*time.Minute)) {
		t.Fatalf("lastMissedTime %v", st.LastMissedTime)
	}
	if !strings.Contains(testenv.Drain(rec), "MissedSchedule") {
		t.Fatal("no MissedSchedule event")
	}
	clock.set(first.Add(4*time.Minute + 10*time.Second))
	reconcileSchedule(t, r, s)
	if runs := scheduledRuns(t, s); len(runs) != 1 || runs[0].Name != nameAt(s, first.Add(4*time.Minute)) {
		t.Fatalf("runs %v, want the one at 4 minutes", runNames(runs))
	}

	s2, first2 := makeSchedule(t, ns, "outage", nil)
	clock.set(first2.Add(2*time.Minute + 50*time.Second))
	base = missed()
	reconcileSchedule(t, r, s2)
	if runs := scheduledRuns(t, s2); len(runs) != 1 || runs[0].Name != nameAt(s2, first2.Add(2*time.Minute)) {
		t.Fatalf("runs %v, want only the latest time's", runNames(runs))
	}
	if got := missed() - base; got != 2 {
		t.Fatalf("missed %v, want the 2 earlier times", got)
	}
}

// A suspended schedule creates nothing and says so.
func TestSchedule_suspendCreatesNothing(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	s, first := makeSchedule(t, ns, "paused", func(sp *v1alpha1.AgentScheduleSpec) { sp.Suspend = ptr.To(true) })
	r, _ := scheduler(&fakeClock{t: first.Add(5 * time.Minute)})
	reconcileSchedule(t, r, s)
	if runs := scheduledRuns(t, s); len(runs) != 0 {
		t.Fatalf("a suspended schedule created %v", runNames(runs))
	}
	if c := readyOf(t, s); c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonScheduleSuspended {
		t.Fatalf("Ready %+v, want True Suspended", c)
	}
	if argo, flux, ks := controllertest.ReadyHealthOf(t, cluster.Client, s, "AgentSchedule"); argo != "Suspended" || flux != "Current" || ks != status.CurrentStatus {
		t.Errorf("a suspended schedule reads Argo CD %s, Flux %s, kstatus %s; want Suspended, Current, Current", argo, flux, ks)
	}
}

// A schedule or time zone that cannot be read is Ready=False with a
// message naming it, and kstatus Failed; a good one is Current.
func TestSchedule_invalidScheduleOrTimeZone(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	cases := []struct{ name, schedule, tz, want string }{
		{"bad-cron", "every day at noon", "UTC", "every day at noon"},
		{"bad-zone", "0 * * * *", "Mars/Olympus_Mons", "Mars/Olympus_Mons"},
		{"two-zones", "CRON_TZ=UTC 0 * * * *", "Europe/Berlin", "CRON_TZ"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, first := makeSchedule(t, ns, tc.name, func(sp *v1alpha1.AgentScheduleSpec) { sp.Schedule, sp.TimeZone = tc.schedule, ptr.To(tc.tz) })
			r, _ := scheduler(&fakeClock{t: first.Add(2 * time.Hour)})
			reconcileSchedule(t, r, s)
			c := readyOf(t, s)
			if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonInvalidSchedule || !strings.Contains(c.Message, tc.want) {
				t.Fatalf("Ready %+v, want False InvalidSchedule naming %q", c, tc.want)
			}
			if runs := scheduledRuns(t, s); len(runs) != 0 {
				t.Fatalf("an invalid schedule created %v", runNames(runs))
			}
			if got := scheduleKstatus(t, s); got != status.FailedStatus {
				t.Fatalf("kstatus %s, want Failed", got)
			}
			if argo, flux, _ := controllertest.ReadyHealthOf(t, cluster.Client, s, "AgentSchedule"); argo != "Degraded" || flux != "Failed" {
				t.Errorf("Argo CD %s, Flux %s; want Degraded, Failed", argo, flux)
			}
		})
	}
	t.Run("valid-zone", func(t *testing.T) {
		s, first := makeSchedule(t, ns, "berlin", func(sp *v1alpha1.AgentScheduleSpec) { sp.Schedule, sp.TimeZone = "0 9 * * *", ptr.To("Europe/Berlin") })
		r, _ := scheduler(&fakeClock{t: first})
		reconcileSchedule(t, r, s)
		if c := readyOf(t, s); c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonScheduled {
			t.Fatalf("Ready %+v", c)
		}
		if got := scheduleKstatus(t, s); got != status.CurrentStatus {
			t.Fatalf("kstatus %s, want Current", got)
		}
		if argo, flux, _ := controllertest.ReadyHealthOf(t, cluster.Client, s, "AgentSchedule"); argo != "Healthy" || flux != "Current" {
			t.Errorf("Argo CD %s, Flux %s; want Healthy, Current", argo, flux)
		}
	})
}

func scheduleKstatus(t *testing.T, s *v1alpha1.AgentSchedule) status.Status {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("AgentSchedule"))
	if err := cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(s), u); err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// startScheduler runs the schedule reconciler alone in a manager for the
// test's namespace, at the clock's time, until the test ends.
func startScheduler(t *testing.T, ns string, clock *fakeClock) {
	t.Helper()
	testenv.StartManager(t, cluster.Config, ns, func(mgr ctrl.Manager) error {
		return NewReconciler(Config{Base: reconcilers.Base{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: clock.now}}).SetupWithManager(mgr)
	})
}

// In the manager, the schedule watches its runs: when one ends, active
// and lastSuccessfulTime follow without waiting for the next time.
func TestSchedule_watchesItsRuns(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	s, _ := makeSchedule(t, ns, "watched", func(sp *v1alpha1.AgentScheduleSpec) { sp.Schedule = "0 0 1 1 *" })
	// The clock is just past next new year's midnight, the schedule's only
	// time this year: the first reconcile creates its run, and then only
	// the run's end can wake the schedule.
	ny := time.Date(time.Now().UTC().Year()+1, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: ny.Add(time.Second)}
	startScheduler(t, ns, clock)
	g := NewWithT(t)
	g.Eventually(func() int32 { return get(t, s).Status.ActiveCount }, 20*time.Second, 20*time.Millisecond).Should(Equal(int32(1)))
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nameAt(s, ny)}}
	finish(t, run, loop.Completed, ny.Add(time.Minute))
	g.Eventually(func() bool {
		st := get(t, s).Status
		return st.ActiveCount == 0 && len(st.Active) == 0 && st.LastSuccessfulTime != nil
	}, 20*time.Second, 20*time.Millisecond).Should(BeTrue(), "the schedule did not see its run end")
}

// After an outage too long to walk time by time, the latest time is still
// found exactly and the count of the times passed is close.
func TestSchedule_dueTimesAfterALongOutage(t *testing.T) {
	sched, _, err := schedtime.Of(&v1alpha1.AgentSchedule{Spec: v1alpha1.AgentScheduleSpec{Schedule: "*/5 * * * *"}}, time.Local)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 31, 12, 7, 30, 0, time.UTC)
	at, n := dueTimes(sched, now.Add(-30*24*time.Hour), now)
	if want := time.Date(2026, 3, 31, 12, 5, 0, 0, time.UTC); !at.Equal(want) {
		t.Fatalf("latest %s, want %s", at, want)
	}
	if want := int64(30 * 24 * 12); n < want-2 || n > want+2 {
		t.Fatalf("%d times counted, want about %d", n, want)
	}
	at, n = dueTimes(sched, now.Add(-11*time.Minute), now)
	if n != 2 || !at.Equal(time.Date(2026, 3, 31, 12, 5, 0, 0, time.UTC)) {
		t.Fatalf("%d times, latest %s; want 2, 12:05", n, at)
	}
}
