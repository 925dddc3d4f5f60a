package controller

import (
	"context"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller/controllertest"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The shipped GitOps health checks (config/gitops), run by the engines
// Argo CD and Flux run them with (controllertest), on runs read back from
// the API server.

// shippedArgoScript reads the shipped Argo CD health check of runs.
func shippedArgoScript(t *testing.T) string {
	t.Helper()
	return controllertest.ShippedArgoScript(t, "argocd-health.lua")
}

// shippedFluxExprs reads the AgentRun entry of healthCheckExprs from the
// shipped Kustomization.
func shippedFluxExprs(t *testing.T) map[string]string {
	t.Helper()
	return controllertest.ShippedFluxExprs(t, "AgentRun")
}

func unstructuredOf(t *testing.T, run *v1alpha1.AgentRun) map[string]any {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("AgentRun"))
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(run), u); err != nil {
		t.Fatal(err)
	}
	return u.Object
}

// holdKits builds runs as kits does, but the model of the run named hold
// never answers: the run stays Running.
type holdKits struct {
	kits
	hold string
}

func (h *holdKits) Build(ctx context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error) {
	k, err := h.kits.Build(ctx, run, grant)
	if err == nil && run.Name == h.hold {
		k.Model = silentModel{}
	}
	return k, err
}

type silentModel struct{}

func (silentModel) Complete(ctx context.Context, _ *loop.Request) (*loop.Reply, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// Each phase, driven by the operator and read from the API server: the
// Argo CD Lua says Healthy / Degraded / Progressing / Suspended and the
// Flux expressions Current / Failed / InProgress.
func TestGitOpsHealth_liveRunsInEveryPhase(t *testing.T) {
	script := shippedArgoScript(t)
	exprs := shippedFluxExprs(t)
	ns := namespace(t)
	startManager(t, &holdKits{kits: kits{tools: newTools()}, hold: "running"})
	g := NewWithT(t)
	const wait, tick = 20 * time.Second, 20 * time.Millisecond

	check := func(name string, run *v1alpha1.AgentRun, argo, flux string) {
		t.Helper()
		g.Eventually(func() []string {
			obj := unstructuredOf(t, run)
			st, _ := controllertest.ArgoHealth(t, script, obj)
			return []string{st, controllertest.FluxHealth(t, exprs, obj)}
		}, wait, tick).Should(Equal([]string{argo, flux}), name)
	}

	running := makeRun(ns, "running").answer("never said").create(t)
	g.Eventually(func() v1alpha1.Phase { return get(t, running).Status.Phase }, wait, tick).Should(Equal(v1alpha1.PhaseRunning))
	check("running", running, "Progressing", "InProgress")

	asking := makeRun(ns, "asking").writeTool("drop_table", false).calls("drop_table", `{}`).create(t)
	g.Eventually(func() v1alpha1.Phase { return get(t, asking).Status.Phase }, wait, tick).Should(Equal(v1alpha1.PhaseAwaitingApproval))
	check("awaiting approval", asking, "Suspended", "InProgress")
	_, msg := controllertest.ArgoHealth(t, script, unstructuredOf(t, asking))
	g.Expect(msg).To(ContainSubstring("t1-c1 (drop_table)"))

	completed := makeRun(ns, "completed").readTool("get_pod").calls("get_pod", `{"name":"web-0"}`).answer("All good.").create(t)
	expectOutcome(t, waitOutcome(t, completed, wait), v1alpha1.OutcomeCompleted, "")
	check("completed", completed, "Healthy", "Current")

	annotate(t, asking, "t1-c1", "stop")
	expectOutcome(t, waitOutcome(t, asking, wait), v1alpha1.OutcomeApprovalDenied, "stopped")
	check("approval denied", asking, "Degraded", "Failed")
	_, msg = controllertest.ArgoHealth(t, script, unstructuredOf(t, asking))
	g.Expect(msg).To(HavePrefix("ApprovalDenied: "))

	budget := makeRun(ns, "budget").maxTurns(1).readTool("get_pod").calls("get_pod", `{}`).calls("get_pod", `{}`).answer("late").create(t)
	expectOutcome(t, waitOutcome(t, budget, wait), v1alpha1.OutcomeBudgetExhausted, "")
	check("budget exhausted", budget, "Degraded", "Failed")

	// spec.cancel on an ended run bumps the generation: until the operator
	// observes it, both read it as in progress, then as before.
	g.Expect(k8sClient.Patch(context.Background(), get(t, completed), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancel":true}}`)))).To(Succeed())
	check("completed, cancel observed", completed, "Healthy", "Current")
}

// Every phase and outcome as the status setters write it (a pending run
// and a run that could not start are hard to catch live), and a run the
// operator has not seen yet (no status).
func TestGitOpsHealth_everyPhaseAndOutcomeAsWritten(t *testing.T) {
	script := shippedArgoScript(t)
	exprs := shippedFluxExprs(t)
	ns := namespace(t)
	now := metav1.NewTime(time.Now().Truncate(time.Second))

	fresh := makeRun(ns, "fresh").answer("x").create(t)
	if st, _ := controllertest.ArgoHealth(t, script, unstructuredOf(t, fresh)); st != "Progressing" {
		t.Fatalf("a run without status: Argo CD health %s, want Progressing", st)
	}

	asked := now.Time
	cases := []struct {
		name       string
		state      loop.State
		argo, flux string
	}{
		{"pending", loop.State{}, "Progressing", "InProgress"},
		{"running", loop.State{Turn: 2, Phase: loop.PhaseModel}, "Progressing", "InProgress"},
		{"awaiting-approval", loop.State{Turn: 1, Phase: loop.PhaseApproval, Calls: []loop.Call{{ToolCall: loop.ToolCall{ID: "t1-c1", Name: "refund"},
			Verdict: loop.Ask, State: loop.CallProposed, RequestedAt: &asked}}}, "Suspended", "InProgress"},
		{"completed", loop.State{Turn: 2, Phase: loop.PhaseDone, Outcome: loop.Completed}, "Healthy", "Current"},
	}
	for _, o := range []loop.Outcome{loop.BudgetExhausted, loop.GuardrailStop, loop.LoopDetected, loop.ApprovalDenied, loop.Escalated, loop.ToolFailure, loop.Error} {
		cases = append(cases, struct {
			name       string
			state      loop.State
			argo, flux string
		}{string(o), loop.State{Turn: 2, Phase: loop.PhaseDone, Outcome: o, Reason: "ended " + string(o)}, "Degraded", "Failed"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := makeRun(ns, "w-"+sanitize(tc.name)).answer("x").create(t)
			runstatus.SetFromState(&run.Status, &tc.state, loop.Convergence{}, now)
			run.Status.ObservedGeneration = run.Generation
			if err := k8sClient.Status().Update(context.Background(), run); err != nil {
				t.Fatal(err)
			}
			obj := unstructuredOf(t, run)
			if st, msg := controllertest.ArgoHealth(t, script, obj); st != tc.argo {
				t.Fatalf("Argo CD health %s (%s), want %s", st, msg, tc.argo)
			}
			if got := controllertest.FluxHealth(t, exprs, obj); got != tc.flux {
				t.Fatalf("Flux health %s, want %s", got, tc.flux)
			}
		})
	}
	t.Run("failed-to-start", func(t *testing.T) {
		run := failedToStart(t, ns, now)
		obj := unstructuredOf(t, run)
		if st, msg := controllertest.ArgoHealth(t, script, obj); st != "Degraded" || msg != "Error: the run cannot start" {
			t.Fatalf("Argo CD health %s (%s), want Degraded (Error: the run cannot start)", st, msg)
		}
		if got := controllertest.FluxHealth(t, exprs, obj); got != "Failed" {
			t.Fatalf("Flux health %s, want Failed", got)
		}
	})
}

func sanitize(s string) string {
	out := []byte{}
	for _, c := range []byte(s) {
		switch {
		case c >= 'A' && c <= 'Z':
			out = append(out, c+'a'-'A')
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			out = append(out, c)
		}
	}
	return string(out)
}
