package crd_test

import (
	"fmt"
	"strings"
	"testing"

	agentsv1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
)

// A ceiling set to zero is kept as zero where zero is a limit, never
// replaced by a default: the operator reads zero and enforces zero.
func TestCreate_zeroCeilingsAreKeptAsZero(t *testing.T) {
	got := created(testContext(t), t, `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: zero-ceilings
spec:
  goal: Answer without tools or money.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget:
    maxTurns: 1
    maxCostUSD: "0"
    maxToolCalls: 0
    defaultToolLimit: 0
    perTool: {lookup: 0}
  tools:
  - name: lookup
    maxCostUSD: "0"
    http: {url: "http://lookup.default.svc/"}
`, &agentsv1alpha1.AgentRun{})
	b := got.Spec.Budget
	if b.MaxCostUSD != "0" || b.MaxToolCalls == nil || *b.MaxToolCalls != 0 || b.DefaultToolLimit == nil || *b.DefaultToolLimit != 0 || b.PerTool["lookup"] != 0 {
		t.Fatalf("stored budget = %+v, want every zero kept", b)
	}
}

// A zero that could only stop every run at once is refused with a message
// that says why.
func TestCreate_meaninglessZerosAreRefusedWithAMessage(t *testing.T) {
	cases := []struct {
		name, budget, model, tool string
		wantErr                   []string
	}{
		{name: "maxturns", budget: "maxTurns: 0", wantErr: []string{"spec.budget.maxTurns", "budget.maxTurns must be at least 1"}},
		{name: "maxtokens", budget: "maxTokens: 0", wantErr: []string{"spec.budget.maxTokens", "budget.maxTokens must be at least 1: a run with no tokens cannot call the model"}},
		{name: "maxwallclock", budget: "maxWallClock: 0s", wantErr: []string{"spec.budget.maxWallClock", "budget.maxWallClock must be a positive duration"}},
		{name: "maxoutputtokens", model: "maxOutputTokens: 0", wantErr: []string{"spec.model.maxOutputTokens", "model.maxOutputTokens must be at least 1: a model call cannot answer in no tokens"}},
		{name: "modeltimeout", model: "timeout: 0s", wantErr: []string{"model.timeout must be a positive duration"}},
		{name: "tooltimeout", tool: "timeout: 0s", wantErr: []string{"tool timeout must be a positive duration"}},
		{name: "maxresultbytes", tool: "maxResultBytes: 0", wantErr: []string{"spec.tools[0].maxResultBytes", "maxResultBytes must be at least 1"}},
		{name: "negative-tool-calls", budget: "maxToolCalls: -1", wantErr: []string{"spec.budget.maxToolCalls"}},
		{name: "negative-per-tool", budget: "perTool: {lookup: -1}", wantErr: []string{"budget.perTool limits cannot be negative"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			budget := "maxTurns: 1"
			if strings.HasPrefix(tc.budget, "maxTurns") {
				budget = tc.budget
			} else if tc.budget != "" {
				budget += ", " + tc.budget
			}
			model := "provider: scripted, script: [{content: Hi.}]"
			if tc.model != "" {
				model += ", " + tc.model
			}
			tool := `url: "http://lookup.default.svc/"`
			toolExtra := ""
			if tc.tool != "" {
				toolExtra = "\n    " + tc.tool
			}
			_, err := create(testContext(t), fmt.Sprintf(`
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: zero-%s
spec:
  goal: Say hello.
  model: {%s}
  budget: {%s}
  tools:
  - name: lookup%s
    http: {%s}
`, tc.name, model, budget, toolExtra, tool))
			if err == nil {
				t.Fatal("The API server accepted a meaningless zero")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("The error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}
