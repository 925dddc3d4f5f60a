package crd_test

import (
	"slices"
	"strings"
	"testing"

	agentsv1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// evaluation is an AgentEvaluation manifest named name whose spec is spec
// (YAML indented two spaces).
func evaluation(name, spec string) string { return manifest("AgentEvaluation", name, spec) }

func TestAgentEvaluation_acceptsValidManifests(t *testing.T) {
	cases := []struct{ name, manifest string }{
		{"every expectation", evaluation("crd-every", `
  templateRef: {name: refund-investigator}
  repeats: 3
  concurrency: 4
  cases:
  - name: double-charge
    parameters: [{name: ticket, value: T-1}]
    expect:
      outcome: Completed
      answer: ['(?i)refund', '\b82\.40\b']
      output:
        fields:
        - {path: refund.due, equals: true}
        - {path: refund.amount, equals: 82.4}
        - {path: customer, equals: {id: C-1, tier: gold}}
        schema: {type: object, required: [refund]}
      calls:
      - {tool: lookup_customer}
      - {tool: issue_refund, when: 'args.amount > 100', max: 0}
      - {tool: issue_refund, min: 1, max: 2}
      maxCostUSD: "0.10"
      maxTurns: 3
  - name: declined
    expect: {outcome: Escalated}
`)},
		{"a case that expects only completion", evaluation("crd-plain", `
  templateRef: {name: refund-investigator}
  cases: [{name: plain}]
`)},
		{"variants and a baseline", evaluation("crd-variants", `
  variants:
  - {name: current, templateRef: {name: refund-investigator}}
  - {name: terse, templateRef: {name: refund-investigator-terse}}
  baseline: {evaluation: refund-check-v1, maxPassRateDrop: "0.1", maxCostIncrease: "1.5", maxTurnsIncrease: 1}
  cases: [{name: plain}]
`)},
		{"names as long as runs' names allow", evaluation(strings.Repeat("e", 23), `
  variants:
  - {name: abcdefghijkl, templateRef: {name: a}}
  - {name: b, templateRef: {name: b}}
  cases: [{name: abcdefghijklmnopqrstuvw}]
`)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			expectCreate(testContext(t), t, tc.manifest, nil)
		})
	}
}

// repeats is 1, concurrency 2, and a case expects Completed unless it
// says otherwise.
func TestAgentEvaluation_defaults(t *testing.T) {
	e := created(testContext(t), t, evaluation("crd-defaulted", `
  templateRef: {name: refund-investigator}
  cases: [{name: plain}]
`), &agentsv1alpha1.AgentEvaluation{})
	got := []any{e.Spec.Repeats, e.Spec.Concurrency, e.Spec.Cases[0].Expect.Outcome}
	if diff := cmp.Diff([]any{int32(1), int32(2), agentsv1alpha1.OutcomeCompleted}, got); diff != "" {
		t.Errorf("defaults (repeats, concurrency, outcome) (-want +got):\n%s", diff)
	}
}

func TestAgentEvaluation_rejectsInvalidManifests(t *testing.T) {
	cases := []struct {
		name, manifest string
		wantErr        []string
	}{
		{"no cases", evaluation("crd-empty", `
  templateRef: {name: refund-investigator}
  cases: []
`), []string{"spec.cases", "should have at least 1 items"}},
		{"a bad regular expression", evaluation("crd-bad-re", `
  templateRef: {name: refund-investigator}
  cases:
  - name: broken
    expect: {answer: ['refund (of']}
`), []string{"spec.cases[0].expect.answer[0]", "must be a valid regular expression (RE2 syntax)"}},
		{"a Perl-only regular expression", evaluation("crd-lookahead", `
  templateRef: {name: refund-investigator}
  cases:
  - name: lookahead
    expect: {answer: ['refund(?=ed)']}
`), []string{"must be a valid regular expression (RE2 syntax)"}},
		{"an empty output check", evaluation("crd-empty-output", `
  templateRef: {name: refund-investigator}
  cases:
  - name: empty
    expect: {output: {}}
`), []string{"output needs fields, schema or both"}},
		{"a call count whose min is over its max", evaluation("crd-call-bounds", `
  templateRef: {name: refund-investigator}
  cases:
  - name: bounds
    expect: {calls: [{tool: issue_refund, min: 2, max: 1}]}
`), []string{"spec.cases[0].expect.calls[0]", "min must not be more than max"}},
		{"a call without a tool", evaluation("crd-call-tool", `
  templateRef: {name: refund-investigator}
  cases:
  - name: notool
    expect: {calls: [{when: 'args.amount > 1'}]}
`), []string{"spec.cases[0].expect.calls[0].tool", "Required value"}},
		{"a cost that is not a decimal", evaluation("crd-float", `
  templateRef: {name: refund-investigator}
  cases:
  - name: float
    expect: {maxCostUSD: "1e-2"}
`), []string{"must be an amount of US dollars written as a decimal string"}},
		{"an outcome that does not exist", evaluation("crd-outcome", `
  templateRef: {name: refund-investigator}
  cases:
  - name: odd
    expect: {outcome: Finished}
`), []string{"spec.cases[0].expect.outcome", "supported values"}},
		{"too many repeats", evaluation("crd-repeats", `
  templateRef: {name: refund-investigator}
  repeats: 11
  cases: [{name: plain}]
`), []string{"spec.repeats", "should be less than or equal to 10"}},
		{"a case name that cannot name a run", evaluation("crd-case-name", `
  templateRef: {name: refund-investigator}
  cases: [{name: Double_Charge}]
`), []string{"spec.cases[0].name"}},
		{"the same case twice", evaluation("crd-twice", `
  templateRef: {name: refund-investigator}
  cases: [{name: plain}, {name: plain}]
`), []string{"spec.cases[1]", "Duplicate value"}},
		{"both a template and variants", evaluation("crd-both", `
  templateRef: {name: refund-investigator}
  variants:
  - {name: a, templateRef: {name: a}}
  - {name: b, templateRef: {name: b}}
  cases: [{name: plain}]
`), []string{"set exactly one of spec.templateRef (one template) and spec.variants (two to five templates to compare)"}},
		{"neither a template nor variants", evaluation("crd-neither", `
  cases: [{name: plain}]
`), []string{"set exactly one of spec.templateRef (one template) and spec.variants (two to five templates to compare)"}},
		{"one variant", evaluation("crd-one-variant", `
  variants: [{name: a, templateRef: {name: a}}]
  cases: [{name: plain}]
`), []string{"spec.variants", "should have at least 2 items"}},
		{"six variants", evaluation("crd-six-variants", `
  variants: [{name: a, templateRef: {name: a}}, {name: b, templateRef: {name: a}}, {name: c, templateRef: {name: a}},
    {name: d, templateRef: {name: a}}, {name: e, templateRef: {name: a}}, {name: f, templateRef: {name: a}}]
  cases: [{name: plain}]
`), []string{"spec.variants", "must have at most 5 items"}},
		{"the same variant twice", evaluation("crd-variant-twice", `
  variants: [{name: a, templateRef: {name: a}}, {name: a, templateRef: {name: b}}]
  cases: [{name: plain}]
`), []string{"spec.variants[1]", "Duplicate value"}},
		{"a variant name too long", evaluation("crd-variant-long", `
  variants: [{name: abcdefghijklm, templateRef: {name: a}}, {name: b, templateRef: {name: b}}]
  cases: [{name: plain}]
`), []string{"spec.variants[0].name", "may not be more than 12"}},
		{"an evaluation and variant name too long for the runs' names", evaluation(strings.Repeat("e", 24), `
  variants: [{name: abcdefghijkl, templateRef: {name: a}}, {name: b, templateRef: {name: b}}]
  cases: [{name: plain}]
`), []string{"the name of an AgentEvaluation and the name of each of its variants are together at most 35 characters"}},
		{"its own baseline", evaluation("crd-self", `
  templateRef: {name: a}
  baseline: {evaluation: crd-self}
  cases: [{name: plain}]
`), []string{"an evaluation cannot be its own baseline"}},
		{"a margin that is not a decimal", evaluation("crd-margin", `
  templateRef: {name: a}
  baseline: {evaluation: before, maxCostIncrease: "20%"}
  cases: [{name: plain}]
`), []string{"spec.baseline.maxCostIncrease"}},
		{"a name too long for its runs' names", evaluation(strings.Repeat("a", 37), `
  templateRef: {name: refund-investigator}
  cases: [{name: plain}]
`), []string{"the name of an AgentEvaluation is at most 36 characters"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			expectCreate(testContext(t), t, tc.manifest, tc.wantErr)
		})
	}
}

// A baseline's margins default to a drop of 0.05 in the pass rate, 20%
// more cost and no more turns.
func TestAgentEvaluation_baselineDefaults(t *testing.T) {
	e := created(testContext(t), t, evaluation("crd-baseline-defaulted", `
  templateRef: {name: refund-investigator}
  baseline: {evaluation: before}
  cases: [{name: plain}]
`), &agentsv1alpha1.AgentEvaluation{})
	b := e.Spec.Baseline
	got := []any{b.MaxPassRateDrop, b.MaxCostIncrease, b.MaxTurnsIncrease}
	if diff := cmp.Diff([]any{agentsv1alpha1.Fraction("0.05"), agentsv1alpha1.Fraction("0.20"), int32(0)}, got); diff != "" {
		t.Errorf("defaults (maxPassRateDrop, maxCostIncrease, maxTurnsIncrease) (-want +got):\n%s", diff)
	}
}

// An evaluation's spec cannot change: its runs and scores belong to it.
func TestAgentEvaluation_specIsImmutable(t *testing.T) {
	expectPatchRefused(testContext(t), t, evaluation("crd-immutable", `
  templateRef: {name: refund-investigator}
  cases: [{name: plain}]
`), `{"spec":{"repeats":3}}`, "the spec of an AgentEvaluation cannot change once created")
}

// kubectl get aev shows the phase, the runs passed of the total, the pass
// rate, the cost and the age; -o wide adds the Complete message. The
// resource is namespaced, with short name aev, in category agents.
func TestAgentEvaluation_kubectlColumns(t *testing.T) {
	ctx := testContext(t)
	list := groupResources(t)
	i := slices.IndexFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "agentevaluations" })
	if i < 0 || !slices.Contains(list.APIResources[i].ShortNames, "aev") || !list.APIResources[i].Namespaced ||
		!slices.Contains(list.APIResources[i].Categories, "agents") {
		t.Fatalf("agentevaluations is not a namespaced resource with short name aev in category agents: %+v", list.APIResources)
	}

	e := created(ctx, t, evaluation("crd-columns", `
  templateRef: {name: refund-investigator}
  repeats: 2
  cases: [{name: one}, {name: two}]
`), &agentsv1alpha1.AgentEvaluation{})
	e.Status = agentsv1alpha1.AgentEvaluationStatus{Phase: agentsv1alpha1.EvaluationFailed,
		Totals: &agentsv1alpha1.EvaluationTotals{Runs: 4, Passed: 3, Failed: 1, PassRate: "0.75", CostUSD: "0.0144"},
		Conditions: []metav1.Condition{{Type: agentsv1alpha1.EvaluationConditionComplete, Status: metav1.ConditionTrue,
			Reason: agentsv1alpha1.ReasonEvaluationFailed, Message: "3 of 4 runs passed", LastTransitionTime: metav1.Now()}}}
	if err := k8sClient.Status().Update(ctx, e); err != nil {
		t.Fatal(err)
	}
	got := columns(ctx, t, "agentevaluations", "crd-columns", 0)
	delete(got, "Name")
	delete(got, "Age")
	want := map[string]any{"Phase": "Failed", "Passed": float64(3), "Total": float64(4), "Pass Rate": "0.75", "Cost": "0.0144"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("kubectl get aev columns (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]any{"Reason": "3 of 4 runs passed"}, columns(ctx, t, "agentevaluations", "crd-columns", 1)); d != "" {
		t.Errorf("kubectl get aev -o wide adds (-want +got):\n%s", d)
	}
}
