package controller

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Issue 46, item 1: a person denies a refund and says why; the model reads
// the reason as the refund's result and takes the route it names (it
// looks the invoice up, a different call), and the run completes. Without
// the reason the model would try the refund again and wait for a person
// once more. status.approvals records the reason with who gave it.
func TestApproval_aDenialsReasonReachesTheModelAndTheRunCompletes(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	const reason = "Not 824.00: the invoice says 82.40.\nLook the invoice up first: get_invoice in_9f21."
	model := modelFunc(func(_ context.Context, req *loop.Request) (*loop.Reply, error) {
		var last *loop.Message
		for i := range req.Messages {
			if m := &req.Messages[i]; m.Role == loop.RoleTool {
				last = m
			}
		}
		switch {
		case last == nil:
			return &loop.Reply{ToolCalls: []loop.ToolCall{{ID: "a", Name: "issue_refund", Arguments: []byte(`{"amount_minor":82400}`)}}}, nil
		case last.Tool == "issue_refund" && strings.Contains(last.Content, strconv.Quote(reason)):
			return &loop.Reply{ToolCalls: []loop.ToolCall{{ID: "b", Name: "get_invoice", Arguments: []byte(`{"invoice":"in_9f21"}`)}}}, nil
		case last.Tool == "issue_refund":
			// No reason to go on: the same refund again.
			return &loop.Reply{ToolCalls: []loop.ToolCall{{ID: "c", Name: "issue_refund", Arguments: []byte(`{"amount_minor":82400}`)}}}, nil
		}
		return &loop.Reply{Content: "The invoice says 82.40; no refund of 824.00 was issued."}, nil
	})
	startManager(t, &kits{tools: tb, model: model})
	run := refundRun(ns, "refund").readTool("get_invoice").create(t)
	waitPending(t, run, 1)

	if err := patchAnnotations(context.Background(), k8sClient, run, map[string]any{
		v1alpha1.ApprovalAnnotationPrefix + "t1-c1": v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalDeny, Reason: reason}.String()}, "test"); err != nil {
		t.Fatal(err)
	}
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer")
	if diff := cmp.Diff(map[string]int{"t2-c1:get_invoice": 1}, tb.counts()); diff != "" {
		t.Errorf("executions (-want +got):\n%s", diff)
	}
	want := []v1alpha1.ApprovalRecord{{CallID: "t1-c1", Decision: v1alpha1.ApprovalDeny, By: adminName, Reason: reason}}
	if diff := cmp.Diff(want, done.Status.Approvals, cmpopts.IgnoreFields(v1alpha1.ApprovalRecord{}, "At")); diff != "" {
		t.Errorf("status.approvals (-want +got):\n%s", diff)
	}
	for _, m := range readTranscript(t, done) {
		if m.CallID == "t1-c1" && m.Role == loop.RoleTool && (m.Status != loop.ObsDeclined || !strings.Contains(m.Content, "Their reason: "+strconv.Quote(reason))) {
			t.Errorf("the transcript records the denied call as %s %q, want declined with the reason quoted", m.Status, m.Content)
		}
	}
}

// A value the operator does not take for an answer (here a reason past
// the bound, which the admission policy refuses first where it is
// installed) leaves its call waiting, with a note that says why; a value
// for a call that does not wait says nothing.
func TestUnreadAnswers(t *testing.T) {
	long := v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalDeny, Reason: strings.Repeat("x", v1alpha1.MaxApprovalReason+1)}.String()
	run := &v1alpha1.AgentRun{}
	run.Annotations = map[string]string{
		v1alpha1.ApprovalAnnotationPrefix + "t2-c1": long,
		v1alpha1.ApprovalAnnotationPrefix + "t2-c2": "deny::fine",
		v1alpha1.ApprovalAnnotationPrefix + "t1-c1": long, // answered long ago
	}
	run.Status.PendingApprovals = []v1alpha1.PendingApproval{{CallID: "t2-c1"}, {CallID: "t2-c2"}}
	notes := unreadAnswers(run)
	if len(notes) != 1 || notes[0].CallID != "t2-c1" || notes[0].Kind != NoteAnswerNotApplied ||
		!strings.Contains(notes[0].Message, "at most 1024") {
		t.Fatalf("notes = %+v, want one for t2-c1 that says a reason has at most 1024 characters", notes)
	}
}
