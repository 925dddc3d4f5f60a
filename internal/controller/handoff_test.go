package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/notify"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The metrics of the hand-off, by name.
const (
	metricFirstResponse  = "agentrun_time_to_first_response_seconds"
	metricDecision       = "agentrun_time_to_decision_seconds"
	metricUnacknowledged = "agentrun_escalation_unacknowledged_oldest_timestamp_seconds"
)

// escalating is a run whose one call waits for a person for a second, and
// so ends Escalated (its approvalTimeout).
func escalating(ns, name string) *runBuilder {
	return makeRun(ns, name).writeTool("drop_table", false).calls("drop_table", `{}`).
		with(func(s *v1alpha1.AgentRunSpec) { s.ApprovalTimeout = &metav1.Duration{Duration: time.Second} })
}

func (b *runBuilder) label(k, v string) *runBuilder {
	if b.r.Labels == nil {
		b.r.Labels = map[string]string{}
	}
	b.r.Labels[k] = v
	return b
}

func owned(owner string) func(*v1alpha1.AgentRunSpec) {
	return func(s *v1alpha1.AgentRunSpec) { s.Escalation = &v1alpha1.EscalationSpec{Owner: owner} }
}

// Issue 46, item 5: an escalated run gets an owner, from its label, else
// its spec (its template's), else the AgentRunPolicy that governs its
// namespace, else none; status.escalation records it with since, the
// Escalated event and the webhook message name it.
func TestHandoff_anEscalationGetsItsOwner(t *testing.T) {
	governed, _ := governedNamespace(t, v1alpha1.AgentRunPolicySpec{EscalationOwner: "platform-oncall"})
	plain := namespace(t)
	startManager(t, &kits{tools: newTools()})
	makeTemplate(t, governed, "cleanup", escalating(governed, "").with(owned("template-team")))

	runs := map[string]*v1alpha1.AgentRun{
		"label": escalating(governed, "labelled").label(v1alpha1.LabelOwner, "refunds-team").with(owned("spec-team")).create(t),
		"spec":  escalating(governed, "spec").with(owned("spec-team")).create(t),
		"tpl":   runOf(t, governed, "templated", "cleanup"),
		"pol":   escalating(governed, "policy").create(t),
		"none":  escalating(plain, "unowned").create(t),
		// The model hands over: the same hand-off.
		"model": makeRun(governed, "handed-over").calls("escalate_to_human", `{"reason":"needs a refund decision"}`).create(t),
	}
	want := map[string]string{"label": "refunds-team", "spec": "spec-team", "tpl": "template-team", "pol": "platform-oncall", "none": "",
		"model": "platform-oncall"}
	got := map[string]string{}
	for k, run := range runs {
		done := waitOutcome(t, run, 30*time.Second)
		why := "approvalTimeout"
		if k == "model" {
			why = "needs a refund decision"
		}
		expectOutcome(t, done, v1alpha1.OutcomeEscalated, why)
		e := done.Status.Escalation
		if e == nil {
			t.Errorf("%s: no status.escalation", run.Name)
			continue
		}
		got[k] = e.Owner
		if done.Status.CompletionTime == nil || !e.Since.Equal(done.Status.CompletionTime) || e.Acknowledged() {
			t.Errorf("%s: status.escalation = %+v, want since the completion time %v and no acknowledgement", run.Name, e, done.Status.CompletionTime)
		}
		var msgs []notify.Message
		for _, m := range notifications(done, false) {
			if m.Event == notify.EventEscalated {
				msgs = append(msgs, m)
			}
		}
		if len(msgs) != 1 || msgs[0].Owner != want[k] || (want[k] != "" && !strings.Contains(msgs[0].Text, "(owner: "+want[k]+")")) {
			t.Errorf("%s: the Escalated messages %+v, want one for owner %q", run.Name, msgs, want[k])
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("owners (-want +got):\n%s", diff)
	}
	NewWithT(t).Eventually(func() []string {
		return eventNotes(t, governed, "AgentRun", "labelled", corev1.EventTypeWarning, string(v1alpha1.OutcomeEscalated))
	}, 10*time.Second, 50*time.Millisecond).Should(ContainElement(ContainSubstring("(owner: refunds-team)")))
}

// Issue 46, item 5: a person acknowledges an escalated run, and another
// resolves it. Each is recorded with the user the API server
// authenticated (a name the client writes is overwritten, and the stamp
// cannot be set on its own); a user without the verb approve is refused;
// the gauge of unacknowledged escalations holds the escalation until it is
// acknowledged; each histogram observes its transition once.
func TestHandoff_anAcknowledgementIsRecordedWithItsAuthenticatedAuthor(t *testing.T) {
	ns := namespace(t)
	bind(t, ns, "agentrun-approver", userSubject("bob"))
	bind(t, ns, "agentrun-approver", userSubject("alice"))
	bind(t, ns, "agentrun-editor", userSubject("pat"))
	ctx := context.Background()
	r, _ := startWith(t, &kits{tools: newTools()}, managerSetup{})
	run := escalating(ns, "esc").label(v1alpha1.LabelOwner, "refunds-team").create(t)
	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeEscalated, "approvalTimeout")
	since := done.Status.Escalation.Since
	series := map[string]string{"namespace": ns, "owner": "refunds-team"}
	kind := map[string]string{"namespace": ns, "owner": "refunds-team", "kind": "escalation"}
	g := NewWithT(t)
	g.Eventually(func() float64 { return sample(scrape(t, r.Metrics), metricUnacknowledged, series) }, 10*time.Second, 50*time.Millisecond).
		Should(Equal(float64(since.Unix())), "the gauge of the unacknowledged escalation")

	err := patchAnnotations(ctx, as(t, "pat"), run, map[string]any{v1alpha1.AnnotationAck: "ack"}, "kubectl-annotate")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `needs the verb "approve"`) {
		t.Fatalf("an acknowledgement by an editor: %v, want it refused for the verb approve", err)
	}
	err = patchAnnotations(ctx, as(t, "bob"), run, map[string]any{v1alpha1.AnnotationAckBy: "mallory"}, "kubectl-annotate")
	if err == nil || !strings.Contains(err.Error(), "records who acknowledged the escalation") {
		t.Fatalf("a stamp set on its own: %v, want it refused", err)
	}
	// The name the client sends is overwritten with its own.
	if err := patchAnnotations(ctx, as(t, "bob"), run, map[string]any{v1alpha1.AnnotationAck: "ack:looking",
		v1alpha1.AnnotationAckBy: "mallory"}, "kubectl-annotate"); err != nil {
		t.Fatalf("bob's acknowledgement: %v", err)
	}
	var cur *v1alpha1.AgentRun
	g.Eventually(func() string {
		cur = get(t, run)
		return cur.Status.Escalation.AcknowledgedBy
	}, 10*time.Second, 20*time.Millisecond).Should(Equal("bob"))
	if e := cur.Status.Escalation; e.AcknowledgedAt == nil || e.ResolvedAt != nil || e.Note != "looking" || e.Owner != "refunds-team" {
		t.Errorf("status.escalation = %+v, want acknowledged by bob with his note, not resolved", e)
	}
	g.Eventually(func() []string {
		return eventNotes(t, ns, "AgentRun", "esc", corev1.EventTypeNormal, v1alpha1.ReasonEscalationAcknowledged)
	}, 10*time.Second, 50*time.Millisecond).Should(ConsistOf(ContainSubstring("bob acknowledged the escalation (owner: refunds-team)")))
	// The gauge is read from the operator's cache at each scrape, which
	// may learn of the acknowledgement a moment after the API server.
	g.Eventually(func() float64 { return sample(scrape(t, r.Metrics), metricUnacknowledged, series) }, 10*time.Second, 50*time.Millisecond).
		Should(BeZero(), "the gauge after the acknowledgement: want no series")
	fams := scrape(t, r.Metrics)
	if got := [2]float64{sample(fams, metricFirstResponse, kind), sample(fams, metricDecision, kind)}; got != [2]float64{1, 0} {
		t.Errorf("first responses and decisions observed = %v, want [1 0]", got)
	}

	if err := patchAnnotations(ctx, as(t, "alice"), run, map[string]any{v1alpha1.AnnotationAck: " resolve : rolled back by hand"},
		"kubectl-annotate"); err != nil {
		t.Fatalf("alice's resolution: %v", err)
	}
	g.Eventually(func() string {
		cur = get(t, run)
		return cur.Status.Escalation.ResolvedBy
	}, 10*time.Second, 20*time.Millisecond).Should(Equal("alice"))
	if e := cur.Status.Escalation; e.AcknowledgedBy != "bob" || e.ResolvedAt == nil || e.Note != "rolled back by hand" {
		t.Errorf("status.escalation = %+v, want acknowledged by bob, resolved by alice with her note", e)
	}
	g.Eventually(func() []string {
		return eventNotes(t, ns, "AgentRun", "esc", corev1.EventTypeNormal, v1alpha1.ReasonEscalationResolved)
	}, 10*time.Second, 50*time.Millisecond).Should(ConsistOf(ContainSubstring("alice resolved the escalation")))

	// Another change of the run reconciles it again: nothing is observed twice.
	if err := patchAnnotations(ctx, k8sClient, run, map[string]any{"team": "payments"}, "kubectl-annotate"); err != nil {
		t.Fatal(err)
	}
	g.Consistently(func() [2]float64 {
		fams := scrape(t, r.Metrics)
		return [2]float64{sample(fams, metricFirstResponse, kind), sample(fams, metricDecision, kind)}
	}, 2*time.Second, 100*time.Millisecond).Should(Equal([2]float64{1, 1}))
}

// Issue 46, item 5: only a run that ended Escalated can be acknowledged:
// the API server refuses the annotation on a run that is still running
// and on one that ended otherwise, and a value that is not ack or resolve.
func TestHandoff_anAcknowledgementOfARunThatDidNotEscalateIsRefused(t *testing.T) {
	ns := namespace(t)
	bind(t, ns, "agentrun-approver", userSubject("bob"))
	ctx := context.Background()
	startManager(t, &kits{tools: newTools()})
	completed := makeRun(ns, "completed").answer("Done.").create(t)
	expectOutcome(t, waitOutcome(t, completed, 20*time.Second), v1alpha1.OutcomeCompleted, "final answer")
	waiting := refundRun(ns, "waiting").create(t)
	waitPending(t, waiting, 1)
	escalated := escalating(ns, "escalated").create(t)
	waitOutcome(t, escalated, 30*time.Second)

	for _, tc := range []struct {
		run   *v1alpha1.AgentRun
		value string
		want  string
	}{
		{completed, "ack", "completed has not escalated (it ended Completed)"},
		{waiting, "resolve", "waiting has not escalated (it has not ended)"},
		{escalated, "take", `agents.agentrun.dev/ack holds ack or resolve`},
		{escalated, "ack:" + strings.Repeat("n", 1025), "longer than 1024 characters"},
	} {
		err := patchAnnotations(ctx, as(t, "bob"), tc.run, map[string]any{v1alpha1.AnnotationAck: tc.value}, "kubectl-annotate")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%.20s on %s: %v, want a refusal saying %q", v1alpha1.AnnotationAck, tc.value, tc.run.Name, err, tc.want)
		}
	}
	if e := get(t, escalated).Status.Escalation; e == nil || e.Acknowledged() {
		t.Errorf("status.escalation = %+v after refused acknowledgements, want one no one acknowledged", e)
	}
}

// Issue 46, item 5: the time people take to answer a waiting call. For a
// call that needs two approvers, the first approval is its first
// response and the second its decision; each is observed once, labelled
// with the run's owner.
func TestHandoff_timeToHumanOfAnApproval(t *testing.T) {
	ns := namespace(t)
	bind(t, ns, "agentrun-approver", userSubject("bob"))
	r, _ := startWith(t, &kits{tools: newTools()}, managerSetup{})
	run := twoPersonRun(ns, "refund").label(v1alpha1.LabelOwner, "refunds-team").create(t)
	p := waitPending(t, run, 1).Status.PendingApprovals[0]
	approve := v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: p.ArgumentsDigest}.String()
	kind := map[string]string{"namespace": ns, "owner": "refunds-team", "kind": "approval"}
	observed := func() [2]float64 {
		fams := scrape(t, r.Metrics)
		return [2]float64{sample(fams, metricFirstResponse, kind), sample(fams, metricDecision, kind)}
	}
	g := NewWithT(t)

	annotate(t, run, "t1-c1", approve)
	g.Eventually(observed, 20*time.Second, 20*time.Millisecond).Should(Equal([2]float64{1, 0}), "the first approval is the first response")
	if err := patchAnnotations(context.Background(), as(t, "bob"), run, map[string]any{v1alpha1.ApprovalAnnotationPrefix + "t1-c1": approve},
		"kubectl-annotate"); err != nil {
		t.Fatalf("bob's approval: %v", err)
	}
	expectOutcome(t, waitOutcome(t, run, 20*time.Second), v1alpha1.OutcomeCompleted, "final answer")
	g.Eventually(observed, 20*time.Second, 20*time.Millisecond).Should(Equal([2]float64{1, 1}), "the second approval is the decision")
}

// Issue 46, item 5: a question the agent asked, answered, is both its
// first response and its decision, of kind question; a run with no owner
// is labelled owner="".
func TestHandoff_timeToHumanOfAQuestion(t *testing.T) {
	ns := namespace(t)
	r, _ := startWith(t, &kits{tools: newTools(), model: askingModel}, managerSetup{})
	run := askRun(ns, "ask").create(t)
	p := waitPending(t, run, 1).Status.PendingApprovals[0]
	annotate(t, run, "t1-c1", v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalReply, Digest: p.ArgumentsDigest, Reason: "in_9f21"}.String())
	expectOutcome(t, waitOutcome(t, run, 20*time.Second), v1alpha1.OutcomeCompleted, "final answer")
	kind := map[string]string{"namespace": ns, "owner": "", "kind": "question"}
	NewWithT(t).Eventually(func() [2]float64 {
		fams := scrape(t, r.Metrics)
		return [2]float64{sample(fams, metricFirstResponse, kind), sample(fams, metricDecision, kind)}
	}, 20*time.Second, 20*time.Millisecond).Should(Equal([2]float64{1, 1}))
}

// Issue 46, item 5: the admission policy reads an acknowledgement as the
// operator does (v1alpha1.ParseEscalationAck): it admits on an escalated
// run exactly the values the operator takes.
func TestAdmission_readsTheAcknowledgementAsTheOperatorDoes(t *testing.T) {
	ctx := context.Background()
	values := []string{"ack", "resolve", "ACK", " Resolve : rolled back ", "ack:", "ack:a note: with colons\nand lines",
		"resolve:" + strings.Repeat("é", v1alpha1.MaxAckNote), "resolve:" + strings.Repeat("é", v1alpha1.MaxAckNote+1),
		"ack :x", "", "take", "acknowledge", "ack\tnow", ":ack"}
	run := makeRun(namespace(t), "acks").answer("ok").create(t)
	cur := get(t, run)
	cur.Status.Outcome, cur.Status.Escalation = v1alpha1.OutcomeEscalated, &v1alpha1.EscalationStatus{Since: metav1.Now()}
	if err := k8sClient.Status().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		_, parseErr := v1alpha1.ParseEscalationAck(v)
		body := map[string]any{v1alpha1.AnnotationAck: v}
		err := patchAnnotations(ctx, k8sClient, run, body, "test")
		if err == nil {
			// Admitted, it is removed again, so that the next value
			// is a change of it.
			if err := patchAnnotations(ctx, k8sClient, run, map[string]any{v1alpha1.AnnotationAck: nil, v1alpha1.AnnotationAckBy: nil}, "test"); err != nil {
				t.Fatal(err)
			}
		}
		if (err == nil) != (parseErr == nil) {
			t.Errorf("%.40q: admitted = %v (%v), the operator takes it = %v (%v)", v, err == nil, err, parseErr == nil, parseErr)
		}
	}
}
