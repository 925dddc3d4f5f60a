package freshread

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gatedReads counts reads and holds each until released, so that a test
// decides who asks while a read is in flight.
type gatedReads struct {
	n       atomic.Int64
	started chan int64
	release chan struct{}
}

func newGatedReads() *gatedReads {
	return &gatedReads{started: make(chan int64, 16), release: make(chan struct{})}
}

func (g *gatedReads) read(context.Context) (int64, error) {
	n := g.n.Add(1)
	g.started <- n
	<-g.release
	return n, nil
}

func waitStarted(t *testing.T, g *gatedReads) int64 {
	t.Helper()
	select {
	case n := <-g.started:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no read started")
		return 0
	}
}

// A caller that asks while a read is in flight never gets that read's
// result: it gets the next read, which begins after it asked.
func TestDo_aCallerDuringAReadGetsTheNextOne(t *testing.T) {
	var g Group[int64]
	reads := newGatedReads()
	results := make([]chan int64, 3)
	ask := func(i int) {
		results[i] = make(chan int64, 1)
		go func() {
			v, err := g.Do(context.Background(), "k", reads.read)
			if err != nil {
				t.Error(err)
			}
			results[i] <- v
		}()
	}
	// asked waits until n callers have asked.
	asked := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			g.mu.Lock()
			s := g.keys["k"]
			ok := s != nil && s.asked == n
			g.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d callers did not all ask", n)
			}
			time.Sleep(time.Millisecond)
		}
	}

	ask(0)
	if n := waitStarted(t, reads); n != 1 {
		t.Fatalf("first read is number %d", n)
	}
	ask(1) // asks while read 1 is in flight
	asked(2)
	reads.release <- struct{}{}
	if n := waitStarted(t, reads); n != 2 {
		t.Fatalf("second read is number %d", n)
	}
	ask(2) // asks while read 2 is in flight
	asked(3)
	close(reads.release)
	for i, want := range []int64{1, 2, 3} {
		if v := <-results[i]; v != want {
			t.Errorf("caller %d got read %d, want %d (the first read that began after it asked)", i, v, want)
		}
	}
}

// Callers that ask together share a few reads, not one each.
func TestDo_sharesReadsAmongCallersThatAskTogether(t *testing.T) {
	var g Group[int]
	var reads atomic.Int64
	read := func(context.Context) (int, error) {
		reads.Add(1)
		time.Sleep(20 * time.Millisecond) // a read that takes a while, as a live LIST does under load
		return 7, nil
	}
	var wg sync.WaitGroup
	const callers = 50
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := g.Do(context.Background(), "k", read); v != 7 || err != nil {
				t.Errorf("Do = %d, %v", v, err)
			}
		}()
	}
	wg.Wait()
	if n := reads.Load(); n < 1 || n > callers/5 {
		t.Errorf("%d reads for %d callers asking together, want at most %d", n, callers, callers/5)
	}
	g.mu.Lock()
	left := len(g.keys)
	g.mu.Unlock()
	if left != 0 {
		t.Errorf("%d keys kept after every read ended", left)
	}
}

// Keys are read apart, and a read's error reaches every caller of its
// round.
func TestDo_keysApartErrorsShared(t *testing.T) {
	var g Group[string]
	boom := errors.New("boom")
	if _, err := g.Do(context.Background(), "a", func(context.Context) (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Errorf("error = %v, want boom", err)
	}
	v, err := g.Do(context.Background(), "b", func(context.Context) (string, error) { return "b", nil })
	if v != "b" || err != nil {
		t.Errorf("key b = %q, %v", v, err)
	}
}

// A caller whose context ends stops waiting; the read still ends for the
// others, and the next caller is served.
func TestDo_aCancelledCallerStopsWaiting(t *testing.T) {
	var g Group[int64]
	reads := newGatedReads()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, "k", reads.read)
		errc <- err
	}()
	waitStarted(t, reads)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled caller kept waiting")
	}
	close(reads.release)
	v, err := g.Do(context.Background(), "k", func(context.Context) (int64, error) { return 42, nil })
	if v != 42 || err != nil {
		t.Errorf("after a cancelled caller, Do = %d, %v; want 42", v, err)
	}
}

// A read that hangs holds the callers after it for about Patience, not
// until it ends: their read starts beside it.
func TestDo_aHungReadDelaysTheNextByPatienceOnly(t *testing.T) {
	var g Group[int64]
	reads := newGatedReads()
	defer close(reads.release)
	go func() { _, _ = g.Do(context.Background(), "k", reads.read) }()
	waitStarted(t, reads) // read 1 hangs until the test ends
	got := make(chan int64, 1)
	go func() {
		v, _ := g.Do(context.Background(), "k", func(context.Context) (int64, error) { return 2, nil })
		got <- v
	}()
	select {
	case v := <-got:
		if v != 2 {
			t.Errorf("the caller after a hung read got %d, want 2", v)
		}
	case <-time.After(Patience + 10*time.Second):
		t.Fatalf("the caller after a hung read still waits, %v after Patience", 10*time.Second)
	}
}
