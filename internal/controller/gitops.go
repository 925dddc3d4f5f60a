package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Re-run protection (docs/gitops.md). Before a protected run starts, the
// operator reads the record of the last protected run of the same name in
// the namespace: a ConfigMap that is owned by nothing, so that it outlives
// the run. A run with another UID and another spec hash is refused (it
// stays Pending, Stalled, reason RerunRefused) unless it carries
// agents.agentrun.dev/allow-rerun: "true". A run that may start replaces
// the record with its own UID and spec hash. One small ConfigMap per
// protected run name; deleting it forgets the name.

// recordPrefix starts the name of a run name's record.
const recordPrefix = "agentrun-spec."

// protected reports whether the run is protected against re-runs: asked
// for by annotation, or applied by Flux or Argo CD (unless the annotation
// says "false").
func protected(run *v1alpha1.AgentRun) bool {
	if v, ok := run.Annotations[v1alpha1.AnnotationGitOpsProtect]; ok {
		return strings.EqualFold(strings.TrimSpace(v), "true")
	}
	for _, l := range v1alpha1.GitOpsMarkers.Labels {
		if run.Labels[l] != "" {
			return true
		}
	}
	for _, a := range v1alpha1.GitOpsMarkers.Annotations {
		if run.Annotations[a] != "" {
			return true
		}
	}
	return false
}

// SpecHash is the hash of a run's spec as the re-run protection compares
// it: spec.cancel is left out (it is the one field that may change).
func SpecHash(spec *v1alpha1.AgentRunSpec) string {
	s := spec.DeepCopy()
	s.Cancel, s.TTLSecondsAfterFinished = false, nil // housekeeping, not what runs
	raw, err := json.Marshal(s)
	if err != nil {
		panic(err) // a typed spec always marshals
	}
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:12])
}

// recordName is the name of the ConfigMap that records the run name's
// last spec hash: the run's name when it fits, else its hash.
func recordName(run string) string {
	if len(recordPrefix)+len(run) <= 253 {
		return recordPrefix + run
	}
	sum := sha256.Sum256([]byte(run))
	return recordPrefix + hex.EncodeToString(sum[:16])
}

// guard refuses to start a protected run that would re-run a name with
// another spec. It is done once per run and process, before the kit is
// built, and only for a run that has not started.
func (r *AgentRunReconciler) guard(ctx context.Context, sc *scope) error {
	run := sc.run
	if !protected(run) || run.Status.StartTime != nil || run.Status.Checkpoint != nil || run.Status.Turn > 0 {
		return nil
	}
	hash := SpecHash(&run.Spec)
	key := client.ObjectKey{Namespace: run.Namespace, Name: recordName(run.Name)}
	rec := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, key, rec)
	if apierrors.IsNotFound(err) {
		rec = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{v1alpha1.LabelSpecRecord: "spec-hash"}}}
		fillRecord(rec, run, hash, sc)
		if err := r.Create(ctx, rec); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return errConflict // another worker recorded it: read again
			}
			return fmt.Errorf("recording the spec hash of %s: %w", run.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the spec hash recorded for %s: %w", run.Name, err)
	}
	if rec.Labels[v1alpha1.LabelSpecRecord] != "spec-hash" {
		// Not a record the operator made: never overwritten. The run
		// does not start until the name is free.
		msg := fmt.Sprintf("refusing to start: the re-run protection records this run's spec in the ConfigMap %s, and a ConfigMap of that name "+
			"that the operator did not make (it lacks the label %s=spec-hash) is in the way; it was left alone. Delete or rename it, "+
			"or give the run a new name", key.Name, v1alpha1.LabelSpecRecord)
		if !refusedWith(run, msg) {
			sc.notes = append(sc.notes, loop.Note{Kind: loop.NoteKind(v1alpha1.ReasonRerunRefused), Warning: true, Message: msg})
		}
		runstatus.SetRerunRefused(&run.Status, msg, metav1.NewTime(sc.now))
		sc.stop = true
		return nil
	}
	d := rec.Data
	if d["uid"] == string(run.UID) {
		return nil
	}
	allowed := strings.EqualFold(strings.TrimSpace(run.Annotations[v1alpha1.AnnotationAllowRerun]), "true")
	if d["specHash"] != "" && d["specHash"] != hash && !allowed {
		msg := fmt.Sprintf("refusing to start: a run named %s with another spec (%s, now %s) started at %s; this looks like a GitOps tool "+
			"recreating the run after a spec edit. Annotate %s=true to run it anyway, or give the run a new name",
			run.Name, d["specHash"], hash, d["startedAt"], v1alpha1.AnnotationAllowRerun)
		if !refusedWith(run, msg) {
			sc.notes = append(sc.notes, loop.Note{Kind: loop.NoteKind(v1alpha1.ReasonRerunRefused), Warning: true, Message: msg})
		}
		runstatus.SetRerunRefused(&run.Status, msg, metav1.NewTime(sc.now))
		sc.stop = true
		return nil
	}
	fillRecord(rec, run, hash, sc)
	if err := r.Update(ctx, rec); err != nil {
		if apierrors.IsConflict(err) {
			return errConflict
		}
		return fmt.Errorf("recording the spec hash of %s: %w", run.Name, err)
	}
	return nil
}

func refusedWith(run *v1alpha1.AgentRun, msg string) bool {
	for _, c := range run.Status.Conditions {
		if c.Type == v1alpha1.ConditionSucceeded && c.Reason == v1alpha1.ReasonRerunRefused && c.Message == clip.Cut(msg, 1024, runstatus.CutMark) {
			return true
		}
	}
	return false
}

func fillRecord(rec *corev1.ConfigMap, run *v1alpha1.AgentRun, hash string, sc *scope) {
	rec.Data = map[string]string{
		"run":       run.Name,
		"uid":       string(run.UID),
		"specHash":  hash,
		"startedAt": sc.now.UTC().Format("2006-01-02T15:04:05Z"),
	}
}
