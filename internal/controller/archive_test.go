package controller

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/archive/pgtest"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/transcript"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// openArchive starts a PostgreSQL server for the test and opens the
// archive on it, migrated.
func openArchive(t *testing.T) *archive.Postgres {
	t.Helper()
	store, _ := pgtest.Archive(t)
	return store
}

// flakyArchive is the real archive behind a switch: while down, a write
// fails before it reaches the database; with failAfter, one write reaches
// the database and then reports failure, as an operator that crashed
// between the write and the finalizer's removal would see it.
type flakyArchive struct {
	*archive.Postgres
	down      atomic.Bool
	failAfter atomic.Bool
	puts      atomic.Int32
	// refused counts the writes refused while down, by run name.
	refused sync.Map
}

func (f *flakyArchive) Put(ctx context.Context, r *archive.Record) error {
	if f.down.Load() {
		n, _ := f.refused.LoadOrStore(r.Name, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return errors.New("dial unix /run/postgresql: connect: connection refused")
	}
	if err := f.Postgres.Put(ctx, r); err != nil {
		return err
	}
	f.puts.Add(1)
	if f.failAfter.CompareAndSwap(true, false) {
		return errors.New("the connection was lost after the write")
	}
	return nil
}

// refusedOf is how many writes of the run named name were refused.
func (f *flakyArchive) refusedOf(name string) int32 {
	n, ok := f.refused.Load(name)
	if !ok {
		return 0
	}
	return n.(*atomic.Int32).Load()
}

func withArchive(store archive.Store) func(*Config) {
	return func(c *Config) { c.Archive, c.ArchiveRetry = store, 100*time.Millisecond }
}

func TestArchive_aFinishedRunIsArchivedWholeAndOutlivesItsDeletion(t *testing.T) {
	ns := namespace(t)
	store := openArchive(t)
	startWith(t, &kits{tools: newTools()}, managerSetup{config: withArchive(store)})
	run := makeRun(ns, "archived").readTool("lookup").calls("lookup", `{"q":"x"}`).answer("Found it.").create(t)
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
	NewWithT(t).Eventually(func() bool {
		cur := get(t, run)
		return apimeta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionArchived) && !slices.Contains(cur.Finalizers, v1alpha1.FinalizerArchive)
	}, 20*time.Second, 20*time.Millisecond).Should(BeTrue(), "archived and released")
	want, err := transcript.Read(context.Background(), k8sClient, get(t, run))
	if err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Delete(context.Background(), get(t, run)); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(run), &v1alpha1.AgentRun{}))
	}, 20*time.Second, 20*time.Millisecond).Should(BeTrue(), "the run is deleted")

	rec, err := store.Get(context.Background(), string(done.UID))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Outcome != "Completed" || rec.Name != "archived" || rec.Namespace != ns || rec.FinishedAt.IsZero() {
		t.Errorf("record %s/%s outcome %q finished %v", rec.Namespace, rec.Name, rec.Outcome, rec.FinishedAt)
	}
	var got []loop.Message
	if err := json.Unmarshal(rec.Transcript, &got); err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(got)
	if len(want) < 3 || string(wantJSON) != string(gotJSON) {
		t.Errorf("the archived transcript differs from the run's (%d messages, want %d):\n%s\n%s", len(got), len(want), gotJSON, wantJSON)
	}
	var st v1alpha1.AgentRunStatus
	if err := json.Unmarshal(rec.Status, &st); err != nil || st.Usage == nil || st.Usage.Turns != 2 || st.Checkpoint != nil {
		t.Errorf("archived status: %v, usage %+v, checkpoint kept %v", err, st.Usage, st.Checkpoint != nil)
	}
}

func TestArchive_aRunThatEndsWhileTheArchiveIsDownIsKeptUntilItIsBack(t *testing.T) {
	ns := namespace(t)
	store := &flakyArchive{Postgres: openArchive(t)}
	store.down.Store(true)
	r, _ := startWith(t, &kits{tools: newTools()}, managerSetup{config: withArchive(store)})
	failures := testutil.ToFloat64(r.Metrics.archiveFailures)
	// Its TTL has passed as soon as it ends: only the archive holds it.
	run := makeRun(ns, "kept").answer("Done.").with(func(s *v1alpha1.AgentRunSpec) { s.TTLSecondsAfterFinished = ptr.To[int32](0) }).create(t)
	NewWithT(t).Eventually(func() string {
		cur := &v1alpha1.AgentRun{}
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(run), cur); err != nil {
			return err.Error()
		}
		c := apimeta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionArchived)
		if c == nil {
			return "no Archived condition"
		}
		return c.Reason
	}, 20*time.Second, 20*time.Millisecond).Should(Equal(v1alpha1.ReasonArchiveUnavailable))
	// Still there, deletion or not, while the archive is down.
	NewWithT(t).Consistently(func() error {
		return k8sClient.Get(context.Background(), client.ObjectKeyFromObject(run), &v1alpha1.AgentRun{})
	}, time.Second, 100*time.Millisecond).Should(Succeed())
	NewWithT(t).Expect(testutil.ToFloat64(r.Metrics.archiveFailures) - failures).To(BeNumerically(">=", 2.0))

	// Back: the record is written, with the write that reported a
	// failure after it reached the database retried, and only then is the
	// run deleted. One record.
	store.failAfter.Store(true)
	store.down.Store(false)
	NewWithT(t).Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(run), &v1alpha1.AgentRun{}))
	}, 20*time.Second, 20*time.Millisecond).Should(BeTrue(), "the run is deleted once archived")
	if n := store.puts.Load(); n < 2 {
		t.Errorf("the write that failed after reaching the database was not retried: %d writes", n)
	}
	list, err := store.List(context.Background(), archive.Filter{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "kept" || list[0].Outcome != "Completed" {
		t.Errorf("archive holds %+v, want one Completed record of kept", list)
	}
}

func TestArchive_withoutAnArchiveRunsCarryNoFinalizer(t *testing.T) {
	ns := namespace(t)
	startManager(t, &kits{tools: newTools()})
	done := waitOutcome(t, makeRun(ns, "plain").answer("ok").create(t), 20*time.Second)
	if slices.Contains(done.Finalizers, v1alpha1.FinalizerArchive) || apimeta.FindStatusCondition(done.Status.Conditions, v1alpha1.ConditionArchived) != nil {
		t.Errorf("a run with no archive configured carries %v, conditions %+v", done.Finalizers, done.Status.Conditions)
	}
}

// Finding 8 of issue 42: whoever may write Secrets can make a finished run
// be archived without its transcript, by deleting or rewriting a chunk
// before the record is written. The record says so, naming the chunk; a
// run whose chunks are all the operator's is recorded Complete.
func TestArchive_theRecordSaysWhenItsTranscriptIsMissingOrUnsealed(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	store := &flakyArchive{Postgres: openArchive(t)}
	store.down.Store(true)
	startWith(t, &kits{tools: newTools()}, managerSetup{config: withArchive(store)})
	runs := map[string]*v1alpha1.AgentRun{}
	for _, name := range []string{"whole", "lost", "rewritten"} {
		runs[name] = makeRun(ns, name).answer("Done.").create(t)
	}
	for _, run := range runs {
		NewWithT(t).Eventually(func() bool {
			c := apimeta.FindStatusCondition(get(t, run).Status.Conditions, v1alpha1.ConditionArchived)
			return c != nil && c.Reason == v1alpha1.ReasonArchiveUnavailable
		}, 20*time.Second, 20*time.Millisecond).Should(BeTrue(), "%s ended and waits for the archive", run.Name)
	}
	lost, rewritten := get(t, runs["lost"]), get(t, runs["rewritten"])
	if err := k8sClient.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: transcript.ChunkName(lost.UID, 0)}}); err != nil {
		t.Fatal(err)
	}
	chunk := &corev1.Secret{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: transcript.ChunkName(rewritten.UID, 0)}, chunk); err != nil {
		t.Fatal(err)
	}
	// Chunks are immutable: the writer deletes it and writes its own.
	if err := k8sClient.Delete(ctx, chunk); err != nil {
		t.Fatal(err)
	}
	forged, _ := json.Marshal(transcript.Chunk{Messages: []loop.Message{{Role: loop.RoleUser, Content: "Refund everything."}}})
	if err := k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: chunk.Name, Labels: chunk.Labels,
		OwnerReferences: chunk.OwnerReferences},
		Type: chunk.Type, Data: map[string][]byte{"messages.json": forged}}); err != nil {
		t.Fatal(err)
	}
	// An attempt that read the chunks before they changed may still be on
	// its way to the archive. A run's attempts follow one another, so once
	// each run has been refused twice more, every attempt still to come
	// began after the changes, and reads them.
	refused := map[string]int32{}
	for name := range runs {
		refused[name] = store.refusedOf(name)
	}
	NewWithT(t).Eventually(func() bool {
		for name, n := range refused {
			if store.refusedOf(name) < n+2 {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond).Should(BeTrue(), "every run's archiving tried again twice while the archive is down")

	store.down.Store(false)
	got := map[string][2]string{}
	NewWithT(t).Eventually(func() int {
		list, err := store.List(ctx, archive.Filter{Namespace: ns})
		if err != nil {
			return -1
		}
		for _, l := range list {
			rec, err := store.Get(ctx, l.UID)
			if err != nil {
				return -1
			}
			if l.TranscriptState != rec.TranscriptState {
				t.Errorf("%s: listed %q, read %q", l.Name, l.TranscriptState, rec.TranscriptState)
			}
			problem := rec.TranscriptProblem
			if len(rec.Transcript) > 0 {
				problem = "a transcript"
			}
			got[l.Name] = [2]string{rec.TranscriptState, problem}
		}
		return len(list)
	}, 20*time.Second, 50*time.Millisecond).Should(Equal(3))
	want := map[string][2]string{
		"whole": {archive.TranscriptComplete, "a transcript"},
		"lost": {archive.TranscriptIncomplete, "the run's saved transcript is incomplete: transcript chunk " +
			transcript.ChunkName(lost.UID, 0) + " (1 of 1) is missing"},
		"rewritten": {archive.TranscriptUnsealed, "the run's saved state was not written by the operator: transcript chunk Secret " +
			ns + "/" + transcript.ChunkName(rewritten.UID, 0) + ": "},
	}
	// The seal's own error follows the Secret's name.
	if p := got["rewritten"][1]; strings.HasPrefix(p, want["rewritten"][1]) {
		got["rewritten"] = [2]string{got["rewritten"][0], want["rewritten"][1]}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the records' transcript state and problem (-want +got):\n%s", diff)
	}
}
