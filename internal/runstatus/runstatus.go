// Package runstatus computes an AgentRun's status from the engine's state.
// Its setters are pure: they read a loop.State (or an outcome) and write
// the status fields, conditions and phase, and nothing else. The
// reconciler and `agentrun local` share them, so a local run prints the
// status the operator would write.
package runstatus

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/loop"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// MaxApprovalRecords bounds status.approvals (the newest are kept; every
// answer is also an event).
const MaxApprovalRecords = 64

// finished reports whether the run has ended for good.
func Finished(run *v1alpha1.AgentRun) bool {
	c := apimeta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionSucceeded)
	return c != nil && c.Status != metav1.ConditionUnknown
}

// isZero reports whether u holds nothing of any ceiling (loop.Ceilings)
// nor of any tool.
func isZero(u loop.Usage) bool {
	for _, c := range loop.Ceilings() {
		if c.Used(u) != 0 {
			return false
		}
	}
	for _, v := range u.PerTool {
		if v != 0 {
			return false
		}
	}
	return true
}

// SetModel sets status.model from the run's model spec (as the platform's
// policies left it) and the engine's state: the model the run calls, and
// how many times it fell back. A scripted run, which names no model and
// has no fallbacks, has none.
func SetModel(st *v1alpha1.AgentRunStatus, m *v1alpha1.ModelSpec, s *loop.State) {
	active := m.Endpoint(s.Model).Name
	st.Model = nil
	if active != "" {
		st.Model = &v1alpha1.ModelStatus{Active: active, Fallbacks: int32(s.Model)}
	}
}

// SetFromState computes everything in status that derives from the
// engine's state: counters, pending approvals, outcome, conditions, phase.
func SetFromState(st *v1alpha1.AgentRunStatus, s *loop.State, conv loop.Convergence, now metav1.Time) {
	st.Turn = int32(s.Turn)
	st.Usage = limits.UsageStatus(s.Usage)
	st.ChildUsage = nil
	if s.Children != nil {
		st.ChildUsage = limits.UsageStatus(*s.Children)
	}
	st.Children, st.ChildrenOmitted = nil, int32(s.ChildRunsOmitted)
	for _, c := range s.ChildRuns {
		st.Children = append(st.Children, v1alpha1.ChildRunStatus{Name: c.Name, CallID: c.CallID,
			Outcome: c.Outcome, Turns: int32(c.Turns), CostUSD: c.Cost.String()})
	}
	st.Reserved = nil
	if !isZero(s.Reserved) {
		st.Reserved = limits.UsageStatus(s.Reserved)
	}
	if s.StartedAt != nil && st.StartTime == nil {
		t := metav1.NewTime(*s.StartedAt)
		st.StartTime = &t
	}

	st.PendingApprovals = nil
	for _, c := range s.PendingCalls() {
		if s.Done() {
			break // an ended run waits for no one
		}
		p := v1alpha1.PendingApproval{CallID: c.ID, Tool: c.Name, Arguments: clip.Cut(string(c.Arguments), 16384, CutMark),
			ArgumentsDigest: loop.ArgumentsDigest(c.Arguments), Rule: c.Rule, Reason: clip.Cut(c.Reason, 4096, CutMark)}
		if c.RequestedAt != nil {
			t := metav1.NewTime(*c.RequestedAt)
			p.RequestedAt = &t
		}
		if c.Needed > 1 {
			p.Approvals, p.ApprovedBy = int32(c.Needed), c.ApprovedBy
		}
		if q, choices, ok := loop.Question(&c); ok {
			p.Question = clip.Cut(q, 2048, CutMark)
			for _, ch := range choices[:min(len(choices), 10)] {
				p.Choices = append(p.Choices, clip.Cut(ch, 256, CutMark))
			}
		}
		st.PendingApprovals = append(st.PendingApprovals, p)
	}

	st.Convergence = &v1alpha1.ConvergenceStatus{RepeatedIntentDepth: int32(conv.RepeatedIntentDepth), Headroom: map[string]string{}}
	for k, v := range conv.Headroom {
		st.Convergence.Headroom[string(k)] = v
	}
	if conv.TurnsToCompletion > 0 {
		n := int32(conv.TurnsToCompletion)
		st.Convergence.TurnsToCompletion = &n
	}

	st.Verification = verificationStatus(s.Verify)
	st.Context = contextStatus(conv.Context)

	st.PendingApprovalCount = int32(len(st.PendingApprovals))
	waiting := len(st.PendingApprovals) > 0
	switch {
	case s.Done():
		st.Outcome = v1alpha1.Outcome(s.Outcome)
		st.Reason = clip.Cut(s.Reason, 8192, CutMark)
		st.Answer = s.Answer
		setOutput(st, s)
		if st.CompletionTime == nil {
			st.CompletionTime = &now
		}
		status := metav1.ConditionFalse
		st.Phase = v1alpha1.PhaseFailed
		if s.Outcome == loop.Completed {
			status = metav1.ConditionTrue
			st.Phase = v1alpha1.PhaseSucceeded
		}
		SetCondition(st, v1alpha1.ConditionSucceeded, status, string(s.Outcome), st.Reason, now)
	case waiting:
		ids := make([]string, 0, len(st.PendingApprovals))
		for _, p := range st.PendingApprovals {
			ids = append(ids, fmt.Sprintf("%s (%s)", p.CallID, p.Tool))
		}
		st.Phase = v1alpha1.PhaseAwaitingApproval
		st.Reason = "waiting for a person to answer " + strings.Join(ids, ", ")
		SetCondition(st, v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, v1alpha1.ReasonAwaitingApproval, st.Reason, now)
	case s.Turn == 0:
		st.Phase = v1alpha1.PhasePending
		st.Reason = ""
		SetCondition(st, v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, v1alpha1.ReasonPending, "the run has not started its first turn", now)
	default:
		st.Phase = v1alpha1.PhaseRunning
		st.Reason = ""
		SetCondition(st, v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, v1alpha1.ReasonRunning, fmt.Sprintf("turn %d", s.Turn), now)
	}
	setSummaryConditions(st, now)
	if waiting {
		SetCondition(st, v1alpha1.ConditionAwaitingApproval, metav1.ConditionTrue, v1alpha1.ReasonApprovalRequested, st.Reason, now)
	} else {
		SetCondition(st, v1alpha1.ConditionAwaitingApproval, metav1.ConditionFalse, v1alpha1.ReasonNoApprovalPending, "no call waits for a person", now)
	}
}

// SetFailed ends a run that could not be built or resumed.
func SetFailed(st *v1alpha1.AgentRunStatus, o v1alpha1.Outcome, reason string, now metav1.Time) {
	setFailed(st, o, string(o), reason, now)
}

// SetInvalid ends a run Error because of its configuration (its manifest
// or its namespace), not a defect: as SetFailed, with the conditions'
// reason InvalidConfiguration.
func SetInvalid(st *v1alpha1.AgentRunStatus, reason string, now metav1.Time) {
	setFailed(st, v1alpha1.OutcomeError, v1alpha1.ReasonInvalidConfiguration, reason, now)
}

// EndReason is the reason of a finished run's Succeeded condition (its
// outcome, or InvalidConfiguration), or "" while the run works.
func EndReason(st *v1alpha1.AgentRunStatus) string {
	if st.Outcome == "" {
		return ""
	}
	if c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSucceeded); c != nil && c.Reason == v1alpha1.ReasonInvalidConfiguration {
		return c.Reason
	}
	return string(st.Outcome)
}

func setFailed(st *v1alpha1.AgentRunStatus, o v1alpha1.Outcome, condReason, reason string, now metav1.Time) {
	st.Outcome, st.Reason, st.Phase = o, clip.Cut(reason, 8192, CutMark), v1alpha1.PhaseFailed
	st.PendingApprovals, st.PendingApprovalCount = nil, 0
	st.Reserved = nil
	if st.CompletionTime == nil {
		st.CompletionTime = &now
	}
	SetCondition(st, v1alpha1.ConditionSucceeded, metav1.ConditionFalse, condReason, st.Reason, now)
	setSummaryConditions(st, now)
	SetCondition(st, v1alpha1.ConditionAwaitingApproval, metav1.ConditionFalse, v1alpha1.ReasonNoApprovalPending, "no call waits for a person", now)
}

// SetRerunRefused holds a protected run that may not start (a GitOps
// re-run with another spec): it stays Pending with Succeeded=Unknown, and
// is Stalled (not Reconciling) so that kstatus, Flux and Argo CD read it as
// failed rather than wait for it. Allowing the re-run lets it start.
func SetRerunRefused(st *v1alpha1.AgentRunStatus, msg string, now metav1.Time) {
	st.Phase, st.Reason = v1alpha1.PhasePending, clip.Cut(msg, 8192, CutMark)
	r := v1alpha1.ReasonRerunRefused
	SetCondition(st, v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, r, msg, now)
	SetCondition(st, v1alpha1.ConditionReady, metav1.ConditionFalse, r, msg, now)
	SetCondition(st, v1alpha1.ConditionReconciling, metav1.ConditionFalse, r, msg, now)
	SetCondition(st, v1alpha1.ConditionStalled, metav1.ConditionTrue, r, msg, now)
	SetCondition(st, v1alpha1.ConditionAwaitingApproval, metav1.ConditionFalse, v1alpha1.ReasonNoApprovalPending, "no call waits for a person", now)
}

// setSummaryConditions derives Ready, Reconciling and Stalled (the
// conditions generic tools such as kstatus read) from Succeeded, which
// must be set: Ready only for a completed run, Reconciling until the run
// ends, Stalled for any other outcome. Their reason is Succeeded's.
func setSummaryConditions(st *v1alpha1.AgentRunStatus, now metav1.Time) {
	s := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSucceeded)
	if s == nil {
		return
	}
	ready, reconciling, stalled := metav1.ConditionFalse, metav1.ConditionFalse, metav1.ConditionFalse
	switch s.Status {
	case metav1.ConditionTrue:
		ready = metav1.ConditionTrue
	case metav1.ConditionFalse:
		stalled = metav1.ConditionTrue
	default:
		reconciling = metav1.ConditionTrue
	}
	reason, msg := s.Reason, s.Message
	SetCondition(st, v1alpha1.ConditionReady, ready, reason, msg, now)
	SetCondition(st, v1alpha1.ConditionReconciling, reconciling, reason, msg, now)
	SetCondition(st, v1alpha1.ConditionStalled, stalled, reason, msg, now)
}

// SettleFinished brings the status of a run that has ended up to date
// with its object: observedGeneration follows the generation (setting
// spec.cancel on an ended run bumps it; otherwise generic tools would read
// the run as in progress for ever), and a run that ended before the
// summary conditions existed gets them. It reports whether it changed
// anything.
func SettleFinished(run *v1alpha1.AgentRun, now metav1.Time) bool {
	st := &run.Status
	changed := false
	if st.ObservedGeneration != run.Generation {
		st.ObservedGeneration = run.Generation
		changed = true
	}
	for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionReconciling, v1alpha1.ConditionStalled} {
		if apimeta.FindStatusCondition(st.Conditions, typ) == nil {
			setSummaryConditions(st, now)
			changed = true
			break
		}
	}
	return changed
}

func SetCondition(st *v1alpha1.AgentRunStatus, typ string, status metav1.ConditionStatus, reason, msg string, now metav1.Time) {
	apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: clip.Cut(msg, 1024, CutMark),
		LastTransitionTime: now})
}

// Answer is a person's answer to a pending call as the operator read it
// from the run's annotations: the approval annotation's decision, the
// arguments digest it names and the reason it gives, if any, and who set
// it.
type Answer struct {
	v1alpha1.ApprovalAnswer
	// By is who set the approval annotation, as the API server stamped it
	// into approved-by.agents.agentrun.dev/<callID>; empty when nothing
	// stamped it.
	By string
	// Edited is the whole arguments of an approval with changes: the
	// proposal with the answer's Edit patch applied; nil otherwise.
	Edited json.RawMessage
}

// RecordApprovals adds the answers and stale answers a step reported.
func RecordApprovals(st *v1alpha1.AgentRunStatus, notes []loop.Note, answers map[string]Answer, now metav1.Time) {
	for _, n := range notes {
		if n.Kind != loop.NoteApproval && n.Kind != loop.NoteStaleApproval {
			continue
		}
		a := answers[n.CallID]
		rec := v1alpha1.ApprovalRecord{CallID: n.CallID, Decision: a.Decision, At: &now, By: a.By, Reason: a.Reason,
			Stale: n.Kind == loop.NoteStaleApproval}
		if a.Edit != "" && !rec.Stale {
			rec.Edit = editRecord(a, n.CallID, notes)
		}
		if rec.Stale && recorded(st, rec.CallID, rec.Decision, true) {
			continue
		}
		st.Approvals = append(st.Approvals, rec)
	}
	if len(st.Approvals) > MaxApprovalRecords {
		st.Approvals = st.Approvals[len(st.Approvals)-MaxApprovalRecords:]
	}
}

// editRecord is status.approvals[].edit of an approval with changes: the
// patch, the digests of the proposal and of the edited arguments, and the
// rule that refused the edit, if one did (loop.NoteEditRefused).
func editRecord(a Answer, callID string, notes []loop.Note) *v1alpha1.ApprovalEdit {
	ed := &v1alpha1.ApprovalEdit{Patch: a.Edit, ProposedDigest: a.Digest}
	if a.Edited != nil {
		ed.ArgumentsDigest = loop.ArgumentsDigest(a.Edited)
	}
	for _, n := range notes {
		if n.Kind == loop.NoteEditRefused && n.CallID == callID {
			ed.Refused = clip.Cut(n.Message, 1024, CutMark)
		}
	}
	return ed
}

func recorded(st *v1alpha1.AgentRunStatus, callID string, d v1alpha1.ApprovalDecision, stale bool) bool {
	for _, a := range st.Approvals {
		if a.CallID == callID && a.Decision == d && a.Stale == stale {
			return true
		}
	}
	return false
}

// CutMark ends a status text cut to its field's limit (clip.Cut).
const CutMark = "… [cut]"

// OnlyProgress reports whether after differs from before in nothing but the
// run's progress: its turn, usage and reservation, convergence and
// verification figures, transcript counts and checkpoint (and its seal), and the messages
// (and times) of conditions whose status and reason stay. A save that
// changes only these may leave status to a later write; a change of phase,
// outcome, reason, approvals or of any condition's status or reason is
// written at once.
func OnlyProgress(before, after *v1alpha1.AgentRunStatus) bool {
	// Shallow copies: only the conditions are changed, so only they are
	// copied; everything else is compared where it is.
	strip := func(st *v1alpha1.AgentRunStatus) v1alpha1.AgentRunStatus {
		c := *st
		c.Turn, c.Usage, c.Reserved, c.Convergence, c.Verification, c.Context, c.ChildUsage = 0, nil, nil, nil, nil, nil, nil
		c.Transcript, c.Checkpoint, c.CheckpointSeal, c.CheckpointSequence = nil, nil, "", 0
		c.Conditions = slices.Clone(st.Conditions)
		for i := range c.Conditions {
			c.Conditions[i].Message, c.Conditions[i].LastTransitionTime = "", metav1.Time{}
		}
		return c
	}
	return equality.Semantic.DeepEqual(strip(before), strip(after))
}

// contextStatus is status.context: the policy that applied and what it
// did; nil when no policy applied (a configuration without one).
func contextStatus(f loop.ContextFigures) *v1alpha1.ContextStatus {
	if f.MaxInputTokens <= 0 {
		return nil
	}
	return &v1alpha1.ContextStatus{MaxInputTokens: f.MaxInputTokens, Source: f.Source, Strategy: v1alpha1.ContextStrategy(f.Strategy),
		Compactions: int32(f.Compactions), LastCompactionTurn: int32(f.LastCompactionTurn), LastInputTokens: f.LastInputTokens}
}

// setOutput writes a completed run's typed answer (spec.output): its
// value when small enough for status (loop.MaxOutputBytes), its digest
// and size either way.
func setOutput(st *v1alpha1.AgentRunStatus, s *loop.State) {
	st.Output, st.OutputDigest, st.OutputBytes = nil, "", 0
	o := s.Output
	if o == nil || s.Outcome != loop.Completed {
		return
	}
	st.OutputDigest, st.OutputBytes = o.Digest, int64(o.Bytes)
	if len(o.Value) > 0 {
		st.Output = &runtime.RawExtension{Raw: o.Value}
	}
}
