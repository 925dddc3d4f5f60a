package controller

import (
	"context"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/platform"
)

// Event reasons of the platform's policies.
const (
	// NotePlatformApplied: an AgentRunPolicy lowered a ceiling or raised a
	// price of the run (the message says which).
	NotePlatformApplied loop.NoteKind = "PlatformPolicyApplied"
	// NotePlatformRefused: an AgentRunPolicy does not let the run run.
	NotePlatformRefused loop.NoteKind = "PlatformPolicyRefused"
)

// govern reads the AgentRunPolicies that govern src's namespace, live (a
// run's kit is built once per process, so this is one read per run and
// restart, shared with the runs whose kits are built at the same moment:
// reconcilers.PolicyReads), and applies them to src: the run is built as they govern it,
// never as its author relaxed it. It runs in the work that builds the
// kit, so the read, which the API server answers only once its cache has
// caught up with etcd, holds no reconcile worker.
func (r *AgentRunReconciler) govern(ctx context.Context, src *v1alpha1.AgentRun) *governed {
	pols, err := r.policies.PlatformPolicies(ctx, r.APIReader, src.Namespace)
	if err != nil {
		return &governed{unread: err}
	}
	run, changes, err := platform.Apply(src, pols)
	var grant egress.Grant
	if err == nil {
		grant, err = platform.Egress(pols)
	}
	if err != nil {
		return &governed{refused: err}
	}
	return &governed{run: run, changes: changes, grant: grant, approvers: platform.ApproversFor(src, pols)}
}
