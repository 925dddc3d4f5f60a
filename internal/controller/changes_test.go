package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

func TestChangeOf_reportsEachTransitionOnce(t *testing.T) {
	now := metav1.Now()
	base := memRun("u", "1")
	base.Status.PendingApprovals = []v1alpha1.PendingApproval{{CallID: "t1-c1", Tool: "shell"}}
	base.Status.Usage = &v1alpha1.UsageStatus{InputTokens: 100, OutputTokens: 10, CostUSD: "0.0100"}

	run := base.DeepCopy()
	run.Status.StartTime = &now
	run.Status.PendingApprovals = append(run.Status.PendingApprovals, v1alpha1.PendingApproval{CallID: "t2-c1", Tool: "deploy"})
	run.Status.Usage = &v1alpha1.UsageStatus{InputTokens: 150, OutputTokens: 12, CostUSD: "0.0150"}

	c := changeOf(base, run, nil, nil)
	if !c.started {
		t.Error("a save that set startTime did not report the run started")
	}
	if c.ended || c.refused {
		t.Errorf("ended=%v refused=%v for a run without an outcome", c.ended, c.refused)
	}
	if len(c.asked) != 1 || c.asked[0].CallID != "t2-c1" {
		t.Errorf("asked = %+v, want only the call that began to wait (t2-c1)", c.asked)
	}
	if c.inputTokens != 50 || c.outputTokens != 2 {
		t.Errorf("charged %d input and %d output tokens, want 50 and 2", c.inputTokens, c.outputTokens)
	}
	if want := costOf(*run.Status.Usage) - costOf(*base.Status.Usage); c.spent != want || want <= 0 {
		t.Errorf("spent %d, want %d", c.spent, want)
	}

	// The next save ends the run; it read what the first one wrote.
	done := run.DeepCopy()
	done.Status.Outcome = v1alpha1.OutcomeCompleted
	c = changeOf(run, done, nil, nil)
	if c.started || len(c.asked) != 0 || !c.ended {
		t.Errorf("started=%v asked=%d ended=%v, want only ended", c.started, len(c.asked), c.ended)
	}
	// A save that read the ended run reports no second end.
	if c = changeOf(done, done.DeepCopy(), nil, nil); c.ended {
		t.Error("a run that had its outcome already was reported ended again")
	}
}

func TestChangeOf_neverChargesLessThanNothing(t *testing.T) {
	// A save that wrote less usage than it read (an older view won the
	// race) charges nothing rather than a negative amount.
	base := memRun("u", "2")
	base.Status.Usage = &v1alpha1.UsageStatus{InputTokens: 90, OutputTokens: 9, CostUSD: "0.0090"}
	run := base.DeepCopy()
	run.Status.Usage = &v1alpha1.UsageStatus{InputTokens: 40, OutputTokens: 4, CostUSD: "0.0040"}
	c := changeOf(base, run, nil, nil)
	if c.inputTokens != 0 || c.outputTokens != 0 || c.spent != 0 {
		t.Errorf("charged %d/%d tokens and %d spend, want nothing", c.inputTokens, c.outputTokens, c.spent)
	}
}

// Issue 46, item 5: the waits for a person a save ended, from status
// alone: a first response when a call that had no answer got one, a
// decision when it stopped waiting with one, nothing for a call that
// stopped waiting without one, and nothing again for answers already in
// the status before.
func TestHumanWaits_countEachResponseOnce(t *testing.T) {
	at := func(m int) *metav1.Time {
		tm := metav1.NewTime(time.Date(2026, 12, 6, 10, m, 0, 0, time.UTC))
		return &tm
	}
	asked := func(id, question string, by ...string) v1alpha1.PendingApproval {
		return v1alpha1.PendingApproval{CallID: id, Question: question, RequestedAt: at(0), ApprovedBy: by}
	}
	answer := func(id, by string, m int) v1alpha1.ApprovalRecord {
		return v1alpha1.ApprovalRecord{CallID: id, Decision: v1alpha1.ApprovalApprove, By: by, At: at(m)}
	}
	for _, tc := range []struct {
		name          string
		before, after v1alpha1.AgentRunStatus
		want          []humanWait
	}{
		{"an approval decides its call",
			v1alpha1.AgentRunStatus{PendingApprovals: []v1alpha1.PendingApproval{asked("t1-c1", "")}},
			v1alpha1.AgentRunStatus{Approvals: []v1alpha1.ApprovalRecord{answer("t1-c1", "bob", 5)}},
			[]humanWait{{kind: waitApproval, took: 5 * time.Minute}, {kind: waitApproval, decision: true, took: 5 * time.Minute}}},
		{"the first of two approvers responds, and decides nothing",
			v1alpha1.AgentRunStatus{PendingApprovals: []v1alpha1.PendingApproval{asked("t1-c1", "")}},
			v1alpha1.AgentRunStatus{PendingApprovals: []v1alpha1.PendingApproval{asked("t1-c1", "", "ann")},
				Approvals: []v1alpha1.ApprovalRecord{answer("t1-c1", "ann", 3)}},
			[]humanWait{{kind: waitApproval, took: 3 * time.Minute}}},
		{"the second approver decides",
			v1alpha1.AgentRunStatus{PendingApprovals: []v1alpha1.PendingApproval{asked("t1-c1", "", "ann")},
				Approvals: []v1alpha1.ApprovalRecord{answer("t1-c1", "ann", 3)}},
			v1alpha1.AgentRunStatus{Approvals: []v1alpha1.ApprovalRecord{answer("t1-c1", "ann", 3), answer("t1-c1", "bob", 9)}},
			[]humanWait{{kind: waitApproval, decision: true, took: 9 * time.Minute}}},
		{"an answered question",
			v1alpha1.AgentRunStatus{PendingApprovals: []v1alpha1.PendingApproval{asked("t1-c1", "Which invoice?")}},
			v1alpha1.AgentRunStatus{Approvals: []v1alpha1.ApprovalRecord{answer("t1-c1", "bob", 1)}},
			[]humanWait{{kind: waitQuestion, took: time.Minute}, {kind: waitQuestion, decision: true, took: time.Minute}}},
		{"a call that timed out",
			v1alpha1.AgentRunStatus{PendingApprovals: []v1alpha1.PendingApproval{asked("t1-c1", "")}},
			v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeEscalated},
			nil},
		{"the same status written again",
			v1alpha1.AgentRunStatus{PendingApprovals: []v1alpha1.PendingApproval{asked("t1-c1", "", "ann")},
				Approvals: []v1alpha1.ApprovalRecord{answer("t1-c1", "ann", 3)}},
			v1alpha1.AgentRunStatus{PendingApprovals: []v1alpha1.PendingApproval{asked("t1-c1", "", "ann")},
				Approvals: []v1alpha1.ApprovalRecord{answer("t1-c1", "ann", 3)}},
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, humanWaits(&tc.before, &tc.after), cmp.AllowUnexported(humanWait{})); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
		})
	}
}
