package controller

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
)

// A call in flight may wait minutes on a model; what waits with it is the
// run's identity, not the decoded run (spec, tool schemas, status), which
// the informer already holds once and which a thousand waiting runs would
// otherwise hold twice.
func TestTracker_callInFlightDoesNotKeepTheRun(t *testing.T) {
	tr := newTracker(nil)
	release := make(chan struct{})
	run := &v1alpha1.AgentRun{}
	run.Name, run.Namespace, run.UID = "waiting", "default", "uid-waiting"
	run.Spec.Goal = string(make([]byte, 1<<20)) // big enough to notice
	kept := weak.Make(run)
	tr.start(context.Background(), run, "model/1", func(ctx context.Context, w *work) {
		<-release
		w.reply = &loop.Reply{Content: "done"}
	})
	run = nil

	deadline := time.Now().Add(5 * time.Second)
	for kept.Value() != nil && time.Now().Before(deadline) {
		runtime.GC()
		runtime.Gosched()
	}
	if kept.Value() != nil {
		t.Fatal("the decoded run is still reachable while its call is in flight")
	}

	close(release)
	select {
	case ev := <-tr.wakeup:
		if ev.Object.GetName() != "waiting" || ev.Object.GetNamespace() != "default" || ev.Object.GetUID() != "uid-waiting" {
			t.Fatalf("woke %s/%s (%s), want default/waiting (uid-waiting)", ev.Object.GetNamespace(), ev.Object.GetName(), ev.Object.GetUID())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the finished call did not wake its run")
	}
	if w := tr.finished("uid-waiting", "model/1"); w == nil || w.reply == nil || w.reply.Content != "done" {
		t.Fatalf("finished work = %+v, want the reply kept until clear", w)
	}
}
