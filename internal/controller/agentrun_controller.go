// Package controller is the Kubernetes plumbing of AgentRun: it reads an
// AgentRun, drives the loop engine one phase at a time, persists the
// engine's state in status before acting on it, dispatches model and tool
// calls outside the reconcile worker, and records events.
package controller

import (
	"context"
	"errors"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/agentrun/agentrun/internal/telemetry"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// The operator's permissions, least privilege:
//   - AgentRuns: watch them, patch status, and patch metadata only to
//     remove stale approval annotations, to hold a run for the archive
//     (its finalizer) and to label a follow-up with the run it continues.
//     Create the children of agent tools (internal/tools/agent) and patch
//     their spec.cancel; a child's owner reference blocks its parent's
//     deletion, which needs update on agentruns/finalizers where the API
//     server enforces owner reference permissions.
//   - Secrets: create, read and replace transcript chunks; read with an
//     uncached reader, so no cluster-wide Secret watch. A run's API key and
//     header values are read as the run's ServiceAccount (impersonation).
//   - Jobs: create and watch the tool Jobs; pods and their logs: read the
//     result of a tool (uncached).
//   - ServiceAccounts: impersonate a run's account for builtin tools and
//     for reading the Secrets a run names.
//   - NetworkPolicies: create the one that confines each job tool's pods.
//   - ConfigMaps: read and write the spec-hash records of the GitOps
//     re-run protection (gitops.go) and the records of each run's highest
//     save (rollback.go); read uncached.
//
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentruns,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentruns/finalizers,verbs=update
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentruns/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;create;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=impersonate
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update;delete

// SetupWithManager registers the reconciler.
func (r *AgentRunReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		r.base.Store(&ctx)
		<-ctx.Done()
		return nil
	})); err != nil {
		return err
	}
	r.Metrics.watchRuns(mgr.GetCache(), r.Clock)
	if r.Shard == "" {
		u := &unclaimedCheck{reader: r.APIReader, namespaces: r.Namespaces, every: r.UnclaimedEvery, after: r.UnclaimedAfter, now: r.Clock,
			metrics: r.Metrics}
		if u.every <= 0 {
			u.every = DefaultUnclaimedEvery
		}
		if u.after <= 0 {
			u.after = DefaultUnclaimedAfter
		}
		if err := mgr.Add(u); err != nil {
			return err
		}
	}
	ku := &keyUse{r: r, every: r.KeyUseEvery}
	if ku.every <= 0 {
		ku.every = DefaultKeyUseEvery
	}
	if err := mgr.Add(ku); err != nil {
		return err
	}
	// Our last write of a run is dropped as soon as the cache holds it, not
	// at the run's next reconcile: a thousand runs waiting on their models
	// would each keep a copy of their object for nothing. The event of that
	// write enqueues nothing (see caughtUp).
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.AgentRun{}, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool { return !r.caughtUp(e.ObjectNew) },
		})).
		Owns(&batchv1.Job{}).
		Watches(&v1alpha1.AgentBudget{}, r.wakeSuspended()).
		Watches(&v1alpha1.AgentRunPolicy{}, r.wakeSuspended()).
		WatchesRawSource(source.Channel(r.work.wakeup, &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(r.judging.wakeup, &handler.EnqueueRequestForObject{}))
	if r.ToolJobs != nil {
		// A tool Job's change wakes the call that waits on it (which then
		// ends its work and so enqueues its run): no call polls its Job.
		b = b.Watches(&batchv1.Job{}, jobChanged(r.ToolJobs))
	}
	if r.ChildRuns != nil {
		b = b.Watches(&v1alpha1.AgentRun{}, childChanged(r.ChildRuns))
	}
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("agentrun").
		Complete(r)
}

// jobChanged tells j of every change of a Job and enqueues nothing.
func jobChanged(j ToolJobs) handler.EventHandler {
	notify := func(o client.Object) { j.Changed(o.GetNamespace(), o.GetName()) }
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			notify(e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			notify(e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			notify(e.Object)
		},
	}
}

// Reconcile drives one run (see reconcile). A panic in it is recovered:
// the reconcile fails (and is retried with back-off) until the run's
// MaxPanics-th panic, which ends the run Error.
func (r *AgentRunReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = r.panicked(ctx, req.NamespacedName, recovered(ctx, r.Metrics, "reconcile", p))
		}
	}()
	for i := 0; ; i++ {
		var uid types.UID
		var started string
		res, uid, started, err = r.reconcile(ctx, req)
		if res.Priority == nil {
			// Whatever brings the run back is not a catch-up write: it
			// queues as any change does, even after one.
			res.Priority = ptr.To(0)
		}
		// Work this reconcile started that often ends at once (a kit
		// build, a batch of fast tools) is waited for a moment, and the
		// run advanced again in this reconcile: otherwise it would wait
		// for a worker again, behind every run enqueued meanwhile.
		if err != nil || started == "" || i == maxInline || !r.work.await(uid, started, inlineWait) {
			return res, err
		}
	}
}

// reconcile advances one run by at most one phase of one turn: it steps
// the engine until the next step needs the outside world, saves what it
// decided (transcript chunks first, then one status patch), and only then
// starts the model call or the tools. A status patch that conflicts with
// another writer is retried at once on a fresh read; the finished work it
// carried stays in memory until a patch holds it.
//
// It returns the run's UID and the key of the work it started that may
// end at once (see Reconcile), if any.
func (r *AgentRunReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, types.UID, string, error) {
	run := &v1alpha1.AgentRun{}
	if err := r.Get(ctx, req.NamespacedName, run); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetName(req.NamespacedName)
		}
		return ctrl.Result{}, "", "", client.IgnoreNotFound(err)
	}
	run = r.mem.freshest(run)
	for attempt := 1; ; attempt++ {
		res, started, err := r.reconcileRun(ctx, req.NamespacedName, run)
		if !errors.Is(err, errConflict) {
			return res, run.UID, started, err
		}
		if attempt == 3 {
			return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, "", "", nil
		}
		ctrl.LoggerFrom(ctx).V(4).Info("Status changed under us, retrying on a fresh read")
		run = &v1alpha1.AgentRun{}
		if err := r.APIReader.Get(ctx, req.NamespacedName, run); err != nil {
			if apierrors.IsNotFound(err) {
				r.forgetName(req.NamespacedName)
			}
			return ctrl.Result{}, "", "", client.IgnoreNotFound(err)
		}
	}
}

// reconcileRun runs a run's phases in order: a running run's (build it,
// read its state, advance it, cover its budgets; then one status write,
// the acts it decided and the report of what changed), or a finished
// run's (settle its status, record the hand-off of its escalation,
// judge it, archive it, expire it).
func (r *AgentRunReconciler) reconcileRun(ctx context.Context, key types.NamespacedName, run *v1alpha1.AgentRun) (ctrl.Result, string, error) {
	if runstatus.Finished(run) || !run.DeletionTimestamp.IsZero() {
		r.forget(run.UID)
		res, err := finishedPhases(ctx, run, r.cancelChildren, r.settle, r.handOff, r.judge, r.archive, r.expireLive)
		return res, "", err
	}
	sc, err := r.open(ctx, key, run)
	if err != nil {
		return ctrl.Result{}, "", err
	}
	result, err := runningPhases(ctx, sc, r.loadKit, r.loadState, r.advance, r.coverBudgets)
	if err != nil {
		return ctrl.Result{}, "", err
	}
	if sc.wait {
		return r.flushDeferred(ctx, sc, result), sc.started, nil
	}
	written, err := r.persist(ctx, sc)
	if err != nil {
		return ctrl.Result{}, "", err
	}
	if d := sc.stored.deferred; d != nil {
		// Back when the deferred status is due, even if nothing wakes the
		// run before.
		result = r.catchUp(result, d, sc.now)
	}
	if _, ttl := r.ttlOf(sc.run); written && runstatus.Finished(sc.run) && (ttl || r.Archive != nil || r.Judges != nil && sc.run.Spec.TemplateRef != nil) {
		// The event of the write that ended the run enqueues nothing
		// (caughtUp): back at once to the finished phases, which judge
		// and archive the run and come back when its time to live has
		// passed.
		result = soonest(result, 0)
	}
	r.releaseJobs(ctx, sc)
	r.act(ctx, sc)
	if written {
		r.report(ctx, sc)
	}
	return result, sc.started, nil
}

// runningPhases runs a running run's phases until one fails, stops the
// run's progress (sc.stop) or waits (sc.wait), combining their results.
func runningPhases(ctx context.Context, sc *scope, phases ...func(context.Context, *scope) (ctrl.Result, error)) (ctrl.Result, error) {
	var result ctrl.Result
	for _, phase := range phases {
		res, err := phase(ctx, sc)
		if err != nil {
			return ctrl.Result{}, err
		}
		result = combine(result, res)
		if sc.stop || sc.wait {
			break
		}
	}
	return result, nil
}

// finishedPhases runs a finished (or deleted) run's phases until one
// fails or asks to be back later (a result with a wait).
func finishedPhases(ctx context.Context, run *v1alpha1.AgentRun, phases ...func(context.Context, *v1alpha1.AgentRun) (ctrl.Result, error)) (ctrl.Result, error) {
	for _, phase := range phases {
		res, err := phase(ctx, run)
		if errors.Is(err, errGone) {
			return ctrl.Result{}, nil
		}
		if err != nil || res.RequeueAfter > 0 {
			return res, err
		}
	}
	return ctrl.Result{}, nil
}

// open begins a running run's reconcile: the run is claimed for the
// archive before anything is spent (so that no delete takes it before its
// record is written), a follow-up is labelled with the run it continues,
// and the run is tracked, and given its scope and trace.
func (r *AgentRunReconciler) open(ctx context.Context, key types.NamespacedName, run *v1alpha1.AgentRun) (*scope, error) {
	if err := r.claimForArchive(ctx, run); err != nil {
		return nil, err
	}
	if err := r.labelFollowUp(ctx, run); err != nil {
		return nil, err
	}
	r.track(key, run.UID)
	sc := &scope{run: run, stored: storedOf(run.DeepCopy(), r.deferredOf(run)), now: r.Clock()}
	if d := sc.stored.deferred; d != nil {
		// Our saves since the stored status: carry on from them.
		run.Status = *d.status.DeepCopy()
	}
	// A child run (an agent tool's) joins its parent's trace, under the
	// span of the call that made it.
	var parentSpan string
	if run.Labels[v1alpha1.LabelParentUID] != "" {
		parentSpan = run.Annotations[v1alpha1.AnnotationTraceParent]
	}
	sc.trace = telemetry.StartRunUnder(r.TracerProvider, run.Status.TraceParent, parentSpan)
	if run.Status.TraceParent == "" {
		// Saved with this reconcile's status write, before any call of
		// the run starts a span under it.
		run.Status.TraceParent = sc.trace.TraceParent()
	}
	return sc, nil
}

// settle is the first finished phase: a finished run's status made
// final (runstatus.SettleFinished), written under the version it read.
func (r *AgentRunReconciler) settle(ctx context.Context, run *v1alpha1.AgentRun) (ctrl.Result, error) {
	base := run.DeepCopy()
	if !run.DeletionTimestamp.IsZero() || !runstatus.SettleFinished(run, metav1.NewTime(r.Clock())) {
		return ctrl.Result{}, nil
	}
	err := r.writeStatus(ctx, run, base, true)
	switch {
	case apierrors.IsConflict(err):
		return ctrl.Result{}, errConflict
	case apierrors.IsNotFound(err):
		return ctrl.Result{}, errGone
	}
	return ctrl.Result{}, err
}

// archive is the second finished phase: the run's record written to the
// archive, when there is one and the run is not archived yet.
func (r *AgentRunReconciler) archive(ctx context.Context, run *v1alpha1.AgentRun) (ctrl.Result, error) {
	if r.Archive == nil || apimeta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionArchived) {
		return ctrl.Result{}, nil
	}
	if err := r.claimForArchive(ctx, run); err != nil {
		return ctrl.Result{}, err
	}
	return r.archiveRun(ctx, run)
}

// expireLive is the last finished phase: a run not being deleted is
// deleted once its time to live has passed (expire).
func (r *AgentRunReconciler) expireLive(ctx context.Context, run *v1alpha1.AgentRun) (ctrl.Result, error) {
	if !run.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	return r.expire(ctx, run)
}

// report tells what a written status changed: the log, events,
// notifications, metrics and the trace, each from the one change.
func (r *AgentRunReconciler) report(ctx context.Context, sc *scope) {
	c := changeOfScope(sc)
	r.logTransitions(ctx, c)
	r.emit(sc.run, c)
	r.emitRemembered(sc.run, c)
	r.announce(ctx, sc.run, c)
	r.Metrics.record(c)
	r.traceCompactions(ctx, sc.trace, c)
	r.endTrace(ctx, sc.trace, c)
}

// flushDeferred writes, when it is due, the status that saves deferred,
// while the run waits for its model or tools; otherwise it asks to be
// back when it is due.
func (r *AgentRunReconciler) flushDeferred(ctx context.Context, sc *scope, res ctrl.Result) ctrl.Result {
	d := sc.stored.deferred
	if d == nil {
		return res
	}
	if due := r.due(d).Sub(sc.now); due > 0 {
		return r.catchUp(res, d, sc.now)
	}
	run := sc.stored.server().DeepCopy()
	run.Status = *d.status.DeepCopy()
	if err := r.patchStatus(ctx, sc.stored.server(), run); err != nil {
		// The next save writes it; until then the chunks hold the progress.
		ctrl.LoggerFrom(ctx).V(2).Info("Could not write the run's deferred status", "error", err.Error())
		return soonest(res, time.Second)
	}
	r.mem.keepDeferred(run.UID, nil)
	return res
}

// catchUp returns res, back when the deferred status d is due. When
// nothing else brings the run back at a set time, that return is queued
// below every other reconcile (handler.LowPriority): the catch-up write
// changes nothing the run waits for, so it yields to the runs whose model
// or tools have answered.
func (r *AgentRunReconciler) catchUp(res ctrl.Result, d *deferred, now time.Time) ctrl.Result {
	due := max(r.due(d).Sub(now), time.Millisecond)
	if res.RequeueAfter == 0 {
		res.RequeueAfter, res.Priority = due, ptr.To(handler.LowPriority)
		return res
	}
	return soonest(res, due)
}

// releaseJobs deletes the kept Jobs of mutating calls whose results status
// now holds: until then a Job is the record that its call ran.
func (r *AgentRunReconciler) releaseJobs(ctx context.Context, sc *scope) {
	var ids []string
	for _, n := range sc.notes {
		if n.Kind == loop.NoteCallFinished && n.CallID != "" {
			ids = append(ids, n.CallID)
		}
	}
	if len(ids) == 0 || r.ToolJobs == nil {
		return
	}
	if err := r.ToolJobs.Release(ctx, sc.run.Namespace, sc.run.UID, ids); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Deleting the Jobs of saved calls")
	}
}

// traceCompactions traces the context compactions the save made, as
// children of the run span.
func (r *AgentRunReconciler) traceCompactions(ctx context.Context, tr *telemetry.Run, c change) {
	if tr == nil || c.run.Status.Context == nil {
		return
	}
	tr.Compactions(ctx, string(c.run.Status.Context.Strategy), c.notes, r.Clock())
}

// endTrace emits the run's invoke_agent span when this reconcile saved
// the run's end: from the run's start (the engine's, to the nanosecond,
// when the checkpoint had it) to now, under the span id the run carries,
// naming the model the run called last (a fallback, if it moved to one).
// Now is read here, after the save, not taken from the reconcile's start:
// a model or tool call made during this reconcile ended after sc.now, and
// the run span must enclose every call of the run.
func (r *AgentRunReconciler) endTrace(ctx context.Context, tr *telemetry.Run, c change) {
	if !c.ended {
		return
	}
	run := c.run
	u := usageOf(run)
	m := activeModel(run)
	info := telemetry.RunInfo{Name: run.Name, Namespace: run.Namespace, UID: string(run.UID),
		Provider: string(m.Provider), Model: m.Name, End: r.Clock(),
		Outcome: string(run.Status.Outcome), Reason: run.Status.Reason, Turns: int(u.Turns),
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, Start: run.CreationTimestamp.Time}
	switch {
	case c.state != nil && c.state.StartedAt != nil:
		info.Start = *c.state.StartedAt
	case run.Status.StartTime != nil:
		info.Start = run.Status.StartTime.Time
	}
	tr.End(ctx, info)
}
