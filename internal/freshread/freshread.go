// Package freshread shares live reads between callers without making any
// of them staler: a caller gets the result of a read that began after it
// asked, never one already under way.
//
// This is group commit applied to reads. Per key, at most one read is in
// flight. Callers that ask while it is in flight wait for it to end, and
// then share the one read that starts next. When many runs start at once
// (an evaluation's cases, a schedule's burst, a test harness), each key is
// read about once per read's duration instead of once per caller, and each
// caller still sees everything written before it asked, as a read of its
// own would.
package freshread

import (
	"context"
	"sync"
	"time"
)

// Timeout bounds one shared read: the callers' own contexts are not
// passed to it, since any of them may be cancelled while the others wait.
const Timeout = 30 * time.Second

// Patience is how long callers wait for a read in flight to end before
// the read they share starts anyway, beside it: a read that hangs delays
// the next ones by this much, not until it times out.
const Patience = time.Second

// Group shares reads by key. The zero value is ready to use; a Group must
// not be copied after first use.
type Group[T any] struct {
	mu   sync.Mutex
	keys map[string]*slot[T]
}

// slot is one key's state: the round that callers asking now join, and
// the goroutines serving the key's rounds.
type slot[T any] struct {
	next    *round[T]
	serving int       // goroutines serving rounds of the key
	reading int       // of them, those with a read in flight
	newest  time.Time // when the newest read in flight began
	asked   int       // calls of Do since the key was last forgotten
}

// round is one read and the callers that share it.
type round[T any] struct {
	read func(context.Context) (T, error) // of the caller that opened the round
	done chan struct{}
	val  T
	err  error
}

// Do returns what read returns, from a read of key that began after Do was
// called. Callers of Do with the same key may share one read (the read
// function of whichever of them asked first), so what a read returns must
// depend on the key alone. It runs with a context of its own, bounded by
// Timeout. Do returns early with ctx's error when ctx ends first.
func (g *Group[T]) Do(ctx context.Context, key string, read func(context.Context) (T, error)) (T, error) {
	g.mu.Lock()
	if g.keys == nil {
		g.keys = map[string]*slot[T]{}
	}
	s := g.keys[key]
	if s == nil {
		s = &slot[T]{}
		g.keys[key] = s
	}
	s.asked++
	r := s.next
	if r == nil {
		r = &round[T]{read: read, done: make(chan struct{})}
		s.next = r
	}
	g.kick(key, s)
	g.mu.Unlock()
	select {
	case <-r.done:
		return r.val, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// kick starts serving the key's waiting round when nothing serves the key,
// or when every read in flight has run past Patience. g.mu is held.
func (g *Group[T]) kick(key string, s *slot[T]) {
	if s.next == nil || g.keys[key] != s {
		return
	}
	if s.serving == 0 || (s.reading == s.serving && time.Since(s.newest) >= Patience) {
		s.serving++
		go g.serve(key, s)
	}
}

// serve reads the key's rounds one after another, until a read ends with
// no caller waiting for the next; the last to stop forgets the key.
func (g *Group[T]) serve(key string, s *slot[T]) {
	for {
		g.mu.Lock()
		r := s.next
		if r == nil {
			s.serving--
			if s.serving == 0 {
				delete(g.keys, key)
			}
			g.mu.Unlock()
			return
		}
		// From here on, a caller joins the round after this one: the read
		// below may already be under way when it asks.
		s.next = nil
		s.reading++
		s.newest = time.Now()
		late := time.AfterFunc(Patience, func() {
			g.mu.Lock()
			g.kick(key, s)
			g.mu.Unlock()
		})
		g.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), Timeout)
		r.val, r.err = r.read(ctx)
		cancel()
		late.Stop()
		g.mu.Lock()
		s.reading--
		g.mu.Unlock()
		close(r.done)
	}
}
