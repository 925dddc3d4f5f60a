package loop

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrInsufficient is returned by a Ledger that cannot admit a reservation.
var ErrInsufficient = errors.New("insufficient budget")

// Ledger is a budget shared by several runs (a tenant's daily allowance,
// say). Reserve must check and reserve in one step, so that two workers
// reading the same balance cannot both be admitted against it.
type Ledger interface {
	// Reserve admits amount if committed + reserved + amount <= limit and
	// records it, returning an id to settle or release later.
	Reserve(ctx context.Context, amount Money) (id string, err error)
	// Settle converts a reservation into actual spend, releasing the rest.
	Settle(ctx context.Context, id string, actual Money) error
	// Release drops a reservation whose spend is known to be zero.
	Release(ctx context.Context, id string) error
}

// MemoryLedger is a Ledger for one process.
type MemoryLedger struct {
	mu        sync.Mutex
	limit     Money
	committed Money
	reserved  map[string]Money
	next      int
}

// NewMemoryLedger returns a ledger with the given limit and spend so far.
func NewMemoryLedger(limit, committed Money) *MemoryLedger {
	return &MemoryLedger{limit: limit, committed: committed, reserved: map[string]Money{}}
}

// Reserve implements Ledger.
func (l *MemoryLedger) Reserve(_ context.Context, amount Money) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var held Money
	for _, r := range l.reserved {
		held += r
	}
	if l.committed+held+amount > l.limit {
		return "", fmt.Errorf("%w: $%s committed + $%s reserved + $%s requested > $%s",
			ErrInsufficient, l.committed, held, amount, l.limit)
	}
	l.next++
	id := fmt.Sprintf("r%d", l.next)
	l.reserved[id] = amount
	return id, nil
}

// Settle implements Ledger.
func (l *MemoryLedger) Settle(_ context.Context, id string, actual Money) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.reserved[id]; !ok {
		return fmt.Errorf("no reservation %q", id)
	}
	delete(l.reserved, id)
	l.committed += actual
	return nil
}

// Release implements Ledger.
func (l *MemoryLedger) Release(ctx context.Context, id string) error { return l.Settle(ctx, id, 0) }

// Committed returns the settled spend.
func (l *MemoryLedger) Committed() Money {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.committed
}
