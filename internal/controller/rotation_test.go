package controller

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/seal"
	"github.com/agentrun/agentrun/internal/transcript"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
)

// stateKeyObjects reads agentrun_state_key_objects as the operator serves
// it: the count by key id, and whether a count was reported yet (every
// key the operator holds has a series once it has counted).
func stateKeyObjects(t *testing.T, r *AgentRunReconciler) (map[string]float64, bool) {
	t.Helper()
	got := map[string]float64{}
	fam := scrape(t, r.Metrics)["agentrun_state_key_objects"]
	if fam == nil {
		return got, false
	}
	for _, m := range fam.Metric {
		for _, l := range m.Label {
			if l.GetName() == "key" {
				got[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	for _, id := range r.Keys.IDs() {
		if _, ok := got[id]; !ok {
			return got, false
		}
	}
	return got, true
}

// Finding 8 of issue 42 (build item 7): the documented rotation removed
// the old key once no running run's status.checkpointSeal named it. But a
// run keeps the chunks it saved before the rotation sealed with the old
// key, and a finished run the archive has not taken yet is read once
// more: removing the key then ended the first Error at its next resume
// and archived the second without its transcript. The operator now
// counts, by key, the sealed objects it will still open
// (agentrun_state_key_objects), and the documented procedure removes a key
// once its count is 0. Followed here with a run waiting for a person and a
// finished run the archive is down for, both sealed with k1: k1 stays
// needed while either is, even once every running run's checkpoint is
// sealed with k2; removed when the count says so, both runs are whole.
func TestRotation_theOldKeyStaysUntilNoRunNeedsIt(t *testing.T) {
	ns := namespace(t)
	store := &flakyArchive{Postgres: openArchive(t)}
	store.down.Store(true)
	k1, k2 := seal.NewKey(), seal.NewKey()
	keyring := func(current string, keys map[string][]byte) *seal.Keyring {
		kr, err := seal.New(keys, current)
		if err != nil {
			t.Fatal(err)
		}
		return kr
	}
	operator := func(kr *seal.Keyring) managerSetup {
		return managerSetup{config: func(c *Config) {
			withArchive(store)(c)
			c.Keys, c.KeyUseEvery = kr, 50*time.Millisecond
		}}
	}
	tb := newTools()

	// Before the rotation: k1 seals. One run ends (the archive is down,
	// so it waits for it); one waits for a person.
	_, stop := startWith(t, &kits{tools: tb}, operator(keyring("k1", map[string][]byte{"k1": k1})))
	ended := makeRun(ns, "ended").answer("Done.").create(t)
	waiting := refundRun(ns, "waiting").calls("issue_refund", `{"amount_minor":100}`).answer("Refunded twice.").create(t)
	waitPending(t, waiting, 1)
	NewWithT(t).Eventually(func() string {
		c := apimeta.FindStatusCondition(get(t, ended).Status.Conditions, v1alpha1.ConditionArchived)
		if c == nil {
			return ""
		}
		return c.Reason
	}, 20*time.Second, 20*time.Millisecond).Should(Equal(v1alpha1.ReasonArchiveUnavailable))
	stop()

	// Rotate: add k2, point the annotation at it, restart the operator.
	r, stop := startWith(t, &kits{tools: tb}, operator(keyring("k2", map[string][]byte{"k1": k1, "k2": k2})))
	annotate(t, waiting, "t1-c1", "approve")
	NewWithT(t).Eventually(func() []string {
		var ids []string
		for _, p := range get(t, waiting).Status.PendingApprovals {
			ids = append(ids, p.CallID)
		}
		return ids
	}, 20*time.Second, 20*time.Millisecond).Should(Equal([]string{"t2-c1"}))
	// What the old procedure looked at: no running run's checkpoint names
	// k1 any more. Its first chunks still carry k1, and so do the ended
	// run's: the count says k1 is needed.
	if s := get(t, waiting).Status.CheckpointSeal; !strings.HasPrefix(s, "v1.k2.") {
		t.Fatalf("the waiting run's checkpoint is sealed %q, want with k2", s)
	}
	NewWithT(t).Eventually(func() bool {
		got, counted := stateKeyObjects(t, r)
		return counted && got["k1"] > 0
	}, 20*time.Second, 20*time.Millisecond).Should(BeTrue(), "the operator reports that k1 still seals objects it will open")

	// The person approves, the archive comes back: both runs end and are
	// archived, and then k1 is no longer needed.
	annotate(t, waiting, "t2-c1", "approve")
	store.down.Store(false)
	NewWithT(t).Eventually(func() map[string]float64 {
		got, _ := stateKeyObjects(t, r)
		return got
	}, 20*time.Second, 20*time.Millisecond).Should(HaveKeyWithValue("k1", 0.0))
	expectOutcome(t, get(t, waiting), v1alpha1.OutcomeCompleted, "")
	stop()

	// k1 removed, as the count allowed: the operator without it leaves both
	// runs as they were, and the archive holds each whole.
	r, _ = startWith(t, &kits{tools: tb}, operator(keyring("k2", map[string][]byte{"k2": k2})))
	NewWithT(t).Eventually(func() bool {
		got, counted := stateKeyObjects(t, r)
		_, needed := got["k1"]
		return counted && !needed
	}, 20*time.Second, 20*time.Millisecond).Should(BeTrue(), "no object needs k1")
	for _, run := range []*v1alpha1.AgentRun{ended, waiting} {
		cur := get(t, run)
		if cur.Status.Outcome != v1alpha1.OutcomeCompleted {
			t.Errorf("%s: outcome %s (%s), want Completed", run.Name, cur.Status.Outcome, cur.Status.Reason)
		}
		rec, err := store.Get(context.Background(), string(cur.UID))
		if err != nil {
			t.Fatalf("%s: %v", run.Name, err)
		}
		want, err := transcript.Read(context.Background(), k8sClient, cur)
		if err != nil || len(want) == 0 {
			t.Fatalf("%s: reading its transcript: %d messages, %v", run.Name, len(want), err)
		}
		var got []loop.Message
		if err := json.Unmarshal(rec.Transcript, &got); err != nil {
			t.Fatalf("%s: %v", run.Name, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: the archived transcript is not the run's (-want +got):\n%s", run.Name, diff)
		}
	}
	for _, call := range []string{"t1-c1:issue_refund", "t2-c1:issue_refund"} {
		if n := tb.counts()[call]; n != 1 {
			t.Errorf("%s ran %d times, want once", call, n)
		}
	}
}

// A key removed too early is not silent: the operator without it counts
// what still names it, under that key, beside the keys it holds. (The run
// ends Error when it is read; the archive, down, keeps it unarchived, so
// its chunks count whether the count comes before that or after.)
func TestRotation_aKeyRemovedTooEarlyIsReported(t *testing.T) {
	ns := namespace(t)
	store := &flakyArchive{Postgres: openArchive(t)}
	store.down.Store(true)
	old, err := seal.New(map[string][]byte{"early1": seal.NewKey()}, "early1")
	if err != nil {
		t.Fatal(err)
	}
	without, err := seal.New(map[string][]byte{"early2": seal.NewKey()}, "early2")
	if err != nil {
		t.Fatal(err)
	}
	operator := func(kr *seal.Keyring) managerSetup {
		return managerSetup{config: func(c *Config) {
			withArchive(store)(c)
			c.Keys, c.KeyUseEvery = kr, 50*time.Millisecond
		}}
	}
	tb := newTools()
	_, stop := startWith(t, &kits{tools: tb}, operator(old))
	waiting := refundRun(ns, "waiting").answer("Refunded.").create(t)
	waitPending(t, waiting, 1)
	stop()

	r, _ := startWith(t, &kits{tools: tb}, operator(without))
	NewWithT(t).Eventually(func() map[string]float64 {
		got, _ := stateKeyObjects(t, r)
		return got
	}, 20*time.Second, 20*time.Millisecond).Should(And(HaveKey("early2"), HaveKeyWithValue("early1", BeNumerically(">=", 1.0))),
		"the waiting run's chunks still name early1")
	// The archive back, the run is archived and lets go (no run of this
	// test is left for the next tests' operators to count).
	store.down.Store(false)
	NewWithT(t).Eventually(func() []string {
		return get(t, waiting).Finalizers
	}, 20*time.Second, 20*time.Millisecond).ShouldNot(ContainElement(v1alpha1.FinalizerArchive))
}
