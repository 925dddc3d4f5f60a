package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Issue 33.5: a reviewer records the outcome a finished run deserved with
// an annotation the API server gates like an answer (the verb approve, an
// outcome, a run that has ended), and the operator's metrics count it
// against the outcome the run emitted.
func TestAttribution_isGatedAndCountedAgainstTheEmittedOutcome(t *testing.T) {
	ns := namespace(t)
	bind(t, ns, "agentrun-editor", userSubject("pat"))
	bind(t, ns, "agentrun-approver", userSubject("ann"))
	m, _ := startObserved(t, &kits{tools: newTools()}, ns, nil)
	ctx := context.Background()
	key := v1alpha1.AttributedOutcomeAnnotation
	series := map[string]string{"emitted": "Completed", "attributed": "LoopDetected", "agree": "false"}
	before := sample(scrape(t, m), "agentrun_outcome_attributions", series)

	done := makeRun(ns, "looked-fine").answer("All good.").create(t)
	expectOutcome(t, waitOutcome(t, done, 20*time.Second), v1alpha1.OutcomeCompleted, "")
	waiting := refundRun(ns, "refund").create(t)
	waitPending(t, waiting, 1)

	// An editor may patch the run, not judge it.
	err := patchAnnotations(ctx, as(t, "pat"), done, map[string]any{key: "LoopDetected"}, "kubectl-annotate")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `needs the verb "approve"`) {
		t.Fatalf("an attribution by an editor = %v, want Forbidden naming the verb approve", err)
	}
	ann := as(t, "ann")
	// Only an outcome, only once the run has ended.
	if err := patchAnnotations(ctx, ann, done, map[string]any{key: "Sideways"}, "kubectl-annotate"); err == nil ||
		!strings.Contains(err.Error(), "must be one of the eight outcomes") {
		t.Fatalf("attributing Sideways = %v, want a refusal listing the outcomes", err)
	}
	if err := patchAnnotations(ctx, ann, waiting, map[string]any{key: "Completed"}, "kubectl-annotate"); err == nil ||
		!strings.Contains(err.Error(), "once the run has ended") {
		t.Fatalf("attributing a running run = %v, want a refusal", err)
	}
	// The approver's attribution is admitted and counted, disagreeing.
	if err := patchAnnotations(ctx, ann, done, map[string]any{key: "LoopDetected"}, "kubectl-annotate"); err != nil {
		t.Fatalf("the approver's attribution was refused: %v", err)
	}
	NewWithT(t).Eventually(func() float64 {
		return sample(scrape(t, m), "agentrun_outcome_attributions", series) - before
	}, 10*time.Second, 50*time.Millisecond).Should(Equal(1.0))
}
