package job

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Wakeups carries the changes of tool Jobs, as the operator's Job informer
// sees them, to the calls that wait on them. With Config.Wakeups set, a
// wait reads its Job when the informer reports a change of it, never on a
// timer once the Job's pod runs: a finished Job ends its call as soon as
// the watch delivers it, and a thousand running tools cost no reads.
type Wakeups struct {
	mu    sync.Mutex
	waits map[types.NamespacedName]map[chan struct{}]struct{}
}

// NewWakeups returns an empty set of waits.
func NewWakeups() *Wakeups {
	return &Wakeups{waits: map[types.NamespacedName]map[chan struct{}]struct{}{}}
}

// Notify wakes every wait on the Job namespace/name. It never blocks: a
// wait that has not yet read an earlier change reads this one with it.
func (w *Wakeups) Notify(namespace, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.waits[types.NamespacedName{Namespace: namespace, Name: name}] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Waiting counts the Jobs that have a wait (for tests and metrics).
func (w *Wakeups) Waiting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waits)
}

// Subscribe returns a channel that receives the changes of the object
// namespace/name that Notify reports, and the function that ends the
// subscription. The agent tools' executor (internal/tools/agent) waits on
// child AgentRuns through it, as Execute waits on Jobs.
func (w *Wakeups) Subscribe(namespace, name string) (<-chan struct{}, func()) {
	return w.subscribe(types.NamespacedName{Namespace: namespace, Name: name})
}

// subscribe returns a channel that receives the Job's changes, and the
// function that ends the subscription.
func (w *Wakeups) subscribe(key types.NamespacedName) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.waits[key] == nil {
		w.waits[key] = map[chan struct{}]struct{}{}
	}
	w.waits[key][ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.waits[key], ch)
		if len(w.waits[key]) == 0 {
			delete(w.waits, key)
		}
	}
}
