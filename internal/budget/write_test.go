package budget

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// budgetClient serves one budget; before each of the first edits status
// writes, someone else (a person, another operator process) changes the
// budget first, as edit says.
func budgetClient(t *testing.T, b *v1alpha1.AgentBudget, edits int, edit func(client.WithWatch, *v1alpha1.AgentBudget)) client.WithWatch {
	t.Helper()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(b).WithStatusSubresource(b).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if edits > 0 {
					edits--
					cur := &v1alpha1.AgentBudget{}
					if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
						return err
					}
					edit(c.(client.WithWatch), cur)
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
}

// A write refused because the budget changed since it was read is
// counted, and change runs again on a fresh read, seeing the change.
func TestWrite_retriesOnAFreshReadAfterAConflict(t *testing.T) {
	b := makeBudget("100")
	var edited *v1alpha1.AgentBudget
	c := budgetClient(t, b, 1, func(c client.WithWatch, cur *v1alpha1.AgentBudget) {
		cur.Status.SettledCostUSD = "40"
		if err := c.Status().Update(context.Background(), cur); err != nil {
			t.Fatal(err)
		}
		edited = cur
	})
	fresh := &v1alpha1.AgentBudget{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(b), fresh); err != nil {
		t.Fatal(err)
	}
	l := NewLedgers()
	var seen []string
	written, err := l.Write(context.Background(), c, c, fresh, "lease", func() time.Time { return t0 },
		func(_, work *v1alpha1.AgentBudget, rolled bool) (bool, error) {
			seen = append(seen, string(work.Status.SettledCostUSD))
			return Lease(work, Request{UID: "r", Run: "r", Exposure: usdAmount("20")}).Changed, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, ","); got != ",40" {
		t.Errorf("change saw settled costs %q, want the first read's (none) then the edit's (40)", got)
	}
	if written == nil || Find(written, "r") == nil || written.Status.SettledCostUSD != "40" {
		t.Fatalf("written = %+v, want the lease on top of the edit", written)
	}
	if got := testutil.ToFloat64(l.conflicts); got != 1 {
		t.Errorf("conflicts counted = %v, want 1", got)
	}
	if got := testutil.ToFloat64(l.written.WithLabelValues("lease")); got != 1 {
		t.Errorf("lease writes counted = %v, want 1", got)
	}
	// A cache still at the edit is behind our write; one still at the
	// first read is not, since the edit came after it and not from us.
	if got := l.latest(edited); got.ResourceVersion != written.ResourceVersion {
		t.Errorf("latest of the edit is version %s, want our write's %s", got.ResourceVersion, written.ResourceVersion)
	}
	if got := l.latest(fresh); got.ResourceVersion != fresh.ResourceVersion {
		t.Errorf("latest of the first read is version %s, want that read's %s", got.ResourceVersion, fresh.ResourceVersion)
	}
}

// What change does not want written is not written, and a budget whose
// window has passed is handed over rolled, saying so.
func TestWrite_writesOnlyWhatChangeAsks(t *testing.T) {
	b := makeBudget("100")
	c := budgetClient(t, b, 0, nil)
	l := NewLedgers()
	var rolledSeen bool
	written, err := l.Write(context.Background(), c, c, b, "lease", func() time.Time { return t0.Add(25 * time.Hour) },
		func(_, _ *v1alpha1.AgentBudget, rolled bool) (bool, error) {
			rolledSeen = rolled
			return false, nil
		})
	if err != nil || written != nil {
		t.Fatalf("Write = %v, %v; want nothing written", written, err)
	}
	if !rolledSeen {
		t.Error("change was not told that the window rolled")
	}
	if got := testutil.ToFloat64(l.written.WithLabelValues("lease")); got != 0 {
		t.Errorf("writes counted = %v, want 0", got)
	}
	stop := errors.New("stop")
	if _, err := l.Write(context.Background(), c, c, b, "lease", func() time.Time { return t0 },
		func(_, _ *v1alpha1.AgentBudget, _ bool) (bool, error) { return true, stop }); !errors.Is(err, stop) {
		t.Errorf("Write = %v, want change's error", err)
	}
}

// A budget deleted under the write is NotFound to the caller, who fails
// closed; one that changes under every attempt is given up for now.
func TestWrite_aBudgetGoneOrAlwaysChangingEndsTheAttempts(t *testing.T) {
	b := makeBudget("100")
	c := budgetClient(t, b, 1, func(c client.WithWatch, cur *v1alpha1.AgentBudget) {
		if err := c.Delete(context.Background(), cur); err != nil {
			t.Fatal(err)
		}
	})
	change := func(_, work *v1alpha1.AgentBudget, _ bool) (bool, error) {
		return Lease(work, Request{UID: "r", Run: "r", Exposure: usdAmount("20")}).Changed, nil
	}
	l := NewLedgers()
	if _, err := l.Write(context.Background(), c, c, b, "lease", func() time.Time { return t0 }, change); !apierrors.IsNotFound(err) {
		t.Errorf("Write on a deleted budget = %v, want NotFound", err)
	}

	b = makeBudget("100")
	var n int
	c = budgetClient(t, b, MaxAttempts, func(c client.WithWatch, cur *v1alpha1.AgentBudget) {
		n++
		cur.Status.ObservedGeneration = int64(n)
		if err := c.Status().Update(context.Background(), cur); err != nil {
			t.Fatal(err)
		}
	})
	fresh := &v1alpha1.AgentBudget{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(b), fresh); err != nil {
		t.Fatal(err)
	}
	_, err := l.Write(context.Background(), c, c, fresh, "lease", func() time.Time { return t0 }, change)
	if !errors.Is(err, ErrContended) || !strings.Contains(err.Error(), "changed under 32 writes in a row") {
		t.Errorf("Write = %v, want it to give up after %d conflicts", err, MaxAttempts)
	}
}

// Open reads the budget under its lock and places the copy: a cache
// behind our own write gets the write; a budget gone is NotFound, with
// the lock still to release.
func TestOpen_readsUnderTheLockAndPlacesTheCopy(t *testing.T) {
	b := makeBudget("100")
	c := budgetClient(t, b, 0, nil)
	key := client.ObjectKeyFromObject(b)
	cached := &v1alpha1.AgentBudget{}
	if err := c.Get(context.Background(), key, cached); err != nil {
		t.Fatal(err)
	}
	l := NewLedgers()
	ours := cached.DeepCopy()
	ours.ResourceVersion = "ours"
	l.Wrote("lease", cached.ResourceVersion, ours)
	got, unlock, err := l.Open(context.Background(), c, key)
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != "ours" {
		t.Errorf("Open with the cache behind our write = version %s, want ours", got.ResourceVersion)
	}
	locked := make(chan struct{})
	go func() { defer l.Lock(key)(); close(locked) }()
	select {
	case <-locked:
		t.Fatal("the budget's lock was free while Open's copy was in use")
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	<-locked

	if err := c.Delete(context.Background(), cached); err != nil {
		t.Fatal(err)
	}
	_, unlock, err = l.Open(context.Background(), c, key)
	unlock()
	if !apierrors.IsNotFound(err) {
		t.Errorf("Open of a deleted budget = %v, want NotFound", err)
	}
}
