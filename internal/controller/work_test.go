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

// Work a reconcile waits for (await) and that ends while it waits is the
// reconcile's to apply: its end enqueues nothing, so the run is not
// reconciled a second time for it. Work that outlasts the wait enqueues
// the run when it ends, as any work does.
func TestTracker_awaitedWorkEnqueuesNothing(t *testing.T) {
	tr := newTracker(nil)
	run := &v1alpha1.AgentRun{}
	run.Name, run.Namespace, run.UID = "fast", "default", "uid-fast"

	tr.start(context.Background(), run, "tools/t1", func(context.Context, *work) {})
	if !tr.await(run.UID, "tools/t1", 10*time.Second) {
		t.Fatal("await reported work that ended at once as not ended")
	}
	if w := tr.finished(run.UID, "tools/t1"); w == nil {
		t.Fatal("the awaited work is not finished")
	}
	select {
	case ev := <-tr.wakeup:
		t.Fatalf("the awaited work enqueued %s", ev.Object.GetName())
	default:
	}
	tr.clear(run.UID, "tools/t1")

	release := make(chan struct{})
	tr.start(context.Background(), run, "tools/t2", func(context.Context, *work) { <-release })
	if tr.await(run.UID, "tools/t2", time.Millisecond) {
		t.Fatal("await reported unfinished work as ended")
	}
	if tr.await(run.UID, "tools/other", time.Millisecond) {
		t.Fatal("await reported work under another key as ended")
	}
	close(release)
	select {
	case ev := <-tr.wakeup:
		if ev.Object.GetUID() != run.UID {
			t.Fatalf("woke %s, want %s", ev.Object.GetUID(), run.UID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("work that outlasted the wait did not enqueue its run")
	}
}

// A reconcile waits for a batch only when it can end at once: a Job's
// call starts a pod and a child run's takes turns, so a worker would
// wait the full inlineWait on every such batch for nothing.
func TestMayEndAtOnce(t *testing.T) {
	spec := &v1alpha1.AgentRunSpec{}
	spec.Tools = []v1alpha1.ToolSpec{
		{Name: "get", Builtin: v1alpha1.BuiltinTool("kubernetes.get")},
		{Name: "fetch", HTTP: &v1alpha1.HTTPTool{URL: "http://example.test"}},
		{Name: "build", Job: &v1alpha1.JobTool{Image: "busybox"}},
		{Name: "ask", Agent: &v1alpha1.AgentTool{}},
	}
	for _, tc := range []struct {
		tools []string
		want  bool
	}{
		{[]string{"get", "fetch"}, true},
		{[]string{"get", "build"}, false},
		{[]string{"ask"}, false},
	} {
		var calls []loop.Invocation
		for _, n := range tc.tools {
			calls = append(calls, loop.Invocation{Tool: n})
		}
		if got := mayEndAtOnce(spec, calls); got != tc.want {
			t.Errorf("mayEndAtOnce(%v) = %v, want %v", tc.tools, got, tc.want)
		}
	}
	if mayEndAtOnce(nil, []loop.Invocation{{Tool: "get"}}) {
		t.Error("a kit without its spec: want no wait")
	}
}
