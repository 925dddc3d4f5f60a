package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/notify"
	"github.com/agentrun/agentrun/internal/platform"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/agentrun/agentrun/internal/seal"
)

// announce tells people what a save asks of them, from its change: a
// Normal event ApprovalRequested for each call that began to wait
// (c.asked), and, with a Notifier, the webhook messages the run has due
// and not yet delivered (notifications). The messages are only queued:
// their delivery never holds up the run.
func (r *AgentRunReconciler) announce(ctx context.Context, obj *v1alpha1.AgentRun, c change) {
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
	// c.run has the spec it ran from (a template's resolved spec), so
	// only the platform's rules are read here.
	told, err := endTold(c.run, nil, func(ns string) ([]v1alpha1.AgentRunPolicy, error) {
		return notifyingPolicies(ctx, r.Client, ns)
	})
	if err != nil {
		// The rescan tells the end later, if it is due.
		ctrl.LoggerFrom(ctx).Error(err, "Whether the run's end is told could not be read; the rescan of the notifications due reads it again")
	}
	for _, m := range notifications(c.run, told) {
		r.Notifier.Notify(m)
	}
}

// notifications are the webhook messages run has due and not delivered
// (v1alpha1.AnnotationNotified): one for each call that waits for a
// person, and one for its end when it is Escalated or told (endTold says
// whether). Each has an ID of its own that stays the same from one
// operator to the next (the run's UID, the event, the call), by which a
// receiver drops a message it already has.
func notifications(run *v1alpha1.AgentRun, told bool) []notify.Message {
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
	case o != "" && told:
		add(notify.EventFinished, notify.Message{Event: notify.EventFinished, Outcome: string(o), Reason: run.Status.Reason,
			Text: clip.Cut(fmt.Sprintf("AgentRun %s/%s ended %s: %s", ns, name, o, run.Status.Reason), 1024, runstatus.CutMark)})
	}
	return out
}

// endTold reports whether run's end is told as Finished: it has an
// outcome other than Escalated (always told, as Escalated), whose
// Finished message is not delivered yet, and that its spec.notify names,
// or, where that does not, the spec resolved from its template (resolved,
// when set, reads it) or a notify rule of an AgentRunPolicy that governs
// its namespace (policies reads them). Nothing is read for a run whose
// end is not due or whose own spec names its outcome.
func endTold(run *v1alpha1.AgentRun, resolved func(*v1alpha1.AgentRun) (*v1alpha1.NotifySpec, error),
	policies func(ns string) ([]v1alpha1.AgentRunPolicy, error)) (bool, error) {
	o := run.Status.Outcome
	if o == "" || o == v1alpha1.OutcomeEscalated || slices.Contains(strings.Split(run.Annotations[v1alpha1.AnnotationNotified], ","), notify.EventFinished) {
		return false, nil
	}
	if names(run.Spec.Notify, o) {
		return true, nil
	}
	var unread error // the resolved spec's: the policies are read all the same
	if resolved != nil && run.Spec.TemplateRef != nil {
		spec, err := resolved(run)
		if names(spec, o) {
			return true, nil
		}
		unread = err
	}
	pols, err := policies(run.Namespace)
	return platform.Notifies(pols, run, o), errors.Join(unread, err)
}

// names reports whether n names outcome o.
func names(n *v1alpha1.NotifySpec, o v1alpha1.Outcome) bool {
	return n != nil && slices.Contains(n.Outcomes, o)
}

// notifyingPolicies are the AgentRunPolicies with notify rules that govern
// namespace ns, read from c (the cache, which the kill switch reads too).
// The namespace is read only when some policy has notify rules.
func notifyingPolicies(ctx context.Context, c client.Reader, ns string) ([]v1alpha1.AgentRunPolicy, error) {
	var list v1alpha1.AgentRunPolicyList
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	list.Items = slices.DeleteFunc(list.Items, func(p v1alpha1.AgentRunPolicy) bool { return len(p.Spec.Notify) == 0 })
	if len(list.Items) == 0 {
		return nil, nil
	}
	nsObj := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: ns}, nsObj); err != nil {
		return nil, err
	}
	return platform.Select(list.Items, nsObj.Labels), nil
}

// PendingNotifications lists the messages every run that c reads has due
// and not delivered: the notifier's Pending, so that what an operator
// restart, a full queue or a webhook that stayed down left undelivered is
// sent later. The spec a run made from a template was resolved to (kept
// in a Secret, read with specs and opened with keys) says whether its end
// is told, as it did when the run ended; being immutable, it is read once
// per run and process. A run whose resolved spec cannot be read is told
// by its own spec and the platform's rules, and the error returned with
// the other runs' messages.
func PendingNotifications(c, specs client.Reader, keys *seal.Keyring) func(ctx context.Context) ([]notify.Message, error) {
	var mu sync.Mutex
	kept := map[types.UID]*v1alpha1.NotifySpec{}
	return func(ctx context.Context) ([]notify.Message, error) {
		var runs v1alpha1.AgentRunList
		if err := c.List(ctx, &runs); err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		seen := map[types.UID]*v1alpha1.NotifySpec{}
		resolved := func(run *v1alpha1.AgentRun) (*v1alpha1.NotifySpec, error) {
			if n, ok := kept[run.UID]; ok {
				seen[run.UID] = n
				return n, nil
			}
			raw, rec, err := keptSpecOf(ctx, specs, keys, run)
			if err != nil || raw == nil {
				return nil, err
			}
			built, _, err := withSpec(run, raw, rec)
			if err != nil {
				return nil, err
			}
			seen[run.UID] = built.Spec.Notify
			return built.Spec.Notify, nil
		}
		governing := map[string][]v1alpha1.AgentRunPolicy{} // by namespace, for this rescan
		policies := func(ns string) ([]v1alpha1.AgentRunPolicy, error) {
			if pols, ok := governing[ns]; ok {
				return pols, nil
			}
			pols, err := notifyingPolicies(ctx, c, ns)
			if err == nil {
				governing[ns] = pols
			}
			return pols, err
		}
		var out []notify.Message
		var errs []error
		for i := range runs.Items {
			run := &runs.Items[i]
			if !run.DeletionTimestamp.IsZero() {
				continue
			}
			told, err := endTold(run, resolved, policies)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s/%s: %w", run.Namespace, run.Name, err))
			}
			out = append(out, notifications(run, told)...)
		}
		kept = seen // the runs gone since are forgotten
		return out, errors.Join(errs...)
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
