package controller

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// askRun is a run given the builtin person.ask as ask_person.
func askRun(ns, name string) *runBuilder {
	return makeRun(ns, name).answer("unused: the test's model answers").with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "ask_person", Builtin: v1alpha1.BuiltinAskPerson})
	})
}

// askingModel asks which invoice, then answers with what the person said.
var askingModel = modelFunc(func(_ context.Context, req *loop.Request) (*loop.Reply, error) {
	for _, m := range req.Messages {
		if m.Role == loop.RoleTool && m.Tool == "ask_person" {
			return &loop.Reply{Content: "Told: " + m.Content}, nil
		}
	}
	return &loop.Reply{ToolCalls: []loop.ToolCall{{ID: "a", Name: "ask_person",
		Arguments: []byte(`{"question":"Which invoice was charged twice?","choices":["in_9f21","in_8c04"]}`)}}}, nil
})

// Issue 46, item 3: the agent asks a person. The run waits as for an
// approval, with the question and its choices in status.pendingApprovals;
// the answer, given by annotation, is the call's result (quoted and
// escaped), status.approvals records it, and no executor ran anything.
func TestAsk_anAnswerToTheAgentsQuestionIsTheCallsResult(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	startManager(t, &kits{tools: tb, model: askingModel})
	run := askRun(ns, "ask").create(t)
	cur := waitPending(t, run, 1)
	p := cur.Status.PendingApprovals[0]
	if p.Question != "Which invoice was charged twice?" || !cmp.Equal(p.Choices, []string{"in_9f21", "in_8c04"}) || p.Rule != loop.RuleAskPerson {
		t.Errorf("pending = %+v, want the question with its two choices", p)
	}
	if cur.Status.Phase != v1alpha1.PhaseAwaitingApproval {
		t.Errorf("phase = %s, want AwaitingApproval", cur.Status.Phase)
	}

	const text = `in_9f21, "the March one"` + "\nnot in_8c04"
	annotate(t, run, "t1-c1", v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalReply, Digest: p.ArgumentsDigest, Reason: text}.String())
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer")

	want := "A person answered your question: " + strconv.Quote(text)
	var got []string
	for _, m := range readTranscript(t, done) {
		if m.Role == loop.RoleTool && m.CallID == "t1-c1" {
			got = append(got, string(m.Status)+": "+m.Content)
		}
	}
	if diff := cmp.Diff([]string{"ok: " + want}, got); diff != "" {
		t.Errorf("the question's result in the transcript (-want +got):\n%s", diff)
	}
	if len(tb.counts()) != 0 {
		t.Errorf("an executor ran %v for a question", tb.counts())
	}
	wantRec := []v1alpha1.ApprovalRecord{{CallID: "t1-c1", Decision: v1alpha1.ApprovalReply, By: adminName, Reason: text}}
	if diff := cmp.Diff(wantRec, done.Status.Approvals, cmpopts.IgnoreFields(v1alpha1.ApprovalRecord{}, "At")); diff != "" {
		t.Errorf("status.approvals (-want +got):\n%s", diff)
	}
}

// A question takes an answer, a call waiting for approval does not; the
// answer that does not fit is not applied, with a note that says what the
// call takes.
func TestFitAnswers(t *testing.T) {
	s := &loop.State{Calls: []loop.Call{
		{ToolCall: loop.ToolCall{ID: "q", Name: "ask_person"}, Verdict: loop.Ask, Rule: loop.RuleAskPerson, State: loop.CallProposed},
		{ToolCall: loop.ToolCall{ID: "r", Name: "issue_refund"}, Verdict: loop.Ask, Rule: "policy.default", State: loop.CallProposed},
		{ToolCall: loop.ToolCall{ID: "q2", Name: "ask_person"}, Verdict: loop.Ask, Rule: loop.RuleAskPerson, State: loop.CallProposed},
		{ToolCall: loop.ToolCall{ID: "r2", Name: "issue_refund"}, Verdict: loop.Ask, Rule: "policy.default", State: loop.CallProposed},
	}}
	answer := func(d v1alpha1.ApprovalDecision) runstatus.Answer {
		return runstatus.Answer{ApprovalAnswer: v1alpha1.ApprovalAnswer{Decision: d, Reason: "x"}}
	}
	answers := map[string]runstatus.Answer{"q": answer(v1alpha1.ApprovalApprove), "r": answer(v1alpha1.ApprovalReply),
		"q2": answer(v1alpha1.ApprovalReply), "r2": answer(v1alpha1.ApprovalDeny)}
	notes := fitAnswers(s, answers)
	var kept []string
	for id := range answers {
		kept = append(kept, id)
	}
	if diff := cmp.Diff([]string{"q2", "r2"}, kept, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("answers kept (-want +got):\n%s", diff)
	}
	if len(notes) != 2 || !strings.Contains(notes[0].Message, "answer it with answer::TEXT") || !strings.Contains(notes[1].Message, "approve, deny or stop it") {
		t.Errorf("notes = %+v, want one for q that says to answer, one for r that says to approve", notes)
	}
}
