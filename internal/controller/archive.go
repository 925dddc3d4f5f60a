package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/agentrun/agentrun/internal/transcript"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The archive (package archive). With an archive configured, every run
// carries the finalizer agents.agentrun.dev/archive from its first
// reconcile: a finished run is written to the archive first, and only
// then is the finalizer removed, so neither a TTL, a schedule's history
// limit nor a person's delete can take a run the archive does not hold.
// The write is keyed by the run's UID and keeps the first record, so a
// crash between the write and the finalizer's removal writes nothing
// twice. An archive that cannot be reached delays the deletion (condition
// Archived=False, agentrun_archive_failures_total) and never a running
// run: only finished or deleted runs are archived.

// DefaultArchiveRetry is how soon a failed archive write is tried again.
const DefaultArchiveRetry = archive.DefaultRetry

// claimForArchive adds the archive's finalizer to a run that lacks it.
func (r *AgentRunReconciler) claimForArchive(ctx context.Context, run *v1alpha1.AgentRun) error {
	if r.Archive == nil || !run.DeletionTimestamp.IsZero() || slices.Contains(run.Finalizers, v1alpha1.FinalizerArchive) ||
		apimeta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionArchived) {
		return nil
	}
	return r.patchFinalizers(ctx, run, append(slices.Clone(run.Finalizers), v1alpha1.FinalizerArchive))
}

// patchFinalizers writes the run's finalizers (patchMetadata).
func (r *AgentRunReconciler) patchFinalizers(ctx context.Context, run *v1alpha1.AgentRun, finalizers []string) error {
	return r.patchMetadata(ctx, run, "finalizers", finalizers)
}

// archiveRun writes a finished (or deleted) run's record, then lets the
// run go: it removes the finalizer. It returns when to try again after a
// failure.
func (r *AgentRunReconciler) archiveRun(ctx context.Context, run *v1alpha1.AgentRun) (ctrl.Result, error) {
	if r.Archive == nil || !slices.Contains(run.Finalizers, v1alpha1.FinalizerArchive) {
		return ctrl.Result{}, nil
	}
	rec, err := r.record(ctx, run)
	if err == nil {
		err = r.Archive.Put(ctx, rec)
	}
	if err != nil {
		r.Metrics.archiveFailed()
		msg := "the run's record cannot be written to the archive; the run is kept until it is: " + err.Error()
		ctrl.LoggerFrom(ctx).Error(err, "Archiving a finished run")
		if run.DeletionTimestamp.IsZero() {
			base := run.DeepCopy()
			if apimeta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionArchived, Status: metav1.ConditionFalse,
				Reason: v1alpha1.ReasonArchiveUnavailable, Message: msg, ObservedGeneration: run.Generation}) {
				if perr := r.writeStatus(ctx, run, base, false); perr != nil && !apierrors.IsNotFound(perr) {
					return ctrl.Result{}, perr
				}
				r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonArchiveUnavailable, v1alpha1.ReasonArchiveUnavailable, msg)
			}
		}
		retry := r.ArchiveRetry
		if retry <= 0 {
			retry = DefaultArchiveRetry
		}
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	r.Metrics.archiveWrote()
	if run.DeletionTimestamp.IsZero() {
		base := run.DeepCopy()
		if apimeta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionArchived, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonArchived, Message: "the run's record is in the archive (UID " + string(run.UID) + ")", ObservedGeneration: run.Generation}) {
			if err := r.writeStatus(ctx, run, base, false); err != nil {
				return ctrl.Result{}, client.IgnoreNotFound(err)
			}
		}
	}
	rest := slices.DeleteFunc(slices.Clone(run.Finalizers), func(f string) bool { return f == v1alpha1.FinalizerArchive })
	if err := r.patchFinalizers(ctx, run, rest); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// record is what the archive keeps of the run: the spec it ran (a
// template's resolved spec), its status without the resumable state, and
// the transcript the operator sealed (chunks anyone else wrote are not
// archived as the run's).
func (r *AgentRunReconciler) record(ctx context.Context, run *v1alpha1.AgentRun) (*archive.Record, error) {
	rec := &archive.Record{UID: string(run.UID), Namespace: run.Namespace, Name: run.Name, Labels: run.Labels, Annotations: run.Annotations,
		CreatedAt: run.CreationTimestamp.Time, Outcome: string(run.Status.Outcome), Reason: run.Status.Reason}
	if run.Status.CompletionTime != nil {
		rec.FinishedAt = run.Status.CompletionTime.Time
	} else {
		rec.FinishedAt = r.Clock()
		if rec.Reason == "" {
			rec.Reason = "deleted before it ended"
		}
	}
	spec := run.Spec
	if run.Spec.TemplateRef != nil {
		rec.Template = run.Spec.TemplateRef.Name
		if raw, _, err := r.keptSpec(ctx, run); err == nil && raw != nil {
			var resolved v1alpha1.AgentRunSpec
			if json.Unmarshal(raw, &resolved) == nil {
				spec = resolved
				spec.Cancel, spec.TTLSecondsAfterFinished = run.Spec.Cancel, run.Spec.TTLSecondsAfterFinished
				spec.TemplateRef, spec.Parameters, spec.ContinueFrom = run.Spec.TemplateRef, run.Spec.Parameters, run.Spec.ContinueFrom
			}
		}
	}
	st := run.Status.DeepCopy()
	st.Checkpoint, st.CheckpointSeal = nil, ""
	var err error
	if rec.Spec, err = json.Marshal(spec); err != nil {
		return nil, err
	}
	if rec.Status, err = json.Marshal(st); err != nil {
		return nil, err
	}
	msgs, err := r.sealedTranscript(ctx, run, rec)
	if err != nil {
		return nil, fmt.Errorf("reading the transcript of %s: %w", run.Name, err)
	}
	if rec.TranscriptState == archive.TranscriptComplete {
		if rec.Transcript, err = json.Marshal(msgs); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// maxTranscriptProblem bounds the problem a record keeps: it quotes a
// Secret's name and a seal's error.
const maxTranscriptProblem = 1024

// sealedTranscript reads the run's messages from the chunks the operator
// sealed, and says in rec whether it read them all. A chunk that is
// missing (deleted by hand, or with the run) or that the operator did not
// seal will not come back by waiting: the record is then kept without the
// transcript, saying what was missing or unsealed, with a Warning event,
// rather than holding the run for ever.
func (r *AgentRunReconciler) sealedTranscript(ctx context.Context, run *v1alpha1.AgentRun, rec *archive.Record) ([]loop.Message, error) {
	msgs, err := transcript.ReadSealedMessages(ctx, r.APIReader, r.Keys, run)
	var state string
	switch {
	case err == nil:
		rec.TranscriptState = archive.TranscriptComplete
		return msgs, nil
	case errors.Is(err, transcript.ErrForged):
		state = archive.TranscriptUnsealed
	case errors.Is(err, transcript.ErrLost):
		state = archive.TranscriptIncomplete
	default:
		return nil, err
	}
	rec.TranscriptState, rec.TranscriptProblem = state, clip.Cut(err.Error(), maxTranscriptProblem, runstatus.CutMark)
	r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonArchiveUnavailable, v1alpha1.ReasonArchiveUnavailable,
		fmt.Sprintf("Archiving %s without its transcript (%s): %v", run.Name, state, err))
	return nil, nil
}
