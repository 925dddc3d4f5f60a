package v1alpha1

// Re-run protection for runs applied by GitOps tools (docs/gitops.md). A
// run's spec is immutable, so a GitOps tool that "edits" it (Flux with
// force: true, Argo CD with Replace=true) deletes the run and creates a new
// one under the same name: without protection the agent would run, and
// spend, again.
const (
	// AnnotationGitOpsProtect set to "true" protects a run: before it
	// starts, the operator compares the hash of its spec with the one
	// recorded for the last run of the same name in the namespace, and
	// refuses to start a run whose spec differs from it. "false" turns the
	// protection off for a run that a GitOps label would otherwise protect.
	AnnotationGitOpsProtect = "agents.agentrun.dev/gitops-protect"

	// AnnotationAllowRerun set to "true" lets a protected run start even
	// though a run of the same name with another spec ran before.
	AnnotationAllowRerun = "agents.agentrun.dev/allow-rerun"

	// LabelSpecRecord marks the ConfigMaps the operator writes. With the
	// value "spec-hash" they record, per run name, the spec hash of the
	// last protected run that started, and outlive the runs on purpose;
	// with "saves", a run's highest save (owned by the run).
	LabelSpecRecord = "agents.agentrun.dev/record"

	// ReasonRerunRefused is the reason of Succeeded=Unknown and
	// Stalled=True on a protected run that the operator refuses to start.
	ReasonRerunRefused = "RerunRefused"
)

// GitOpsMarkers are the labels and annotations by which Flux and Argo CD
// mark what they apply. A run carrying one is protected unless
// AnnotationGitOpsProtect is "false".
var GitOpsMarkers = struct{ Labels, Annotations []string }{
	Labels: []string{
		"kustomize.toolkit.fluxcd.io/name", // Flux Kustomization
		"helm.toolkit.fluxcd.io/name",      // Flux HelmRelease
		"argocd.argoproj.io/instance",      // Argo CD label tracking with this key
	},
	Annotations: []string{
		"argocd.argoproj.io/tracking-id", // Argo CD annotation tracking (the default)
	},
}
