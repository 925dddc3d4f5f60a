package runclient

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnswerOptions is one answer to a pending call.
type AnswerOptions struct {
	Run      Ref
	CallID   string
	Decision v1alpha1.ApprovalDecision
	// Reason is why the person answers so, in their words; "" for none. A
	// denial's reason is what the model reads as the call's result; every
	// reason is recorded in status.approvals. At most
	// v1alpha1.MaxApprovalReason characters.
	Reason string
	// Edit is the JSON merge patch of an approval with changes, and Set
	// are key=value changes written over it (EditPatch types them by the
	// tool's parameter schema); empty for none. Changes need Decision
	// approve and the call waiting: the answer is bound to the arguments
	// shown, also with Force.
	Edit string
	Set  []string
	// Arguments, when set, are the whole arguments a person approved in
	// place of the proposed ones (the console's edit form): the change is
	// the JSON merge patch from the arguments status.pendingApprovals
	// shows to these, and Edit and Set are not used.
	Arguments string
	// Force sets the annotation without checking that the call waits, and
	// replaces an earlier answer the operator has not acted on yet.
	Force bool
	// Shown, when set, is what the person answering was shown (the
	// console's form carries it): the answer is refused unless the run is
	// still that object and the call waits with those arguments.
	Shown *Shown
}

// Shown is the run and the call a person looked at when they answered.
type Shown struct {
	// UID is the run's: a run deleted and created again under its name is
	// another object. The answer's patch carries it as a precondition.
	UID types.UID
	// Digest is the digest of the call's arguments
	// (status.pendingApprovals[].argumentsDigest); an approval is bound to
	// it.
	Digest string
}

// Answered is an answer the API server took: the approval annotation is
// set on the run.
type Answered struct {
	Run      Ref
	CallID   string
	Decision v1alpha1.ApprovalDecision
	// Digest is the digest of the arguments an approval is bound to (the
	// annotation's value is approve:DIGEST); "" when nothing binds it: a
	// denial, a forced answer, or a call status gives no digest for.
	Digest string
	// Reason is the reason given with the answer, as the annotation
	// carries it (space around it removed); "" for none.
	Reason string
	// Edit is the JSON merge patch of an approval with changes; "" for
	// none.
	Edit string
	// Call is the call as status.pendingApprovals held it when the answer
	// was checked; nil for a forced answer, which is not checked.
	Call *v1alpha1.PendingApproval
}

// String says what the answer did, as the plugin prints it and the
// console shows it: "agentrun/NAME: CALLID approved", and the reason
// given, quoted, when there is one.
func (a *Answered) String() string {
	if a.Edit != "" {
		return fmt.Sprintf("%s: %s approved with changes %s (vetted again before it runs)", a.Run, a.CallID, a.Edit)
	}
	if a.Decision == v1alpha1.ApprovalReply {
		return fmt.Sprintf("%s: %s answered %q", a.Run, a.CallID, a.Reason)
	}
	return fmt.Sprintf("%s: %s %s%s", a.Run, a.CallID, answered(a.Decision), Because(a.Reason))
}

// Because is the reason given with an answer as the plugin and the
// console print it after the answer: quoted, so that it is escaped and on
// one line; "" for none.
func Because(reason string) string {
	if reason == "" {
		return ""
	}
	return fmt.Sprintf(" (reason: %q)", reason)
}

func answered(d v1alpha1.ApprovalDecision) string {
	switch d {
	case v1alpha1.ApprovalApprove:
		return "approved"
	case v1alpha1.ApprovalDeny:
		return "denied"
	default:
		return "denied; the run will stop (ApprovalDenied)"
	}
}

// Reason is why an answer was refused.
type Reason string

const (
	// RunEnded: the run has an outcome; no call waits.
	RunEnded Reason = "RunEnded"
	// NotPending: the call is not in status.pendingApprovals.
	NotPending Reason = "NotPending"
	// AnsweredAlready: the call carries another answer the operator has
	// not acted on yet; only a forced answer replaces it.
	AnsweredAlready Reason = "AnsweredAlready"
	// RunReplaced: the run was deleted and created again under its name
	// after the person answering was shown it.
	RunReplaced Reason = "RunReplaced"
	// ArgumentsChanged: the call now waits with other arguments than the
	// person answering was shown.
	ArgumentsChanged Reason = "ArgumentsChanged"
)

// Refused is an answer not given: the run is as it was. Its message says
// why in a sentence and, for a call that does not wait, lists the calls
// that do.
type Refused struct {
	Reason Reason
	Run    Ref
	CallID string
	msg    string
}

func (e *Refused) Error() string { return e.msg }

func refuse(reason Reason, o AnswerOptions, format string, args ...any) *Refused {
	return &Refused{Reason: reason, Run: o.Run, CallID: o.CallID, msg: fmt.Sprintf(format, args...)}
}

// Answer sets approval.agents.agentrun.dev/<callID>=<decision> (with the
// digest an approval is bound to, and the reason given:
// v1alpha1.ApprovalAnswer) on the run with a merge patch made by
// FieldManager. Unless Force is set, it first
// checks that the call is in status.pendingApprovals and refuses otherwise
// (*Refused), listing the calls that do wait.
func Answer(ctx context.Context, c client.Client, o AnswerOptions) (*Answered, error) {
	switch o.Decision {
	case v1alpha1.ApprovalApprove, v1alpha1.ApprovalDeny, v1alpha1.ApprovalStop:
	case v1alpha1.ApprovalReply:
		if strings.TrimSpace(o.Reason) == "" {
			return nil, fmt.Errorf("an answer to the agent's question needs text: say what the agent asked for")
		}
	default:
		return nil, fmt.Errorf("unknown answer %q: use approve, deny, stop or answer", o.Decision)
	}
	key := v1alpha1.ApprovalAnnotationPrefix + o.CallID
	if errs := validation.IsQualifiedName(key); len(errs) > 0 || o.CallID == "" {
		return nil, fmt.Errorf("%q is not a call id: call ids look like t3-c1, or p1-E2 for a plan's step (see status.pendingApprovals)", o.CallID)
	}

	// The reason is checked as the operator reads it, before anything is
	// asked of the server.
	given, err := v1alpha1.ParseApprovalAnswer(v1alpha1.ApprovalAnswer{Decision: o.Decision, Reason: strings.TrimSpace(o.Reason)}.String())
	if err != nil {
		return nil, err
	}
	editing := o.Edit != "" || len(o.Set) > 0 || o.Arguments != ""
	if editing && (o.Decision != v1alpha1.ApprovalApprove || o.Reason != "") {
		return nil, fmt.Errorf("changes go with an approval, without a reason: the changed arguments are the answer")
	}

	run, err := Get(ctx, c, o.Run)
	if err != nil {
		return nil, err
	}
	a := &Answered{Run: o.Run, CallID: o.CallID, Decision: o.Decision, Reason: given.Reason}
	if editing {
		if o.Arguments != "" {
			a.Edit, err = ArgumentsPatch(run, o.CallID, o.Arguments)
		} else {
			a.Edit, err = EditPatch(run, o.CallID, o.Edit, o.Set)
		}
		if err != nil {
			return nil, err
		}
		if a.Edit == "" {
			return nil, fmt.Errorf("the arguments of %s are as proposed: nothing was changed, so nothing was answered. Approve it, or change them", o.CallID)
		}
		// Checked as the operator reads it (the call's digest is read
		// below).
		if err := v1alpha1.CheckEdit(a.Edit); err != nil {
			return nil, err
		}
	}
	if !o.Force || a.Edit != "" {
		if a.Call, err = checkPending(run, o); err != nil {
			return nil, err
		}
		if err := checkShown(run, o); err != nil {
			return nil, err
		}
		switch question := a.Call.Question != ""; {
		case question && o.Decision == v1alpha1.ApprovalApprove:
			return nil, refuse(NotPending, o, "%s on %s is a question the agent asks (%q), not a call to approve: answer it "+
				"(kubectl agentrun answer %s %s \"...\"), or deny or stop it", o.CallID, o.Run, a.Call.Question, o.Run.Name, o.CallID)
		case !question && o.Decision == v1alpha1.ApprovalReply:
			return nil, refuse(NotPending, o, "%s on %s waits for approval, not for an answer to a question: approve, deny or stop it",
				o.CallID, o.Run)
		}
		if o.Decision == v1alpha1.ApprovalApprove || o.Decision == v1alpha1.ApprovalReply {
			// What binds an approval to the arguments shown: the operator
			// applies it only to a call with those arguments (a run
			// recreated under the same name with others does not get it).
			a.Digest = a.Call.ArgumentsDigest
		}
		if a.Edit != "" && a.Digest == "" {
			return nil, fmt.Errorf("%s on %s has no argumentsDigest in status.pendingApprovals: changes must name the arguments they change, "+
				"so they cannot be given for it; approve or deny it", o.CallID, o.Run)
		}
	}

	meta := map[string]any{}
	meta["annotations"] = map[string]string{key: v1alpha1.ApprovalAnswer{Decision: a.Decision, Digest: a.Digest, Reason: a.Reason, Edit: a.Edit}.String()}
	if o.Shown != nil {
		// The API server refuses the patch (409) if the run was replaced
		// after it was read.
		meta["uid"] = o.Shown.UID
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, err
	}
	if err := c.Patch(ctx, run, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager)); err != nil {
		return nil, Explain(err, o.Run)
	}
	return a, nil
}

// checkShown refuses an answer given on the strength of another run or
// other arguments than the call now waiting has: the run was deleted and
// created again, or the call changed, after the person looked.
func checkShown(run *v1alpha1.AgentRun, o AnswerOptions) error {
	if o.Shown == nil {
		return nil
	}
	if run.UID != o.Shown.UID {
		return refuse(RunReplaced, o, "%s is not the run you were shown: it was deleted and created again since (uid %s, shown %s). Nothing was answered: look at the call again",
			o.Run, run.UID, o.Shown.UID)
	}
	for _, p := range run.Status.PendingApprovals {
		if p.CallID == o.CallID && p.ArgumentsDigest != o.Shown.Digest {
			return refuse(ArgumentsChanged, o, "%s on %s now waits with other arguments (%s) than you were shown (%s). Nothing was answered: look at the call again",
				o.CallID, o.Run, p.ArgumentsDigest, o.Shown.Digest)
		}
	}
	return nil
}

// checkPending refuses an answer to a call that is not waiting, or one that
// would silently replace an earlier answer; it returns the call that waits.
func checkPending(run *v1alpha1.AgentRun, o AnswerOptions) (*v1alpha1.PendingApproval, error) {
	ref := o.Run
	if run.Status.Outcome != "" {
		return nil, refuse(RunEnded, o, "%s has already ended (%s): no call waits for an answer", ref, run.Status.Outcome)
	}
	for _, p := range run.Status.PendingApprovals {
		if p.CallID != o.CallID {
			continue
		}
		prev, ok := run.Annotations[v1alpha1.ApprovalAnnotationPrefix+o.CallID]
		if a, err := v1alpha1.ParseApprovalAnswer(prev); ok && (err != nil || a.Decision != o.Decision) {
			return nil, refuse(AnsweredAlready, o, "%s was already answered %q on %s and the operator has not acted on it yet; use --force to change the answer",
				o.CallID, prev, ref)
		}
		return &p, nil
	}

	var b strings.Builder
	fmt.Fprintf(&b, "%s is not waiting for approval on %s", o.CallID, ref)
	for i := len(run.Status.Approvals) - 1; i >= 0; i-- {
		a := run.Status.Approvals[i]
		if a.CallID == o.CallID && !a.Stale {
			fmt.Fprintf(&b, " (it was already answered %s", a.Decision)
			if a.By != "" {
				fmt.Fprintf(&b, " by %s", a.By)
			}
			b.WriteString(")")
			break
		}
	}
	if len(run.Status.PendingApprovals) == 0 {
		phase := string(run.Status.Phase)
		if phase == "" {
			phase = "not started"
		}
		fmt.Fprintf(&b, ": no call waits for an answer (phase %s)", phase)
	} else {
		b.WriteString("\npending approvals:")
		for _, p := range run.Status.PendingApprovals {
			fmt.Fprintf(&b, "\n  %s  %s %s", p.CallID, p.Tool, p.Arguments)
		}
	}
	b.WriteString("\nuse --force to set the annotation anyway")
	return nil, refuse(NotPending, o, "%s", b.String())
}

// Cancelled is what a cancel did: requested the stop, or nothing because
// the run had ended or its stop was requested before.
type Cancelled struct {
	Run Ref
	// Ended is the run's outcome when it had already ended: nothing was
	// written.
	Ended v1alpha1.Outcome
	// Already is true when spec.cancel was set before: nothing was written.
	Already bool
}

// String says what the cancel did, as the plugin prints it.
func (c *Cancelled) String() string {
	switch {
	case c.Ended != "":
		return fmt.Sprintf("%s has already ended (%s); nothing to cancel", c.Run, c.Ended)
	case c.Already:
		return fmt.Sprintf("%s: cancel already requested", c.Run)
	}
	return fmt.Sprintf("%s: cancel requested; the run stops at the next turn boundary", c.Run)
}

// CancelOptions names the run to cancel.
type CancelOptions struct {
	Run Ref
	// UID, when set, is the run the person was shown (the console's
	// button): a run created again under the name since is refused
	// (RunReplaced), and the patch carries the UID as a precondition, so
	// that the API server refuses it too (409) if the run is replaced in
	// between.
	UID types.UID
}

// Cancel sets spec.cancel to true with a merge patch, so the run stops at the
// next turn boundary as ApprovalDenied. It never sends the whole spec: the
// CRD forbids any other spec change, and a typed round trip could make one.
func Cancel(ctx context.Context, c client.Client, o CancelOptions) (*Cancelled, error) {
	ref := o.Run
	run, err := Get(ctx, c, ref)
	if err != nil {
		return nil, err
	}
	switch {
	case o.UID != "" && run.UID != o.UID:
		return nil, &Refused{Reason: RunReplaced, Run: ref, msg: fmt.Sprintf(
			"%s was deleted and created again since the page was read: nothing was cancelled; reload it, and cancel the run it shows now", ref)}
	case run.Status.Outcome != "":
		return &Cancelled{Run: ref, Ended: run.Status.Outcome}, nil
	case run.Spec.Cancel:
		return &Cancelled{Run: ref, Already: true}, nil
	}
	patch := map[string]any{"spec": map[string]any{"cancel": true}}
	if o.UID != "" {
		patch["metadata"] = map[string]any{"uid": o.UID}
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	if err := c.Patch(ctx, run, client.RawPatch(types.MergePatchType, body), client.FieldOwner(FieldManager)); err != nil {
		return nil, Explain(err, ref)
	}
	return &Cancelled{Run: ref}, nil
}
