package controller

// The files of this package are layered: a file uses only what it or a
// file below it declares, so each reads without the files that use it
// (`go run ./hack/loopgraph -v internal/controller` prints the layers, and
// its test holds them). From the top:
//
//   - agentrun_controller.go: Reconcile, the two lists of phases, the
//     report after the write.
//   - the phases: agentrun_budgets.go, archive.go, ttl.go, panics.go,
//     notifications.go; below them agentrun_phases.go (load, advance,
//     persist, act, events) and the checks it calls (gitops.go,
//     templates.go, rollback.go, suspend.go, platform.go).
//   - reconciler.go (this file): the reconciler, its configuration, what
//     it holds for the runs it drives.
//   - what the reconciler is built of: work.go (calls off the workers),
//     failures.go, metrics.go, changes.go (what a write changed),
//     scope.go (what one reconcile holds), stored.go, memory.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/budget"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/notify"
	"github.com/agentrun/agentrun/internal/seal"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KitBuilder builds a run's Kit from its spec, with what the platform's
// policies open to the run's requests (platform.Egress). An error is the
// user's: the run ends with it as the reason.
type KitBuilder interface {
	Build(ctx context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error)
}

// ChildRuns is told of the changes of child runs; the agent tools'
// executor implements it (through internal/tools/job.Wakeups), so that
// this package knows no executor.
type ChildRuns interface {
	// Notify tells the calls that wait on the run namespace/name that it
	// changed.
	Notify(namespace, name string)
}

// ToolJobs is what the reconciler does with the Jobs that job tools run;
// the job executor's package implements it (internal/tools/job.Jobs), so
// that this package knows no executor.
type ToolJobs interface {
	// Changed tells the calls that wait on the Job namespace/name that it
	// changed.
	Changed(namespace, name string)
	// Release deletes the kept Jobs (those of mutating calls) of these
	// calls of the run, once status holds their results.
	Release(ctx context.Context, namespace string, run types.UID, callIDs []string) error
	// SealKeys calls add with the key that sealed each tool Job of a run
	// that live holds.
	SealKeys(ctx context.Context, kr *seal.Keyring, live func(run types.UID) bool, add func(key string)) error
}

// Config is what an AgentRunReconciler is built from.
type Config struct {
	client.Client
	// APIReader reads Secrets (transcript chunks) without a cache; the
	// client when nil.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Kits      KitBuilder
	// Clock is time.Now unless a test sets it.
	Clock func() time.Time
	// Ledgers is the book this reconciler and the AgentBudget reconciler
	// write budgets through; give both the same one (a new one when nil).
	Ledgers *budget.Ledgers
	// Shard is the shard this reconciler's manager serves (its cache
	// selects the shard's runs: ShardCache). The unsharded one (empty)
	// also reports, in agentrun_runs_unclaimed, labelled runs nobody has
	// started after UnclaimedAfter (DefaultUnclaimedAfter when zero),
	// looking every UnclaimedEvery (DefaultUnclaimedEvery when zero), in
	// Namespaces (all when empty: those the operator watches).
	Shard                          string
	UnclaimedEvery, UnclaimedAfter time.Duration
	Namespaces                     []string
	// KeyUseEvery is how often the leader counts the objects each state
	// key seals, agentrun_state_key_objects (DefaultKeyUseEvery when
	// zero; keyuse.go).
	KeyUseEvery time.Duration
	// MaxConcurrentReconciles sizes the worker pool (8 when zero). Model
	// and tool calls never run on a worker (see work.go), so a few workers
	// serve many runs; a reconcile mostly waits on the API server, and for
	// at most inlineWait on tools that end at once.
	MaxConcurrentReconciles int
	// EventVerbosity says which of a run's notes become events: EventsPerTurn
	// (the default) or EventsPerCall.
	EventVerbosity EventVerbosity
	// ToolJobs, when set, is told of every change of a Job the Job
	// informer sees (the job tools' executors wait on it instead of
	// polling their Jobs), deletes the kept Jobs of calls whose results
	// status holds, and names the keys that sealed Jobs (keyuse.go). The
	// operator sets job.Jobs; nil leaves tool Jobs alone.
	ToolJobs ToolJobs
	// ChildRuns, when set, is told of every change of a run that has a
	// parent (children.go): the agent tools' executors wait on it.
	ChildRuns ChildRuns
	// StatusInterval is how far a run's status may fall behind its saved
	// progress: a save that changes only the run's progress (its turn,
	// usage and checkpoint) carries the checkpoint in its last transcript
	// chunk, and status is written once StatusInterval has passed since the
	// first such save (or sooner, with any other change). Zero writes status
	// at every save. The operator's default is DefaultStatusInterval.
	StatusInterval time.Duration
	// Keys seal what the operator reads back from objects a tenant can
	// write (status.checkpoint, transcript chunks) and open those seals.
	// Every process that drives a run must hold the keys that sealed it:
	// the operator reads them from a Secret in its own namespace
	// (operator.LoadKeys). Nil gives an ephemeral keyring, whose seals no
	// other process opens.
	Keys *seal.Keyring
	// Archive, when set, keeps the record of every finished run: a run
	// cannot be deleted before its record is written (see archive.go).
	Archive archive.Store
	// ArchiveRetry is how soon a failed archive write is tried again;
	// zero means DefaultArchiveRetry.
	ArchiveRetry time.Duration
	// DefaultTTLAfterFinished deletes a finished run that sets no
	// spec.ttlSecondsAfterFinished this long after it ended; nil keeps it.
	DefaultTTLAfterFinished *time.Duration
	// AcceptUnstampedAnswers applies approval annotations that carry no
	// approved-by stamp (the admission policy agentrun-approver-identity is
	// not installed), whose author nobody authenticated. Off, such an
	// answer is not applied: the call waits, with a Warning event.
	AcceptUnstampedAnswers bool
	// Notifier, when set, is told when a call starts waiting for a
	// person and when a run ends Escalated (see notifications.go); it
	// delivers off the reconcile.
	Notifier *notify.Notifier
	// TracerProvider receives the runs' spans (telemetry.Setup builds it
	// from the OTEL_* environment); nil sends none, but every run still
	// gets a trace id in status.traceParent.
	TracerProvider trace.TracerProvider
	// Metrics counts what the reconciler does and reports the gauges of
	// runs in flight (and of unclaimed runs); the operator registers it.
	// Set it before NewAgentRunReconciler; nil counts nothing.
	Metrics *Metrics
	// Judges builds the model of a template's judge (spec.judge.model),
	// which scores a sample of the template's finished runs (judging.go);
	// the operator sets kit.Builder.Judge. Nil judges no run.
	Judges func(ctx context.Context, namespace string, spec *v1alpha1.ModelSpec) (loop.Model, loop.Pricing, error)

	// traceIDOf is TraceIDOf unless a test sets it.
	traceIDOf func(ctx context.Context, run *v1alpha1.AgentRun) string
}

// AgentRunReconciler reconciles AgentRuns. Build it with
// NewAgentRunReconciler.
type AgentRunReconciler struct {
	Config

	// work is the model and tool calls in flight, off the workers.
	work *tracker
	// judging is the judge calls in flight about finished runs, off the
	// workers (judging.go).
	judging *tracker
	// mem is what this process holds for each run between reconciles.
	mem *memory
	// policies shares the live reads of the platform's policies among
	// runs that start together (govern).
	policies *reconcilers.PolicyReads
	// base is the manager's context, which work in flight outlives a
	// reconcile under; nil until the manager starts.
	base atomic.Pointer[context.Context]
}

// NewAgentRunReconciler builds a reconciler, defaults applied.
func NewAgentRunReconciler(cfg Config) *AgentRunReconciler {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.APIReader == nil {
		cfg.APIReader = cfg.Client
	}
	if cfg.MaxConcurrentReconciles <= 0 {
		cfg.MaxConcurrentReconciles = 8
	}
	if cfg.EventVerbosity == "" {
		cfg.EventVerbosity = EventsPerTurn
	}
	if cfg.Keys == nil {
		cfg.Keys = seal.Ephemeral()
	}
	if cfg.Ledgers == nil {
		cfg.Ledgers = budget.NewLedgers()
	}
	return &AgentRunReconciler{
		Config:   cfg,
		work:     newTracker(cfg.Metrics),
		judging:  newTracker(cfg.Metrics),
		mem:      newMemory(),
		policies: &reconcilers.PolicyReads{},
	}
}

// DefaultStatusInterval is the operator's StatusInterval.
const DefaultStatusInterval = 5 * time.Second

// EventVerbosity says which of a run's notes become events. Every event is
// an API write (and a few hundred bytes the recorder keeps for a while), so
// the default records at most one event for a turn that goes as planned.
type EventVerbosity string

const (
	// EventsPerTurn (the default) records one event per turn, the model's
	// answer (ModelAnswered: what it asked for, tokens and cost), and
	// everything a person should look at or that changes the run's course:
	// warnings (a call refused, denied or waiting for approval, a failed
	// call, a budget warning, a retry, a lost call), approvals answered,
	// plans submitted, refused or replaced, verdicts and the outcome.
	EventsPerTurn EventVerbosity = "turn"
	// EventsPerCall also records each turn's start, each call's verdict
	// and result, each plan step and each verification.
	EventsPerCall EventVerbosity = "call"
)

// ParseEventVerbosity reads --event-verbosity.
func ParseEventVerbosity(s string) (EventVerbosity, error) {
	switch v := EventVerbosity(s); v {
	case EventsPerTurn, EventsPerCall:
		return v, nil
	}
	return "", fmt.Errorf("event verbosity %q: want %s or %s", s, EventsPerTurn, EventsPerCall)
}

// errConflict: the run changed since it was read; read it again.
var errConflict = errors.New("the run changed under us")

// errGone: the run was deleted while a phase wrote it; nothing is left
// to do.
var errGone = errors.New("the run is gone")

// background is the context that work in flight runs under: the
// manager's, which outlives any one reconcile.
func (r *AgentRunReconciler) background() context.Context {
	if ctx := r.base.Load(); ctx != nil {
		return *ctx
	}
	return context.Background()
}

// deferredOf returns the run's status as our saves left it when they did
// not write status, if the run is still the version they were newer than.
// After any other write of the run (an annotation, a cancel, a status
// written by anyone) the saves' chunks are the record to resume from, and
// loadState reads them.
func (r *AgentRunReconciler) deferredOf(run *v1alpha1.AgentRun) *deferred {
	return r.mem.deferredOver(run.UID, run.ResourceVersion)
}

// due is when the status that d holds back must be written.
func (r *AgentRunReconciler) due(d *deferred) time.Time { return d.since.Add(r.StatusInterval) }

// combine is what two phases of one reconcile ask for together: the
// soonest requeue either asks for (as Cluster API's and Flux's reconcilers
// combine their sub-reconcilers' results), never the last phase's alone.
func combine(a, b ctrl.Result) ctrl.Result {
	if b.RequeueAfter > 0 {
		a = soonest(a, b.RequeueAfter)
	}
	return a
}

// soonest returns res, to be back within d at the latest.
func soonest(res ctrl.Result, d time.Duration) ctrl.Result {
	d = max(d, time.Millisecond)
	if res.RequeueAfter == 0 || d < res.RequeueAfter {
		res.RequeueAfter = d
	}
	return res
}

// caughtUp drops our last write of the run once the cache holds it, and
// reports whether obj is that write. The watch may deliver the write
// before the patch returns: the version is then noted, remember keeps no
// copy of it, and its event is not recognised.
//
// The event of our own last write enqueues nothing: the reconcile that
// wrote it already acted on everything it holds (and asked to come back
// when it needed to), so reconciling again would only find the run
// waiting. A run made two reconciles a turn and one more for each status
// write; under a burst of turns these queued in front of the reconciles
// with work to do.
func (r *AgentRunReconciler) caughtUp(obj client.Object) (ours bool) {
	return r.mem.caughtUp(client.ObjectKeyFromObject(obj), obj.GetUID(), obj.GetResourceVersion())
}

// ActiveRuns counts the runs this process is driving (those it holds
// state for); the client's adaptive rate limit follows it.
func (r *AgentRunReconciler) ActiveRuns() int {
	return r.mem.runs()
}

// track records which UID the run of this name has; a run recreated under
// the same name makes the old one's state forgotten.
func (r *AgentRunReconciler) track(key types.NamespacedName, uid types.UID) {
	if old, replaced := r.mem.track(key, uid); replaced {
		r.forget(old)
	}
}

// forgetName drops what this process holds for a run that no longer exists.
func (r *AgentRunReconciler) forgetName(key types.NamespacedName) {
	if uid, ok := r.mem.uidOf(key); ok {
		r.forget(uid)
	}
}

// forget drops what this process holds for a run: its kit, its cached
// transcript, our last write and its work in flight (cancelled).
func (r *AgentRunReconciler) forget(uid types.UID) {
	r.work.forget(uid)
	r.mem.forget(uid)
}

// patchMetadata writes one field of the run's metadata, guarded by its
// resourceVersion (a conflict is errConflict), and keeps the run in
// memory as the API server has it. A run that is gone is left alone.
func (r *AgentRunReconciler) patchMetadata(ctx context.Context, run *v1alpha1.AgentRun, field string, value any) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{field: value, "resourceVersion": run.ResourceVersion}})
	if err != nil {
		return err
	}
	if err := r.Patch(ctx, run, client.RawPatch("application/merge-patch+json", body)); err != nil {
		if apierrors.IsConflict(err) {
			return errConflict
		}
		return client.IgnoreNotFound(err)
	}
	return nil
}
