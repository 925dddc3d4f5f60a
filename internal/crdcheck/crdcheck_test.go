package crdcheck_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/config/crd"
	"github.com/agentrun/agentrun/internal/crdcheck"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

func object(t *testing.T, manifest string) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(j, &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

const run = `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: r}
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
`

func validator(t *testing.T) *crdcheck.Validator {
	t.Helper()
	v, err := crdcheck.New(crd.AgentRuns, "v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestCreate_appliesTheSchemaDefaults(t *testing.T) {
	obj := object(t, run)
	if errs := validator(t).Create(context.Background(), obj); len(errs) > 0 {
		t.Fatalf("a valid run is refused: %v", errs)
	}
	spec := obj["spec"].(map[string]any)
	budget := spec["budget"].(map[string]any)
	model := spec["model"].(map[string]any)
	if budget["defaultToolLimit"] != int64(10) || model["timeout"] != "1m0s" {
		t.Errorf("defaults not applied: budget = %v, model = %v", budget, model)
	}
	// A ceiling an AgentRunPolicy caps has no schema default: the
	// engine fills it, so a platform limit below it refuses no one.
	if _, ok := budget["maxTokens"]; ok {
		t.Errorf("budget.maxTokens was defaulted by the schema: %v", budget)
	}
}

func TestCreate_refusesWithTheSchemaAndTheCELRules(t *testing.T) {
	for _, tc := range []struct{ from, to, want string }{
		{"maxTurns: 3", "maxTurns: -1", "spec.budget.maxTurns"},                                // the schema
		{"Say hello.", `" "`, "goal must not be empty"},                                        // a CEL rule
		{"kind: AgentRun", "kind: AgentRuns", "must be agents.agentrun.dev/v1alpha1 AgentRun"}, // the kind
	} {
		errs := validator(t).Create(context.Background(), object(t, strings.Replace(run, tc.from, tc.to, 1)))
		if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
			t.Errorf("%s -> %s: errors %v, want %q", tc.from, tc.to, errs, tc.want)
		}
	}
}

func TestNew_refusesAVersionTheCRDDoesNotServe(t *testing.T) {
	if _, err := crdcheck.New(crd.AgentRuns, "v2"); err == nil || !strings.Contains(err.Error(), `no version "v2"`) {
		t.Errorf("err = %v", err)
	}
}
