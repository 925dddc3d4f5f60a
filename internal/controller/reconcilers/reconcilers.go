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
	"github.com/agentrun/agentrun/internal/freshread"
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
// It shares its reads with no one: a caller that reads often keeps a
// PolicyReads.
func PlatformPolicies(ctx context.Context, reader client.Reader, namespace string) ([]v1alpha1.AgentRunPolicy, error) {
	var own PolicyReads
	return own.PlatformPolicies(ctx, reader, namespace)
}

// PolicyReads reads as PlatformPolicies does, sharing the reads among the
// callers that ask together (package freshread): each caller still gets
// policies and namespace labels read after it asked, so a policy created
// before a run starts governs it, as with a read of its own. Runs started
// together (an evaluation's cases, a burst of creates) cost the API server
// a few lists instead of one each. The zero value is ready; it must not be
// copied after first use.
type PolicyReads struct {
	lists      freshread.Group[[]v1alpha1.AgentRunPolicy]
	namespaces freshread.Group[map[string]string]
}

// PlatformPolicies returns the AgentRunPolicies that govern namespace,
// read after the call began. What it returns is the caller's own to
// change.
func (p *PolicyReads) PlatformPolicies(ctx context.Context, reader client.Reader, namespace string) ([]v1alpha1.AgentRunPolicy, error) {
	pols, err := p.lists.Do(ctx, "", func(ctx context.Context) ([]v1alpha1.AgentRunPolicy, error) {
		return listPolicies(ctx, reader)
	})
	if err != nil || len(pols) == 0 {
		return nil, err
	}
	labels, err := p.namespaces.Do(ctx, namespace, func(ctx context.Context) (map[string]string, error) {
		return namespaceLabels(ctx, reader, namespace)
	})
	if err != nil {
		return nil, err
	}
	selected := platform.Select(pols, labels)
	for i := range selected {
		selected[i] = *selected[i].DeepCopy()
	}
	return selected, nil
}

func listPolicies(ctx context.Context, reader client.Reader) ([]v1alpha1.AgentRunPolicy, error) {
	list := &v1alpha1.AgentRunPolicyList{}
	if err := reader.List(ctx, list); err != nil {
		return nil, fmt.Errorf("reading the AgentRunPolicies (the operator needs the ClusterRole agentrun-platform-reader): %w", err)
	}
	return list.Items, nil
}

func namespaceLabels(ctx context.Context, reader client.Reader, namespace string) (map[string]string, error) {
	ns := &corev1.Namespace{}
	if err := reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return nil, fmt.Errorf("reading namespace %s for its AgentRunPolicies (the operator needs the ClusterRole agentrun-platform-reader): %w", namespace, err)
	}
	return ns.Labels, nil
}
