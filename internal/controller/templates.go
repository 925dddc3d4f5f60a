package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/agentrun/agentrun/internal/seal"
	"github.com/agentrun/agentrun/internal/template"
	"github.com/agentrun/agentrun/internal/transcript"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Runs made from a template (spec.templateRef). The operator resolves the
// template once, before the run is built: it reads the template, checks
// the parameters, replaces the placeholders, and keeps the resolved spec
// in a Secret the run owns (immutable, sealed like the transcript, since
// anyone who may create Secrets in the namespace could write one), then
// records the template's name, resourceVersion and the spec's digest in
// status.template. From then on the run is built from that Secret only: an
// edit or deletion of the template changes nothing for it.

// TemplateWait is how long a run waits for the template, or an MCPServer,
// it names to exist (a GitOps tool may apply the run before them) before
// it ends Error.
const TemplateWait = time.Minute

// resolvedSpecType is the Secret type of a run's resolved spec.
const resolvedSpecType = corev1.SecretType("agents.agentrun.dev/resolved-spec")

const (
	resolvedSpecKey  = "spec.json"
	resolvedSealKey  = "seal"
	purposeResolved  = "agentrun/resolved-spec"
	annotationTplRV  = "agents.agentrun.dev/template-resource-version"
	annotationTplRef = "agents.agentrun.dev/template"
)

// ResolvedSpecName is the name of the Secret that keeps the resolved spec
// of the run with this UID.
func ResolvedSpecName(uid types.UID) string { return fmt.Sprintf("agentrun-%s-spec", uid) }

// errTemplateRefused: the run cannot be made from its template; final.
var errTemplateRefused = errors.New("the run cannot be made from its template")

// errTemplateMissing: the template does not exist yet; try again later.
var errTemplateMissing = errors.New("the template does not exist")

// resolved returns the run as it runs: for a run made from a template, a
// copy whose spec is the resolved one (with the run's own cancel, TTL,
// templateRef and parameters), and the record for status.template. A run
// that names no template is returned as it is, with a nil record.
func (r *AgentRunReconciler) resolved(ctx context.Context, run *v1alpha1.AgentRun) (*v1alpha1.AgentRun, *v1alpha1.TemplateStatus, error) {
	if run.Spec.TemplateRef == nil {
		return run, nil, nil
	}
	raw, rec, err := r.keptSpec(ctx, run)
	if err != nil {
		return nil, nil, err
	}
	if raw == nil {
		if raw, rec, err = r.resolveOnce(ctx, run); err != nil {
			return nil, nil, err
		}
	}
	return withSpec(run, raw, rec)
}

// withSpec is run with the resolved spec raw (as resolved returns it).
func withSpec(run *v1alpha1.AgentRun, raw []byte, rec *v1alpha1.TemplateStatus) (*v1alpha1.AgentRun, *v1alpha1.TemplateStatus, error) {
	spec := v1alpha1.AgentRunSpec{}
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, nil, fmt.Errorf("%w: the resolved spec kept in the Secret %s cannot be read: %v", errTemplateRefused, ResolvedSpecName(run.UID), err)
	}
	spec.Cancel, spec.TTLSecondsAfterFinished = run.Spec.Cancel, run.Spec.TTLSecondsAfterFinished
	spec.TemplateRef, spec.Parameters, spec.ContinueFrom = run.Spec.TemplateRef, run.Spec.Parameters, run.Spec.ContinueFrom
	rec.Goal = spec.Goal // the display copy; the run is built from spec
	out := run.DeepCopy()
	out.Spec = spec
	return out, rec, nil
}

// keptSpec reads the resolved spec kept with the run: nil when none was
// kept yet. One that status counts on and that is missing, or that the
// operator did not seal, is refused.
func (r *AgentRunReconciler) keptSpec(ctx context.Context, run *v1alpha1.AgentRun) ([]byte, *v1alpha1.TemplateStatus, error) {
	return keptSpecOf(ctx, r.APIReader, r.Keys, run)
}

// keptSpecOf is keptSpec, reading the Secret with reader and opening its
// seal with keys, for what reads a run's resolved spec outside a
// reconcile (the notifications due).
func keptSpecOf(ctx context.Context, reader client.Reader, keys *seal.Keyring, run *v1alpha1.AgentRun) ([]byte, *v1alpha1.TemplateStatus, error) {
	name := ResolvedSpecName(run.UID)
	sec := &corev1.Secret{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: name}, sec)
	if apierrors.IsNotFound(err) {
		if t := run.Status.Template; t != nil && t.Digest != "" {
			return nil, nil, fmt.Errorf("%w: the resolved spec of AgentRunTemplate %s (the Secret %s) is gone; the run cannot go on without it",
				errTemplateRefused, t.Name, name)
		}
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the resolved spec %s: %w", name, err)
	}
	raw := sec.Data[resolvedSpecKey]
	ref := metav1.GetControllerOf(sec)
	if ref == nil || ref.UID != run.UID || sec.Type != resolvedSpecType ||
		keys.Open(string(sec.Data[resolvedSealKey]), purposeResolved, []byte(run.UID), raw) != nil {
		return nil, nil, fmt.Errorf("%w: the Secret %s, which should keep the run's resolved spec, was not written by the operator (%v); it was left alone",
			errTemplateRefused, name, transcript.ErrForged)
	}
	rec := &v1alpha1.TemplateStatus{Name: sec.Annotations[annotationTplRef], ResourceVersion: sec.Annotations[annotationTplRV], Digest: template.Digest(raw)}
	if t := run.Status.Template; t != nil && t.Digest != "" && t.Digest != rec.Digest {
		return nil, nil, fmt.Errorf("%w: the resolved spec in the Secret %s has the digest %s, and status.template records %s",
			errTemplateRefused, name, rec.Digest, t.Digest)
	}
	return raw, rec, nil
}

// resolvedKey is the id of the key that opening the seal of sec, the
// run's resolved spec, needs (seal.Keyring.Needs): "" when it is not the
// operator's.
func (r *AgentRunReconciler) resolvedKey(run *v1alpha1.AgentRun, sec *corev1.Secret) string {
	if ref := metav1.GetControllerOf(sec); ref == nil || ref.UID != run.UID || sec.Type != resolvedSpecType {
		return ""
	}
	return r.Keys.Needs(string(sec.Data[resolvedSealKey]), purposeResolved, []byte(run.UID), sec.Data[resolvedSpecKey])
}

// resolveOnce reads the template, resolves the run's spec, has the API
// server validate it as it would a run written out in full (a dry-run
// create, which also applies the cluster's admission policies), and keeps
// it in the run's Secret. Two reconciles racing keep one: the second
// reads what the first kept.
func (r *AgentRunReconciler) resolveOnce(ctx context.Context, run *v1alpha1.AgentRun) ([]byte, *v1alpha1.TemplateStatus, error) {
	ref := run.Spec.TemplateRef
	tpl := &v1alpha1.AgentRunTemplate{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: ref.Name}, tpl); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("%w: AgentRunTemplate %q does not exist in namespace %s", errTemplateMissing, ref.Name, run.Namespace)
		}
		return nil, nil, fmt.Errorf("reading AgentRunTemplate %s: %w", ref.Name, err)
	}
	spec, err := template.Resolve(tpl, run.Spec.Parameters)
	if err != nil {
		var te *template.Error
		if errors.As(err, &te) {
			return nil, nil, fmt.Errorf("%w: %s", errTemplateRefused, te.Message)
		}
		return nil, nil, err
	}
	if run.Spec.ContinueFrom != nil && run.Spec.Goal != "" {
		// A follow-up of a run made from the template asks its own
		// question; the rest is the template's.
		spec.Goal = run.Spec.Goal
	}
	probe := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, GenerateName: "template-check-"}, Spec: *spec}
	if err := r.Create(ctx, probe, client.DryRunAll); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
			return nil, nil, fmt.Errorf("%w: AgentRunTemplate %s with these parameters does not make a valid run: %s",
				errTemplateRefused, tpl.Name, runclient.APIMessage(err))
		}
		return nil, nil, fmt.Errorf("validating the run resolved from AgentRunTemplate %s: %w", tpl.Name, err)
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, err
	}
	immutable := true
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ResolvedSpecName(run.UID),
			Namespace: run.Namespace,
			Labels:    map[string]string{transcript.LabelRunUID: string(run.UID)},
			Annotations: map[string]string{
				annotationTplRef: tpl.Name,
				annotationTplRV:  tpl.ResourceVersion,
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind("AgentRun"))},
		},
		Type:      resolvedSpecType,
		Immutable: &immutable,
		Data: map[string][]byte{
			resolvedSpecKey: raw,
			resolvedSealKey: []byte(r.Keys.Seal(purposeResolved, []byte(run.UID), raw)),
		},
	}
	if err := r.Create(ctx, sec); err != nil {
		if apierrors.IsAlreadyExists(err) {
			kept, rec, kerr := r.keptSpec(ctx, run)
			if kerr == nil && kept == nil {
				kerr = fmt.Errorf("the resolved spec %s exists and cannot be read yet", sec.Name)
			}
			return kept, rec, kerr
		}
		return nil, nil, fmt.Errorf("keeping the resolved spec of %s: %w", run.Name, err)
	}
	return raw, &v1alpha1.TemplateStatus{Name: tpl.Name, ResourceVersion: tpl.ResourceVersion, Digest: template.Digest(raw)}, nil
}

// ReasonTemplateNotFound is the event reason of a run whose template does
// not exist (yet).
const ReasonTemplateNotFound = "TemplateNotFound"
