package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/transcript"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// threeLookups is a run whose model reads three times, a turn each, then
// answers; priced gives its read tool a declared cost.
func threeLookups(ns, name string, priced bool) *runBuilder {
	b := makeRun(ns, name).readTool("lookup")
	if priced {
		b = b.with(func(s *v1alpha1.AgentRunSpec) { s.Tools[0].MaxCostUSD = "0.001" })
	}
	return b.calls("lookup", `{"q":1}`).calls("lookup", `{"q":2}`).calls("lookup", `{"q":3}`).answer("Found it.")
}

// chunkSecrets counts the run's transcript chunk Secrets.
func chunkSecrets(t *testing.T, run *v1alpha1.AgentRun) int {
	t.Helper()
	var secrets corev1.SecretList
	if err := k8sClient.List(context.Background(), &secrets, client.InNamespace(run.Namespace),
		client.MatchingLabels{transcript.LabelRunUID: string(run.UID)}); err != nil {
		t.Fatal(err)
	}
	return len(secrets.Items)
}

// A read that costs nothing runs before the model's answer that proposed it
// is saved, and one chunk holds both: a turn of free reads is one save, not
// two. A read with a declared cost keeps the save before it runs.
func TestFreeReads_oneChunkHoldsTheAnswerAndItsReads(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	startManager(t, &kits{tools: tb})
	free := threeLookups(ns, "free", false).create(t)
	priced := threeLookups(ns, "priced", true).create(t)

	chunks := map[string]int{}
	for _, run := range []*v1alpha1.AgentRun{free, priced} {
		done := waitOutcome(t, run, 30*time.Second)
		expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
		if n := len(readTranscript(t, done)); n != 7 {
			t.Fatalf("%s: %d messages in the transcript, want 7 (three answers with their results, the answer)", run.Name, n)
		}
		chunks[run.Name] = chunkSecrets(t, done)
		if int(done.Status.Transcript.Chunks) != chunks[run.Name] {
			t.Fatalf("%s: status counts %d chunks, %d exist", run.Name, done.Status.Transcript.Chunks, chunks[run.Name])
		}
	}
	if got := chunks["priced"] - chunks["free"]; got != 3 {
		t.Fatalf("chunks: %v; the free reads' run should save 3 fewer (one per turn of reads), saved %d fewer", chunks, got)
	}
	for id, n := range tb.counts() {
		if n != 2 { // each call id once in each run
			t.Errorf("%s ran %d times, want once in each run", id, n)
		}
	}
}

// A free read still running when the reconcile stops waiting is saved as
// dispatched, with the answer that proposed it, before it ends; it is not
// started again.
func TestFreeReads_aSlowReadIsSavedAsDispatchedBeforeItEnds(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	release := make(chan struct{})
	tb.funcs["lookup"] = func(ctx context.Context, inv loop.Invocation) loop.Result {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return loop.Result{Output: []byte(`{"found":"` + inv.CallID + `"}`)}
	}
	startManager(t, &kits{tools: tb})
	run := makeRun(ns, "slow-read").readTool("lookup").calls("lookup", `{"q":1}`).answer("Found it.").create(t)
	NewWithT(t).Eventually(func() string {
		var roles string
		msgs, err := transcript.Read(context.Background(), k8sClient, get(t, run))
		if err != nil {
			return err.Error()
		}
		for _, m := range msgs {
			roles += string(m.Role) + " "
		}
		return roles
	}, 20*time.Second, 20*time.Millisecond).Should(Equal("assistant "), "the answer that proposed the read is saved while the read runs")
	close(release)
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
	if n := len(readTranscript(t, done)); n != 3 {
		t.Fatalf("%d messages in the transcript, want 3", n)
	}
	for id, n := range tb.counts() {
		if n != 1 {
			t.Errorf("%s ran %d times, want once", id, n)
		}
	}
}

// When the save that holds an answer and its free reads fails, the next
// attempt saves the same answer with the same results: the model is not
// called again and the reads do not run again.
func TestFreeReads_aFailedSaveRunsNothingAgain(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	b := threeLookups(ns, "refused-save", false)
	model := &countingModel{inner: &loop.Scripted{Entries: scriptOf(b)}}
	var creates, refused atomic.Int64
	startReconciler(t, &kits{tools: tb, model: model}, 0, func(c client.Client, _ func()) client.Client {
		return hookClient{Client: c, before: func(_ context.Context, op string, obj client.Object) error {
			if _, chunk := obj.(*corev1.Secret); !chunk || op != "create" || obj.GetNamespace() != ns {
				return nil
			}
			// The first chunk is the first answer with its reads.
			if creates.Add(1) == 1 {
				refused.Add(1)
				return errors.New("the API server is unavailable")
			}
			return nil
		}}
	})
	run := b.create(t)
	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
	if refused.Load() != 1 {
		t.Fatalf("%d saves refused, want 1", refused.Load())
	}
	if calls := model.calls.Load(); calls != 4 {
		t.Fatalf("the model was called %d times for 4 answers", calls)
	}
	if done.Status.Usage.Turns != 4 {
		t.Fatalf("charged %d turns for 4 answers", done.Status.Usage.Turns)
	}
	want := map[string]int{"t1-c1:lookup": 1, "t2-c1:lookup": 1, "t3-c1:lookup": 1}
	if diff := cmp.Diff(want, tb.counts()); diff != "" {
		t.Fatalf("reads run (-want +got):\n%s", diff)
	}
	if n := len(readTranscript(t, done)); n != 7 {
		t.Fatalf("%d messages in the transcript, want 7", n)
	}
}

// newestCheckpoint is the run's newest saved checkpoint, as a restart
// resumes from it: the last chunk's past those status counts, else
// status's.
func newestCheckpoint(t *testing.T, run *v1alpha1.AgentRun) string {
	t.Helper()
	cur := get(t, run)
	n := 0
	if cur.Status.Transcript != nil {
		n = int(cur.Status.Transcript.Chunks)
	}
	chunks, err := transcript.ReadChunks(context.Background(), k8sClient, cur, n)
	if err != nil {
		return err.Error()
	}
	return string(transcript.Newest(cur, chunks, n))
}
