package runclient

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RerunOptions names the run to repeat and, optionally, the new run.
type RerunOptions struct {
	Run Ref
	// Name is the new run's name; empty makes the API server generate one
	// from the old run's name.
	Name string
	// UID, when set, is the run the person was shown (the console's
	// button): a run created again under the name since is refused
	// (RunReplaced), never repeated in its place.
	UID types.UID
}

// Rerun creates a new AgentRun with the spec of an existing one
// (spec.cancel cleared). A run made from a template keeps its templateRef
// and parameters, so the operator resolves the template again, as it is
// now.
//
// The new run is labelled agents.agentrun.dev/rerun-of with the old run's
// name. It keeps the old run's labels and annotations except those that
// say who made or answered the old one, which are not true of the new one:
// the operator's own (agents.agentrun.dev/..., approvals and who gave
// them), a schedule's label, kubectl apply's last-applied-configuration,
// and every label and annotation of Flux and Argo CD. The last matters:
// Argo CD would count a run carrying its tracking as part of its
// application and prune it, and the operator would treat it as applied by
// GitOps. Owner references are not copied either.
//
// Reading the old run fails with Get's explanation; creating the new one
// fails with the API server's error as it gave it.
func Rerun(ctx context.Context, c client.Client, o RerunOptions) (*v1alpha1.AgentRun, error) {
	old, err := Get(ctx, c, o.Run)
	if err != nil {
		return nil, err
	}
	if o.UID != "" && old.UID != o.UID {
		return nil, &Refused{Reason: RunReplaced, Run: o.Run, msg: fmt.Sprintf(
			"%s was deleted and created again since the page was read: reload it, and re-run the run it shows now", o.Run)}
	}
	return RerunOf(ctx, c, old, o.Name)
}

// RerunOf creates a re-run of old, a run as read from the API server or
// as rebuilt from its archived record (the console's archive page): a new
// run in old's namespace, named name (generated from old's name when
// empty), with old's spec and the labels and annotations Rerun keeps, as
// Rerun makes it.
func RerunOf(ctx context.Context, c client.Client, old *v1alpha1.AgentRun, name string) (*v1alpha1.AgentRun, error) {
	run := &v1alpha1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   old.Namespace,
			Name:        name,
			Labels:      keep(old.Labels, dropLabel),
			Annotations: keep(old.Annotations, dropAnnotation),
		},
		Spec: *old.Spec.DeepCopy(),
	}
	run.Spec.Cancel = false
	if name == "" {
		run.GenerateName = GenerateName(old.Name)
	}
	label, cut := NameLabel(old.Name)
	if run.Labels == nil {
		run.Labels = map[string]string{}
	}
	run.Labels[v1alpha1.LabelRerunOf] = label
	if cut {
		// The label holds at most 63 characters; the annotation of the
		// same key keeps the whole name.
		if run.Annotations == nil {
			run.Annotations = map[string]string{}
		}
		run.Annotations[v1alpha1.LabelRerunOf] = old.Name
	}
	if err := c.Create(ctx, run, client.FieldOwner(FieldManager)); err != nil {
		return nil, err
	}
	return run, nil
}

func keep(m map[string]string, drop func(string) bool) map[string]string {
	var out map[string]string
	for k, v := range m {
		if drop(k) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// gitopsDomains are the key prefixes of Flux and Argo CD: beyond the
// markers the operator reads, their sync options, waves and hooks speak
// of objects they apply, which a re-run is not.
var gitopsDomains = []string{"argocd.argoproj.io", "toolkit.fluxcd.io"}

func dropLabel(k string) bool {
	return slices.Contains(v1alpha1.GitOpsMarkers.Labels, k) || operatorKey(k) || gitopsKey(k)
}

func dropAnnotation(k string) bool {
	return slices.Contains(v1alpha1.GitOpsMarkers.Annotations, k) || operatorKey(k) || gitopsKey(k) ||
		k == "kubectl.kubernetes.io/last-applied-configuration"
}

// operatorKey: agents.agentrun.dev/... (the schedule, rerun-of, the
// re-run protection's switches, created-by, attributed-outcome ...) and
// the approval annotations, with who gave them. The shard label
// (sharding.agents.agentrun.dev/key) is kept: it is the user's choice of
// operator, as true of the re-run as of the run.
func operatorKey(k string) bool {
	return strings.HasPrefix(k, "agents.agentrun.dev/") ||
		strings.HasPrefix(k, v1alpha1.ApprovalAnnotationPrefix) ||
		strings.HasPrefix(k, v1alpha1.ApprovedByAnnotationPrefix)
}

func gitopsKey(k string) bool {
	prefix, _, ok := strings.Cut(k, "/")
	if !ok {
		return false
	}
	for _, d := range gitopsDomains {
		if prefix == d || strings.HasSuffix(prefix, "."+d) {
			return true
		}
	}
	return false
}
