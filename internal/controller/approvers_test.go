package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
)

// twoPersonRun asks two distinct people to approve any refund.
func twoPersonRun(ns, name string) *runBuilder {
	return refundRun(ns, name).answer("Refunded.").with(func(s *v1alpha1.AgentRunSpec) {
		s.Policy = &v1alpha1.PolicySpec{Default: "allow", Rules: []v1alpha1.PolicyRule{{Name: "two-person-refunds",
			Tools: []string{"issue_refund"}, Decision: "ask", Reason: "Refunds need two people.", Approvals: ptr.To[int32](2)}}}
	})
}

// Issue 46, item 4: a rule that requires two approvers is not satisfied by
// one person answering twice (the API server refuses the second answer,
// and the refund does not run), and is satisfied by a second person:
// the refund runs once, and status.approvals records both.
func TestApprovers_aTwoPersonRuleNeedsTwoDistinctPeople(t *testing.T) {
	ns := namespace(t)
	bind(t, ns, "agentrun-approver", userSubject("bob"))
	tb, ctx := newTools(), context.Background()
	startManager(t, &kits{tools: tb})
	run := twoPersonRun(ns, "refund").create(t)
	p := waitPending(t, run, 1).Status.PendingApprovals[0]
	if p.Approvals != 2 || len(p.ApprovedBy) != 0 {
		t.Fatalf("pending = %+v, want a call that needs 2 approvals and has none", p)
	}
	approve := v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: p.ArgumentsDigest}.String()

	annotate(t, run, "t1-c1", approve)
	var cur *v1alpha1.AgentRun
	NewWithT(t).Eventually(func() []string {
		cur = get(t, run)
		if len(cur.Status.PendingApprovals) == 0 {
			return nil
		}
		return cur.Status.PendingApprovals[0].ApprovedBy
	}, 20*time.Second, 20*time.Millisecond).Should(Equal([]string{adminName}), "the first approval was not counted")
	// Counted, the answer is taken off the run, so that the next
	// person's is set anew and stamped with their name.
	NewWithT(t).Eventually(func() map[string]string { return get(t, run).Annotations }, 20*time.Second, 20*time.Millisecond).
		ShouldNot(HaveKey(v1alpha1.ApprovalAnnotationPrefix+"t1-c1"), "the counted approval stays on the run")

	// The same person again, in other words: refused, and not counted.
	err := patchAnnotations(ctx, k8sClient, run, map[string]any{v1alpha1.ApprovalAnnotationPrefix + "t1-c1": "APPROVE"}, "kubectl-annotate")
	if err == nil || !strings.Contains(err.Error(), adminName+" approved approval.agents.agentrun.dev/t1-c1 before") {
		t.Fatalf("a second approval by %s: %v, want it refused as theirs before", adminName, err)
	}
	if cur = get(t, run); cur.Status.Outcome != "" || len(cur.Status.PendingApprovals) != 1 || tb.counts()["t1-c1:issue_refund"] != 0 {
		t.Fatalf("after one person's approval the run is %s with %d calls waiting and %v run; want the refund waiting", cur.Status.Outcome,
			len(cur.Status.PendingApprovals), tb.counts())
	}

	if err := patchAnnotations(ctx, as(t, "bob"), run, map[string]any{v1alpha1.ApprovalAnnotationPrefix + "t1-c1": approve}, "kubectl-annotate"); err != nil {
		t.Fatalf("bob's approval: %v", err)
	}
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer")
	if diff := cmp.Diff(map[string]int{"t1-c1:issue_refund": 1}, tb.counts()); diff != "" {
		t.Errorf("executions (-want +got):\n%s", diff)
	}
	var got []string
	for _, a := range done.Status.Approvals {
		got = append(got, a.CallID+" "+string(a.Decision)+" by "+a.By)
	}
	if diff := cmp.Diff([]string{"t1-c1 approve by " + adminName, "t1-c1 approve by bob"}, got); diff != "" {
		t.Errorf("status.approvals (-want +got):\n%s", diff)
	}
}
