package agentevaluation

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/archive/pgtest"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// countingArchive is the real archive, counting the evaluations written.
type countingArchive struct {
	*archive.Postgres
	puts atomic.Int32
}

func (c *countingArchive) PutEvaluation(ctx context.Context, e *archive.Evaluation) error {
	c.puts.Add(1)
	return c.Postgres.PutEvaluation(ctx, e)
}

// openArchive starts a PostgreSQL server for the test and opens the
// archive on it, migrated.
func openArchive(t *testing.T) *countingArchive {
	t.Helper()
	store, _ := pgtest.Archive(t)
	return &countingArchive{Postgres: store}
}

// startArchivingEvaluator is startEvaluator with an archive.
func startArchivingEvaluator(t *testing.T, ns string, store archive.Evaluations) {
	t.Helper()
	testenv.StartManager(t, cluster.Config, ns, func(mgr ctrl.Manager) error {
		return NewReconciler(Config{Base: reconcilers.Base{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()},
			Archive: store, ArchiveRetry: 100 * time.Millisecond}).SetupWithManager(mgr)
	})
}

// archived waits for the evaluation's Archived condition to be True and
// returns the evaluation.
func archived(t *testing.T, e *v1alpha1.AgentEvaluation) *v1alpha1.AgentEvaluation {
	t.Helper()
	NewWithT(t).Eventually(func() bool {
		return apimeta.IsStatusConditionTrue(get(t, e).Status.Conditions, v1alpha1.ConditionArchived)
	}, 20*time.Second, 20*time.Millisecond).Should(BeTrue(), "the Archived condition of %s", e.Name)
	return get(t, e)
}

// Issue 48, items 2 and 3: a complete evaluation goes to the archive
// whole, once (a later reconcile, as after a restart, writes nothing);
// and spec.baseline naming an evaluation that has been deleted compares
// with the archived one, finding the same regressions as against the
// live one, the BaselineCompared condition saying which was used.
func TestEvaluation_archivedOnceAndComparedWithWhenDeleted(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	store := openArchive(t)
	startArchivingEvaluator(t, ns, store)
	ctx := context.Background()
	before := evaluatedBefore(t, ns)
	live := archived(t, before)
	rec, err := store.NewestEvaluation(ctx, ns, "before")
	if err != nil {
		t.Fatalf("the archive after %s completed: %v", before.Name, err)
	}
	var st v1alpha1.AgentEvaluationStatus
	if err := json.Unmarshal(rec.Status, &st); err != nil {
		t.Fatal(err)
	}
	got := []any{rec.UID, rec.Phase, rec.PassRate, rec.CostUSD, rec.FinishedAt.Equal(live.Status.CompletionTime.Time)}
	want := []any{string(live.UID), string(v1alpha1.EvaluationFailed), "0.50", "0.0400", true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the archived evaluation (uid, phase, pass rate, cost, finished at completion) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(live.Status.Variants, st.Variants); diff != "" {
		t.Errorf("the archived status.variants against the live one (-want +got):\n%s", diff)
	}
	// A reconcile of the archived evaluation (a restart lists them all)
	// writes nothing again.
	r := NewReconciler(Config{Base: reconcilers.Base{Client: cluster.Client, APIReader: cluster.Client}, Archive: store})
	reconcileOnce(t, r, before)
	if n := store.puts.Load(); n != 1 {
		t.Errorf("%d writes of %s to the archive; want 1", n, before.Name)
	}

	// Two evaluations alike, against the live baseline and then, once it
	// is deleted, the archived one.
	against := func(name string) *v1alpha1.AgentEvaluation {
		e := refundCases(makeEval(ns, name).variants("stable", "refund-v1", "change", "refund-unverified").against("before")).create(t)
		endAll(t, e, 4, func(run string) (loop.Outcome, string, v1alpha1.Verdict) {
			switch {
			case strings.HasPrefix(run, name+"-change-"):
				return loop.Completed, "refund", ""
			case strings.HasSuffix(run, "-hard-1"):
				return loop.Escalated, "", v1alpha1.VerdictNotVerified
			}
			return loop.Completed, "refund", v1alpha1.VerdictVerified
		})
		return completed(t, e)
	}
	fromLive := against("after")
	if err := cluster.Client.Delete(ctx, live); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() bool {
		return apierrors.IsNotFound(cluster.Client.Get(ctx, client.ObjectKeyFromObject(live), &v1alpha1.AgentEvaluation{}))
	}, 20*time.Second, 20*time.Millisecond).Should(BeTrue())
	fromArchive := against("again")

	if len(fromLive.Status.Regressions) == 0 {
		t.Fatalf("no regressions against the live baseline: %+v", fromLive.Status.Conditions)
	}
	if diff := cmp.Diff(fromLive.Status.Regressions, fromArchive.Status.Regressions); diff != "" {
		t.Errorf("regressions against the archived baseline, against the live one's (-want +got):\n%s", diff)
	}
	c := findCondition(fromArchive.Status.Conditions, v1alpha1.EvaluationConditionBaselineCompared)
	wantPrefix := "against the archived evaluation before finished at " + live.Status.CompletionTime.UTC().Format(time.RFC3339) +
		" (UID " + string(live.UID) + "): compared variant stable, variant change with before: 1 regressed"
	if fromArchive.Status.Phase != v1alpha1.EvaluationRegressed || c == nil || c.Reason != v1alpha1.ReasonEvaluationRegressed ||
		!strings.HasPrefix(c.Message, wantPrefix) {
		t.Errorf("phase %s, BaselineCompared %+v; want Regressed, reason Regressed, a message that begins %q", fromArchive.Status.Phase, c, wantPrefix)
	}
	if c := findCondition(fromLive.Status.Conditions, v1alpha1.EvaluationConditionBaselineCompared); c == nil ||
		!strings.HasPrefix(c.Message, "against the live evaluation before: ") {
		t.Errorf("BaselineCompared against the live baseline: %+v; want a message that says the live evaluation was used", c)
	}
}

// With an archive, a baseline neither live nor archived is a condition
// that says where it was looked for.
func TestEvaluation_aBaselineNeitherLiveNorArchived(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	store := openArchive(t)
	e := makeEval(ns, "orphan").answering("one", "ok").against("never-made").create(t)
	r := NewReconciler(Config{Base: reconcilers.Base{Client: cluster.Client, APIReader: cluster.Client}, Archive: store})
	reconcileOnce(t, r, e)
	completeOnlyRun(t, e)
	reconcileOnce(t, r, e)
	st, c := baselineCompared(t, e)
	got := []any{st.Phase, c.Status, c.Reason, c.Message, apimeta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionArchived)}
	want := []any{v1alpha1.EvaluationPassed, metav1.ConditionFalse, v1alpha1.ReasonBaselineNotFound,
		"the baseline evaluation never-made is not in namespace " + ns + " or in the archive: nothing was compared", true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(phase, BaselineCompared status, reason, message, archived) (-want +got):\n%s", diff)
	}
}

// downArchive is the real archive behind a switch: while down, a write
// fails before it reaches the database.
type downArchive struct {
	*countingArchive
	down atomic.Bool
}

func (d *downArchive) PutEvaluation(ctx context.Context, e *archive.Evaluation) error {
	if d.down.Load() {
		return errors.New("dial unix /run/postgresql: connect: connection refused")
	}
	return d.countingArchive.PutEvaluation(ctx, e)
}

// An evaluation that completes while the archive is down says so
// (Archived=False) and is tried again; once the archive is back it is
// written, and says that.
func TestEvaluation_completedWhileTheArchiveIsDownIsArchivedLater(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	store := &downArchive{countingArchive: openArchive(t)}
	store.down.Store(true)
	e := makeEval(ns, "later").answering("one", "ok").create(t)
	r := NewReconciler(Config{Base: reconcilers.Base{Client: cluster.Client, APIReader: cluster.Client}, Archive: store})
	reconcileOnce(t, r, e)
	completeOnlyRun(t, e)
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(e)})
	if err != nil {
		t.Fatal(err)
	}
	st := get(t, e).Status
	c := findCondition(st.Conditions, v1alpha1.ConditionArchived)
	if st.Phase != v1alpha1.EvaluationPassed || c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonArchiveUnavailable ||
		!strings.Contains(c.Message, "connection refused") || res.RequeueAfter != archive.DefaultRetry {
		t.Errorf("with the archive down: phase %s, Archived %+v, requeue after %s; want Passed, False ArchiveUnavailable quoting the error, %s",
			st.Phase, c, res.RequeueAfter, archive.DefaultRetry)
	}
	if _, err := store.NewestEvaluation(context.Background(), ns, "later"); !errors.Is(err, archive.ErrNoEvaluation) {
		t.Errorf("the archive while down: %v, want ErrNoEvaluation", err)
	}

	store.down.Store(false)
	reconcileOnce(t, r, e)
	if c := findCondition(get(t, e).Status.Conditions, v1alpha1.ConditionArchived); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonArchived {
		t.Errorf("once the archive is back: Archived %+v; want True, Archived", c)
	}
	if rec, err := store.NewestEvaluation(context.Background(), ns, "later"); err != nil || rec.Phase != string(v1alpha1.EvaluationPassed) {
		t.Errorf("the archive once back: %+v, %v; want the Passed evaluation", rec, err)
	}
}
