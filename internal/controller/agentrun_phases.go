package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/transcript"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Flush bounds of the transcript buffer kept in status.checkpoint.
const (
	flushBytes    = 8 << 10
	flushMessages = 48
	maxSteps      = 16
)

// scope is what one reconcile has read and decided.
type scope struct {
	run  *v1alpha1.AgentRun
	base *v1alpha1.AgentRun
	now  time.Time

	kit   *Kit
	state *loop.State
	// flushed is how many messages of state.Transcript are in chunks.
	flushed int

	answers map[string]loop.Answer
	by      map[string]string
	effect  loop.Effect
	notes   []loop.Note

	// stop: the run ended or failed in this reconcile; wait: nothing to do
	// until outside work finishes (no write).
	stop bool
	wait bool
}

// loadKit builds (or reuses) the run's engine, model and tools. The spec
// cannot change after creation, so a run's kit is built once per process.
func (r *AgentRunReconciler) loadKit(ctx context.Context, sc *scope) (ctrl.Result, error) {
	r.mu.Lock()
	k := r.kits[sc.run.UID]
	r.mu.Unlock()
	if k == nil {
		var err error
		k, err = r.Kits.Build(ctx, sc.run)
		if err != nil {
			// The manifest passed the API server's validation but cannot be
			// run (a CEL condition that does not compile, say): that is
			// final, not worth a retry.
			outcome := v1alpha1.OutcomeError
			if errors.Is(err, kit.ErrUnavailable) {
				outcome = v1alpha1.OutcomeToolFailure
			}
			reason := "the run cannot start: " + err.Error()
			SetFailed(&sc.run.Status, outcome, reason, metav1.NewTime(sc.now))
			sc.notes = append(sc.notes, loop.Note{Kind: loop.NoteFinished, Warning: true, Message: string(outcome) + ": " + reason})
			sc.stop = true
			return ctrl.Result{}, nil
		}
		r.mu.Lock()
		r.kits[sc.run.UID] = k
		r.mu.Unlock()
	}
	sc.kit = k
	return ctrl.Result{}, nil
}

// loadState reads the checkpoint and the transcript chunks it refers to.
func (r *AgentRunReconciler) loadState(ctx context.Context, sc *scope) (ctrl.Result, error) {
	s, err := transcript.Decode(sc.run)
	if err != nil {
		SetFailed(&sc.run.Status, v1alpha1.OutcomeError, err.Error(), metav1.NewTime(sc.now))
		sc.stop = true
		return ctrl.Result{}, nil
	}
	chunks, messages := 0, 0
	if t := sc.run.Status.Transcript; t != nil {
		chunks, messages = int(t.Chunks), int(t.Messages)
	}
	r.mu.Lock()
	flushed := r.chunks[sc.run.UID]
	r.mu.Unlock()
	if len(flushed) != messages {
		if flushed, err = transcript.ReadChunks(ctx, r.APIReader, sc.run, chunks); err != nil {
			return ctrl.Result{}, err
		}
		if len(flushed) != messages {
			return ctrl.Result{}, fmt.Errorf("transcript chunks hold %d messages, status says %d", len(flushed), messages)
		}
		r.mu.Lock()
		r.chunks[sc.run.UID] = flushed
		r.mu.Unlock()
	}
	// Append the buffered tail to the cached flushed messages in place
	// rather than copying the whole transcript every reconcile: only this
	// run's reconciles touch its cache entry, one at a time (the work
	// queue serialises a key), and the entry's length stops at what is
	// flushed, so what lies beyond it is this reconcile's scratch space.
	s.Transcript = append(flushed, s.Transcript...)
	sc.state, sc.flushed = s, len(flushed)
	sc.answers, sc.by = answersFrom(sc.run)
	return ctrl.Result{}, nil
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
	in := loop.Input{Answers: sc.answers, Cancel: sc.run.Spec.Cancel}
	switch s.Phase {
	case loop.PhaseModel:
		key := modelKey(s)
		if r.work.busy(uid, key) {
			if !in.Cancel {
				sc.wait = true
				return ctrl.Result{}, nil
			}
			r.work.forget(uid) // cancel: the call's reservation is charged
		} else if w := r.work.take(uid, key); w != nil {
			in.Reply, in.ModelErr = w.reply, w.err
		}
		// No work in this process: the call was lost to a restart.
	case loop.PhaseAct:
		key := toolsKey(s)
		if r.work.busy(uid, key) {
			// Tools run to their end even when the run is cancelled: the
			// boundary is after their results are recorded.
			sc.wait = true
			return ctrl.Result{}, nil
		}
		if w := r.work.take(uid, key); w != nil {
			in.Results = w.results
		}
	}

	for i := 0; i < maxSteps; i++ {
		in.Context = ctx
		eff := sc.kit.Engine.Step(s, in)
		sc.notes = append(sc.notes, eff.Notes...)
		sc.effect = eff
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
	}
	return ctrl.Result{}, nil
}

// persist writes what this reconcile decided, status first, in one patch
// with optimistic locking, so that nothing is dispatched unless status
// holds the decision (write-ahead). It reports whether it wrote, and
// whether status now holds the decision (written, or already there).
//
// The newest messages ride in the checkpoint; when they pass the flush
// bounds (or the run ended) they move to a transcript chunk, after the
// status patch: a reconcile that read a stale object fails its patch and
// so never touches a chunk, and the chunk it writes next is one that no
// committed status counts yet, which makes replacing a leftover safe.
func (r *AgentRunReconciler) persist(ctx context.Context, sc *scope) (written, ok bool, err error) {
	st := &sc.run.Status
	now := metav1.NewTime(sc.now)
	s := sc.state
	if s != nil && sc.kit != nil {
		if err := setCheckpoint(st, s, sc.flushed); err != nil {
			return false, false, err
		}
		SetStatusFromState(st, s, sc.kit.Engine.Convergence(s), now)
		recordApprovals(st, sc.notes, sc.answers, sc.by, now)
	}
	if st.ObservedGeneration != sc.run.Generation {
		st.ObservedGeneration = sc.run.Generation
	}
	if !equalStatus(&sc.base.Status, st) {
		if err := r.patchStatus(ctx, sc.base, sc.run); err != nil {
			if apierrors.IsConflict(err) {
				// Our read was stale; the newer version's event brings us back.
				ctrl.LoggerFrom(ctx).V(4).Info("Status changed under us, retrying on the newer version")
				return false, false, nil
			}
			return false, false, err
		}
		written = true
	}
	if s != nil && sc.kit != nil {
		if err := r.flush(ctx, sc); err != nil {
			return written, true, err
		}
		r.mu.Lock()
		r.chunks[sc.run.UID] = s.Transcript[:sc.flushed]
		r.mu.Unlock()
	}
	if sc.stop || (s != nil && s.Done()) {
		r.forget(sc.run.UID)
	}
	return written, true, nil
}

func (r *AgentRunReconciler) patchStatus(ctx context.Context, base, run *v1alpha1.AgentRun) error {
	prev := base.ResourceVersion
	if err := r.Status().Patch(ctx, run, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	r.remember(prev, run)
	return nil
}

// setCheckpoint puts the engine's state in status, with the messages that
// are not yet in a chunk.
func setCheckpoint(st *v1alpha1.AgentRunStatus, s *loop.State, flushed int) error {
	cp := *s
	cp.Transcript = s.Transcript[flushed:]
	if s.Done() && len(cp.Transcript) == 0 {
		// An ended run is never resumed: its outcome, usage and
		// transcript are all that is left to read.
		st.Checkpoint = nil
		return nil
	}
	raw, err := json.Marshal(&cp)
	if err != nil {
		return err
	}
	st.Checkpoint = &runtime.RawExtension{Raw: raw}
	return nil
}

// flush moves the checkpoint's messages to a new chunk when they pass the
// bounds or the run has ended, then records that in status.
func (r *AgentRunReconciler) flush(ctx context.Context, sc *scope) error {
	s, st := sc.state, &sc.run.Status
	tail := s.Transcript[sc.flushed:]
	if len(tail) == 0 || !(s.Done() || len(tail) >= flushMessages || messagesSize(tail) >= flushBytes) {
		return nil
	}
	chunks := 0
	if st.Transcript != nil {
		chunks = int(st.Transcript.Chunks)
	}
	if err := transcript.Write(ctx, r.Client, r.APIReader, sc.run, chunks, tail); err != nil {
		return fmt.Errorf("writing transcript chunk %d: %w", chunks, err)
	}
	base := sc.run.DeepCopy()
	st.Transcript = &v1alpha1.TranscriptStatus{Chunks: int32(chunks + 1), Messages: int32(sc.flushed + len(tail))}
	if err := setCheckpoint(st, s, sc.flushed+len(tail)); err != nil {
		return err
	}
	if err := r.patchStatus(ctx, base, sc.run); err != nil {
		// The chunk is written but not counted: the next reconcile
		// writes it again (the same messages) and counts it.
		return fmt.Errorf("recording transcript chunk %d: %w", chunks, err)
	}
	sc.flushed += len(tail)
	return nil
}

func messagesSize(msgs []loop.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content) + 64
		for _, c := range m.ToolCalls {
			n += len(c.Arguments) + len(c.Name) + 32
		}
	}
	return n
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
	switch eff := sc.effect; eff.Kind {
	case loop.EffectCallModel:
		timeout := kit.Engine.Config().Model.Timeout
		req := eff.Request
		r.work.start(r.background(), run, modelKey(s), func(ctx context.Context, w *work) {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			w.reply, w.err = kit.Model.Complete(cctx, req)
		})
	case loop.EffectRunTools:
		if len(eff.Calls) == 0 {
			return
		}
		calls, concurrent := eff.Calls, eff.Concurrent
		r.work.start(r.background(), run, toolsKey(s), func(ctx context.Context, w *work) {
			w.results = loop.ExecuteBatch(ctx, kit.Tools, calls, concurrent)
		})
	}
	r.dropStaleAnnotations(ctx, sc)
}

// dropStaleAnnotations removes answers recorded as stale, so that a later
// call with the same id gets its own answer.
func (r *AgentRunReconciler) dropStaleAnnotations(ctx context.Context, sc *scope) {
	var keys []string
	for _, n := range sc.notes {
		if n.Kind == loop.NoteStaleApproval {
			keys = append(keys, v1alpha1.ApprovalAnnotationPrefix+n.CallID)
		}
	}
	if len(keys) == 0 {
		return
	}
	ann := map[string]any{}
	for _, k := range keys {
		ann[k] = nil
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err := r.Patch(ctx, sc.run.DeepCopy(), client.RawPatch("application/merge-patch+json", body)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Removing stale approval annotations")
	}
}

// emit records the reconcile's notes as events, after the status write.
func (r *AgentRunReconciler) emit(sc *scope) {
	if r.Recorder == nil {
		return
	}
	for _, n := range sc.notes {
		typ := corev1.EventTypeNormal
		if n.Warning {
			typ = corev1.EventTypeWarning
		}
		reason := string(n.Kind)
		if n.Kind == loop.NoteFinished && sc.run.Status.Outcome != "" {
			reason = string(sc.run.Status.Outcome)
		}
		r.Recorder.Eventf(sc.run, nil, typ, reason, string(n.Kind), "%s", clip(n.Message, 1024))
	}
}
