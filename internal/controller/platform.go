package controller

import (
	"context"
	"fmt"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/platform"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Event reasons of the platform's policies.
const (
	// NotePlatformApplied: an AgentRunPolicy lowered a ceiling or raised a
	// price of the run (the message says which).
	NotePlatformApplied loop.NoteKind = "PlatformPolicyApplied"
	// NotePlatformRefused: an AgentRunPolicy does not let the run run.
	NotePlatformRefused loop.NoteKind = "PlatformPolicyRefused"
)

// platformPolicies reads the AgentRunPolicies that govern run's namespace,
// live (a run's kit is built once per process, so this is one read per
// run and restart). The operator's ClusterRole agentrun-platform-reader
// grants the reads; without them no run starts, rather than runs starting
// ungoverned.
func (r *AgentRunReconciler) platformPolicies(ctx context.Context, run *v1alpha1.AgentRun) ([]v1alpha1.AgentRunPolicy, error) {
	list := &v1alpha1.AgentRunPolicyList{}
	if err := r.APIReader.List(ctx, list); err != nil {
		return nil, fmt.Errorf("reading the AgentRunPolicies (the operator needs the ClusterRole agentrun-platform-reader): %w", err)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	ns := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: run.Namespace}, ns); err != nil {
		return nil, fmt.Errorf("reading namespace %s for its AgentRunPolicies (the operator needs the ClusterRole agentrun-platform-reader): %w", run.Namespace, err)
	}
	return platform.Select(list.Items, ns.Labels), nil
}
