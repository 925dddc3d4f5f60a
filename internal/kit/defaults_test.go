package kit

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/tools/memtool"
)

// The CRD's defaults (its +kubebuilder:default markers) and the engine's
// (loop's Default constants, applied by Config.Normalize) are one fact
// written in two languages: the generated CRD must say what the constants
// say, so a run gets the same default from the API server as from
// `agentrun local`.
func TestCRDDefaults_areTheEnginesDefaults(t *testing.T) {
	raw, err := os.ReadFile("../../config/crd/bases/agents.agentrun.dev_agentruns.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	spec := dig(t, crd, "spec", "versions", 0, "schema", "openAPIV3Schema", "properties", "spec")
	dur := func(d time.Duration) string { return d.String() }
	want := map[string]string{
		"budget.defaultToolLimit":      fmt.Sprint(loop.DefaultToolLimit),
		"loopDetection.threshold":      fmt.Sprint(loop.DefaultLoopThreshold),
		"loopDetection.maxPeriod":      fmt.Sprint(loop.DefaultLoopMaxPeriod),
		"model.maxOutputTokens":        fmt.Sprint(loop.DefaultMaxOutputTokens),
		"model.timeout":                dur(loop.DefaultModelTimeout),
		"model.retry.maxAttempts":      fmt.Sprint(loop.DefaultModelRetry.MaxAttempts),
		"model.retry.initialBackoff":   dur(loop.DefaultModelRetry.InitialBackoff),
		"model.retry.maxBackoff":       dur(loop.DefaultModelRetry.MaxBackoff),
		"tools[].maxResultBytes":       fmt.Sprint(loop.DefaultMaxResultBytes),
		"tools[].retry.maxAttempts":    fmt.Sprint(loop.DefaultToolRetry.MaxAttempts),
		"tools[].retry.initialBackoff": dur(loop.DefaultToolRetry.InitialBackoff),
		"tools[].retry.maxBackoff":     dur(loop.DefaultToolRetry.MaxBackoff),
		"verify.maxTrials":             fmt.Sprint(loop.DefaultMaxTrials),
		"verify.memory":                fmt.Sprint(loop.DefaultMemory),
		"verify.stallTrials":           fmt.Sprint(loop.DefaultStallTrials),
		"context.keepRecentTurns":      fmt.Sprint(loop.DefaultKeepRecentTurns),
		"context.strategy":             string(loop.ContextClear),
		"memory.maxEntries":            fmt.Sprint(memtool.DefaultMaxEntries),
		"memory.maxEntryBytes":         fmt.Sprint(memtool.DefaultMaxEntryBytes),
		"memory.ttl":                   dur(memtool.DefaultTTL),
	}
	field := func(path string) map[string]any {
		node := spec
		for _, name := range strings.Split(path, ".") {
			name, list := strings.CutSuffix(name, "[]")
			node = dig(t, node, "properties", name)
			if list {
				node = dig(t, node, "items")
			}
		}
		return node.(map[string]any)
	}
	// What an AgentRunPolicy's limits cap has no default in the CRD: the
	// API server would store it before the platform's admission policy
	// runs, and a run that left it unset would be refused for a value
	// nobody wrote instead of getting the platform's maximum. The engine
	// (or the platform policy) fills it.
	capped := map[string]string{"maxTurns": "budget.maxTurns", "maxTokens": "budget.maxTokens", "maxCostUSD": "budget.maxCostUSD",
		"maxToolCalls": "budget.maxToolCalls", "maxWallClock": "budget.maxWallClock", "maxApprovalTimeout": "approvalTimeout",
		"maxToolTimeout": "tools[].timeout"}
	limits := reflect.TypeFor[v1alpha1.PlatformLimits]()
	for i := range limits.NumField() {
		name, _, _ := strings.Cut(limits.Field(i).Tag.Get("json"), ",")
		path, ok := capped[name]
		if !ok {
			t.Errorf("AgentRunPolicy limits.%s caps a field this test does not know: add it to capped", name)
			continue
		}
		if def, ok := field(path)["default"]; ok {
			t.Errorf("spec.%s has the CRD default %v, but AgentRunPolicy limits.%s caps it: leave the default to the engine", path, def, name)
		}
	}
	for path, w := range want {
		def, ok := field(path)["default"]
		if !ok {
			t.Errorf("spec.%s has no default in the CRD; the engine's is %s", path, w)
			continue
		}
		got := fmt.Sprint(def)
		if d, err := time.ParseDuration(got); err == nil && strings.HasSuffix(w, "s") {
			got = dur(d) // "30s" and "1m0s" are the same default
		}
		if got != w {
			t.Errorf("spec.%s: the CRD's default is %s, the engine's %s", path, got, w)
		}
	}
}

// dig follows keys (strings) and indexes (ints) through decoded YAML.
func dig(t *testing.T, node any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := node.(map[string]any)
			if !ok || m[k] == nil {
				t.Fatalf("the CRD has no %q here", k)
			}
			node = m[k]
		case int:
			l, ok := node.([]any)
			if !ok || len(l) <= k {
				t.Fatalf("the CRD has no item %d here", k)
			}
			node = l[k]
		}
	}
	return node
}
