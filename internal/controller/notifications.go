package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/notify"
	"github.com/agentrun/agentrun/internal/runstatus"
)

// announce tells people what a save asks of them, from its change: a
// Normal event ApprovalRequested for each call that began to wait
// (c.asked), and, with a Notifier, the webhook messages the run has due
// and not yet delivered (notifications). The messages are only queued:
// their delivery never holds up the run.
func (r *AgentRunReconciler) announce(obj *v1alpha1.AgentRun, c change) {
	ns, name := c.run.Namespace, c.run.Name
	for _, p := range c.asked {
		msg := fmt.Sprintf("%s/%s waits for a person to approve %s: %s %s (arguments %s; %s: %s). Answer with kubectl agentrun approve|deny|stop %s %s -n %s",
			ns, name, p.CallID, p.Tool, clip.Cut(p.Arguments, 256, runstatus.CutMark), p.ArgumentsDigest, p.Rule, p.Reason, name, p.CallID, ns)
		// The call id in the action keeps each call's event its own (the
		// recorder folds events of one reason and action).
		r.event(obj, corev1.EventTypeNormal, v1alpha1.ReasonApprovalRequested, v1alpha1.ReasonApprovalRequested+" "+p.CallID, msg)
	}
	if r.Notifier == nil || (len(c.asked) == 0 && !c.ended) {
		return
	}
	for _, m := range notifications(c.run) {
		r.Notifier.Notify(m)
	}
}

// notifications are the webhook messages run has due and not delivered
// (v1alpha1.AnnotationNotified): one for each call that waits for a
// person, and one for its end when it is Escalated or spec.notify names
// its outcome. Each has an ID of its own that stays the same from one
// operator to the next (the run's UID, the event, the call), by which a
// receiver drops a message it already has.
func notifications(run *v1alpha1.AgentRun) []notify.Message {
	ns, name := run.Namespace, run.Name
	sent := strings.Split(run.Annotations[v1alpha1.AnnotationNotified], ",")
	var out []notify.Message
	add := func(key string, m notify.Message) {
		if !slices.Contains(sent, key) {
			m.ID, m.Namespace, m.Run = string(run.UID)+"/"+key, ns, name
			out = append(out, m)
		}
	}
	for _, p := range run.Status.PendingApprovals {
		add(notify.EventApprovalRequested+"/"+p.CallID, notify.Message{
			Event: notify.EventApprovalRequested, CallID: p.CallID, Tool: p.Tool,
			ArgumentsDigest: p.ArgumentsDigest, Rule: p.Rule, Reason: p.Reason,
			Text: clip.Cut(fmt.Sprintf("AgentRun %s/%s waits for approval of %s (%s, arguments %s): %s",
				ns, name, p.CallID, p.Tool, p.ArgumentsDigest, p.Reason), 1024, runstatus.CutMark),
		})
	}
	o := run.Status.Outcome
	switch {
	case o == v1alpha1.OutcomeEscalated:
		owner, to := "", ""
		if e := run.Status.Escalation; e != nil && e.Owner != "" {
			owner, to = e.Owner, " (owner: "+e.Owner+")"
		}
		add(notify.EventEscalated, notify.Message{Event: notify.EventEscalated, Outcome: string(o), Reason: run.Status.Reason, Owner: owner,
			Text: clip.Cut(fmt.Sprintf("AgentRun %s/%s ended Escalated%s: %s", ns, name, to, run.Status.Reason), 1024, runstatus.CutMark)})
	case o != "" && run.Spec.Notify != nil && slices.Contains(run.Spec.Notify.Outcomes, o):
		add(notify.EventFinished, notify.Message{Event: notify.EventFinished, Outcome: string(o), Reason: run.Status.Reason,
			Text: clip.Cut(fmt.Sprintf("AgentRun %s/%s ended %s: %s", ns, name, o, run.Status.Reason), 1024, runstatus.CutMark)})
	}
	return out
}

// PendingNotifications lists the messages every run that c reads has due
// and not delivered: the notifier's Pending, so that what an operator
// restart, a full queue or a webhook that stayed down left undelivered is
// sent later.
func PendingNotifications(c client.Reader) func(ctx context.Context) ([]notify.Message, error) {
	return func(ctx context.Context) ([]notify.Message, error) {
		var runs v1alpha1.AgentRunList
		if err := c.List(ctx, &runs); err != nil {
			return nil, err
		}
		var out []notify.Message
		for i := range runs.Items {
			if runs.Items[i].DeletionTimestamp.IsZero() {
				out = append(out, notifications(&runs.Items[i])...)
			}
		}
		return out, nil
	}
}

// RecordDelivered is the notifier's Delivered: it adds the message to the
// run's AnnotationNotified, keeping only the entries still due (a call
// answered since needs no entry), with the run's resourceVersion so that
// two deliveries recorded at once both stay. A run whose UID changed (a
// new run of the same name) is left alone.
func RecordDelivered(c client.Client) func(ctx context.Context, m notify.Message) error {
	return func(ctx context.Context, m notify.Message) error {
		uid, key, ok := strings.Cut(m.ID, "/")
		if !ok {
			return nil
		}
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			run := &v1alpha1.AgentRun{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Run}, run); err != nil {
				return client.IgnoreNotFound(err)
			}
			if string(run.UID) != uid {
				return nil
			}
			base := run.DeepCopy()
			keep := []string{key}
			for _, k := range strings.Split(run.Annotations[v1alpha1.AnnotationNotified], ",") {
				if k != "" && k != key && stillDue(run, k) {
					keep = append(keep, k)
				}
			}
			slices.Sort(keep)
			if run.Annotations == nil {
				run.Annotations = map[string]string{}
			}
			run.Annotations[v1alpha1.AnnotationNotified] = strings.Join(keep, ",")
			return c.Patch(ctx, run, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		})
	}
}

// stillDue reports whether the delivered entry key still names a message
// of run: a call that waits, or its end.
func stillDue(run *v1alpha1.AgentRun, key string) bool {
	event, call, _ := strings.Cut(key, "/")
	if event != notify.EventApprovalRequested {
		return true
	}
	return slices.ContainsFunc(run.Status.PendingApprovals, func(p v1alpha1.PendingApproval) bool { return p.CallID == call })
}
