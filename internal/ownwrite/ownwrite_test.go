package ownwrite

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func obj(uid types.UID, rv, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: uid, ResourceVersion: rv},
		Data: map[string]string{"v": data}}
}

var key = types.NamespacedName{Namespace: "ns", Name: "a"}

// A read at any version our chain of writes replaced is behind us and
// gets our last write, as a copy; any other version gets the read, and
// the write is dropped.
func TestFreshest_followsTheChainOfOurWrites(t *testing.T) {
	w := New[types.NamespacedName, *corev1.ConfigMap]()
	w.Wrote(key, "1", obj("u", "2", "first"))
	w.Wrote(key, "2", obj("u", "3", "second"))
	for _, rv := range []string{"1", "2"} {
		got := w.Freshest(key, obj("u", rv, "stale"))
		if got.ResourceVersion != "3" || got.Data["v"] != "second" {
			t.Fatalf("read at %s: got version %s %q, want our write 3", rv, got.ResourceVersion, got.Data["v"])
		}
		got.Data["v"] = "changed by the caller"
	}
	if got := w.Freshest(key, obj("u", "1", "stale")); got.Data["v"] != "second" {
		t.Errorf("a caller's change reached the cache: %q", got.Data["v"])
	}
	if got := w.Freshest(key, obj("u", "9", "theirs")); got.ResourceVersion != "9" {
		t.Errorf("a version someone else wrote: got %s, want the read", got.ResourceVersion)
	}
	if w.Has(key) {
		t.Error("our write was kept after a newer version was read")
	}
}

// An object deleted and made again under the same key is not ours,
// whatever its version says.
func TestWrote_aNewObjectIsNotOurs(t *testing.T) {
	w := New[types.NamespacedName, *corev1.ConfigMap]()
	w.Wrote(key, "1", obj("u", "2", "old object"))
	if got := w.Freshest(key, obj("v", "1", "new object")); got.GetUID() != "v" {
		t.Errorf("a new object with our old version read our write of the old one")
	}
	w.Wrote(key, "1", obj("u", "2", ""))
	w.Wrote(key, "7", obj("v", "8", "")) // the object was made again
	if got := w.Freshest(key, obj("v", "2", "")); got.ResourceVersion != "2" {
		t.Errorf("a version of the old object counted for the new one: got %s", got.ResourceVersion)
	}
}

// A write over a version that is not our last one (someone else wrote in
// between, or it was read from the API server, ahead of the cache) keeps
// what came before: our last write, and what it replaced, are older than
// the new write, and a cache still at any of them is behind it.
func TestWrote_aBrokenChainKeepsWhatIsOlder(t *testing.T) {
	w := New[types.NamespacedName, *corev1.ConfigMap]()
	w.Wrote(key, "1", obj("u", "2", ""))
	w.Wrote(key, "5", obj("u", "6", "ours")) // someone else wrote 3..5
	for _, rv := range []string{"1", "2", "5"} {
		if got := w.Freshest(key, obj("u", rv, "")); got.ResourceVersion != "6" {
			t.Errorf("a cache at %s: got %s, want our write 6", rv, got.ResourceVersion)
		}
	}
	if got := w.Freshest(key, obj("u", "4", "theirs")); got.ResourceVersion != "4" {
		t.Errorf("a version we never saw: got %s, want the read", got.ResourceVersion)
	}
}

// A write the cache delivered before the write's call returned is not
// kept; CaughtUp of our write forgets it; Forget leaves nothing.
func TestCaughtUp_dropsWhatTheCacheHolds(t *testing.T) {
	w := New[types.NamespacedName, *corev1.ConfigMap]()
	if w.CaughtUp(key, "2", true) {
		t.Error("a version before any write of ours was taken for ours")
	}
	w.Wrote(key, "1", obj("u", "2", ""))
	if w.Len() != 0 {
		t.Errorf("%d entries held after a write the cache had already delivered", w.Len())
	}
	w.Wrote(key, "2", obj("u", "3", ""))
	if !w.CaughtUp(key, "3", true) || w.Len() != 0 {
		t.Errorf("the cache delivering our write: %d entries left", w.Len())
	}
	w.CaughtUp(key, "7", false)
	w.Wrote(key, "3", obj("u", "4", ""))
	w.CaughtUp(key, "8", true)
	w.Forget(key)
	if w.Len() != 0 {
		t.Errorf("Forget left %d entries", w.Len())
	}
}
