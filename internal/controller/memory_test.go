package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

func memRun(uid, rv string) *v1alpha1.AgentRun {
	return &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run", UID: types.UID(uid), ResourceVersion: rv}}
}

var memKey = types.NamespacedName{Namespace: "ns", Name: "run"}

func TestMemory_forgetLeavesNothingOfTheRun(t *testing.T) {
	m := newMemory()
	fill := func(uid types.UID) {
		m.track(types.NamespacedName{Namespace: "ns", Name: string(uid)}, uid)
		m.keepKit(uid, &Kit{})
		m.keepSaved(uid, &saved{chunks: 1})
		m.keepDeferred(uid, &deferred{status: &v1alpha1.AgentRunStatus{}, over: "1", since: time.Now()})
		m.remember("1", memRun(string(uid), "2"))
		m.caughtUp(types.NamespacedName{Namespace: "ns", Name: string(uid)}, uid, "3")
		m.panicked(uid)
		m.keepHigh(uid, highWater{seq: 3, recorded: 3})
	}
	fill("a")
	one := m.size()
	if one != 8 {
		t.Fatalf("one run filled %d entries, want one in each of the 8 maps", one)
	}
	fill("b")
	m.forget("a")
	if got := m.size(); got != one {
		t.Errorf("after forgetting a, %d entries are held, want b's %d", got, one)
	}
	if m.kit("a") != nil || m.saved("a") != nil || m.deferredOver("a", "1") != nil {
		t.Error("a's kit, transcript or deferred status outlived forget")
	}
	if m.kit("b") == nil || m.saved("b") == nil {
		t.Error("forgetting a dropped b's memory")
	}
	m.forget("b")
	if got := m.size(); got != 0 {
		t.Errorf("%d entries held after forgetting every run", got)
	}
}

func TestMemory_aRunRecreatedUnderItsNameReplacesTheOld(t *testing.T) {
	m := newMemory()
	if _, replaced := m.track(memKey, "old"); replaced {
		t.Error("the first run of a name replaced something")
	}
	if _, replaced := m.track(memKey, "old"); replaced {
		t.Error("the same run tracked again replaced itself")
	}
	old, replaced := m.track(memKey, "new")
	if !replaced || old != "old" {
		t.Errorf("track of a new UID under the name = (%q, %t), want (old, true)", old, replaced)
	}
	if uid, ok := m.uidOf(memKey); !ok || uid != "new" {
		t.Errorf("uidOf = (%q, %t), want new", uid, ok)
	}
	if m.runs() != 1 {
		t.Errorf("%d runs held, want 1", m.runs())
	}
}

func TestMemory_deferredStatusHoldsOnlyOverTheVersionItWasNewerThan(t *testing.T) {
	m := newMemory()
	m.keepDeferred("a", &deferred{status: &v1alpha1.AgentRunStatus{Turn: 3}, over: "10", since: time.Now()})
	if d := m.deferredOver("a", "10"); d == nil || d.status.Turn != 3 {
		t.Fatalf("deferredOver the version it was newer than = %+v, want turn 3", d)
	}
	if d := m.deferredOver("a", "11"); d != nil {
		t.Error("a deferred status survived someone else's write of the run")
	}
	if d := m.deferredOver("a", "10"); d != nil {
		t.Error("a deferred status dropped for a newer version came back")
	}
	m.keepDeferred("b", &deferred{status: &v1alpha1.AgentRunStatus{}, over: "1"})
	m.keepDeferred("b", nil)
	if m.deferredOver("b", "1") != nil {
		t.Error("keepDeferred(nil) left the status deferred")
	}
}

// Read-your-own-writes: while the cache still holds a version one of our
// writes replaced, a reconcile reads our write; once the cache delivers it,
// or anyone else writes, it reads the cache.
func TestMemory_freshestReadsOurWriteUntilTheCacheCatchesUp(t *testing.T) {
	m := newMemory()
	m.track(memKey, "a")
	m.remember("10", memRun("a", "11"))
	m.remember("11", memRun("a", "12"))
	for _, stale := range []string{"10", "11"} {
		if got := m.freshest(memRun("a", stale)); got.ResourceVersion != "12" {
			t.Errorf("cache at %s: freshest read %s, want our write 12", stale, got.ResourceVersion)
		}
	}
	if got := m.freshest(memRun("a", "13")); got.ResourceVersion != "13" {
		t.Errorf("someone else wrote 13: freshest read %s", got.ResourceVersion)
	}
	if got := m.freshest(memRun("a", "10")); got.ResourceVersion != "10" {
		t.Error("our write was still read after the cache moved past it")
	}

	m.remember("13", memRun("a", "14"))
	if !m.caughtUp(memKey, "a", "14") {
		t.Error("the cache delivering our write was not recognised")
	}
	if m.size() != 1 { // the name alone
		t.Errorf("%d entries held once the cache caught up, want only the name", m.size())
	}
}

// The watch may deliver our write before the patch returns: remember then
// keeps no copy, and the event was not ours to skip.
func TestMemory_aWriteTheCacheDeliveredFirstIsNotKept(t *testing.T) {
	m := newMemory()
	m.track(memKey, "a")
	if m.caughtUp(memKey, "a", "11") {
		t.Error("an event before any write of ours was taken for ours")
	}
	m.remember("10", memRun("a", "11"))
	if got := m.freshest(memRun("a", "11")); got.ResourceVersion != "11" {
		t.Errorf("freshest = %s", got.ResourceVersion)
	}
	if m.size() != 1 {
		t.Errorf("%d entries held, want only the name: the write the cache had was kept", m.size())
	}
	// An untracked run's events are not noted at all.
	m.caughtUp(types.NamespacedName{Namespace: "ns", Name: "other"}, "b", "5")
	if m.size() != 1 {
		t.Error("an event of a run this process holds nothing for was noted")
	}
}
