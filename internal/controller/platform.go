package controller

import (
	"context"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/loop"
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
// run and restart).
func (r *AgentRunReconciler) platformPolicies(ctx context.Context, run *v1alpha1.AgentRun) ([]v1alpha1.AgentRunPolicy, error) {
	return reconcilers.PlatformPolicies(ctx, r.APIReader, run.Namespace)
}
