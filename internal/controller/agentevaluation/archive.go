package agentevaluation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/evaluation"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The archive. With one configured, a complete evaluation (Passed,
// Failed or Regressed) is written to it whole, keyed by its UID, and
// then carries the condition Archived=True, so that neither a restart
// nor a later reconcile writes it again (the write keeps the first
// record anyway). A write that fails is tried again (Archived=False,
// reason ArchiveUnavailable). spec.baseline naming an evaluation that is
// not live reads the newest archived one of that name.

// archiveEvaluation writes a complete evaluation to the archive unless
// it is there already, and records that it is (the Archived condition).
// It returns when to try again after a failure.
func (r *Reconciler) archiveEvaluation(ctx context.Context, e *v1alpha1.AgentEvaluation) (ctrl.Result, error) {
	if r.Archive == nil || !evaluation.Complete(e) || apimeta.IsStatusConditionTrue(e.Status.Conditions, v1alpha1.ConditionArchived) {
		return ctrl.Result{}, nil
	}
	rec, err := recordOf(e)
	if err == nil {
		err = r.Archive.PutEvaluation(ctx, rec)
	}
	base := e.DeepCopy()
	now := metav1.NewTime(r.Clock())
	if err != nil {
		msg := "the evaluation's results cannot be written to the archive; trying again: " + err.Error()
		ctrl.LoggerFrom(ctx).Error(err, "Archiving a complete evaluation")
		if apimeta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionArchived, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonArchiveUnavailable, Message: msg, ObservedGeneration: e.Generation, LastTransitionTime: now}) {
			if perr := r.Status().Patch(ctx, e, client.MergeFrom(base)); perr != nil {
				return ctrl.Result{}, client.IgnoreNotFound(perr)
			}
			if r.Recorder != nil {
				r.Recorder.Eventf(e, nil, corev1.EventTypeWarning, v1alpha1.ReasonArchiveUnavailable, v1alpha1.ReasonArchiveUnavailable, "%s", msg)
			}
		}
		retry := r.ArchiveRetry
		if retry <= 0 {
			retry = archive.DefaultRetry
		}
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	apimeta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionArchived, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonArchived, Message: "the evaluation's results are in the archive (UID " + string(e.UID) + ")",
		ObservedGeneration: e.Generation, LastTransitionTime: now})
	return ctrl.Result{}, client.IgnoreNotFound(r.Status().Patch(ctx, e, client.MergeFrom(base)))
}

// recordOf is what the archive keeps of a complete evaluation: its spec
// and its status, whole.
func recordOf(e *v1alpha1.AgentEvaluation) (*archive.Evaluation, error) {
	rec := &archive.Evaluation{UID: string(e.UID), Namespace: e.Namespace, Name: e.Name, Phase: string(e.Status.Phase)}
	if c := e.Status.CompletionTime; c != nil {
		rec.FinishedAt = c.Time
	}
	var err error
	if rec.Spec, err = json.Marshal(e.Spec); err != nil {
		return nil, err
	}
	if rec.Status, err = json.Marshal(e.Status); err != nil {
		return nil, err
	}
	return rec, nil
}

// archivedBaseline reads the newest archived evaluation of this name in
// e's namespace: nil when the archive holds none.
func (r *Reconciler) archivedBaseline(ctx context.Context, e *v1alpha1.AgentEvaluation, name string) (*v1alpha1.AgentEvaluation, *archive.Evaluation, error) {
	rec, err := r.Archive.NewestEvaluation(ctx, e.Namespace, name)
	switch {
	case errors.Is(err, archive.ErrNoEvaluation):
		return nil, nil, nil
	case err != nil:
		return nil, nil, err
	}
	b := &v1alpha1.AgentEvaluation{ObjectMeta: metav1.ObjectMeta{Namespace: rec.Namespace, Name: rec.Name, UID: types.UID(rec.UID)}}
	if err := json.Unmarshal(rec.Spec, &b.Spec); err != nil {
		return nil, nil, fmt.Errorf("the archived evaluation %s (UID %s) has a spec that is not an evaluation's: %w", name, rec.UID, err)
	}
	if err := json.Unmarshal(rec.Status, &b.Status); err != nil {
		return nil, nil, fmt.Errorf("the archived evaluation %s (UID %s) has a status that is not an evaluation's: %w", name, rec.UID, err)
	}
	return b, rec, nil
}
