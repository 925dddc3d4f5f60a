package agentruntemplate

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller/controllertest"
	"github.com/agentrun/agentrun/internal/testenv"
)

// start runs the template reconciler, in a manager of its own whose cache
// holds a new namespace, until the test ends; it returns the namespace.
func start(t *testing.T) string {
	t.Helper()
	ns := testenv.Namespace(t, cluster.Client)
	testenv.StartManager(t, cluster.Config, ns, func(mgr ctrl.Manager) error {
		return (&Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
	})
	return ns
}

// create creates the AgentRunTemplate named name in ns whose spec is the
// YAML spec.
func create(t *testing.T, ns, name, spec string) *v1alpha1.AgentRunTemplate {
	t.Helper()
	tpl := &v1alpha1.AgentRunTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := yaml.UnmarshalStrict([]byte(spec), &tpl.Spec); err != nil {
		t.Fatalf("the test's spec: %v", err)
	}
	if err := cluster.Client.Create(context.Background(), tpl); err != nil {
		t.Fatalf("creating the template %s: %v", name, err)
	}
	return tpl
}

// judged waits until the reconciler has judged tpl's current generation
// and returns the template as the API server then has it.
func judged(t *testing.T, tpl *v1alpha1.AgentRunTemplate) *v1alpha1.AgentRunTemplate {
	t.Helper()
	var got *v1alpha1.AgentRunTemplate
	NewWithT(t).Eventually(func() bool {
		got = testenv.Get(t, cluster.Client, tpl.DeepCopy())
		c := apimeta.FindStatusCondition(got.Status.Conditions, "Ready")
		return c != nil && c.ObservedGeneration == got.Generation && got.Status.ObservedGeneration == got.Generation
	}, 10*time.Second, 20*time.Millisecond).Should(BeTrue(), "the template's Ready condition for its current generation")
	return got
}

// conditionOf is the condition typ of tpl as "Status Reason: Message", or
// "" when it has none.
func conditionOf(tpl *v1alpha1.AgentRunTemplate, typ string) string {
	c := apimeta.FindStatusCondition(tpl.Status.Conditions, typ)
	if c == nil {
		return ""
	}
	return string(c.Status) + " " + c.Reason + ": " + c.Message
}

// usable is the Ready condition of a template runs can be made from.
const usable = "True " + ReasonValid + ": runs can be made from this template"

// expectConditions fails the test unless tpl's Ready and Stalled
// conditions read ready and stalled ("" for none).
func expectConditions(t *testing.T, tpl *v1alpha1.AgentRunTemplate, ready, stalled string) {
	t.Helper()
	if got := conditionOf(tpl, "Ready"); got != ready {
		t.Errorf("Ready = %q, want %q", got, ready)
	}
	if got := conditionOf(tpl, "Stalled"); got != stalled {
		t.Errorf("Stalled = %q, want %q", got, stalled)
	}
}

// expectHealth fails the test unless Argo CD, Flux and kstatus, with the
// checks the chart ships, read tpl as want says.
func expectHealth(t *testing.T, tpl client.Object, want ...string) {
	t.Helper()
	argo, flux, ks := controllertest.ReadyHealthOf(t, cluster.Client, tpl, "AgentRunTemplate")
	if got := []string{argo, flux, string(ks)}; !slices.Equal(got, want) {
		t.Errorf("health (Argo CD, Flux, kstatus) = %v, want %v", got, want)
	}
}

const ticketRun = `
run:
  goal: "Investigate $(params.ticket)."
  instructions: "Be $(params.tone)."
  model: {provider: scripted, script: [{content: done}]}
  budget: {maxTurns: 3}
`

func TestReconcile_aUsableTemplateIsReadyAndHealthy(t *testing.T) {
	ns := start(t)
	tpl := judged(t, create(t, ns, "investigator", `
parameters:
- {name: ticket, required: true, pattern: '^T-[0-9]+$'}
- {name: tone, enum: [formal, friendly], default: formal}
`+ticketRun))
	expectConditions(t, tpl, usable, "")
	if tpl.Status.ParameterCount != 2 {
		t.Errorf("status.parameterCount = %d, want 2", tpl.Status.ParameterCount)
	}
	expectHealth(t, tpl, "Healthy", "Current", string(status.CurrentStatus))
}

// A default outside its parameter's pattern is what the API server does
// not check: every run that leaves the parameter out would end Error, so
// the template says so, and GitOps tools show it failed.
func TestReconcile_aDefaultOutsideItsPatternStallsTheTemplate(t *testing.T) {
	ns := start(t)
	tpl := judged(t, create(t, ns, "bad-default", `
parameters:
- {name: ticket, pattern: '^T-[0-9]+$', default: "1042", description: "the support ticket"}
- {name: tone, default: formal}
`+ticketRun))
	msg := `the default of parameter "ticket" must match the pattern ^T-[0-9]+$, and "1042" does not (the support ticket)`
	expectConditions(t, tpl, "False "+ReasonInvalid+": "+msg, "True "+ReasonInvalid+": "+msg)
	expectHealth(t, tpl, "Degraded", "Failed", string(status.FailedStatus))
}

// An edit that declares the missing parameter makes the template usable
// again: Ready turns True for the new generation and Stalled goes.
func TestReconcile_anEditThatFixesTheTemplateClearsStalled(t *testing.T) {
	ns := start(t)
	tpl := judged(t, create(t, ns, "undeclared", `
parameters:
- {name: ticket}
`+ticketRun))
	msg := ": spec.run uses $(params.tone), which spec.parameters does not declare"
	expectConditions(t, tpl, "False "+ReasonInvalid+msg, "True "+ReasonInvalid+msg)
	fixed := tpl.DeepCopy()
	fixed.Spec.Parameters = append(fixed.Spec.Parameters, v1alpha1.TemplateParameter{Name: "tone"})
	if err := cluster.Client.Patch(context.Background(), fixed, client.MergeFrom(tpl)); err != nil {
		t.Fatal(err)
	}
	tpl = judged(t, fixed)
	if tpl.Generation != 2 || tpl.Status.ObservedGeneration != 2 {
		t.Errorf("generation %d, status.observedGeneration %d; want 2 and 2", tpl.Generation, tpl.Status.ObservedGeneration)
	}
	expectConditions(t, tpl, usable, "")
	if tpl.Status.ParameterCount != 2 {
		t.Errorf("status.parameterCount = %d, want 2", tpl.Status.ParameterCount)
	}
}
