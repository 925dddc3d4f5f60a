// Package ownwrite remembers the operator's own last write of each
// object, for the reads that come before the informer cache has caught
// up with it.
//
// A controller that writes an object and is woken again at once (a model
// that answers in a millisecond, a burst of leases on one budget) can
// read the cache before the cache has seen its write. Acting on that copy
// costs a conflict and a round trip, or worse, acts on a state the object
// has left. Writes keeps the object as our last write left it, with the
// versions known to be older than it (those our writes replaced since the
// cache last caught up, and our own earlier writes): a read of one of
// those is behind us, and the write is what to act on. Any other version
// is taken as newer than anything we wrote (the cache caught up, or
// someone else wrote since), and the entry is dropped; a wrong guess costs
// a conflict, never a lost write.
//
// It is the one such cache of the operator: the AgentRun reconciler's
// status writes and the budget ledgers' both use it.
package ownwrite

import (
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Writes holds our last write of each object, by key K. The zero value is
// not ready: build it with New.
type Writes[K comparable, T client.Object] struct {
	mu      sync.Mutex
	written map[K]written[T]
	// seen is the last version the cache delivered of an object that
	// was not (yet) our remembered write (see CaughtUp).
	seen map[K]string
}

type written[T client.Object] struct {
	obj T
	// ours are versions older than obj: those our writes replaced since
	// the cache last caught up, and our own earlier writes.
	ours map[string]bool
}

// New returns an empty cache.
func New[K comparable, T client.Object]() *Writes[K, T] {
	return &Writes[K, T]{written: map[K]written[T]{}, seen: map[K]string{}}
}

// Freshest returns our last write of the object when read is a version
// known to be older than it (one our writes replaced, or an earlier write
// of ours); else read, and our write is forgotten. The write returned is
// a copy: callers may change it.
func (w *Writes[K, T]) Freshest(k K, read T) T {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.written[k]
	if !ok {
		return read
	}
	if e.obj.GetUID() == read.GetUID() && read.GetResourceVersion() != e.obj.GetResourceVersion() && e.ours[read.GetResourceVersion()] {
		return e.obj.DeepCopyObject().(T) // the read is behind our own writes
	}
	delete(w.written, k) // caught up, or someone wrote after us
	return read
}

// Wrote records a write that the API server accepted: obj as it returned,
// which replaced version prev. When the cache has already delivered that
// version (CaughtUp), nothing needs keeping.
//
// A write over a version that is not our last one (someone else wrote in
// between, or we read the object from the API server, ahead of the cache)
// keeps what is known of the same object: our last write was accepted
// before prev was, so it and every version it replaced are older than
// this write too.
func (w *Writes[K, T]) Wrote(k K, prev string, obj T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[k] == obj.GetResourceVersion() {
		delete(w.seen, k)
		delete(w.written, k)
		return
	}
	e, ok := w.written[k]
	switch {
	case !ok || e.obj.GetUID() != obj.GetUID():
		e = written[T]{ours: map[string]bool{}}
	case e.obj.GetResourceVersion() != prev:
		e.ours[e.obj.GetResourceVersion()] = true
	}
	e.ours[prev] = true
	e.obj = obj.DeepCopyObject().(T)
	w.written[k] = e
}

// CaughtUp tells the cache delivered version rv of the object, and
// reports whether that is our last write (which is then forgotten). The
// watch may deliver a write before the write's call returns: with note,
// the version is kept, so that Wrote keeps no copy of it.
func (w *Writes[K, T]) CaughtUp(k K, rv string, note bool) (ours bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.written[k]; ok && e.obj.GetResourceVersion() == rv {
		delete(w.written, k)
		return true
	}
	if note {
		w.seen[k] = rv
	}
	return false
}

// Forget drops what is held for the object.
func (w *Writes[K, T]) Forget(k K) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.written, k)
	delete(w.seen, k)
}

// Len counts the entries held: a test's check that Forget leaves nothing.
func (w *Writes[K, T]) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.written) + len(w.seen)
}

// Has reports whether a write of the object is held.
func (w *Writes[K, T]) Has(k K) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.written[k]
	return ok
}
