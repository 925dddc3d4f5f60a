package runclient

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Why an acknowledgement was refused.
const (
	// NotEscalated: the run has not ended Escalated; there is nothing to
	// acknowledge.
	NotEscalated Reason = "NotEscalated"
	// HandedOffAlready: the escalation was acknowledged (for an
	// acknowledgement) or resolved (for either) before.
	HandedOffAlready Reason = "HandedOffAlready"
)

// AckOptions is one acknowledgement of an escalated run.
type AckOptions struct {
	Run Ref
	// Resolve resolves the escalation (which acknowledges it too, when no
	// one had).
	Resolve bool
	// Note is what the person says, recorded in status.escalation.note; at
	// most v1alpha1.MaxAckNote characters.
	Note string
	// UID, when set, is the run the person was shown: the API server
	// refuses the acknowledgement (409) for a run created again under the
	// name since.
	UID types.UID
}

// Acked is an acknowledgement the API server took: the annotation
// agents.agentrun.dev/ack is set on the run.
type Acked struct {
	Run     Ref
	Resolve bool
	Note    string
	// Owner is the escalation's owner, as status.escalation holds it.
	Owner string
}

// String says what the acknowledgement did, as the plugin prints it.
func (a *Acked) String() string {
	what := "acknowledged"
	if a.Resolve {
		what = "resolved"
	}
	owner := ""
	if a.Owner != "" {
		owner = " (owner " + a.Owner + ")"
	}
	note := ""
	if a.Note != "" {
		note = fmt.Sprintf(" (note: %q)", a.Note)
	}
	return fmt.Sprintf("%s: escalation%s %s%s", a.Run, owner, what, note)
}

// Ack sets agents.agentrun.dev/ack on the run (v1alpha1.EscalationAck: ack
// or resolve, and the note) with a merge patch made by FieldManager, after
// checking that the run ended Escalated and that its escalation is not
// acknowledged (for an acknowledgement) or resolved (for either) already;
// it refuses otherwise (*Refused). The operator records who set it, as the
// API server authenticated them, in status.escalation.
func Ack(ctx context.Context, c client.Client, o AckOptions) (*Acked, error) {
	value := v1alpha1.EscalationAck{Resolve: o.Resolve, Note: strings.TrimSpace(o.Note)}
	a, err := v1alpha1.ParseEscalationAck(value.String())
	if err != nil {
		return nil, err
	}
	run, err := Get(ctx, c, o.Run)
	if err != nil {
		return nil, err
	}
	refuse := func(reason Reason, format string, args ...any) error {
		return &Refused{Reason: reason, Run: o.Run, msg: fmt.Sprintf(format, args...)}
	}
	e := run.Status.Escalation
	switch {
	case run.Status.Outcome == "":
		return nil, refuse(NotEscalated, "%s has not escalated: it has not ended (phase %s), so there is nothing to acknowledge", o.Run, phaseOf(run))
	case run.Status.Outcome != v1alpha1.OutcomeEscalated:
		return nil, refuse(NotEscalated, "%s has not escalated: it ended %s, so there is nothing to acknowledge", o.Run, run.Status.Outcome)
	case e == nil:
		return nil, refuse(NotEscalated, "%s ended Escalated before the operator recorded escalations (no status.escalation): there is nothing to acknowledge",
			o.Run)
	case e.ResolvedAt != nil:
		return nil, refuse(HandedOffAlready, "the escalation of %s was resolved%s already", o.Run, by(e.ResolvedBy))
	case e.AcknowledgedAt != nil && !o.Resolve:
		return nil, refuse(HandedOffAlready, "the escalation of %s was acknowledged%s already; resolve it with --resolve", o.Run, by(e.AcknowledgedBy))
	}
	meta := map[string]any{"annotations": map[string]string{v1alpha1.AnnotationAck: a.String()}}
	if o.UID != "" {
		meta["uid"] = o.UID
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, err
	}
	if err := c.Patch(ctx, run, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager)); err != nil {
		return nil, Explain(err, o.Run)
	}
	return &Acked{Run: o.Run, Resolve: a.Resolve, Note: a.Note, Owner: e.Owner}, nil
}

func by(who string) string {
	if who == "" {
		return ""
	}
	return " by " + who
}

func phaseOf(run *v1alpha1.AgentRun) string {
	if run.Status.Phase == "" {
		return "not started"
	}
	return string(run.Status.Phase)
}
