package controller

import (
	"context"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/evaluation"
	"github.com/agentrun/agentrun/internal/runstatus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// judgeKey is the key of a run's judgement in r.judging.
const judgeKey = "judge"

// judgeRecheck is how soon a run whose judge call is in flight is looked
// at again if the call's end has not enqueued it before; the later
// finished phases (archive, time to live) wait for the judgement.
const judgeRecheck = time.Minute

// judge is a finished phase: a run made from a template whose spec.judge
// samples it (sampled) is scored once by the template's judge, off the
// workers (r.judging: the call's end enqueues the run again; the archive
// and the time to live wait for it), and the
// verdict is written to status.judgement, which marks the run judged.
// What the judge gave no score for (garbage, a refusal, a failed call, a
// call over its ceilings, a model that cannot be built) is a judgement
// with failure set, never an error of the reconcile. The verdict stays in
// memory until a status write holds it, so a conflict does not call the
// judge again.
func (r *AgentRunReconciler) judge(ctx context.Context, run *v1alpha1.AgentRun) (ctrl.Result, error) {
	if r.Judges == nil || run.Spec.TemplateRef == nil || run.Status.Judgement != nil || !run.DeletionTimestamp.IsZero() {
		r.judging.forget(run.UID)
		return ctrl.Result{}, nil
	}
	if w := r.judging.finished(run.UID, judgeKey); w != nil {
		return r.recordJudgement(ctx, run, w)
	}
	if r.judging.busy(run.UID, judgeKey) {
		return ctrl.Result{RequeueAfter: judgeRecheck}, nil
	}
	tpl := &v1alpha1.AgentRunTemplate{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Spec.TemplateRef.Name}, tpl); err != nil {
		// A template deleted since judges nothing.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	spec := tpl.Spec.Judge
	if spec == nil || !sampled(run, &spec.Sample) {
		return ctrl.Result{}, nil
	}
	judged := run.DeepCopy()
	r.judging.start(r.background(), run, judgeKey, func(ctx context.Context, w *work) {
		w.judgement = r.judgeOnce(ctx, spec, judged)
	})
	return ctrl.Result{RequeueAfter: judgeRecheck}, nil
}

// recordJudgement writes w's judgement to the run's status, under the
// version it read, and observes it in the metrics once written.
func (r *AgentRunReconciler) recordJudgement(ctx context.Context, run *v1alpha1.AgentRun, w *work) (ctrl.Result, error) {
	base := run.DeepCopy()
	run.Status.Judgement = w.judgement.DeepCopy()
	switch err := r.writeStatus(ctx, run, base, true); {
	case apierrors.IsConflict(err):
		return ctrl.Result{}, errConflict
	case apierrors.IsNotFound(err):
		r.judging.forget(run.UID)
		return ctrl.Result{}, errGone
	case err != nil:
		return ctrl.Result{}, err
	}
	r.judging.clear(run.UID, judgeKey)
	r.Metrics.judged(run)
	return ctrl.Result{}, nil
}

// sampled says whether s picks run: its outcome is one of s.outcomes (any,
// when empty) and its UID hashes below s.fraction, so that every replica
// and restart picks the same runs.
func sampled(run *v1alpha1.AgentRun, s *v1alpha1.JudgeSample) bool {
	// A run an AgentEvaluation made is scored by that evaluation, its own
	// judge included, and charged to its budget: judging it here too would
	// pay twice for a run that is not production's.
	if run.Labels[v1alpha1.LabelEvaluation] != "" {
		return false
	}
	if len(s.Outcomes) > 0 && !slices.Contains(s.Outcomes, run.Status.Outcome) {
		return false
	}
	f, err := strconv.ParseFloat(s.Fraction, 64)
	if err != nil || f <= 0 {
		return false // the CRD admits only decimals from 0 to 1
	}
	h := fnv.New64a()
	h.Write([]byte(run.UID))
	return float64(h.Sum64())/(1<<64) < f
}

// judgeOnce asks spec's judge to score run, once, within spec's ceilings
// for the one call.
func (r *AgentRunReconciler) judgeOnce(ctx context.Context, spec *v1alpha1.RunJudge, run *v1alpha1.AgentRun) *v1alpha1.JudgementStatus {
	minScore := max(spec.MinScore, v1alpha1.JudgeMinScale)
	j := &evaluation.Judge{Spec: &v1alpha1.EvaluationJudge{Rubric: spec.Rubric, MinScore: minScore, Model: spec.Model,
		MaxCostUSD: spec.MaxCostUSD, MaxTokens: spec.MaxTokens}}
	var err error
	if j.Model, j.Pricing, err = r.Judges(ctx, run.Namespace, &spec.Model); err != nil {
		j.Unavailable = err.Error()
	}
	v := j.Judge(ctx, &v1alpha1.EvaluationCase{}, run, 0, 0, 0)
	js := &v1alpha1.JudgementStatus{MinScore: minScore, Tokens: v.Tokens, JudgedAt: metav1.NewTime(r.Clock())}
	if v.Cost > 0 {
		js.CostUSD = v1alpha1.USD(v.Cost.String())
	}
	if v.Score == 0 {
		js.Failure = clip.Cut(v.Failure, 1024, runstatus.CutMark)
		return js
	}
	s := v.Score
	agreed := (s >= minScore) == (run.Status.Outcome == v1alpha1.OutcomeCompleted)
	js.Score, js.Agreed, js.Rationale = &s, &agreed, clip.Cut(v.Rationale, 512, runstatus.CutMark)
	return js
}
