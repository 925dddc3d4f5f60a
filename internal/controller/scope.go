package controller

import (
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/agentrun/agentrun/internal/telemetry"
)

// scope is what one reconcile has read and decided. The phases fill it in
// order (loadKit, loadState, advance); persist writes it out.
type scope struct {
	// run is the object being reconciled; its status is rewritten in
	// place and patched once, against the object the API server holds.
	// stored is the run as last saved: that object, with the status our
	// saves hold but did not write (deferred) laid over it (stored.go).
	run    *v1alpha1.AgentRun
	stored stored
	// resumed: the state was read back from chunks saved after the stored
	// status (loadState), so this save writes status.
	resumed bool
	// now is the reconcile's one reading of the clock.
	now time.Time

	// kit is the run's engine, model and tools (loadKit).
	kit *Kit
	// state is the engine's state, from the checkpoint in status and the
	// transcript chunks (loadState), then as the steps left it (advance).
	state *loop.State
	// saved is what of the transcript is in chunks (read-only here);
	// flushed is how many messages of state.Transcript that is.
	saved   *saved
	flushed int
	// consumed is the key of the finished work this reconcile applied; it
	// is dropped from memory once status holds its outcome.
	consumed string
	// started is the key of the work this reconcile started that may end
	// at once (a kit build, a batch of tools), which Reconcile waits for
	// a moment.
	started string

	// reads are free reads advance started before their step was saved
	// and that were still running when it stopped waiting: act hands
	// them to the tracker once the step is saved.
	reads *reads

	// answers are the approval annotations not yet applied, by call id,
	// each with who set it and the digest it names (answersFrom).
	answers map[string]runstatus.Answer
	// edits are the arguments of the approvals with changes among
	// answers, the proposal patched (editsFrom).
	edits map[string]loop.Edit
	// effect is what the last step asked the outside world to do (a model
	// call, tools), started only after the status write holds it.
	effect loop.Effect
	// notes are what the steps reported, turned into events and metrics
	// once the write succeeded.
	notes []loop.Note

	// trace is the run's trace, from status.traceParent (set in this
	// reconcile when the run had none); act starts the calls under it and
	// the reconcile that saves the run's end emits its span.
	trace *telemetry.Run

	// stop: the run ended or failed in this reconcile; wait: nothing to do
	// until outside work finishes (no write).
	stop bool
	wait bool
}

// asBuilt is the run with the spec it is built from: a run made from a
// template names its model and ceilings only in the resolved spec, which
// the metrics and the trace label it by.
func asBuilt(sc *scope) *v1alpha1.AgentRun {
	spec := sc.builtSpec()
	if spec == &sc.run.Spec || sc.run.Spec.TemplateRef == nil {
		return sc.run
	}
	cp := *sc.run
	cp.Spec = *spec
	return &cp
}

// builtSpec is the spec the run's kit was built from (resolved from its
// template, governed by the platform's policies), or the run's own when
// that is what the kit was built from or before it is built.
func (sc *scope) builtSpec() *v1alpha1.AgentRunSpec {
	if sc.kit != nil && sc.kit.Spec != nil {
		return sc.kit.Spec
	}
	return &sc.run.Spec
}
