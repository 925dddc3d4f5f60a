package budget

import (
	"context"
	"sync"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/ownwrite"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	// writes is our last write of each budget (ownwrite).
	writes *ownwrite.Writes[types.NamespacedName, *v1alpha1.AgentBudget]

	written   *prometheus.CounterVec
	conflicts prometheus.Counter
}

// NewLedgers returns an empty book. A process has one, which both the
// AgentBudget and the AgentRun reconciler write through; the operator
// registers its Collectors.
func NewLedgers() *Ledgers {
	return &Ledgers{locks: map[types.NamespacedName]*sync.Mutex{}, writes: ownwrite.New[types.NamespacedName, *v1alpha1.AgentBudget](),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{
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
	return []prometheus.Collector{l.written, l.conflicts}
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

// Open takes the budget's lock and returns the freshest copy of it this
// process knows, and the lock's release (to call whatever the error). The
// copy is read through cache after the lock is held, then placed by
// latest: a copy read before the lock may predate the versions latest
// remembers (they restart once the cache catches up) and would be taken
// for newer, costing a conflict. A budget that does not exist is the
// reader's NotFound.
func (l *Ledgers) Open(ctx context.Context, cache client.Reader, key types.NamespacedName) (*v1alpha1.AgentBudget, func(), error) {
	unlock := l.Lock(key)
	read := &v1alpha1.AgentBudget{}
	if err := cache.Get(ctx, key, read); err != nil {
		return nil, unlock, err
	}
	return l.latest(read), unlock, nil
}

// latest returns our last write of the budget when read (from the cache)
// is a version our writes replaced, else read (ownwrite); Open is the way
// to call it. Anything else is newer than our write: the cache caught up,
// or someone else wrote since (a person's edit of the spec, which a step
// must be judged on).
func (l *Ledgers) latest(read *v1alpha1.AgentBudget) *v1alpha1.AgentBudget {
	return l.writes.Freshest(keyOf(read), read)
}

// Wrote records our write b, which the API server accepted over version
// prev, and counts it by kind (lease, refused, settle).
func (l *Ledgers) Wrote(kind, prev string, b *v1alpha1.AgentBudget) {
	l.written.WithLabelValues(kind).Inc()
	l.writes.Wrote(keyOf(b), prev, b)
}

// Conflicted counts a write refused on a changed budget; the writer
// reads it again. Our last write is kept: it is still newer than every
// version it replaced, which a cache behind it may yet hold.
func (l *Ledgers) Conflicted() {
	l.conflicts.Inc()
}

// Forget drops our last write of the budget (it is gone, or changed).
func (l *Ledgers) Forget(key types.NamespacedName) {
	l.writes.Forget(key)
}

func keyOf(b *v1alpha1.AgentBudget) types.NamespacedName {
	return types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
}
