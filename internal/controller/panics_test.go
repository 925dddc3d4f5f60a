package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/transcript"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Issue 33.3: a defect that panics in every reconcile of one run ends that
// run Error after MaxPanics tries, counted, and the run is not reconciled
// into the same panic again; other runs carry on.
func TestPanic_aReconcileThatPanicsEndsTheRunError(t *testing.T) {
	ns := namespace(t)
	var attempts atomic.Int64
	r, _ := startReconciler(t, &kits{tools: newTools()}, 0, func(c client.Client, _ func()) client.Client {
		return hookClient{Client: c, before: func(_ context.Context, op string, obj client.Object) error {
			// A defect in the save of one run: its first transcript chunk.
			if s, ok := obj.(*corev1.Secret); ok && op == "create" && s.Namespace == ns && s.Labels[transcript.LabelRun] == "panicky" {
				attempts.Add(1)
				panic(errors.New("a defect in the save"))
			}
			return nil
		}}
	})
	m := r.Metrics
	before := testutil.ToFloat64(m.panics.WithLabelValues("reconcile"))
	errorsBefore := testutil.ToFloat64(m.runsFinished.WithLabelValues(nsLabel(m, ns), "scripted", "", "Error", "Error", ""))
	run := makeRun(ns, "panicky").readTool("lookup").calls("lookup", `{"q":1}`).answer("done").create(t)
	calm := makeRun(ns, "calm").readTool("lookup").calls("lookup", `{"q":1}`).answer("done").create(t)

	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeError, fmt.Sprintf("the operator failed on this run %d times", MaxPanics))
	if !strings.Contains(done.Status.Reason, "the operator panicked: a defect in the save") {
		t.Fatalf("the reason does not say what panicked: %s", done.Status.Reason)
	}
	expectOutcome(t, waitOutcome(t, calm, 30*time.Second), v1alpha1.OutcomeCompleted, "")
	g := NewWithT(t)
	g.Expect(attempts.Load()).To(BeEquivalentTo(MaxPanics), "saves that panicked")
	g.Expect(testutil.ToFloat64(m.panics.WithLabelValues("reconcile")) - before).To(BeEquivalentTo(MaxPanics))
	// Counted after the status write the test saw: wait for it.
	g.Eventually(func() float64 {
		return testutil.ToFloat64(m.runsFinished.WithLabelValues(nsLabel(m, ns), "scripted", "", "Error", "Error", "")) - errorsBefore
	}, 10*time.Second, 20*time.Millisecond).Should(BeEquivalentTo(1))
	// Ended, the run is not saved again: the panic does not come back.
	g.Consistently(attempts.Load, time.Second, 50*time.Millisecond).Should(BeEquivalentTo(MaxPanics))
}

// panickyKits panics building the kit of the run named panicky, as a
// defect in a model adapter or an MCP client would, off the workers.
type panickyKits struct{ kits }

func (p *panickyKits) Build(ctx context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error) {
	if run.Name == "panicky" {
		panic("a defect in the kit builder")
	}
	return p.kits.Build(ctx, run, grant)
}

// Issue 33.3: a panic in work off the workers (the kit build, a model
// call) used to end the whole operator; it now ends that run Error (not
// InvalidConfiguration: it is a defect) and the operator serves the rest.
func TestPanic_inWorkOffTheWorkersEndsOnlyThatRun(t *testing.T) {
	ns := namespace(t)
	r, _ := startReconciler(t, &panickyKits{kits{tools: newTools()}}, 0, nil)
	before := testutil.ToFloat64(r.Metrics.panics.WithLabelValues("work"))
	run := makeRun(ns, "panicky").answer("done").create(t)
	expectOutcome(t, waitOutcome(t, run, 20*time.Second), v1alpha1.OutcomeError, "the operator panicked: a defect in the kit builder")
	calm := makeRun(ns, "calm").answer("done").create(t)
	expectOutcome(t, waitOutcome(t, calm, 20*time.Second), v1alpha1.OutcomeCompleted, "")
	NewWithT(t).Expect(testutil.ToFloat64(r.Metrics.panics.WithLabelValues("work")) - before).To(BeEquivalentTo(1))
}

// failingKits fails the kit build of each run with the error named after
// it.
type failingKits struct {
	kits
	errs map[string]error
}

func (f *failingKits) Build(ctx context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error) {
	if err := f.errs[run.Name]; err != nil {
		return nil, err
	}
	return f.kits.Build(ctx, run, grant)
}

// Issue 33.3: whose fault. A run that cannot start because of what it was
// given ends Error with the reason InvalidConfiguration (and that label on
// agentrun_runs_finished_total); one that cannot start because the API
// server failed ends Error as a defect.
func TestRun_aConfigurationErrorIsToldApartFromADefect(t *testing.T) {
	ns := namespace(t)
	r, _ := startReconciler(t, &failingKits{kits: kits{tools: newTools()}, errs: map[string]error{
		"forbidden": fmt.Errorf("model.apiKeySecretRef: %w", apierrors.NewForbidden(corev1.Resource("secrets"), "openai", errors.New("no"))),
		"typo":      errors.New("policy.rules[0].when: a condition does not compile"),
		"down":      fmt.Errorf("reading the API key: %w", apierrors.NewServiceUnavailable("etcd is busy")),
	}}, 0, nil)
	m := r.Metrics
	invalidBefore := testutil.ToFloat64(m.runsFinished.WithLabelValues(nsLabel(m, ns), "scripted", "", "Error", v1alpha1.ReasonInvalidConfiguration, ""))
	forbidden := makeRun(ns, "forbidden").answer("x").create(t)
	typo := makeRun(ns, "typo").answer("x").create(t)
	down := makeRun(ns, "down").answer("x").create(t)
	expectInvalid(t, waitOutcome(t, forbidden, 20*time.Second), "the run cannot start: model.apiKeySecretRef")
	expectInvalid(t, waitOutcome(t, typo, 20*time.Second), "does not compile")
	expectOutcome(t, waitOutcome(t, down, 20*time.Second), v1alpha1.OutcomeError, "etcd is busy")
	// Counted after the status write the test saw: wait for it.
	NewWithT(t).Eventually(func() float64 {
		return testutil.ToFloat64(m.runsFinished.WithLabelValues(nsLabel(m, ns), "scripted", "", "Error", v1alpha1.ReasonInvalidConfiguration, "")) - invalidBefore
	}, 10*time.Second, 20*time.Millisecond).Should(BeEquivalentTo(2))
}
