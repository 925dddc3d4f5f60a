// Package controllertest holds what the tests of more than one
// controller package use (it is imported by tests only): the shipped
// GitOps health checks (config/gitops), run by the engines Argo CD and
// Flux run them with, on objects read back from the API server.
package controllertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// ArgoHealth runs the Lua health check as Argo CD does: a sandboxed
// gopher-lua state with the base, table, string and math libraries, the
// object as the global obj (maps and lists as tables, numbers as
// numbers), and the returned table's status and message.
func ArgoHealth(t testing.TB, script string, obj map[string]any) (status, message string) {
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

// FluxHealth evaluates healthCheckExprs (ShippedFluxExprs) as
// Flux's kustomize-controller does (RFC 0009, fluxcd/pkg runtime/cel):
// expressions parsed (not type-checked) in an environment with optional
// types and the strings, sets and encoders extensions, the object's
// top-level fields as variables; a status.observedGeneration that differs
// from metadata.generation is InProgress; then inProgress, failed and
// current in that order, the first true one wins, and none true is
// InProgress.
func FluxHealth(t testing.TB, exprs map[string]string, obj map[string]any) string {
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

// ShippedArgoScript reads the shipped Argo CD health check of that name
// in config/gitops (argocd-health.lua for runs, argocd-health-ready.lua
// for the kinds with a Ready condition).
func ShippedArgoScript(t testing.TB, name string) string {
	t.Helper()
	script, err := os.ReadFile(gitopsFile(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(script)
}

// ShippedFluxExprs reads the entry of healthCheckExprs for kind from the
// shipped Kustomization.
func ShippedFluxExprs(t testing.TB, kind string) map[string]string {
	t.Helper()
	file := gitopsFile(t, "flux-kustomization.yaml")
	raw, err := os.ReadFile(file)
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
	t.Fatalf("%s has no healthCheckExprs entry for %s", file, kind)
	return nil
}

// ReadyHealthOf runs the shipped health checks of templates and schedules
// on obj (of kind) read back from the API server through c: Argo CD's,
// Flux's and kstatus'.
func ReadyHealthOf(t testing.TB, c client.Reader, obj client.Object, kind string) (argo, flux string, ks status.Status) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(kind))
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), u); err != nil {
		t.Fatal(err)
	}
	argo, _ = ArgoHealth(t, ShippedArgoScript(t, "argocd-health-ready.lua"), u.Object)
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return argo, FluxHealth(t, ShippedFluxExprs(t, kind), u.Object), res.Status
}

// gitopsFile is the path of a file of config/gitops.
func gitopsFile(t testing.TB, name string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "config", "gitops", name)
}
