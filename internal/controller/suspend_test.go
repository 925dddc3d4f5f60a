package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// expectStopped waits for the run to end ApprovalDenied with a reason
// that contains want, and checks that its refund never ran.
func expectStopped(t *testing.T, tb *tools, run *v1alpha1.AgentRun, want string) *v1alpha1.AgentRun {
	t.Helper()
	done := waitOutcome(t, run, 20*time.Second)
	if done.Status.Outcome != v1alpha1.OutcomeApprovalDenied || !strings.Contains(done.Status.Reason, want) {
		t.Fatalf("outcome %s (%s); want ApprovalDenied naming %q", done.Status.Outcome, done.Status.Reason, want)
	}
	if n := tb.counts()["t1-c1:issue_refund"]; n != 0 {
		t.Fatalf("the stopped run's refund ran %d times", n)
	}
	return done
}

// Issue 33, item 4: an AgentBudget's kill switch stops the runs it covers
// now (here one waiting for a person, holding a lease), and a run created
// while it is set never starts; turned off, runs start again.
func TestSuspend_anAgentBudgetStopsItsRuns(t *testing.T) {
	tb, run, _ := pendingRefund(t)
	ctx := context.Background()
	b := &v1alpha1.AgentBudget{ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: "team"},
		Spec: v1alpha1.AgentBudgetSpec{MaxCostUSD: "100"}}
	if err := k8sClient.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	base := b.DeepCopy()
	b.Spec.Suspend = true
	if err := k8sClient.Patch(ctx, b, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	expectStopped(t, tb, run, "AgentBudget team, which covers it, is suspended (spec.suspend: true)")

	// The runs are priced: a budget that limits dollars refuses a run
	// whose model has no price.
	priced := func(s *v1alpha1.AgentRunSpec) { s.Model.Pricing = &v1alpha1.ModelPricing{Input: "1", Output: "1"} }
	later := makeRun(run.Namespace, "later").answer("done").with(priced).create(t)
	if done := expectStopped(t, tb, later, "AgentBudget team"); done.Status.Turn != 0 {
		t.Fatalf("the run created while suspended took %d turns", done.Status.Turn)
	}

	base = get(t, b).DeepCopy()
	b = base.DeepCopy()
	b.Spec.Suspend = false
	if err := k8sClient.Patch(ctx, b, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	// The operator's cache may hold the suspended budget a moment longer:
	// a run created in that moment is stopped, and the next one is not.
	attempt := 0
	NewWithT(t).Eventually(func() v1alpha1.Outcome {
		attempt++
		after := makeRun(run.Namespace, fmt.Sprintf("after-%d", attempt)).answer("done").with(priced).create(t)
		return waitOutcome(t, after, 20*time.Second).Status.Outcome
	}, 30*time.Second, 100*time.Millisecond).Should(Equal(v1alpha1.OutcomeCompleted), "no run completed after the switch was turned off")
}

// The platform's kill switch: an AgentRunPolicy with suspend stops every
// run of the namespaces it selects.
func TestSuspend_anAgentRunPolicyStopsTheRunsOfItsNamespaces(t *testing.T) {
	ns, p := governedNamespace(t, v1alpha1.AgentRunPolicySpec{})
	tb := newTools()
	startManager(t, &kits{tools: tb})
	run := refundRun(ns, "refund").answer("Refunded.").create(t)
	waitPending(t, run, 1)
	elsewhere := refundRun(namespace(t), "refund").answer("Refunded.").create(t)
	waitPending(t, elsewhere, 1)

	base := get(t, p).DeepCopy()
	p = base.DeepCopy()
	p.Spec.Suspend = true
	if err := k8sClient.Patch(context.Background(), p, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	expectStopped(t, tb, run, "AgentRunPolicy "+p.Name+" suspends the runs of namespace "+ns)
	NewWithT(t).Consistently(func() v1alpha1.Outcome { return get(t, elsewhere).Status.Outcome }, time.Second, 100*time.Millisecond).
		Should(BeEmpty(), "a run of a namespace the policy does not select was stopped")
}
