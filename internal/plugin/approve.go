package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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

// Answer sets approval.agents.agentrun.dev/<callID>=<decision> on the run
// with a merge patch made by FieldManager. Unless Force is set, it first
// checks that the call is in status.pendingApprovals and refuses otherwise,
// listing the calls that do wait.
func Answer(ctx context.Context, c client.Client, o AnswerOptions, w io.Writer) error {
	switch o.Decision {
	case v1alpha1.ApprovalApprove, v1alpha1.ApprovalDeny, v1alpha1.ApprovalStop:
	default:
		return fmt.Errorf("unknown answer %q: use approve, deny or stop", o.Decision)
	}
	key := v1alpha1.ApprovalAnnotationPrefix + o.CallID
	if errs := validation.IsQualifiedName(key); len(errs) > 0 || o.CallID == "" {
		return fmt.Errorf("%q is not a call id: call ids look like t3-c1, or p1-E2 for a plan's step (see status.pendingApprovals)", o.CallID)
	}

	run, err := getRun(ctx, c, o.Run)
	if err != nil {
		return err
	}
	value := v1alpha1.ApprovalAnswer{Decision: o.Decision}
	meta := map[string]any{}
	if !o.Force {
		if err := checkPending(run, o); err != nil {
			return err
		}
		if err := checkShown(run, o); err != nil {
			return err
		}
		if o.Decision == v1alpha1.ApprovalApprove {
			value.Digest = boundTo(run, o.CallID)
			showCall(w, run, o.CallID)
		}
	}

	meta["annotations"] = map[string]string{key: value.String()}
	if o.Shown != nil {
		// The API server refuses the patch (409) if the run was replaced
		// after it was read.
		meta["uid"] = o.Shown.UID
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, run, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager)); err != nil {
		return explain(err, o.Run)
	}
	printf(w, "%s: %s %s\n", o.Run, o.CallID, answered(o.Decision))
	return nil
}

// checkShown refuses an answer given on the strength of another run or
// other arguments than the call now waiting has: the run was deleted and
// created again, or the call changed, after the person looked.
func checkShown(run *v1alpha1.AgentRun, o AnswerOptions) error {
	if o.Shown == nil {
		return nil
	}
	if run.UID != o.Shown.UID {
		return fmt.Errorf("%s is not the run you were shown: it was deleted and created again since (uid %s, shown %s). Nothing was answered: look at the call again",
			o.Run, run.UID, o.Shown.UID)
	}
	for _, p := range run.Status.PendingApprovals {
		if p.CallID == o.CallID && p.ArgumentsDigest != o.Shown.Digest {
			return fmt.Errorf("%s on %s now waits with other arguments (%s) than you were shown (%s). Nothing was answered: look at the call again",
				o.CallID, o.Run, p.ArgumentsDigest, o.Shown.Digest)
		}
	}
	return nil
}

// showCall prints the call being approved with its arguments whole (as
// status holds them: cut only past 16 KiB, and marked) and their digest: the
// operator runs the call only with exactly these arguments.
func showCall(w io.Writer, run *v1alpha1.AgentRun, callID string) {
	for _, p := range run.Status.PendingApprovals {
		if p.CallID != callID {
			continue
		}
		printf(w, "%s %s", p.CallID, p.Tool)
		if p.ArgumentsDigest != "" {
			printf(w, " (arguments %s)", p.ArgumentsDigest)
		}
		printf(w, ":\n%s\n", p.Arguments)
	}
}

// boundTo is what binds an approval to the arguments shown: their digest,
// so that the operator applies it only to a call with those arguments (a
// run recreated under the same name with others does not get it); "" when
// status gives no digest.
func boundTo(run *v1alpha1.AgentRun, callID string) string {
	for _, p := range run.Status.PendingApprovals {
		if p.CallID == callID && p.ArgumentsDigest != "" {
			return p.ArgumentsDigest
		}
	}
	return ""
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

// checkPending refuses an answer to a call that is not waiting, or one that
// would silently replace an earlier answer.
func checkPending(run *v1alpha1.AgentRun, o AnswerOptions) error {
	ref := o.Run
	if run.Status.Outcome != "" {
		return fmt.Errorf("%s has already ended (%s): no call waits for an answer", ref, run.Status.Outcome)
	}
	for _, p := range run.Status.PendingApprovals {
		if p.CallID != o.CallID {
			continue
		}
		prev, ok := run.Annotations[v1alpha1.ApprovalAnnotationPrefix+o.CallID]
		if a, err := v1alpha1.ParseApprovalAnswer(prev); ok && (err != nil || a.Decision != o.Decision) {
			return fmt.Errorf("%s was already answered %q on %s and the operator has not acted on it yet; use --force to change the answer",
				o.CallID, prev, ref)
		}
		return nil
	}

	var b strings.Builder
	fmt.Fprintf(&b, "%s is not waiting for approval on %s", o.CallID, ref)
	for i := len(run.Status.Approvals) - 1; i >= 0; i-- {
		a := run.Status.Approvals[i]
		if a.CallID == o.CallID && !a.Stale {
			fmt.Fprintf(&b, " (it was already answered %s%s)", a.Decision, by(a.By))
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
	return fmt.Errorf("%s", b.String())
}

func by(who string) string {
	if who == "" {
		return ""
	}
	return " by " + who
}

// Cancel sets spec.cancel to true with a merge patch, so the run stops at the
// next turn boundary as ApprovalDenied. It never sends the whole spec: the
// CRD forbids any other spec change, and a typed round trip could make one.
func Cancel(ctx context.Context, c client.Client, ref Ref, w io.Writer) error {
	run, err := getRun(ctx, c, ref)
	if err != nil {
		return err
	}
	if run.Status.Outcome != "" {
		printf(w, "%s has already ended (%s); nothing to cancel\n", ref, run.Status.Outcome)
		return nil
	}
	if run.Spec.Cancel {
		printf(w, "%s: cancel already requested\n", ref)
		return nil
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))
	if err := c.Patch(ctx, run, patch, client.FieldOwner(FieldManager)); err != nil {
		return explain(err, ref)
	}
	printf(w, "%s: cancel requested; the run stops at the next turn boundary\n", ref)
	return nil
}
