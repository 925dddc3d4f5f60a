package budget

import (
	"sync"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// MaxAttempts bounds the compare-and-swap retries of one write to a
// budget in one reconcile (a run's lease, the AgentBudget reconciler's
// settling); beyond it the reconcile gives up for now and is retried: a
// contended ledger delays, never overspends.
const MaxAttempts = 32

// Ledgers serialises this process's writes to each AgentBudget and
// remembers the last version it wrote. Every writer of a budget in the
// operator (runs leasing, the AgentBudget reconciler settling) takes the
// budget's lock and starts from that version, so the operator's own
// writes never conflict with each other and need no read first: under a
// burst of runs, a lease is one write instead of a storm of conflicts
// and re-reads. The compare-and-swap on resourceVersion still guards
// every write, against anyone else (a person editing the budget, another
// operator process during a leader hand-over): a conflict re-reads and
// retries.
//
// Ledgers also counts the writes and their conflicts (Collectors), for
// both reconcilers alike.
type Ledgers struct {
	mu    sync.Mutex
	locks map[types.NamespacedName]*sync.Mutex
	last  map[types.NamespacedName]*v1alpha1.AgentBudget

	writes    *prometheus.CounterVec
	conflicts prometheus.Counter
}

// NewLedgers returns an empty book. A process has one, which both the
// AgentBudget and the AgentRun reconciler write through; the operator
// registers its Collectors.
func NewLedgers() *Ledgers {
	return &Ledgers{locks: map[types.NamespacedName]*sync.Mutex{}, last: map[types.NamespacedName]*v1alpha1.AgentBudget{},
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Subsystem: "budget", Name: "writes_total",
			Help: "Status writes to AgentBudgets that the API server accepted, by what they did (lease: a run took or extended a lease; refused: a refusal was recorded; settle: the AgentBudget reconciler closed leases, expired them or rolled the window).",
		}, []string{"kind"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "agentrun", Subsystem: "budget", Name: "lease_conflicts_total",
			Help: "Lease writes refused because the AgentBudget changed since it was read; each is retried on a fresh read.",
		}),
	}
}

// Collectors is the book's metrics, for the operator to register with the
// others it serves.
func (l *Ledgers) Collectors() []prometheus.Collector {
	return []prometheus.Collector{l.writes, l.conflicts}
}

// Lock takes the budget's lock and returns its unlock.
func (l *Ledgers) Lock(key types.NamespacedName) func() {
	l.mu.Lock()
	m := l.locks[key]
	if m == nil {
		m = &sync.Mutex{}
		l.locks[key] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// Latest returns the newer of read (from the cache) and our last write of
// the same object; the caller holds the budget's lock. Our last write is
// newer unless the cache has caught up with it or someone else wrote
// since, which the write's conflict will tell. A read of a later spec
// (a higher generation) is newer than our write: our write succeeded, so
// the spec changed after it. Without this check a step refused on our
// write's older spec (a lower limit or share) writes nothing, so no
// conflict would ever show the new one.
func (l *Ledgers) Latest(read *v1alpha1.AgentBudget) *v1alpha1.AgentBudget {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.last[keyOf(read)]
	if w == nil || w.UID != read.UID || w.ResourceVersion == read.ResourceVersion || read.Generation > w.Generation {
		return read
	}
	return w
}

// Wrote records our write, which the API server accepted, and counts it
// by kind (lease, refused, settle).
func (l *Ledgers) Wrote(kind string, b *v1alpha1.AgentBudget) {
	l.writes.WithLabelValues(kind).Inc()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last[keyOf(b)] = b.DeepCopy()
}

// Conflicted counts a write refused on a changed budget and forgets our
// last write of it: the writer reads it again.
func (l *Ledgers) Conflicted(key types.NamespacedName) {
	l.conflicts.Inc()
	l.Forget(key)
}

// Forget drops our last write of the budget (it is gone, or changed).
func (l *Ledgers) Forget(key types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.last, key)
}

func keyOf(b *v1alpha1.AgentBudget) types.NamespacedName {
	return types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
}
