package weakcache

import (
	"errors"
	"runtime"
	"testing"
)

type value struct{ s string }

func TestGet_sharesAValueWhileItIsHeldAndForgetsItOnceFreed(t *testing.T) {
	var c Cache[string, value]
	builds := 0
	build := func(s string) func() (*value, error) {
		return func() (*value, error) { builds++; return &value{s}, nil }
	}
	func() { // the values are held only inside
		a, _ := c.Get("a", build("a"))
		again, _ := c.Get("a", build("a"))
		b, _ := c.Get("b", build("b"))
		if a != again || builds != 2 || a == b || b.s != "b" {
			t.Fatalf("a=%p again=%p b=%p builds=%d", a, again, b, builds)
		}
	}()
	// Cleanups run after a collection, on their own goroutine: collect
	// until both entries are gone, a bounded number of times.
	for i := 0; i < 200 && c.Len() > 0; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if n := c.Len(); n != 0 {
		t.Fatalf("%d entries left after their values were freed", n)
	}
	if _, _ = c.Get("a", build("a")); builds != 3 {
		t.Fatalf("builds = %d, want a fresh build once the value was freed", builds)
	}
}

func TestGet_keepsNothingWhenTheBuildFails(t *testing.T) {
	var c Cache[int, value]
	boom := errors.New("boom")
	if v, err := c.Get(1, func() (*value, error) { return nil, boom }); v != nil || !errors.Is(err, boom) {
		t.Fatalf("v=%v err=%v", v, err)
	}
	if c.Len() != 0 {
		t.Fatalf("a failed build was kept")
	}
}
