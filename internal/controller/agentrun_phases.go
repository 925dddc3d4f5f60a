package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/agentrun/agentrun/internal/transcript"
	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const maxSteps = 16

// maxBatchBytes bounds the tool output one group of calls brings back,
// counted as JSON (escaped): each result is already cut at its tool's
// maxResultBytes, and a group whose results add up to more has each cut to
// a fair share, so that one step's results always fit a transcript chunk.
const maxBatchBytes = 512 << 10

// kitKey is the work that builds a run's kit.
const kitKey = "kit"

// KitBuildTimeout bounds the building of one run's kit, its MCP servers'
// inspection included: the run ends ToolFailure (an MCP server that did
// not answer) or Error past it.
const KitBuildTimeout = time.Minute

// loadKit builds (or reuses) the run's engine, model and tools. The spec
// cannot change after creation, so a run's kit is built once per process.
// The build runs outside the reconcile worker, as model and tool calls do:
// it inspects the run's MCP servers, which its author chose, and a server
// that answers slowly must not hold a worker that other tenants' runs need.
func (r *AgentRunReconciler) loadKit(ctx context.Context, sc *scope) (ctrl.Result, error) {
	k := r.mem.kit(sc.run.UID)
	if k == nil {
		uid := sc.run.UID
		if r.work.busy(uid, kitKey) {
			sc.wait = true
			return ctrl.Result{}, nil
		}
		w := r.work.finished(uid, kitKey)
		if w == nil {
			if err := r.guard(ctx, sc); err != nil || sc.stop {
				return ctrl.Result{}, err
			}
			// A run made from a template is built from the spec resolved
			// from it, once, and kept with the run.
			src, tpl, err := r.resolved(ctx, sc.run)
			switch {
			case errors.Is(err, errTemplateMissing) && sc.now.Sub(sc.run.CreationTimestamp.Time) < TemplateWait:
				r.event(sc.run, corev1.EventTypeWarning, ReasonTemplateNotFound, ReasonTemplateNotFound,
					fmt.Sprintf("%s; waiting up to %s for it", err.Error(), TemplateWait))
				sc.wait = true
				return ctrl.Result{RequeueAfter: TemplateWait / 10}, nil
			case errors.Is(err, errTemplateMissing), errors.Is(err, errTemplateRefused):
				r.failInvalid(sc, "the run cannot start: "+err.Error())
				return ctrl.Result{}, nil
			case err != nil:
				return ctrl.Result{}, err
			}
			// Tools that name an MCPServer take its settings now, before
			// the policies judge them by their server's url.
			src, err = resolveMCPServers(ctx, r.APIReader, src)
			var refusal *kit.MCPServerRefusal
			switch {
			case errors.As(err, &refusal) && refusal.Missing && sc.now.Sub(sc.run.CreationTimestamp.Time) < TemplateWait:
				// Applied after the run, as a template may be.
				r.event(sc.run, corev1.EventTypeWarning, ReasonMCPServerNotFound, ReasonMCPServerNotFound,
					fmt.Sprintf("%s; waiting up to %s for it", err.Error(), TemplateWait))
				sc.wait = true
				return ctrl.Result{RequeueAfter: TemplateWait / 10}, nil
			case errors.As(err, &refusal):
				r.failInvalid(sc, "the run cannot start: "+err.Error())
				return ctrl.Result{}, nil
			case err != nil:
				return ctrl.Result{}, err
			}
			// The build reads the platform's policies first, live, and
			// builds the run as they govern it (govern): off the worker,
			// which a live read would hold for as long as the API server
			// takes to answer it consistently (docs/scale.md). The copy
			// is the build's own: this reconcile goes on with sc.run.
			src = src.DeepCopy()
			r.work.start(r.background(), sc.run, kitKey, func(ctx context.Context, w *work) {
				ctx, cancel := context.WithTimeout(ctx, KitBuildTimeout)
				defer cancel()
				w.template = tpl
				g := r.govern(ctx, src)
				if w.governed = g; g.unread != nil || g.refused != nil {
					return
				}
				w.kit, w.err = r.Kits.Build(ctx, g.run, g.grant)
				if w.kit != nil {
					w.kit.Approvers = g.approvers
					// The spec alone, so that the kit does not keep the
					// rest of the run's copy (its status, managedFields)
					// for the run's whole life.
					spec := g.run.Spec
					w.kit.Spec = &spec
				}
			})
			sc.wait, sc.started = true, kitKey
			return ctrl.Result{}, nil
		}
		r.work.clear(uid, kitKey)
		if g := w.governed; g != nil {
			switch {
			case g.unread != nil:
				// Read again by the next build.
				return ctrl.Result{}, g.unread
			case g.refused != nil:
				r.failInvalid(sc, "the run cannot start: "+g.refused.Error())
				sc.notes = append(sc.notes, loop.Note{Kind: NotePlatformRefused, Warning: true, Message: g.refused.Error()})
				return ctrl.Result{}, nil
			case len(g.changes) > 0:
				r.event(sc.run, corev1.EventTypeNormal, string(NotePlatformApplied), string(NotePlatformApplied), strings.Join(g.changes, "; "))
			}
		}
		k = w.kit
		if k != nil && k.Spec != nil && equality.Semantic.DeepEqual(*k.Spec, sc.run.Spec) {
			// Built from the run's own spec, unchanged: the kit keeps no
			// copy of it for the run's life (scope.builtSpec).
			k.Spec = nil
		}
		if t := sc.run.Status.Template; w.template != nil && (t == nil || t.Goal == "") {
			// A run resolved by an operator that kept no goal in status
			// gets it here; the digest is the same (keptSpec checks it).
			sc.run.Status.Template = w.template
		}
		if err := w.err; err != nil {
			// The manifest passed the API server's validation but cannot be
			// run (a CEL condition that does not compile, say): that is
			// final, not worth a retry.
			outcome := v1alpha1.OutcomeError
			reason := "the run cannot start: " + err.Error()
			switch cause := buildFailure(err); cause {
			case causeUnavailable:
				outcome = v1alpha1.OutcomeToolFailure
				runstatus.SetFailed(&sc.run.Status, outcome, reason, metav1.NewTime(sc.now))
			case causeConfiguration:
				runstatus.SetInvalid(&sc.run.Status, reason, metav1.NewTime(sc.now))
			default:
				runstatus.SetFailed(&sc.run.Status, outcome, reason, metav1.NewTime(sc.now))
			}
			sc.notes = append(sc.notes, loop.Note{Kind: loop.NoteFinished, Warning: true, Message: string(outcome) + ": " + reason})
			sc.stop = true
			return ctrl.Result{}, nil
		}
		r.mem.keepKit(sc.run.UID, k)
	}
	sc.kit = k
	if sc.run.Status.Limits == nil && k.Engine != nil {
		// What admission uses, kept with the run for everything that judges
		// it (headroom, the overdue alert, the console): the spec alone
		// does not say it for a run made from a template or capped by a
		// platform policy.
		sc.run.Status.Limits = limits.Status(k.Engine.Config())
	}
	return ctrl.Result{}, nil
}

// loadState reads the checkpoint and the transcript chunks it refers to.
// State the checkpoint counts on that is missing or unreadable ends the
// run Error with a reason that names it: waiting will not bring it back.
func (r *AgentRunReconciler) loadState(ctx context.Context, sc *scope) (ctrl.Result, error) {
	st := &sc.run.Status
	chunks, messages := 0, 0
	if t := st.Transcript; t != nil {
		chunks, messages = int(t.Chunks), int(t.Messages)
	}
	// Status may be written by anyone who may patch it: its checkpoint
	// and counts are resumed only under the operator's seal.
	if err := transcript.OpenCheckpoint(r.Keys, sc.run.UID, st); err != nil {
		r.fail(sc, "the run cannot resume: "+err.Error())
		return ctrl.Result{}, nil
	}
	// A sealed status may still be an earlier one, written back: it must
	// be the run's latest save (rollback.go).
	high, err := r.highest(ctx, sc.run)
	if errors.Is(err, transcript.ErrForged) {
		r.fail(sc, "the run cannot resume: "+err.Error())
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if reason := rolledBack(st, high); reason != "" {
		restoreUsage(st, high)
		r.fail(sc, reason)
		return ctrl.Result{}, nil
	}
	sv := r.mem.saved(sc.run.UID)
	fromStorage := false
	// A follow-up that has saved nothing yet starts from the conversation
	// of the run it continues (seedFollowUp); once saved, it resumes from
	// its own transcript, as every run does.
	seed := sc.run.Spec.ContinueFrom != nil && chunks == 0 && st.Checkpoint == nil
	switch {
	case sv != nil && sv.chunks == chunks && len(sv.messages) == messages:
		// What this process last saved.
	case chunks == 0 && st.Checkpoint == nil:
		// Never saved: a run's first save writes status.
		sv = &saved{observations: map[string]transcript.Observation{}}
		r.mem.keepSaved(sc.run.UID, sv)
	default:
		// Not what this process last saved (a restart, another replica,
		// another write of the run): read the chunks, with those saved
		// after the ones status counts.
		fromStorage = true
		cs, err := transcript.ReadSealed(ctx, r.APIReader, r.Keys, sc.run, chunks)
		if errors.Is(err, transcript.ErrLost) || errors.Is(err, transcript.ErrForged) {
			r.fail(sc, "the run cannot resume: "+err.Error())
			return ctrl.Result{}, nil
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		sv = &saved{chunks: len(cs), observations: map[string]transcript.Observation{}}
		counted := 0
		for i, ch := range cs {
			sv.messages = append(sv.messages, ch.Messages...)
			if i < chunks {
				counted += len(ch.Messages)
			}
			for _, o := range ch.Observations {
				sv.observations[o.CallID] = o
			}
		}
		if counted != messages {
			r.fail(sc, fmt.Sprintf("the run cannot resume: its transcript chunks hold %d messages, its status counts %d", counted, messages))
			return ctrl.Result{}, nil
		}
		if len(cs) > chunks {
			// Saves after the stored status: resume from the newest.
			st.Checkpoint = &runtime.RawExtension{Raw: transcript.Newest(sc.run, cs, chunks)}
			st.Transcript = &v1alpha1.TranscriptStatus{Chunks: int32(sv.chunks), Messages: int32(len(sv.messages))}
			sc.resumed = true
		}
		r.mem.keepSaved(sc.run.UID, sv)
	}
	s, err := transcript.Decode(sc.run)
	if err != nil {
		r.fail(sc, err.Error())
		return ctrl.Result{}, nil
	}
	if sc.resumed && sc.kit != nil {
		// The last save is newer than the stored status: what this
		// reconcile adds (its spend, its transitions) counts from it.
		runstatus.SetFromState(st, s, sc.kit.Engine.Convergence(s), metav1.NewTime(sc.now))
		runstatus.SetModel(st, &asBuilt(sc).Spec.Model, s)
		sc.stored.lay(st)
	}
	// The results of the turn's calls are in the chunks, not in status.
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.ObsStatus == "" || c.Observation != "" {
			continue
		}
		o, ok := sv.observations[c.ID]
		if !ok {
			r.fail(sc, fmt.Sprintf("the run cannot resume: the result of call %s (%s) is missing from its transcript Secrets", c.ID, c.Name))
			return ctrl.Result{}, nil
		}
		c.Observation = o.Content
	}
	// Append the checkpoint's messages (only runs saved by older operators
	// have any) to the cached saved messages; the full slice expression
	// makes any append copy, so the cache is never written through.
	s.Transcript = append(sv.messages[:len(sv.messages):len(sv.messages)], s.Transcript...)
	if seed && len(s.Transcript) == 0 {
		refused, err := r.seedFollowUp(ctx, sc, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		if refused != "" {
			r.failInvalid(sc, refused)
			return ctrl.Result{}, nil
		}
	}
	var eng *loop.Engine
	if sc.kit != nil {
		eng = sc.kit.Engine
	}
	if reason, voided := checkProposals(s, eng); reason != "" {
		r.fail(sc, reason)
		if voided != "" {
			sc.notes = append(sc.notes, loop.Note{Kind: NoteApprovalVoided, CallID: voided, Warning: true, Message: reason})
		}
		return ctrl.Result{}, nil
	}
	sc.state, sc.saved, sc.flushed = s, sv, len(sv.messages)
	if fromStorage && sc.kit != nil {
		// Read back from storage: a saved verdict counts only as far as
		// vetting the waiting batch again, under the policies in force
		// now, agrees with it.
		sc.notes = append(sc.notes, sc.kit.Engine.Revet(ctx, s, sc.now)...)
	}
	sc.answers = answersFrom(sc.run)
	notes := append(unreadAnswers(sc.run), bindAnswers(s, sc.answers)...)
	notes = append(notes, fitAnswers(s, sc.answers)...)
	if sc.kit != nil {
		notes = append(notes, screenApprovers(sc.kit.Approvers, sc.answers, r.AcceptUnstampedAnswers)...)
	}
	var editNotes []loop.Note
	sc.edits, editNotes = editsFrom(s, sc.answers)
	notes = append(notes, editNotes...)
	for _, n := range notes {
		// Recorded now: the run still waits, so this reconcile may save
		// nothing, and notes become events only with a save.
		r.event(sc.run, corev1.EventTypeWarning, string(n.Kind), string(n.Kind)+" "+n.CallID, n.Message)
	}
	return ctrl.Result{}, nil
}

// fail ends the run Error in this reconcile, keeping what status says was
// spent.
func (r *AgentRunReconciler) fail(sc *scope, reason string) {
	runstatus.SetFailed(&sc.run.Status, v1alpha1.OutcomeError, reason, metav1.NewTime(sc.now))
	r.failed(sc, reason)
}

// failInvalid ends the run Error as fail does, blaming its configuration
// (condition reason InvalidConfiguration) rather than the operator.
func (r *AgentRunReconciler) failInvalid(sc *scope, reason string) {
	runstatus.SetInvalid(&sc.run.Status, reason, metav1.NewTime(sc.now))
	r.failed(sc, reason)
}

func (r *AgentRunReconciler) failed(sc *scope, reason string) {
	sc.run.Status.Checkpoint = nil
	sc.notes = append(sc.notes, loop.Note{Kind: loop.NoteFinished, Warning: true, Message: string(v1alpha1.OutcomeError) + ": " + reason})
	sc.state = nil
	sc.stop = true
}

func modelKey(s *loop.State) string { return fmt.Sprintf("model/t%d/a%d", s.Turn, s.Attempt) }

func toolsKey(s *loop.State) string {
	var ids []string
	for _, c := range s.Calls {
		if c.State == loop.CallDispatched {
			ids = append(ids, c.ID)
		}
	}
	return "tools/" + strings.Join(ids, ",")
}

// advance feeds the engine what arrived since the last reconcile (a model
// reply, tool results, answers, a cancel) and steps it until the next step
// needs the outside world.
func (r *AgentRunReconciler) advance(ctx context.Context, sc *scope) (ctrl.Result, error) {
	s, uid := sc.state, sc.run.UID
	in := loop.Input{Cancel: sc.run.Spec.Cancel}
	in.Answers, in.Reasons = decisions(sc.answers)
	in.Edits, in.By = sc.edits, authors(sc.answers)
	if in.Cancel {
		in.CancelReason = cancelReason(sc.run) // who cancelled, when the run says
	} else {
		// The kill switches stop the run as spec.cancel does.
		why, err := r.suspension(ctx, sc.run)
		if err != nil {
			return ctrl.Result{}, err
		}
		in.Cancel, in.CancelReason = why != "", why
	}
	switch {
	case s.Phase.CallsModel():
		key := modelKey(s)
		if r.work.busy(uid, key) {
			if !in.Cancel {
				sc.wait = true
				return ctrl.Result{}, nil
			}
			r.work.forget(uid) // cancel: the call's reservation is charged
		} else if w := r.work.finished(uid, key); w != nil {
			in.Reply, in.ModelErr = w.reply, w.err
			sc.consumed = key
		}
		// No work in this process: the call was lost to a restart.
	case s.Phase == loop.PhaseAct:
		key := toolsKey(s)
		if r.work.busy(uid, key) {
			// Tools run to their end even when the run is cancelled: the
			// boundary is after their results are recorded. A child run
			// ends sooner, cancelled too.
			if in.Cancel {
				if _, err := r.cancelChildren(ctx, sc.run); err != nil {
					return ctrl.Result{}, err
				}
			}
			sc.wait = true
			return ctrl.Result{}, nil
		}
		if w := r.work.finished(uid, key); w != nil {
			in.Results = boundResults(w.results, maxBatchBytes)
			sc.consumed = key
		}
	}

	// The model's answer this reconcile applies, if any: the first group
	// of free reads it proposes may run before it is saved (readsFirst).
	answer := ""
	if in.Reply != nil {
		answer = sc.consumed
	}
	for i := 0; i < maxSteps; i++ {
		in.Context = ctx
		eff := sc.kit.Engine.Step(s, in)
		sc.notes = append(sc.notes, eff.Notes...)
		sc.effect = eff
		if eff.Kind == loop.EffectRunTools && answer != "" && r.mayRunUnsaved(sc, eff.Calls) {
			results, ok := r.readsFirst(sc, answer, eff)
			answer = ""
			if !ok {
				break // saved as dispatched; act hands them to the tracker
			}
			in = loop.Input{Results: boundResults(results, maxBatchBytes)}
			continue
		}
		if eff.Kind != loop.EffectContinue {
			break
		}
		in = loop.Input{}
	}
	switch sc.effect.Kind {
	case loop.EffectAsk:
		if d := sc.kit.Engine.ApprovalDeadline(s); !d.IsZero() {
			return ctrl.Result{RequeueAfter: max(time.Second, d.Sub(sc.now)+time.Second)}, nil
		}
	case loop.EffectContinue:
		// Many turns without outside work: come back for the rest.
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	case loop.EffectWait:
		// A retry's backoff: the checkpoint holds when it is due, so a
		// restart during the wait resumes it.
		return ctrl.Result{RequeueAfter: max(time.Millisecond, sc.effect.Until.Sub(sc.now))}, nil
	}
	return ctrl.Result{}, nil
}

// persist saves what this reconcile decided, so that nothing is
// dispatched unless it is saved (write-ahead), and reports whether it
// saved anything. New messages and tool results go to transcript chunks
// first; then one status patch, with optimistic locking, counts them and
// carries the checkpoint, stripped of every message and result. A save
// that changes only the run's progress (mayDefer) puts the checkpoint in
// its last chunk instead and leaves status to a later write (deferred),
// within StatusInterval. A reconcile that read a stale object is refused
// (errConflict) before it changes anything that status counts.
//
// A save the API server will never accept (a Secret in the way, an object
// too large) ends the run Error, keeping what was spent; a transient
// failure is returned (retried with backoff, a Warning event each time)
// and neither charges nor dispatches anything.
func (r *AgentRunReconciler) persist(ctx context.Context, sc *scope) (written bool, err error) {
	st := &sc.run.Status
	now := metav1.NewTime(sc.now)
	s := sc.state
	var next *saved
	if st.ObservedGeneration != sc.run.Generation {
		st.ObservedGeneration = sc.run.Generation
	}
	apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionSaved) // this save clears it
	quiet, deferrable := false, false
	if s != nil && sc.kit != nil {
		runstatus.SetFromState(st, s, sc.kit.Engine.Convergence(s), now)
		runstatus.SetModel(st, &asBuilt(sc).Spec.Model, s)
		runstatus.RecordApprovals(st, sc.notes, sc.answers, now)
		// An Escalated end is handed to its owner in the write that
		// ends the run.
		escalate(st, ownerOf(sc), now)
		if err := setCheckpoint(st, s); err != nil {
			return false, err
		}
		var checkpoint []byte
		if deferrable = r.mayDefer(sc); deferrable {
			checkpoint = st.Checkpoint.Raw
		}
		next, quiet, err = r.saveTranscript(ctx, sc, checkpoint)
		switch {
		case errors.Is(err, transcript.ErrStale):
			r.dropSaves(sc.run.UID)
			return false, errConflict
		case errors.Is(err, transcript.ErrRefused):
			r.fail(sc, "the run's transcript cannot be saved: "+err.Error())
			s, next, quiet, deferrable = nil, nil, false, false
		case err != nil:
			r.unsaved(ctx, sc, "Saving the transcript failed; retrying: "+err.Error())
			return false, err
		}
	}
	switch {
	case quiet:
		// Saved in the chunk; status follows within StatusInterval. The
		// status held back is sealed now (patchStatus seals what it
		// writes): the next reconcile resumes from it.
		if err := r.sealStatus(sc.run.UID, &sc.stored.server().Status, st); err != nil {
			return false, err
		}
		d := &deferred{status: st.DeepCopy(), over: sc.stored.server().ResourceVersion, since: sc.now}
		if sc.stored.deferred != nil {
			d.since = sc.stored.deferred.since
		}
		r.mem.keepDeferred(sc.run.UID, d)
		sc.stored.deferred, written = d, true
	case sc.stored.deferred != nil && deferrable && equalStatus(&sc.stored.run().Status, st):
		// Nothing new since the saves whose status is deferred: it stays
		// deferred until it is due.
	case !equalStatus(&sc.stored.server().Status, st):
		err := r.patchStatus(ctx, sc.stored.server(), sc.run)
		if apierrors.IsConflict(err) {
			return false, errConflict
		}
		if (apierrors.IsInvalid(err) || apierrors.IsRequestEntityTooLargeError(err)) && !sc.stop {
			// Never answered by running the work again: the run ends,
			// with what it spent.
			r.fail(sc, "the run's status cannot be saved: "+clip.Cut(err.Error(), 2048, runstatus.CutMark))
			next = nil
			if !equalStatus(&sc.stored.server().Status, st) {
				err = r.patchStatus(ctx, sc.stored.server(), sc.run)
			}
			if apierrors.IsConflict(err) {
				return false, errConflict
			}
		}
		if err != nil {
			r.unsaved(ctx, sc, "Saving the run's status failed; retrying: "+err.Error())
			return false, err
		}
		r.mem.keepDeferred(sc.run.UID, nil)
		sc.stored.deferred, written = nil, true
	}
	if sc.consumed != "" {
		r.work.clear(sc.run.UID, sc.consumed)
	}
	if next != nil {
		r.mem.keepSaved(sc.run.UID, next)
	}
	if sc.stop || (s != nil && s.Done()) {
		r.forget(sc.run.UID)
	}
	return written, nil
}

// mayDefer reports whether this save may leave status to a later write:
// StatusInterval is set, the deferred saves are not due, the state was not
// read back from saves status does not count (a restart, another write of
// the run), and the save changes nothing of the status but the run's
// progress.
func (r *AgentRunReconciler) mayDefer(sc *scope) bool {
	if r.StatusInterval <= 0 || sc.stop || sc.resumed || sc.state == nil || sc.state.Done() {
		return false
	}
	if d := sc.stored.deferred; d != nil && !sc.now.Before(r.due(d)) {
		return false
	}
	return runstatus.OnlyProgress(&sc.stored.server().Status, &sc.run.Status)
}

// dropSaves forgets what this process knows of a run's saves, so that the
// next attempt reads them from the API server.
func (r *AgentRunReconciler) dropSaves(uid types.UID) {
	r.mem.dropSaves(uid)
}

// saveTranscript writes the messages and tool results that are not yet in
// a chunk as new chunks, and counts them in status.transcript. With a
// checkpoint, the last new chunk carries it and the save is done when that
// chunk is (quiet); a save with nothing new for a chunk is not. It returns
// what is saved once status or the last chunk holds that count.
func (r *AgentRunReconciler) saveTranscript(ctx context.Context, sc *scope, checkpoint []byte) (_ *saved, quiet bool, _ error) {
	s, sv := sc.state, sc.saved
	msgs := s.Transcript[sc.flushed:]
	var obs []transcript.Observation
	keep := map[string]transcript.Observation{}
	for _, c := range s.Calls {
		if c.Observation == "" {
			continue
		}
		o := transcript.Observation{CallID: c.ID, Content: c.Observation, Status: c.ObsStatus}
		if old, ok := sv.observations[c.ID]; !ok || old != o {
			obs = append(obs, o)
		}
		keep[c.ID] = o
	}
	if len(msgs) == 0 && len(obs) == 0 {
		if len(keep) == len(sv.observations) {
			return sv, false, nil
		}
		return &saved{chunks: sv.chunks, messages: sv.messages, observations: keep}, false, nil
	}
	next := &saved{chunks: sv.chunks, messages: sv.messages[:len(sv.messages):len(sv.messages)], observations: keep}
	chs := transcript.Split(msgs, obs, transcript.MaxChunkBytes)
	for i, ch := range chs {
		if i == len(chs)-1 && len(checkpoint) > 0 {
			ch.Checkpoint = checkpoint
		}
		if err := transcript.Write(ctx, r.Client, r.APIReader, r.Keys, sc.run, next.chunks, ch); err != nil {
			return nil, false, fmt.Errorf("writing transcript chunk %d: %w", next.chunks, err)
		}
		next.chunks++
		next.messages = append(next.messages, ch.Messages...)
		for _, o := range ch.Observations {
			next.observations[o.CallID] = o // as saved, cut if it had to be
		}
	}
	sc.run.Status.Transcript = &v1alpha1.TranscriptStatus{Chunks: int32(next.chunks), Messages: int32(len(next.messages))}
	return next, len(checkpoint) > 0, nil
}

// patchStatus writes run's status over base, numbered and sealed, and
// once the API server has accepted it, raises the run's high-water mark
// and its record (rollback.go). A write that fails raises nothing.
func (r *AgentRunReconciler) patchStatus(ctx context.Context, base, run *v1alpha1.AgentRun) error {
	// A status equal to base but for its spelling (the API server's
	// timestamps and key order) keeps base's number: the write then
	// changes nothing, as before statuses were numbered, and the API
	// server stores nothing.
	run.Status.CheckpointSequence = base.Status.CheckpointSequence
	if err := r.sealWith(run.UID, &run.Status); err != nil {
		return err
	}
	if !sameStatus(&base.Status, &run.Status) {
		if err := r.sealStatus(run.UID, &base.Status, &run.Status); err != nil {
			return err
		}
	}
	prev := base.ResourceVersion
	if err := r.writeStatus(ctx, run, base, true); err != nil {
		return err
	}
	r.mem.remember(prev, run)
	r.savedStatus(ctx, run)
	return nil
}

// sameStatus reports whether a and b read the same as JSON, key order
// aside (the API server may spell a raw JSON value of a status it returns
// in another order than the operator wrote it). Only status is compared:
// a status write keeps the rest of the object as stored.
func sameStatus(a, b *v1alpha1.AgentRunStatus) bool {
	x, errA := json.Marshal(a)
	y, errB := json.Marshal(b)
	if errA != nil || errB != nil {
		return false
	}
	if bytes.Equal(x, y) {
		return true
	}
	patch, err := jsonpatch.CreateMergePatch(x, y)
	return err == nil && string(patch) == "{}"
}

// writeStatus is the one place the AgentRun reconciler writes a run's
// status. With lock, it puts run's whole status over base under base's
// resourceVersion (a conflict then means the run changed since it was
// read): the API server takes only status from a status write and keeps
// the rest as stored, so this holds what a merge patch over base would,
// and spares the API server applying a patch to the stored object
// (docs/scale.md). Without lock, it is a merge
// patch over base, whatever changed since; with no base, the whole status
// under run's resourceVersion. Once written, run is the object as stored.
func (r *AgentRunReconciler) writeStatus(ctx context.Context, run, base *v1alpha1.AgentRun, lock bool) error {
	ctx, cancel := answered(ctx)
	defer cancel()
	switch {
	case base == nil:
		return r.Status().Update(ctx, run)
	case lock:
		put := base.DeepCopy()
		put.ManagedFields = nil // the API server keeps its own on a status write
		put.Status = *run.Status.DeepCopy()
		if err := r.Status().Update(ctx, put); err != nil {
			return err
		}
		*run = *put
		return nil
	}
	return r.Status().Patch(ctx, run, client.MergeFrom(base))
}

// sealStatus numbers st as the status written over base (one higher than
// any saved) and seals its checkpoint, counts and number for the run
// (loadState opens the seal, and compares the number with the highest
// saved, before resuming).
func (r *AgentRunReconciler) sealStatus(uid types.UID, base, st *v1alpha1.AgentRunStatus) error {
	st.CheckpointSequence = r.nextSequence(uid, base)
	return r.sealWith(uid, st)
}

// sealWith seals st as it is numbered.
func (r *AgentRunReconciler) sealWith(uid types.UID, st *v1alpha1.AgentRunStatus) error {
	s, err := transcript.SealCheckpoint(r.Keys, uid, st)
	if err != nil {
		return fmt.Errorf("sealing the checkpoint: %w", err)
	}
	st.CheckpointSeal = s
	return nil
}

// setCheckpoint puts the engine's state in status without what only
// Secret readers may see: the transcript is in chunks, and so are the
// results of the turn's calls (ObsStatus says a call has one).
func setCheckpoint(st *v1alpha1.AgentRunStatus, s *loop.State) error {
	if s.Done() {
		// An ended run is never resumed: its outcome, usage and
		// transcript are all that is left to read.
		st.Checkpoint = nil
		return nil
	}
	cp := *s
	cp.Transcript = nil
	cp.Calls = make([]loop.Call, len(s.Calls))
	for i, c := range s.Calls {
		c.Observation = ""
		cp.Calls[i] = c
	}
	raw, err := json.Marshal(&cp)
	if err != nil {
		return err
	}
	st.Checkpoint = &runtime.RawExtension{Raw: raw}
	return nil
}

// unsaved reports a save that failed and will be retried: a Warning event
// (PersistFailed) and, as far as status can still be written, the
// condition Saved=False on the status as it was read. Nothing else of the
// reconcile is written.
func (r *AgentRunReconciler) unsaved(ctx context.Context, sc *scope, msg string) {
	msg = clip.Cut(msg, 1024, runstatus.CutMark)
	r.event(sc.run, corev1.EventTypeWarning, v1alpha1.ReasonPersistFailed, v1alpha1.ReasonPersistFailed, msg)
	if c := apimeta.FindStatusCondition(sc.stored.server().Status.Conditions, v1alpha1.ConditionSaved); c != nil && c.Message == msg {
		return
	}
	run := sc.stored.server().DeepCopy()
	runstatus.SetCondition(&run.Status, v1alpha1.ConditionSaved, metav1.ConditionFalse, v1alpha1.ReasonPersistFailed, msg, metav1.NewTime(sc.now))
	if err := r.patchStatus(ctx, sc.stored.server(), run); err != nil {
		ctrl.LoggerFrom(ctx).V(2).Info("Could not record the failed save in status", "error", err.Error())
	}
}

// boundResults cuts the outputs of one group of results so that together
// they take at most limit bytes as JSON; each result keeps at least a fair
// share, and a cut result says so (Truncated, with its full Size).
func boundResults(results []loop.Result, limit int) []loop.Result {
	sizes := make([]int, len(results))
	total := 0
	for i, r := range results {
		sizes[i] = escapedLen(r.Output, len(r.Output))
		total += sizes[i]
	}
	if total <= limit {
		return results
	}
	// The largest share that fits: results under it are kept whole.
	share := limit / len(results)
	for changed := true; changed; {
		changed = false
		left, n := limit, 0
		for _, sz := range sizes {
			if sz <= share {
				left -= sz
			} else {
				n++
			}
		}
		if n > 0 && left/n > share {
			share, changed = left/n, true
		}
	}
	out := make([]loop.Result, len(results))
	for i, r := range results {
		out[i] = r
		if sizes[i] <= share {
			continue
		}
		cut := cutEscaped(r.Output, share)
		size := r.Size
		if size < int64(len(r.Output)) {
			size = int64(len(r.Output))
		}
		out[i].Output, out[i].Size, out[i].Truncated = r.Output[:cut], size, true
	}
	return out
}

// escapedLen is the length of b's first n bytes once JSON-escaped.
func escapedLen(b []byte, n int) int {
	size := 0
	for _, c := range b[:n] {
		size += escapedByte(c)
	}
	return size
}

func escapedByte(c byte) int {
	switch {
	case c == '"' || c == '\\':
		return 2
	case c < 0x20 || c == '<' || c == '>' || c == '&':
		return 6
	case c >= 0x80:
		return 3 // an invalid byte may become U+FFFD
	}
	return 1
}

// cutEscaped returns how many leading bytes of b fit in limit bytes of
// JSON, ending on a rune boundary.
func cutEscaped(b []byte, limit int) int {
	size, i := 0, 0
	for ; i < len(b); i++ {
		if size+escapedByte(b[i]) > limit {
			break
		}
		size += escapedByte(b[i])
	}
	return len(clip.Head(b, i))
}

func equalStatus(a, b *v1alpha1.AgentRunStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}

// act starts the outside work the engine asked for, after its intent is
// safely in status.
func (r *AgentRunReconciler) act(ctx context.Context, sc *scope) {
	if sc.state == nil || sc.kit == nil {
		return
	}
	s, kit, run := sc.state, sc.kit, sc.run
	base, obs := r.observed(sc)
	switch eff := sc.effect; eff.Kind {
	case loop.EffectCallModel:
		eng, req := kit.Engine, eff.Request
		model := loop.ObserveModel(kit.ModelAt(req.Fallback), obs)
		r.work.start(base, run, modelKey(s), func(ctx context.Context, w *work) {
			w.reply, w.err = eng.CallModel(ctx, model, req)
		})
	case loop.EffectRunTools:
		if len(eff.Calls) == 0 {
			return
		}
		calls, concurrent := eff.Calls, eff.Concurrent
		if b := sc.reads; b != nil {
			// Started by advance, still running: saved as dispatched now.
			r.work.start(base, run, toolsKey(s), func(ctx context.Context, w *work) {
				w.results, w.err = b.join(ctx)
			})
			sc.reads = nil
		} else {
			tools := loop.ObserveTools(kit.Tools, obs)
			r.work.start(base, run, toolsKey(s), func(ctx context.Context, w *work) {
				w.results = loop.ExecuteBatch(ctx, tools, calls, concurrent)
			})
		}
		if mayEndAtOnce(sc.builtSpec(), calls) {
			sc.started = toolsKey(s)
		}
	}
	r.dropStaleAnnotations(ctx, sc)
}

// observed is the context and the observers of the calls act and advance
// start: metrics and spans see every call, and the calls' spans are
// children of the run's span, whichever reconcile or process starts them.
// The engine's model is the one the run calls now (a fallback's once it
// fell back): the calls' metrics and spans are labelled with it.
func (r *AgentRunReconciler) observed(sc *scope) (context.Context, loop.Observer) {
	cfg := sc.kit.Engine.Config()
	obs := loop.Observers(r.Metrics.calls(cfg.Model.Provider, cfg.Model.Name), sc.trace.Observer(cfg.Model.Provider, cfg.Model.Name))
	return sc.trace.Context(r.background()), obs
}

// readsFirst runs the free reads the model's answer (the finished work
// with key answer) proposed before that answer is saved, so that one save
// holds both; the reads stay with the answer until then (tracker.follow),
// and a save that fails does not run them again. A crash before the save
// runs them again, which free reads allow. It returns their results when
// they ended within inlineWait; otherwise they are left in sc.reads.
func (r *AgentRunReconciler) readsFirst(sc *scope, answer string, eff loop.Effect) ([]loop.Result, bool) {
	uid, key := sc.run.UID, toolsKey(sc.state)
	b := r.work.readsAfter(uid, answer, key)
	if b == nil {
		tctx, obs := r.observed(sc)
		tools, calls, concurrent := loop.ObserveTools(sc.kit.Tools, obs), eff.Calls, eff.Concurrent
		onPanic := func(ctx context.Context, p any) error { return recovered(ctx, r.Metrics, "work", p) }
		b = startReads(tctx, onPanic, func(ctx context.Context) []loop.Result {
			return loop.ExecuteBatch(ctx, tools, calls, concurrent)
		})
		r.work.follow(uid, answer, key, b)
	}
	results, ok := b.wait(inlineWait)
	if !ok {
		sc.reads = b
	}
	return results, ok
}

// mayRunUnsaved reports whether a group of calls may run before the step
// that dispatched it is saved: free reads (loop.Config.Rerunnable) that
// may end at once.
func (r *AgentRunReconciler) mayRunUnsaved(sc *scope, calls []loop.Invocation) bool {
	return sc.kit.Engine.Config().Rerunnable(calls) && mayEndAtOnce(sc.builtSpec(), calls)
}

// mayEndAtOnce reports whether a batch can end while its reconcile waits
// (Reconcile's inlineWait): not when a call is a Job's, which starts a
// pod, or a child run's, which takes turns of its own.
func mayEndAtOnce(spec *v1alpha1.AgentRunSpec, calls []loop.Invocation) bool {
	if spec == nil {
		return false
	}
	for _, c := range calls {
		for _, t := range spec.Tools {
			if t.Name == c.Tool && (t.Job != nil || t.Agent != nil) {
				return false
			}
		}
	}
	return true
}

// dropStaleAnnotations removes answers recorded as stale, so that a later
// call with the same id gets its own answer, and approvals counted
// toward a call that still waits for more approvers, so that the next
// person's answer is set anew (and stamped with their name).
func (r *AgentRunReconciler) dropStaleAnnotations(ctx context.Context, sc *scope) {
	var keys []string
	for _, n := range sc.notes {
		if n.Kind == loop.NoteStaleApproval || (n.Kind == loop.NoteApproval && waitsFor(sc.run, n.CallID)) {
			keys = append(keys, v1alpha1.ApprovalAnnotationPrefix+n.CallID)
		}
	}
	if len(keys) == 0 {
		return
	}
	ann := map[string]any{}
	for _, k := range keys {
		ann[k] = nil
		// The record of who answered goes with the answer (the admission
		// policy admits removing both together).
		id := strings.TrimPrefix(k, v1alpha1.ApprovalAnnotationPrefix)
		if _, ok := sc.run.Annotations[v1alpha1.ApprovedByAnnotationPrefix+id]; ok {
			ann[v1alpha1.ApprovedByAnnotationPrefix+id] = nil
		}
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err := r.Patch(ctx, sc.run.DeepCopy(), client.RawPatch("application/merge-patch+json", body)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Removing stale approval annotations")
	}
}

// perCall are the notes of a turn that goes as planned, besides the
// model's answer: events at EventsPerCall only, unless they warn.
var perCall = map[loop.NoteKind]bool{
	loop.NoteTurnStarted: true, loop.NoteCallVetted: true, loop.NoteCallFinished: true,
	loop.NoteStepStarted: true, loop.NoteStepFinished: true, loop.NoteSolving: true, loop.NoteVerifying: true,
}

// maxRefusalEvents is how many refused calls of one batch are events of
// their own; a batch with more gets one CallsRefused event instead.
const maxRefusalEvents = 3

// ReasonCallsRefused is the event that lists the refused calls of a batch
// with more than maxRefusalEvents of them.
const ReasonCallsRefused = "CallsRefused"

// emit records the reconcile's notes as events on obj, after the status
// write.
func (r *AgentRunReconciler) emit(obj *v1alpha1.AgentRun, c change) {
	if r.Recorder == nil {
		return
	}
	// A batch with many refused calls is one event that lists them (a
	// hostile model proposes up to loop.MaxCallsPerReply calls at once).
	var refused []string
	for _, n := range c.notes {
		if n.Kind == loop.NoteCallVetted && n.Warning {
			refused = append(refused, n.Message)
		}
	}
	summarise := len(refused) > maxRefusalEvents
	if summarise {
		r.event(obj, corev1.EventTypeWarning, ReasonCallsRefused, ReasonCallsRefused+fmt.Sprintf(" t%d", c.run.Status.Turn),
			fmt.Sprintf("%d calls of the batch were refused: %s", len(refused), strings.Join(refused, "; ")))
	}
	for _, n := range c.notes {
		if r.EventVerbosity != EventsPerCall && perCall[n.Kind] && !n.Warning {
			continue
		}
		if summarise && n.Kind == loop.NoteCallVetted && n.Warning {
			continue
		}
		typ := corev1.EventTypeNormal
		if n.Warning {
			typ = corev1.EventTypeWarning
		}
		reason := string(n.Kind)
		msg := n.Message
		if n.Kind == loop.NoteFinished && c.run.Status.Outcome != "" {
			reason = string(c.run.Status.Outcome)
			if e := c.run.Status.Escalation; e != nil && e.Owner != "" {
				msg += " (owner: " + e.Owner + ")"
			}
		}
		// The recorder folds events with the same type, reason and action
		// into one series and keeps the first note only: a note about a
		// call names the call in its action, and a note about a turn the
		// turn, so that every call's verdict (a refusal, a denial, an
		// answer) and every turn's answer is an event of its own.
		action := string(n.Kind)
		switch {
		case n.CallID != "":
			action += " " + n.CallID
		case n.Turn > 0:
			action += fmt.Sprintf(" t%d", n.Turn)
		}
		r.event(obj, typ, reason, action, msg)
	}
}

// event records an event about a run, the one place the AgentRun
// reconciler records one: nothing without a recorder, and the note cut to
// the 1 KiB an event's note may hold.
func (r *AgentRunReconciler) event(obj runtime.Object, typ, reason, action, note string) {
	if r.Recorder != nil {
		r.Recorder.Eventf(obj, nil, typ, reason, action, "%s", clip.Cut(note, 1024, runstatus.CutMark))
	}
}

// maxCancelledBy bounds how much of the cancelled-by annotation a run's
// reason quotes: anyone who may patch the run may write it.
const maxCancelledBy = 256

// cancelReason is the reason of a run cancelled with spec.cancel, naming
// who cancelled it when the annotation says (a schedule that replaced it),
// or "" for the engine's default.
func cancelReason(run *v1alpha1.AgentRun) string {
	by := run.Annotations[v1alpha1.AnnotationCancelledBy]
	if by == "" {
		return ""
	}
	by = clip.Cut(by, maxCancelledBy, runstatus.CutMark)
	if strings.HasPrefix(by, "AgentSchedule/") {
		return "the run was cancelled by " + by + " (concurrencyPolicy Replace started a newer run)"
	}
	return "the run was cancelled by " + by + " (spec.cancel is true)"
}
