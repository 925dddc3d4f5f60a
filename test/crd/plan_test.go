package crd_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
)

// plannedRun is a run with a strategy block; %s is its name and %s the
// lines under spec (strategy, plan).
const plannedRun = namedRun + `  goal: Explain the two August charges.
  model:
    provider: scripted
    script: [{content: Two charges.}]
  budget: {maxTurns: 6}
  tools:
  - name: find_invoices
    http: {url: "http://billing.default.svc/invoices", method: POST}
%s`

func TestCreate_strategyAndPlan(t *testing.T) {
	cases := []specCase{
		{name: "react by default", spec: ""},
		{name: "react named", spec: "  strategy: react\n"},
		{name: "planExecute with the plan's defaults", spec: "  strategy: planExecute\n"},
		{name: "planExecute with every field", spec: "  strategy: planExecute\n  plan: {maxSteps: 32, maxReplans: 0}\n"},
		{name: "an unknown strategy", spec: "  strategy: treeOfThought\n",
			wantErr: []string{"spec.strategy", `supported values: "react", "planExecute"`}},
		{name: "a plan without planExecute", spec: "  plan: {maxSteps: 4}\n",
			wantErr: []string{"spec.plan", "spec.plan applies only to strategy planExecute"}},
		{name: "a plan with react", spec: "  strategy: react\n  plan: {maxSteps: 4}\n",
			wantErr: []string{"spec.plan", "spec.plan applies only to strategy planExecute"}},
		{name: "too many steps", spec: "  strategy: planExecute\n  plan: {maxSteps: 33}\n",
			wantErr: []string{"spec.plan.maxSteps", "should be less than or equal to 32"}},
		{name: "no steps", spec: "  strategy: planExecute\n  plan: {maxSteps: 0}\n",
			wantErr: []string{"spec.plan.maxSteps", "should be greater than or equal to 1"}},
		{name: "too many replans", spec: "  strategy: planExecute\n  plan: {maxReplans: 6}\n",
			wantErr: []string{"spec.plan.maxReplans", "should be less than or equal to 5"}},
	}
	expectCreates(t, plannedRun, "plan", cases)
}

func TestCreate_planDefaults(t *testing.T) {
	got := created(testContext(t), t, fmt.Sprintf(plannedRun, "plan-defaults", "  strategy: planExecute\n  plan: {}\n"), &agentsv1alpha1.AgentRun{})
	want := &agentsv1alpha1.PlanSpec{MaxSteps: ptr.To[int32](8), MaxReplans: ptr.To[int32](1)}
	if diff := cmp.Diff(want, got.Spec.Plan); diff != "" {
		t.Errorf("The defaulted plan differs (-want +got):\n%s", diff)
	}
}

func TestUpdate_strategyAndPlanCannotChange(t *testing.T) {
	expectEditsRefused(t, plannedRun, "plan", "  strategy: planExecute\n  plan: {maxSteps: 4}\n",
		`{"spec": {"strategy": "react"}}`,
		`{"spec": {"plan": {"maxSteps": 3}}}`,
		`{"spec": {"plan": null}}`)
}
