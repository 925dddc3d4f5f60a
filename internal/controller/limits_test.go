package controller

import (
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Issue 43, item 5: a run was judged on limits it does not have. The
// overdue-run alert computed a run's deadline from its stored spec, so a
// run made from a template (whose own spec sets no budget), or whose
// ceilings a platform policy capped or filled, was judged on the defaults
// (15 minutes of work, an hour per ask). The operator now writes what
// admission uses in status.limits, and the deadline reads it.
func TestLimits_statusSaysWhatAdmissionUsesForATemplatedAndCappedRun(t *testing.T) {
	ns, p := governedNamespace(t, v1alpha1.AgentRunPolicySpec{
		Limits: &v1alpha1.PlatformLimits{MaxTurns: ptr.To(int32(4)), MaxCostUSD: "0.50"},
	})
	startManager(t, &kits{tools: newTools()})
	tpl := makeTemplate(t, ns, "refunder", makeRun(ns, "").maxTurns(3).
		budget(func(b *v1alpha1.BudgetSpec) { b.MaxWallClock = &metav1.Duration{Duration: 10 * time.Minute} }).
		with(func(s *v1alpha1.AgentRunSpec) {
			s.Goal = "Refund ticket $(params.ticket)."
			s.ApprovalTimeout = &metav1.Duration{Duration: 7 * time.Minute}
		}).
		writeTool("refund", false).calls("refund", `{"ticket":"$(params.ticket)"}`).answer("Refunded."),
		v1alpha1.TemplateParameter{Name: "ticket", Required: true})
	run := runOf(t, ns, "t-7", tpl.Name, "ticket", "T-7")

	waiting := waitPending(t, run, 1)
	l := waiting.Status.Limits
	if l == nil {
		t.Fatalf("status.limits is not set on a run that has started (phase %s)", waiting.Status.Phase)
	}
	got := l.Budget
	if got.MaxTurns != 3 || got.MaxCostUSD != "0.5000" || got.MaxWallClock == nil || got.MaxWallClock.Duration != 10*time.Minute ||
		l.ApprovalTimeout.Duration != 7*time.Minute {
		t.Fatalf("status.limits = maxTurns %d, maxCostUSD %q, maxWallClock %v, approvalTimeout %s; "+
			"want 3, 10m0s and 7m0s (the template) and 0.5000 (AgentRunPolicy %s fills it)", got.MaxTurns, got.MaxCostUSD, got.MaxWallClock, l.ApprovalTimeout.Duration, p.Name)
	}
	if got.MaxTokens == nil || *got.MaxTokens != 100_000 || got.MaxToolCalls == nil || *got.MaxToolCalls != 50 {
		t.Fatalf("status.limits.budget = %+v: the defaults are not filled", got)
	}
	// The overdue alert's deadline: started, 10m of work, one ask of 7m,
	// and the margin; not the 15m and 1h of the CRD's defaults.
	end, ok := deadline(waiting)
	if want := waiting.Status.StartTime.Add(10*time.Minute + 7*time.Minute + OverdueMargin); !ok || !end.Equal(want) {
		t.Fatalf("deadline = %s (started %v), want %s", end, ok, want)
	}

	annotate(t, waiting, waiting.Status.PendingApprovals[0].CallID, "approve")
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
	if done.Status.Limits == nil || done.Status.Limits.Budget.MaxTurns != 3 {
		t.Fatalf("status.limits after the run ended: %+v", done.Status.Limits)
	}
}

// A run written out in full has the limits its spec sets, defaults
// filled; the console and kubectl read the same field for every run.
func TestLimits_aRunWrittenOutInFullHasItsOwnLimits(t *testing.T) {
	ns := namespace(t)
	startManager(t, &kits{tools: newTools()})
	run := makeRun(ns, "plain").maxTurns(3).answer("Done.").create(t)
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
	l := done.Status.Limits
	g := NewWithT(t)
	g.Expect(l).NotTo(BeNil())
	g.Expect(l.Budget.MaxTurns).To(Equal(int32(3)))
	g.Expect(l.Budget.MaxWallClock.Duration).To(Equal(15 * time.Minute))
	g.Expect(l.Budget.MaxCostUSD).To(Equal(v1alpha1.USD("1.0000")))
	g.Expect(l.ApprovalTimeout.Duration).To(Equal(time.Hour))
}

// The platform's limits promise "leave it unset to get that maximum", but
// the CRD stored a default for maxTokens, maxToolCalls, maxWallClock,
// approvalTimeout and a tool's timeout before the admission policy ran:
// under a limit below that default, every run that left the field unset
// was refused for a value its author never wrote. Those defaults are the
// operator's now (as maxCostUSD's always was): such a run is admitted and
// gets the platform's maximum.
func TestLimits_aCeilingLeftUnsetGetsThePlatformsMaximum(t *testing.T) {
	ns, p := governedNamespace(t, v1alpha1.AgentRunPolicySpec{Limits: &v1alpha1.PlatformLimits{
		MaxTokens: ptr.To(int64(50_000)), MaxToolCalls: ptr.To(int32(9)), MaxWallClock: &metav1.Duration{Duration: 10 * time.Minute},
		MaxApprovalTimeout: &metav1.Duration{Duration: 30 * time.Minute}, MaxToolTimeout: &metav1.Duration{Duration: 10 * time.Second}}})
	startManager(t, &kits{tools: newTools()})
	// The policy reaches the API server by a watch: wait until a run
	// that sets a ceiling above it is refused.
	refusedAtCreation(t, k8sClient, makeRun(ns, "too-long").maxTurns(3).answer("Done.").
		with(func(s *v1alpha1.AgentRunSpec) { s.ApprovalTimeout = &metav1.Duration{Duration: time.Hour} }).r, "allows at most 30m")
	run := makeRun(ns, "unset").maxTurns(3).readTool("lookup").calls("lookup", `{"id":1}`).answer("Done.").create(t)
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
	l := done.Status.Limits
	if l == nil || l.Budget.MaxTokens == nil || *l.Budget.MaxTokens != 50_000 || l.Budget.MaxToolCalls == nil || *l.Budget.MaxToolCalls != 9 ||
		l.Budget.MaxWallClock == nil || l.Budget.MaxWallClock.Duration != 10*time.Minute || l.ApprovalTimeout.Duration != 30*time.Minute {
		t.Fatalf("status.limits = %+v; want AgentRunPolicy %s's maxima (50000 tokens, 9 calls, 10m, 30m)", l, p.Name)
	}
}
