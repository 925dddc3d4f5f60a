package controller

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	. "github.com/onsi/gomega"
	lua "github.com/yuin/gopher-lua"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The shipped GitOps health checks (config/gitops), run by the engines
// Argo CD and Flux run them with, on runs read back from the API server.

const (
	argoHealthFile = "../../config/gitops/argocd-health.lua"
	fluxFile       = "../../config/gitops/flux-kustomization.yaml"
)

// argoHealth runs the Lua health check as Argo CD does: a sandboxed
// gopher-lua state with the base, table, string and math libraries, the
// object as the global obj (maps and lists as tables, numbers as
// numbers), and the returned table's status and message.
func argoHealth(t *testing.T, script string, obj map[string]any) (status, message string) {
	t.Helper()
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		l.Push(l.NewFunction(lib.open))
		l.Push(lua.LString(lib.name))
		l.Call(1, 0)
	}
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(script); err != nil {
		t.Fatalf("the health check failed: %v", err)
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("the health check returned %s, not a table", l.Get(-1).Type())
	}
	status, message = lua.LVAsString(ret.RawGetString("status")), lua.LVAsString(ret.RawGetString("message"))
	switch status {
	case "Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown":
	default:
		t.Fatalf("the health check returned a status Argo CD does not know: %q", status)
	}
	return status, message
}

func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		tb := l.NewTable()
		for k, e := range v {
			tb.RawSetString(k, toLua(l, e))
		}
		return tb
	case []any:
		tb := l.NewTable()
		for _, e := range v {
			tb.Append(toLua(l, e))
		}
		return tb
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case nil:
		return lua.LNil
	}
	panic(fmt.Sprintf("unexpected %T in an unstructured object", v))
}

// fluxHealth evaluates the shipped healthCheckExprs for AgentRun as
// Flux's kustomize-controller does (RFC 0009, fluxcd/pkg runtime/cel):
// expressions parsed (not type-checked) in an environment with optional
// types and the strings, sets and encoders extensions, the object's
// top-level fields as variables; a status.observedGeneration that differs
// from metadata.generation is InProgress; then inProgress, failed and
// current in that order, the first true one wins, and none true is
// InProgress.
func fluxHealth(t *testing.T, exprs map[string]string, obj map[string]any) string {
	t.Helper()
	if og, ok, _ := unstructured.NestedInt64(obj, "status", "observedGeneration"); ok {
		if g, ok, _ := unstructured.NestedInt64(obj, "metadata", "generation"); ok && g != og {
			return "InProgress"
		}
	}
	env, err := cel.NewEnv(cel.HomogeneousAggregateLiterals(), cel.EagerlyValidateDeclarations(true), cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true), cel.OptionalTypes(), ext.Strings(), ext.Sets(), ext.Encoders())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct{ key, status string }{{"inProgress", "InProgress"}, {"failed", "Failed"}, {"current", "Current"}} {
		src := exprs[e.key]
		if src == "" {
			continue
		}
		ast, iss := env.Parse(src)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", e.key, iss.Err())
		}
		prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.InterruptCheckFrequency(100))
		if err != nil {
			t.Fatalf("%s: %v", e.key, err)
		}
		val, _, err := prg.Eval(obj)
		if err != nil {
			t.Fatalf("%s: %v", e.key, err)
		}
		b, ok := val.(types.Bool)
		if !ok {
			t.Fatalf("%s is not a boolean: %v", e.key, val)
		}
		if b {
			return e.status
		}
	}
	return "InProgress"
}

// shippedArgoScript reads the shipped Argo CD health check.
func shippedArgoScript(t *testing.T) string {
	t.Helper()
	script, err := os.ReadFile(argoHealthFile)
	if err != nil {
		t.Fatal(err)
	}
	return string(script)
}

// shippedFluxExprs reads the AgentRun entry of healthCheckExprs from the
// shipped Kustomization.
func shippedFluxExprs(t *testing.T) map[string]string {
	t.Helper()
	return shippedFluxExprsOf(t, "AgentRun")
}

// shippedFluxExprsOf reads the entry of healthCheckExprs for kind.
func shippedFluxExprsOf(t *testing.T, kind string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(fluxFile)
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Spec struct {
			HealthCheckExprs []map[string]string `json:"healthCheckExprs"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	for _, e := range k.Spec.HealthCheckExprs {
		if e["apiVersion"] == v1alpha1.GroupVersion.String() && e["kind"] == kind {
			if e["current"] == "" {
				t.Fatal("Flux requires a current expression")
			}
			return e
		}
	}
	t.Fatalf("%s has no healthCheckExprs entry for %s", fluxFile, kind)
	return nil
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
			st, _ := argoHealth(t, script, obj)
			return []string{st, fluxHealth(t, exprs, obj)}
		}, wait, tick).Should(Equal([]string{argo, flux}), name)
	}

	running := makeRun(ns, "running").answer("never said").create(t)
	g.Eventually(func() v1alpha1.Phase { return get(t, running).Status.Phase }, wait, tick).Should(Equal(v1alpha1.PhaseRunning))
	check("running", running, "Progressing", "InProgress")

	asking := makeRun(ns, "asking").writeTool("drop_table", false).calls("drop_table", `{}`).create(t)
	g.Eventually(func() v1alpha1.Phase { return get(t, asking).Status.Phase }, wait, tick).Should(Equal(v1alpha1.PhaseAwaitingApproval))
	check("awaiting approval", asking, "Suspended", "InProgress")
	_, msg := argoHealth(t, script, unstructuredOf(t, asking))
	g.Expect(msg).To(ContainSubstring("t1-c1 (drop_table)"))

	completed := makeRun(ns, "completed").readTool("get_pod").calls("get_pod", `{"name":"web-0"}`).answer("All good.").create(t)
	expectOutcome(t, waitOutcome(t, completed, wait), v1alpha1.OutcomeCompleted, "")
	check("completed", completed, "Healthy", "Current")

	annotate(t, asking, "t1-c1", "stop")
	expectOutcome(t, waitOutcome(t, asking, wait), v1alpha1.OutcomeApprovalDenied, "stopped")
	check("approval denied", asking, "Degraded", "Failed")
	_, msg = argoHealth(t, script, unstructuredOf(t, asking))
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
	if st, _ := argoHealth(t, script, unstructuredOf(t, fresh)); st != "Progressing" {
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
			if st, msg := argoHealth(t, script, obj); st != tc.argo {
				t.Fatalf("Argo CD health %s (%s), want %s", st, msg, tc.argo)
			}
			if got := fluxHealth(t, exprs, obj); got != tc.flux {
				t.Fatalf("Flux health %s, want %s", got, tc.flux)
			}
		})
	}
	t.Run("failed-to-start", func(t *testing.T) {
		run := failedToStart(t, ns, now)
		obj := unstructuredOf(t, run)
		if st, msg := argoHealth(t, script, obj); st != "Degraded" || msg != "Error: the run cannot start" {
			t.Fatalf("Argo CD health %s (%s), want Degraded (Error: the run cannot start)", st, msg)
		}
		if got := fluxHealth(t, exprs, obj); got != "Failed" {
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
