package controller

import (
	"context"
	"sync"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/platform"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// work is one model call or one group of tool calls running outside the
// reconcile worker. A slow model or tool on one run never holds a worker:
// the reconcile that starts the work returns at once, and the work's end
// enqueues the run again.
type work struct {
	key     string
	done    bool
	reply   *loop.Reply
	err     error
	results []loop.Result
	// kit is a built kit (the work that builds one, see loadKit).
	kit *Kit
	// template is the record of the template a built kit's run was made
	// from, for status.template.
	template *v1alpha1.TemplateStatus
	// governed is what the platform's policies made of the run whose kit
	// the work builds (govern).
	governed *governed
	// judgement is a finished run's judgement (judging.go).
	judgement *v1alpha1.JudgementStatus
	cancel    context.CancelFunc
	// ended is closed when the work has ended (not when it was
	// cancelled); awaited says a reconcile waits for it (await), which
	// then advances the run itself: the end enqueues nothing.
	ended   chan struct{}
	awaited bool
	// reads are the free reads a model's answer proposed, started under
	// readsKey before that answer was saved (advance): they stay with the
	// answer until a save holds both, so a failed save does not run them
	// again.
	reads    *reads
	readsKey string
}

// governed is a run as the platform's policies govern it, or why they do
// not let it run, or why they could not be read.
type governed struct {
	// run is the run built: its author's, with the policies' ceilings
	// lowered and prices raised (changes says which).
	run     *v1alpha1.AgentRun
	changes []string
	// grant is what the policies open to the run's model calls and HTTP
	// and MCP tools, on top of the operator's egress.
	grant     egress.Grant
	approvers platform.Approvers
	// refused: the policies do not let the run run (final).
	refused error
	// unread: the policies could not be read (tried again).
	unread error
}

// tracker holds the work in flight in this process, by run. After a
// restart it is empty: a run whose checkpoint says a call is in flight,
// with no work here, lost that call, and the engine decides what that
// means (charge and call again, adopt a Job, or report an unknown outcome).
type tracker struct {
	mu     sync.Mutex
	items  map[types.UID]*work
	wakeup chan event.GenericEvent
	// metrics counts the panics of work (nil counts nothing).
	metrics *Metrics
}

func newTracker(m *Metrics) *tracker {
	return &tracker{items: map[types.UID]*work{}, wakeup: make(chan event.GenericEvent, 1024), metrics: m}
}

// get returns the run's work with this key, or nil.
func (t *tracker) get(uid types.UID, key string) *work {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.items[uid]
	if w == nil || w.key != key {
		return nil
	}
	cp := *w
	return &cp
}

// busy reports whether the run has unfinished work with this key.
func (t *tracker) busy(uid types.UID, key string) bool {
	w := t.get(uid, key)
	return w != nil && !w.done
}

// start runs fn in its own goroutine as the run's work under key; when it
// returns, the run is enqueued again.
func (t *tracker) start(ctx context.Context, run *v1alpha1.AgentRun, key string, fn func(ctx context.Context, w *work)) {
	ctx, cancel := context.WithCancel(ctx)
	t.mu.Lock()
	if old := t.items[run.UID]; old != nil && old.cancel != nil && old.key != key {
		old.cancel()
	}
	if old := t.items[run.UID]; old != nil && old.key == key && !old.done {
		t.mu.Unlock()
		cancel()
		return // already running
	}
	w := &work{key: key, cancel: cancel, ended: make(chan struct{})}
	t.items[run.UID] = w
	t.mu.Unlock()

	// The goroutine keeps only the run's identity: the decoded run (spec,
	// tool schemas, status) can be collected while the call waits.
	uid, name, namespace := run.UID, run.Name, run.Namespace
	go func() {
		var out work
		func() {
			// A panic here would end the whole operator (every tenant's
			// runs) for one run's defect: it becomes this work's error.
			defer func() {
				if p := recover(); p != nil {
					out.err = recovered(ctx, t.metrics, "work", p)
				}
			}()
			fn(ctx, &out)
		}()
		if ctx.Err() != nil {
			// Cancelled by a shutdown or because the run was forgotten:
			// what came back is an interruption, not the call's result.
			// A new operator finds the call in flight and resumes it
			// (adopting a Job, repeating a read, or reporting an unknown
			// outcome for anything else).
			return
		}
		t.mu.Lock()
		if cur := t.items[uid]; cur == w {
			w.done, w.reply, w.err, w.results, w.kit, w.template, w.governed, w.judgement = true, out.reply, out.err, out.results, out.kit, out.template, out.governed, out.judgement
		}
		awaited := w.awaited
		t.mu.Unlock()
		close(w.ended)
		if awaited {
			return
		}
		obj := &v1alpha1.AgentRun{}
		obj.Name, obj.Namespace, obj.UID = name, namespace, uid
		t.wakeup <- event.GenericEvent{Object: obj}
	}()
}

// await waits at most d for the run's work with this key to end, and
// reports whether it did. While it waits, the work's end enqueues nothing:
// the caller advances the run when await returns true. When it returns
// false the work's end enqueues the run, as it would have.
func (t *tracker) await(uid types.UID, key string, d time.Duration) bool {
	t.mu.Lock()
	w := t.items[uid]
	if w == nil || w.key != key {
		t.mu.Unlock()
		return false
	}
	if w.done {
		t.mu.Unlock()
		return true
	}
	w.awaited = true
	t.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-w.ended:
		return true
	case <-timer.C:
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if w.done {
		return true
	}
	w.awaited = false
	return false
}

// finished returns the run's finished work with this key, or nil. The work
// stays until clear: what it brought back is kept in memory until the
// run's status holds it.
func (t *tracker) finished(uid types.UID, key string) *work {
	w := t.get(uid, key)
	if w == nil || !w.done {
		return nil
	}
	return w
}

// clear drops the run's finished work with this key, once saved.
func (t *tracker) clear(uid types.UID, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.items[uid]; w != nil && w.key == key && w.done {
		delete(t.items, uid)
	}
}

// forget cancels and drops whatever the run had in flight.
func (t *tracker) forget(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.items[uid]; w != nil {
		if w.cancel != nil {
			w.cancel()
		}
		if w.reads != nil {
			w.reads.cancel()
		}
		delete(t.items, uid)
	}
}

// readsAfter returns the reads started after the run's finished work with
// this key (a model's answer) under readsKey, or nil.
func (t *tracker) readsAfter(uid types.UID, key, readsKey string) *reads {
	w := t.finished(uid, key)
	if w == nil || w.readsKey != readsKey {
		return nil
	}
	return w.reads
}

// follow keeps b, started under readsKey, with the run's finished work
// with this key (see readsAfter).
func (t *tracker) follow(uid types.UID, key, readsKey string, b *reads) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.items[uid]; w != nil && w.key == key && w.done {
		w.reads, w.readsKey = b, readsKey
	}
}

// inlineWait is how long a reconcile waits for the kit build or the tools
// it started (advance, for free reads) before it returns, and maxInline
// how many times one reconcile advances a run again after such a wait. A
// model call is never waited for: it takes seconds.
const (
	inlineWait = 20 * time.Millisecond
	maxInline  = 4
)
