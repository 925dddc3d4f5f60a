package plugin

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// Issue 46, item 3: kubectl agentrun answer gives the text as the answer
// to the agent's question, bound to the question shown; approve is no
// answer to a question, and answer is none to a call waiting for
// approval.
func TestAnswer_answersTheAgentsQuestion(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.PendingApprovals = pending("t1-c1", "t1-c2")
		s.PendingApprovals[0].Tool, s.PendingApprovals[0].Question = "ask_person", "Which invoice?"
		s.PendingApprovals[0].ArgumentsDigest = "sha256:0b1e"
	})
	ref := Ref{Namespace: ns, Name: "r"}

	err := Answer(ctx, k8sClient, AnswerOptions{Run: ref, CallID: "t1-c1", Decision: v1alpha1.ApprovalApprove}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `is a question the agent asks ("Which invoice?")`) {
		t.Errorf("approving a question: %v, want a refusal that says it is a question", err)
	}
	err = Answer(ctx, k8sClient, AnswerOptions{Run: ref, CallID: "t1-c2", Decision: v1alpha1.ApprovalReply, Reason: "yes"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "waits for approval, not for an answer") {
		t.Errorf("answering a call that waits for approval: %v, want a refusal", err)
	}
	err = Answer(ctx, k8sClient, AnswerOptions{Run: ref, CallID: "t1-c1", Decision: v1alpha1.ApprovalReply, Reason: "  "}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "needs text") {
		t.Errorf("an empty answer: %v, want a refusal", err)
	}
	if got := get(t, run).Annotations; len(got) != 0 {
		t.Fatalf("refused answers set %v", got)
	}

	var out bytes.Buffer
	if err := Answer(ctx, k8sClient, AnswerOptions{Run: ref, CallID: "t1-c1", Decision: v1alpha1.ApprovalReply, Reason: "in_9f21: the March one"}, &out); err != nil {
		t.Fatal(err)
	}
	if got, want := get(t, run).Annotations[v1alpha1.ApprovalAnnotationPrefix+"t1-c1"], "answer:sha256:0b1e:in_9f21: the March one"; got != want {
		t.Errorf("annotation = %q, want %q", got, want)
	}
	if want := `agentrun/r: t1-c1 answered "in_9f21: the March one"`; !strings.Contains(out.String(), want) {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}
