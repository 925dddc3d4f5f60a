package evaluation

import (
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// ended is a run that ended with outcome, answer, output (JSON, or ""
// for none), cost and turns.
func ended(outcome v1alpha1.Outcome, answer, output, cost string, turns int32) *v1alpha1.AgentRun {
	run := &v1alpha1.AgentRun{Status: v1alpha1.AgentRunStatus{Outcome: outcome, Reason: "ended " + string(outcome), Answer: answer,
		Usage: &v1alpha1.UsageStatus{CostUSD: cost, Turns: turns}}}
	if output != "" {
		run.Status.Output = &runtime.RawExtension{Raw: []byte(output)}
	}
	return run
}

func field(path, equals string) v1alpha1.OutputField {
	return v1alpha1.OutputField{Path: path, Equals: runtime.RawExtension{Raw: []byte(equals)}}
}

// A run passes when every expectation holds; otherwise its reason names
// the first expectation it missed, what was expected and what it saw.
func TestScore_namesTheFirstExpectationMissed(t *testing.T) {
	output := `{"refund":{"due":true,"amount":82.4},"tags":["a","b"]}`
	ok := ended(v1alpha1.OutcomeCompleted, "We refunded 82.40.", output, "0.0200", 2)
	cases := []struct {
		name   string
		expect v1alpha1.EvaluationExpectation
		run    *v1alpha1.AgentRun
		want   string
	}{
		{"nothing set expects Completed", v1alpha1.EvaluationExpectation{}, ok, ""},
		{"another outcome", v1alpha1.EvaluationExpectation{}, ended(v1alpha1.OutcomeBudgetExhausted, "", "", "0.5", 3),
			"outcome: expected Completed, the run ended BudgetExhausted (ended BudgetExhausted)"},
		{"an expected failure", v1alpha1.EvaluationExpectation{Outcome: v1alpha1.OutcomeEscalated}, ended(v1alpha1.OutcomeEscalated, "", "", "", 1), ""},
		{"every pattern matches", v1alpha1.EvaluationExpectation{Answer: []v1alpha1.RE2Pattern{`(?i)REFUNDED`, `82\.40`}}, ok, ""},
		{"the second pattern misses", v1alpha1.EvaluationExpectation{Answer: []v1alpha1.RE2Pattern{`refund`, `^Sorry`}}, ok,
			`answer[1]: expected a match for "^Sorry", the answer was "We refunded 82.40."`},
		{"fields equal as JSON", v1alpha1.EvaluationExpectation{Output: &v1alpha1.OutputExpectation{Fields: []v1alpha1.OutputField{
			field("refund.due", "true"), field("refund.amount", "82.40"), field("tags", `["a","b"]`)}}}, ok, ""},
		{"a field differs", v1alpha1.EvaluationExpectation{Output: &v1alpha1.OutputExpectation{Fields: []v1alpha1.OutputField{
			field("refund.amount", "80")}}}, ok, "output.fields[refund.amount]: expected 80, found 82.4"},
		{"a field is missing", v1alpha1.EvaluationExpectation{Output: &v1alpha1.OutputExpectation{Fields: []v1alpha1.OutputField{
			field("refund.currency", `"EUR"`)}}}, ok, `output.fields[refund.currency]: expected "EUR", the output has no such field`},
		{"no typed answer", v1alpha1.EvaluationExpectation{Output: &v1alpha1.OutputExpectation{Fields: []v1alpha1.OutputField{
			field("refund.due", "true")}}}, ended(v1alpha1.OutcomeCompleted, "yes", "", "0", 1),
			"output: expected a typed answer in status.output, the run has none (does the template set spec.output?)"},
		{"the schema holds", v1alpha1.EvaluationExpectation{Output: &v1alpha1.OutputExpectation{
			Schema: &runtime.RawExtension{Raw: []byte(`{"type":"object","required":["refund"]}`)}}}, ok, ""},
		{"the schema fails", v1alpha1.EvaluationExpectation{Output: &v1alpha1.OutputExpectation{
			Schema: &runtime.RawExtension{Raw: []byte(`{"type":"object","required":["reply"]}`)}}}, ok,
			"output.schema: the output does not validate: at /: missing property 'reply'"},
		{"a schema that loads a URL", v1alpha1.EvaluationExpectation{Output: &v1alpha1.OutputExpectation{
			Schema: &runtime.RawExtension{Raw: []byte(`{"$ref":"https://example.com/s.json"}`)}}}, ok,
			`output.schema is not a usable JSON Schema: failing loading "https://example.com/s.json": only references inside the same schema (such as "#/$defs/item") are allowed; files and URLs are never loaded`},
		{"within the cost", v1alpha1.EvaluationExpectation{MaxCostUSD: "0.02"}, ok, ""},
		{"over the cost", v1alpha1.EvaluationExpectation{MaxCostUSD: "0.01"}, ok, "maxCostUSD: expected at most 0.01, the run spent 0.0200"},
		{"over the turns", v1alpha1.EvaluationExpectation{MaxTurns: ptr.To[int32](1)}, ok, "maxTurns: expected at most 1, the run took 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Score(&tc.expect, tc.run)); diff != "" {
				t.Errorf("score (-want +got):\n%s", diff)
			}
		})
	}
}
