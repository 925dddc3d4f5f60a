package plugin

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// scriptedWatches hands out run watches the test controls: the first is a
// fake the test feeds or closes; later ones wait for release, then ask the
// API server with the options watch gave.
type scriptedWatches struct {
	client.WithWatch
	fake      *watch.FakeWatcher
	reopening chan struct{}
	release   chan struct{}
	mu        sync.Mutex
	calls     int
}

func newScriptedWatches(c client.WithWatch) *scriptedWatches {
	return &scriptedWatches{WithWatch: c, fake: watch.NewFakeWithChanSize(8, false), reopening: make(chan struct{}), release: make(chan struct{})}
}

func (s *scriptedWatches) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	if _, ok := list.(*v1alpha1.AgentRunList); !ok {
		return s.WithWatch.Watch(ctx, list, opts...)
	}
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	switch n {
	case 1:
		return s.fake, nil
	case 2:
		close(s.reopening)
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.WithWatch.Watch(ctx, list, opts...)
}

// watchInBackground follows the run r of ns as o says, with a resync of an
// hour unless o sets one: what the test checks must come through watches.
func watchInBackground(t *testing.T, ctx context.Context, c client.WithWatch, ns string, o WatchOptions) (*syncBuffer, <-chan error) {
	t.Helper()
	o.Run = Ref{Namespace: ns, Name: "r"}
	if o.Resync == 0 {
		o.Resync = time.Hour
	}
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		_, err := Watch(ctx, c, o, out)
		done <- err
	}()
	return out, done
}

func waitDone(t *testing.T, ctx context.Context, done <-chan error, out *syncBuffer) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatalf("watch did not end with the run; it printed:\n%s", out.String())
	}
}

// The server closes the run's watch, and the run waits for a person and
// is answered before the watch is open again: the phases in between are
// printed, in order, from the versions the reopened watch replays.
func TestWatch_phasesChangedWhileTheWatchWasClosedAreNotLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) { s.Phase = v1alpha1.PhaseRunning })

	c := newScriptedWatches(k8sClient)
	out, done := watchInBackground(t, ctx, c, ns, WatchOptions{})
	NewWithT(t).Eventually(out.String, 15*time.Second, 20*time.Millisecond).Should(ContainSubstring("phase: Running\n"))

	c.fake.Stop() // the server closed the watch
	select {
	case <-c.reopening:
	case <-ctx.Done():
		t.Fatal("watch did not reopen the run's watch")
	}
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseAwaitingApproval
		s.PendingApprovals = pending("t1-c1")
	})
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseRunning
		s.PendingApprovals = nil
		s.Approvals = []v1alpha1.ApprovalRecord{{CallID: "t1-c1", Decision: v1alpha1.ApprovalApprove, By: "alice"}}
	})
	close(c.release)
	NewWithT(t).Eventually(out.String, 15*time.Second, 20*time.Millisecond).Should(ContainSubstring("answered: t1-c1 approve by alice\n"))
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseSucceeded
		s.Outcome, s.Reason = v1alpha1.OutcomeCompleted, "done"
	})
	waitDone(t, ctx, done, out)

	want := `goal: Find out why the customer was charged twice.
phase: Running
phase: AwaitingApproval
approval needed: t1-c1 issue_refund {"amount_minor":8240} (policy.rules[0]: Refunds above 50.00 need a person.)
  approve: kubectl agentrun approve r t1-c1
  deny:    kubectl agentrun deny r t1-c1
  stop:    kubectl agentrun stop r t1-c1
answered: t1-c1 approve by alice
phase: Running
phase: Succeeded
outcome: Completed
reason: done
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("watch output (-want +got):\n%s", diff)
	}
}

// A watch event queued before a read that saw a newer version arrives
// after it: the older version is not printed again (the phase would go
// back, and an answered call would be asked again).
func TestWatch_anOlderVersionArrivingLateIsNotPrinted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseAwaitingApproval
		s.PendingApprovals = pending("t1-c1")
	})
	stale := get(t, run)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseRunning
		s.PendingApprovals = nil
		s.Approvals = []v1alpha1.ApprovalRecord{{CallID: "t1-c1", Decision: v1alpha1.ApprovalDeny, By: "bob"}}
	})

	c := newScriptedWatches(k8sClient)
	out, done := watchInBackground(t, ctx, c, ns, WatchOptions{})
	NewWithT(t).Eventually(out.String, 15*time.Second, 20*time.Millisecond).Should(ContainSubstring("phase: Running\n"))
	c.fake.Modify(stale) // delivered late, after the read of the newer version
	c.fake.Modify(get(t, run))
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseFailed
		s.Outcome, s.Reason = v1alpha1.OutcomeApprovalDenied, "bob said no"
	})
	c.fake.Modify(get(t, run))
	waitDone(t, ctx, done, out)

	want := `goal: Find out why the customer was charged twice.
answered: t1-c1 deny by bob
phase: Running
phase: Failed
outcome: ApprovalDenied
reason: bob said no
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("watch output (-want +got):\n%s", diff)
	}
}
