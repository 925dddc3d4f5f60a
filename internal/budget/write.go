package budget

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Write is the one compare-and-swap of a budget's status, shared by every
// writer of it: a run's lease, an evaluation judge's lease and the
// AgentBudget reconciler's settling.
// The caller holds the budget's lock and passes the freshest copy it has
// (Open, or a read from the API server made under the lock). change is given that copy (fresh) and a copy of it
// rolled into the window current at now (work, and whether the roll
// changed it); it edits work and says whether to write it. A write refused
// because the budget changed or went (a person's edit, another operator
// process) is counted (Conflicted), and change is tried again on a fresh
// read through r, at most MaxAttempts times.
//
// Write returns the budget as written, or nil when change wrote nothing.
// A read that finds the budget gone returns the API server's NotFound,
// wrapped (apierrors.IsNotFound tells it); giving up after MaxAttempts
// returns ErrContended, wrapped.
func (l *Ledgers) Write(ctx context.Context, c client.Client, r client.Reader, fresh *v1alpha1.AgentBudget, kind string, now func() time.Time,
	change func(fresh, work *v1alpha1.AgentBudget, rolled bool) (bool, error)) (*v1alpha1.AgentBudget, error) {
	key := keyOf(fresh)
	for attempt := 1; ; attempt++ {
		work := fresh.DeepCopy()
		rolled, _ := Roll(work, now())
		if write, err := change(fresh, work, rolled); err != nil || !write {
			return nil, err
		}
		err := c.Status().Update(ctx, work)
		if err == nil {
			l.Wrote(kind, fresh.ResourceVersion, work)
			return work, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("writing AgentBudget %s: %w", key.Name, err)
		}
		l.Conflicted()
		if attempt == MaxAttempts {
			return nil, fmt.Errorf("%w: AgentBudget %s changed under %d writes in a row; retrying", ErrContended, key.Name, MaxAttempts)
		}
		fresh = &v1alpha1.AgentBudget{}
		if err := r.Get(ctx, key, fresh); err != nil {
			return nil, fmt.Errorf("reading AgentBudget %s: %w", key.Name, err)
		}
	}
}

// ErrContended is Write giving up for now: the budget changed under
// MaxAttempts writes in a row. Nothing was lost; the writer tries again
// later.
var ErrContended = errors.New("contended")
