package controller

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// refundEditModel proposes a refund of 824.00 and, once the refund has a
// result, answers with what it read.
var refundEditModel = modelFunc(func(_ context.Context, req *loop.Request) (*loop.Reply, error) {
	for _, m := range req.Messages {
		if m.Role == loop.RoleTool && m.Tool == "issue_refund" {
			return &loop.Reply{Content: "Read: " + m.Content}, nil
		}
	}
	return &loop.Reply{ToolCalls: []loop.ToolCall{{ID: "a", Name: "issue_refund", Arguments: []byte(`{"amount_minor":82400,"invoice":"in_9f21"}`)}}}, nil
})

// Issue 46, item 2: a reviewer approves the refund with changes (82.40,
// not 824.00). The tool executor receives the edited arguments and never
// the proposed ones; status.approvals records the edit bound to the
// digest of the edited arguments; the transcript keeps the proposal in
// the model's message and shows what ran, and who changed it.
func TestApproval_anEditedApprovalRunsTheEditedArguments(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	var mu sync.Mutex
	var received []string
	tb.funcs["issue_refund"] = func(_ context.Context, inv loop.Invocation) loop.Result {
		mu.Lock()
		received = append(received, string(inv.Arguments))
		mu.Unlock()
		return loop.Result{Output: []byte(`{"refunded_minor":8240}`)}
	}
	startManager(t, &kits{tools: tb, model: refundEditModel})
	run := refundRun(ns, "refund").create(t)
	proposed := waitPending(t, run, 1).Status.PendingApprovals[0].ArgumentsDigest

	patch := `{"amount_minor":8240}`
	annotate(t, run, "t1-c1", v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: proposed, Edit: patch}.String())
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer")

	edited := `{"amount_minor":8240,"invoice":"in_9f21"}`
	mu.Lock()
	got := received
	mu.Unlock()
	if diff := cmp.Diff([]string{edited}, got); diff != "" {
		t.Errorf("arguments the tool executor received (-want +got):\n%s", diff)
	}
	want := []v1alpha1.ApprovalRecord{{CallID: "t1-c1", Decision: v1alpha1.ApprovalApprove, By: adminName,
		Edit: &v1alpha1.ApprovalEdit{Patch: patch, ProposedDigest: proposed, ArgumentsDigest: loop.ArgumentsDigest([]byte(edited))}}}
	if diff := cmp.Diff(want, done.Status.Approvals, cmpopts.IgnoreFields(v1alpha1.ApprovalRecord{}, "At")); diff != "" {
		t.Errorf("status.approvals (-want +got):\n%s", diff)
	}
	var sawProposal, sawRan bool
	for _, m := range readTranscript(t, done) {
		for _, c := range m.ToolCalls {
			sawProposal = sawProposal || (c.ID == "t1-c1" && loop.ArgumentsDigest(c.Arguments) == proposed)
		}
		if m.Role == loop.RoleTool && m.CallID == "t1-c1" {
			sawRan = string(m.Arguments) == edited && m.EditedBy == adminName &&
				strings.Contains(m.Content, "A person changed the arguments of this call to "+edited)
			if !sawRan {
				t.Errorf("the refund's result in the transcript: arguments %s by %q, %q; want %s by %q, said to the model",
					m.Arguments, m.EditedBy, m.Content, edited, adminName)
			}
		}
	}
	if !sawProposal || !sawRan {
		t.Errorf("the transcript shows the proposal: %v, and what ran: %v; want both", sawProposal, sawRan)
	}
}

// Issue 46, item 2: the edited call is vetted again from the start. An
// edit the run's policy denies (a refund above 1000.00) is refused with
// that rule's message; the call ends as the rule decides (denied, the
// model reads the rule's message), and the refund never runs.
func TestApproval_anEditThatBreaksAPolicyRuleIsRefusedWithItsMessage(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	startManager(t, &kits{tools: tb, model: refundEditModel})
	const because = "refunds above 1000.00 need Finance"
	run := refundRun(ns, "refund").with(func(s *v1alpha1.AgentRunSpec) {
		s.Policy = &v1alpha1.PolicySpec{Default: "ask", Rules: []v1alpha1.PolicyRule{{Name: "refund-ceiling",
			Tools: []string{"issue_refund"}, When: "args.amount_minor > 100000", Decision: "deny", Reason: because}}}
	}).create(t)
	proposed := waitPending(t, run, 1).Status.PendingApprovals[0].ArgumentsDigest

	annotate(t, run, "t1-c1", v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: proposed, Edit: `{"amount_minor":824000}`}.String())
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer")

	if n := tb.counts()["t1-c1:issue_refund"]; n != 0 {
		t.Errorf("the refund the policy denies ran %d times", n)
	}
	if len(done.Status.Approvals) != 1 || done.Status.Approvals[0].Edit == nil ||
		!strings.Contains(done.Status.Approvals[0].Edit.Refused, because) {
		t.Fatalf("status.approvals = %+v, want one edit refused with %q", done.Status.Approvals, because)
	}
	for _, m := range readTranscript(t, done) {
		if m.Role == loop.RoleTool && m.CallID == "t1-c1" && (m.Status != loop.ObsDenied || !strings.Contains(m.Content, because)) {
			t.Errorf("the model read %s %q for the edited refund, want it denied with %q", m.Status, m.Content, because)
		}
	}
}
