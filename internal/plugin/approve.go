package plugin

import (
	"context"
	"io"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runclient"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnswerOptions is one answer to a pending call (see runclient).
type AnswerOptions = runclient.AnswerOptions

// Shown is the run and the call a person looked at when they answered.
type Shown = runclient.Shown

// Answer answers a pending call (runclient.Answer) and prints what it did:
// for an approval, the call approved with its arguments whole (as status
// holds them: cut only past 16 KiB, and marked) and their digest, since the
// operator runs the call only with exactly these arguments; then one line
// saying what the answer was.
func Answer(ctx context.Context, c client.Client, o AnswerOptions, w io.Writer) error {
	a, err := runclient.Answer(ctx, c, o)
	if err != nil {
		return err
	}
	if p := a.Call; p != nil && a.Decision == v1alpha1.ApprovalApprove {
		printf(w, "%s %s", p.CallID, p.Tool)
		if p.ArgumentsDigest != "" {
			printf(w, " (arguments %s)", p.ArgumentsDigest)
		}
		printf(w, ":\n%s\n", p.Arguments)
	}
	printf(w, "%s\n", a)
	return nil
}

// AckOptions is one acknowledgement of an escalated run (see runclient).
type AckOptions = runclient.AckOptions

// Ack acknowledges or resolves an escalated run (runclient.Ack) and
// prints what it did.
func Ack(ctx context.Context, c client.Client, o AckOptions, w io.Writer) error {
	a, err := runclient.Ack(ctx, c, o)
	if err != nil {
		return err
	}
	printf(w, "%s\n", a)
	return nil
}

// Cancel asks the run to stop at the next turn boundary (runclient.Cancel)
// and prints what it did.
func Cancel(ctx context.Context, c client.Client, ref Ref, w io.Writer) error {
	cancelled, err := runclient.Cancel(ctx, c, runclient.CancelOptions{Run: ref})
	if err != nil {
		return err
	}
	printf(w, "%s\n", cancelled)
	return nil
}

func by(who string) string {
	if who == "" {
		return ""
	}
	return " by " + who
}
