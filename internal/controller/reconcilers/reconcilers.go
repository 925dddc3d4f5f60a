// Package reconcilers holds what the reconcilers of the smaller kinds
// (AgentBudget, AgentSchedule, AgentEvaluation) are built from alike: the
// client, the uncached reader, the event recorder and the clock, and the
// filter of the run events a kind that owns runs wakes for.
package reconcilers

import (
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runstatus"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// Base is the part of a reconciler's configuration every kind shares.
type Base struct {
	client.Client
	// APIReader reads uncached; the client when nil.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Clock is time.Now unless a test sets it.
	Clock func() time.Time
}

// Defaulted is b with its defaults applied.
func (b Base) Defaulted() Base {
	if b.Clock == nil {
		b.Clock = time.Now
	}
	if b.APIReader == nil {
		b.APIReader = b.Client
	}
	return b
}

// RunStartedOrEnded passes the AgentRun events that a kind owning runs
// (a schedule, an evaluation) acts on: a run created, deleted, or ended;
// not the status writes of its every step.
func RunStartedOrEnded() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return runstatus.Finished(e.ObjectOld.(*v1alpha1.AgentRun)) != runstatus.Finished(e.ObjectNew.(*v1alpha1.AgentRun))
		},
	}
}
