// Package reconcilers holds what the reconcilers of the smaller kinds
// (AgentBudget, AgentSchedule, AgentEvaluation, MCPServer) are built from
// alike: the client, the uncached reader, the event recorder and the
// clock, the filter of the run events a kind that owns runs wakes for,
// and the read of the AgentRunPolicies that govern a namespace.
package reconcilers

import (
	"context"
	"fmt"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/platform"
	"github.com/agentrun/agentrun/internal/runstatus"
	corev1 "k8s.io/api/core/v1"
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

// PlatformPolicies reads, live, the AgentRunPolicies that govern a
// namespace. The operator's ClusterRole agentrun-platform-reader grants
// the reads; without them the caller fails (no run starts ungoverned).
func PlatformPolicies(ctx context.Context, reader client.Reader, namespace string) ([]v1alpha1.AgentRunPolicy, error) {
	list := &v1alpha1.AgentRunPolicyList{}
	if err := reader.List(ctx, list); err != nil {
		return nil, fmt.Errorf("reading the AgentRunPolicies (the operator needs the ClusterRole agentrun-platform-reader): %w", err)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	ns := &corev1.Namespace{}
	if err := reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return nil, fmt.Errorf("reading namespace %s for its AgentRunPolicies (the operator needs the ClusterRole agentrun-platform-reader): %w", namespace, err)
	}
	return platform.Select(list.Items, ns.Labels), nil
}
