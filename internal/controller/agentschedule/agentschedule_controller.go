// Package agentschedule is the AgentSchedule reconciler: it creates
// AgentRuns on a schedule, as the CronJob controller creates Jobs.
package agentschedule

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	// Time zones are read from the binary, not the image: the operator's
	// image has no zoneinfo, and spec.timeZone must mean the same
	// everywhere.
	_ "time/tzdata"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/agentrun/agentrun/internal/schedtime"
	"github.com/agentrun/agentrun/internal/transcript"
	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// The event reasons of an AgentSchedule.
const (
	ReasonScheduleCreated   = "Scheduled"
	ReasonMissedSchedule    = "MissedSchedule"
	ReasonSkippedConcurrent = "SkippedConcurrent"
	ReasonReplaced          = "Replaced"
	ReasonDeletedHistory    = "DeletedHistory"
)

// Config is what a Reconciler is built from.
type Config struct {
	reconcilers.Base
	// Metrics counts the runs created and the times missed; nil counts
	// nothing.
	Metrics *Metrics
}

// Reconciler creates AgentRuns on the schedules of
// AgentSchedules, as the CronJob controller creates Jobs: the latest due
// time runs, times older than the starting deadline are missed, the
// concurrency policy decides about runs still going, and finished runs
// beyond the history limits are deleted. Build it with NewReconciler.
type Reconciler struct {
	Config
}

// NewReconciler builds the reconciler, defaults applied.
func NewReconciler(cfg Config) *Reconciler {
	cfg.Base = cfg.Defaulted()
	return &Reconciler{Config: cfg}
}

// A run's owner reference blocks the schedule's deletion until the run
// is gone, which needs update on agentschedules/finalizers where the API
// server enforces owner reference permissions.
// Deleting a run's history takes its transcript Secrets with it, by label:
// there may be no garbage collector to follow the owner references soon.
//
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentschedules,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentschedules/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentschedules/finalizers,verbs=update
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentruns,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=deletecollection

// SetupWithManager registers the reconciler: it wakes for a schedule's
// spec changes and for the runs it owns, so that active and
// lastSuccessfulTime follow them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.AgentSchedule{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&v1alpha1.AgentRun{}, builder.WithPredicates(startedOrEnded)).
		Named("agentschedule").
		Complete(r)
}

// startedOrEnded passes the run events a schedule cares about: a run
// created, deleted, or ended.
var startedOrEnded = reconcilers.RunStartedOrEnded()

// maxWalk bounds the scheduled times walked one by one between two
// reconciles; past it the count is estimated and the latest time found
// from close to now.
const maxWalk = 1000

// dueTimes returns the latest scheduled time in (after, now] and how many
// there are (zero and 0 when none).
func dueTimes(sched cron.Schedule, after, now time.Time) (time.Time, int64) {
	var latest, first time.Time
	var n int64
	t := sched.Next(after)
	for ; n < maxWalk && !t.IsZero() && !t.After(now); t = sched.Next(t) {
		if n == 0 {
			first = t
		}
		latest, n = t, n+1
	}
	if t.IsZero() || t.After(now) {
		return latest, n
	}
	// Too many to walk (a long outage of a frequent schedule): the rest
	// are counted at the average interval walked, and the latest is found
	// by walking from the smallest window before now that holds a time.
	if d := latest.Sub(first); d > 0 {
		n += int64(now.Sub(latest) / (d / time.Duration(n-1)))
	}
	for _, w := range []time.Duration{time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour, 5 * 367 * 24 * time.Hour} {
		from := now.Add(-w)
		if from.Before(latest) {
			from = latest
		}
		u := sched.Next(from)
		if u.IsZero() || u.After(now) {
			continue
		}
		for i := 0; i < maxWalk*10 && !u.IsZero() && !u.After(now); u = sched.Next(u) {
			latest = u
			i++
		}
		break
	}
	return latest, n
}

// runName is the name of the run for a scheduled time: the same time
// always gives the same name, so that no time runs twice whoever creates
// it (a restarted operator, two replicas for a moment).
func runName(s *v1alpha1.AgentSchedule, at time.Time) string {
	return s.Name + "-" + strconv.FormatInt(at.Unix()/60, 10)
}

// Reconcile brings one schedule up to date: it records the runs it owns,
// deletes history beyond the limits, and creates the run now due, if any.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &v1alpha1.AgentSchedule{}
	if err := r.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if s.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	now := r.Clock()
	work := s.DeepCopy()
	st := &work.Status
	var all v1alpha1.AgentRunList
	if err := r.List(ctx, &all, client.InNamespace(s.Namespace), client.MatchingLabels{v1alpha1.LabelSchedule: s.Name}); err != nil {
		return ctrl.Result{}, err
	}
	var active, finished []*v1alpha1.AgentRun
	for i := range all.Items {
		run := &all.Items[i]
		if !metav1.IsControlledBy(run, s) {
			continue // a run that only wears the label
		}
		if !runstatus.Finished(run) {
			active = append(active, run)
			continue
		}
		finished = append(finished, run)
		if run.Status.Outcome == v1alpha1.OutcomeCompleted && run.Status.CompletionTime != nil &&
			(st.LastSuccessfulTime == nil || st.LastSuccessfulTime.Before(run.Status.CompletionTime)) {
			st.LastSuccessfulTime = run.Status.CompletionTime.DeepCopy()
		}
	}
	if err := r.deleteHistory(ctx, s, finished); err != nil {
		return ctrl.Result{}, err
	}

	setActive(st, active)
	res, err := r.schedule(ctx, work, active, now) // and the run it creates
	st.ObservedGeneration = s.Generation
	if !equality.Semantic.DeepEqual(s.Status, work.Status) {
		if uerr := r.Status().Update(ctx, work); uerr != nil {
			if apierrors.IsConflict(uerr) {
				// Redone on a fresh read: a run created here is then
				// found (AlreadyExists) and recorded.
				return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
			}
			return ctrl.Result{}, client.IgnoreNotFound(uerr)
		}
	}
	return res, err
}

// schedule creates the run now due, if any, and sets Ready; active gains
// the run it creates.
func (r *Reconciler) schedule(ctx context.Context, s *v1alpha1.AgentSchedule, active []*v1alpha1.AgentRun, now time.Time) (ctrl.Result, error) {
	st := &s.Status
	ready := func(status metav1.ConditionStatus, reason, msg string) {
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ScheduleConditionReady, Status: status,
			Reason: reason, Message: clip.Cut(msg, 1024, runstatus.CutMark), ObservedGeneration: s.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	sched, loc, err := schedtime.Of(s, time.Local)
	if err != nil {
		ready(metav1.ConditionFalse, v1alpha1.ReasonInvalidSchedule, err.Error())
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonInvalidSchedule, Message: clip.Cut(err.Error(), 1024, runstatus.CutMark), ObservedGeneration: s.Generation,
			LastTransitionTime: metav1.NewTime(now)})
		r.event(s, corev1.EventTypeWarning, v1alpha1.ReasonInvalidSchedule, "Parse", err.Error())
		return ctrl.Result{}, nil // the spec has to change, which wakes us
	}
	apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionStalled)
	if s.Spec.Suspend != nil && *s.Spec.Suspend {
		// As a CronJob: the times that pass now are looked at on resume.
		ready(metav1.ConditionTrue, v1alpha1.ReasonScheduleSuspended, "spec.suspend is true: no runs are created")
		return ctrl.Result{}, nil
	}
	now = now.In(loc)
	next := sched.Next(now)
	requeue := ctrl.Result{}
	if !next.IsZero() {
		requeue.RequeueAfter = max(next.Sub(now), time.Second)
	}
	nextMsg := "next run at " + next.UTC().Format(time.RFC3339)
	if next.IsZero() {
		nextMsg = "the schedule names no time in the next five years"
	}

	after := s.CreationTimestamp.Time
	for _, t := range []*metav1.Time{st.LastScheduleTime, st.LastMissedTime} {
		if t != nil && t.After(after) {
			after = t.Time
		}
	}
	at, due := dueTimes(sched, after.In(loc), now)
	if due == 0 {
		keepCreateFailed(st, ready, nextMsg)
		return requeue, nil
	}
	if d := s.Spec.StartingDeadlineSeconds; d != nil && at.Add(time.Duration(*d)*time.Second).Before(now) {
		r.Metrics.missed(s.Namespace, due)
		st.LastMissedTime = &metav1.Time{Time: at}
		r.event(s, corev1.EventTypeWarning, ReasonMissedSchedule, "Miss", fmt.Sprintf(
			"Missed %d scheduled time(s), the latest %s: older than startingDeadlineSeconds (%d)", due, at.UTC().Format(time.RFC3339), *d))
		keepCreateFailed(st, ready, nextMsg)
		return requeue, nil
	}
	name := runName(s, at)
	var others []*v1alpha1.AgentRun
	for _, a := range active {
		if a.Name != name {
			others = append(others, a)
		}
	}
	switch {
	case len(others) == 0:
	case s.Spec.ConcurrencyPolicy == v1alpha1.ForbidConcurrent:
		// As a CronJob: the time is not recorded, so it still runs if the
		// active run ends before the next one (and within the deadline).
		r.event(s, corev1.EventTypeNormal, ReasonSkippedConcurrent, "Skip", fmt.Sprintf(
			"Skipped the run for %s: concurrencyPolicy is Forbid and %s has not ended", at.UTC().Format(time.RFC3339), others[0].Name))
		keepCreateFailed(st, ready, nextMsg)
		return requeue, nil
	case s.Spec.ConcurrencyPolicy == v1alpha1.ReplaceConcurrent:
		for _, a := range others {
			if err := r.cancel(ctx, s, a); err != nil {
				return ctrl.Result{}, err
			}
		}
	}

	run, err := runFor(r.Scheme(), s, name, at)
	if err == nil {
		err = r.Create(ctx, run)
	}
	switch {
	case apierrors.IsAlreadyExists(err):
		// Created before (by us before a restart, or by another replica):
		// the time is taken, and counted by whoever created it.
	case err != nil:
		ready(metav1.ConditionFalse, v1alpha1.ReasonCreateFailed, fmt.Sprintf("creating run %s for %s: %v", name, at.UTC().Format(time.RFC3339), err))
		r.event(s, corev1.EventTypeWarning, v1alpha1.ReasonCreateFailed, "Create", fmt.Sprintf("Creating run %s: %v", name, err))
		return ctrl.Result{}, fmt.Errorf("creating run %s: %w", name, err)
	default:
		r.Metrics.created(s.Namespace)
		if due > 1 {
			r.Metrics.missed(s.Namespace, due-1)
			r.event(s, corev1.EventTypeWarning, ReasonMissedSchedule, "Miss", fmt.Sprintf(
				"Missed %d scheduled time(s) before %s: only the latest runs", due-1, at.UTC().Format(time.RFC3339)))
		}
		r.event(s, corev1.EventTypeNormal, ReasonScheduleCreated, "Create", fmt.Sprintf("Created run %s for %s", name, at.UTC().Format(time.RFC3339)))
		active = append(active, run)
	}
	st.LastScheduleTime = &metav1.Time{Time: at}
	setActive(st, active)
	ready(metav1.ConditionTrue, v1alpha1.ReasonScheduled, nextMsg)
	return requeue, nil
}

// keepCreateFailed sets Ready=True unless the last create failed: that
// stays until a create succeeds, so that a refused run is not hidden
// between two scheduled times.
func keepCreateFailed(st *v1alpha1.AgentScheduleStatus, ready func(metav1.ConditionStatus, string, string), msg string) {
	if c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ScheduleConditionReady); c != nil && c.Reason == v1alpha1.ReasonCreateFailed {
		return
	}
	ready(metav1.ConditionTrue, v1alpha1.ReasonScheduled, msg)
}

// setActive lists the active runs by name, once each.
func setActive(st *v1alpha1.AgentScheduleStatus, active []*v1alpha1.AgentRun) {
	refs := make([]corev1.ObjectReference, 0, len(active))
	for _, a := range active {
		if slices.ContainsFunc(refs, func(r corev1.ObjectReference) bool { return r.Name == a.Name }) {
			continue
		}
		refs = append(refs, corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "AgentRun",
			Namespace: a.Namespace, Name: a.Name, UID: a.UID})
	}
	slices.SortFunc(refs, func(a, b corev1.ObjectReference) int { return cmp.Compare(a.Name, b.Name) })
	if len(refs) == 0 {
		refs = nil
	}
	st.Active, st.ActiveCount = refs, int32(len(refs))
}

// runFor is the run of the scheduled time at.
func runFor(sc *runtime.Scheme, s *v1alpha1.AgentSchedule, name string, at time.Time) (*v1alpha1.AgentRun, error) {
	tpl := s.Spec.RunTemplate
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace,
		Labels: map[string]string{}, Annotations: map[string]string{}}}
	for k, v := range tpl.Metadata.Labels {
		run.Labels[k] = v
	}
	for k, v := range tpl.Metadata.Annotations {
		run.Annotations[k] = v
	}
	run.Labels[v1alpha1.LabelSchedule] = s.Name
	run.Annotations[v1alpha1.AnnotationScheduledTime] = at.UTC().Format(time.RFC3339)
	// The schedule's author, as the API server recorded it, is the run's:
	// never a name the template writes. Without one (a schedule created
	// before the admission policies), the API server records the operator.
	delete(run.Annotations, v1alpha1.CreatedByAnnotation)
	if author := s.Annotations[v1alpha1.CreatedByAnnotation]; author != "" {
		run.Annotations[v1alpha1.CreatedByAnnotation] = author
	}
	switch {
	case tpl.TemplateRef != nil:
		run.Spec = runclient.FromTemplate(tpl.TemplateRef.Name, tpl.Parameters)
	case tpl.Spec != nil:
		// The run and the schedule share one spec struct: what runs.
		run.Spec.AgentSpec = *tpl.Spec.AgentSpec.DeepCopy()
	default:
		return nil, fmt.Errorf("runTemplate has neither templateRef nor spec")
	}
	if err := controllerutil.SetControllerReference(s, run, sc); err != nil {
		return nil, err
	}
	return run, nil
}

// cancel ends a run of the schedule for Replace: spec.cancel, and the
// annotation that makes its reason name the schedule.
func (r *Reconciler) cancel(ctx context.Context, s *v1alpha1.AgentSchedule, run *v1alpha1.AgentRun) error {
	if run.Spec.Cancel {
		return nil
	}
	by := "AgentSchedule/" + s.Name
	if err := r.Patch(ctx, run, runclient.CancelPatch(by)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("cancelling run %s: %w", run.Name, err)
	}
	r.event(s, corev1.EventTypeNormal, ReasonReplaced, "Cancel "+run.Name, fmt.Sprintf(
		"Cancelled run %s: concurrencyPolicy is Replace and a newer run is due", run.Name))
	return nil
}

// deleteHistory deletes the finished runs beyond the history limits, the
// oldest first, with their transcript Secrets.
func (r *Reconciler) deleteHistory(ctx context.Context, s *v1alpha1.AgentSchedule, finished []*v1alpha1.AgentRun) error {
	var ok, failed []*v1alpha1.AgentRun
	for _, run := range finished {
		if run.Status.Outcome == v1alpha1.OutcomeCompleted {
			ok = append(ok, run)
		} else {
			failed = append(failed, run)
		}
	}
	limit := func(p *int32, def int) int {
		if p == nil {
			return def
		}
		return int(*p)
	}
	for _, g := range []struct {
		runs  []*v1alpha1.AgentRun
		limit int
	}{{ok, limit(s.Spec.SuccessfulRunsHistoryLimit, 3)}, {failed, limit(s.Spec.FailedRunsHistoryLimit, 1)}} {
		if len(g.runs) <= g.limit {
			continue
		}
		slices.SortFunc(g.runs, func(a, b *v1alpha1.AgentRun) int { return endOf(b).Compare(endOf(a)) }) // newest first
		for _, run := range g.runs[g.limit:] {
			if err := r.deleteRun(ctx, s, run); err != nil {
				return err
			}
		}
	}
	return nil
}

// endOf is when a run ended, for ordering history: its completion time, or
// its creation when it has none.
func endOf(run *v1alpha1.AgentRun) time.Time {
	if run.Status.CompletionTime != nil {
		return run.Status.CompletionTime.Time
	}
	return run.CreationTimestamp.Time
}

// deleteRun deletes a run of the history: its transcript Secrets first,
// so that a failure leaves the run to find them by again (its owner
// references would let a garbage collector do it, but not every cluster
// the operator is tested in has one, and it may be slow).
func (r *Reconciler) deleteRun(ctx context.Context, s *v1alpha1.AgentSchedule, run *v1alpha1.AgentRun) error {
	if err := r.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(run.Namespace),
		client.MatchingLabels{transcript.LabelRunUID: string(run.UID)}); err != nil {
		return fmt.Errorf("deleting the transcript of %s: %w", run.Name, err)
	}
	err := r.Delete(ctx, run, client.Preconditions{UID: &run.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or another run now has its name
	}
	if err != nil {
		return fmt.Errorf("deleting run %s: %w", run.Name, err)
	}
	r.event(s, corev1.EventTypeNormal, ReasonDeletedHistory, "Delete "+run.Name, fmt.Sprintf(
		"Deleted run %s (ended %s) and its transcript: beyond the history limit", run.Name, run.Status.Outcome))
	return nil
}

func (r *Reconciler) event(s *v1alpha1.AgentSchedule, typ, reason, action, msg string) {
	if r.Recorder != nil {
		r.Recorder.Eventf(s, nil, typ, reason, action, "%s", clip.Cut(msg, 1024, runstatus.CutMark))
	}
}
