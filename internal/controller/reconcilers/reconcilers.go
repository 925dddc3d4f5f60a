// Package reconcilers holds what the reconcilers of the smaller kinds
// (AgentBudget, AgentSchedule) are built from alike: the client, the
// uncached reader, the event recorder and the clock.
package reconcilers

import (
	"time"

	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
