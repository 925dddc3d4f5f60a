package evaluation

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/config/crd"
	"github.com/agentrun/agentrun/internal/crdcheck"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The cases of a ConfigMap are read strictly, checked with the inline
// ones as the API server checks spec.cases, and given the CRD's
// defaults; what is wrong is said in the API server's words.
func TestReadCases(t *testing.T) {
	v, err := crdcheck.New(crd.AgentEvaluations, v1alpha1.GroupVersion.Version)
	if err != nil {
		t.Fatal(err)
	}
	e := &v1alpha1.AgentEvaluation{ObjectMeta: metav1.ObjectMeta{Name: "refund-check", Namespace: "team-a"},
		Spec: v1alpha1.AgentEvaluationSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "refund-investigator"},
			Cases:     []v1alpha1.EvaluationCase{{Name: "double-charge"}},
			CasesFrom: &v1alpha1.EvaluationCasesSource{ConfigMapKeyRef: v1alpha1.ConfigMapKeySelector{Name: "cases", Key: "cases.yaml"}}}}
	got, err := ReadCases(v, e, `
- name: too-old
  parameters: [{name: ticket, value: T-7}]
  expect: {outcome: Escalated}
- name: formal
  expect: {answer: ['(?i)sorry']}
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.EvaluationCase{
		{Name: "too-old", Parameters: []v1alpha1.ParameterValue{{Name: "ticket", Value: "T-7"}}, Expect: v1alpha1.EvaluationExpectation{Outcome: v1alpha1.OutcomeEscalated}},
		{Name: "formal", Expect: v1alpha1.EvaluationExpectation{Outcome: v1alpha1.OutcomeCompleted, Answer: []v1alpha1.RE2Pattern{"(?i)sorry"}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cases (-want +got):\n%s", diff)
	}
	if all := Cases(&v1alpha1.AgentEvaluation{Spec: e.Spec, Status: v1alpha1.AgentEvaluationStatus{CasesFrom: got}}); len(all) != 3 || all[2].Name != "formal" {
		t.Errorf("Cases = %v, want the inline case then the two read", all)
	}

	for _, tt := range []struct{ data, want string }{
		{`name: one`, "it does not hold a list of cases"},
		{`[]`, "it holds no cases"},
		{`- {name: one, expected: {outcome: Completed}}`, `unknown field "expected"`},
		{`- {name: double-charge}`, `spec.cases[1]: Duplicate value: {"name":"double-charge"}`},
		{`- {name: Too_Old}`, `spec.cases[1].name: Invalid value: "Too_Old": spec.cases[1].name in body should match`},
		{`- {name: one, expect: {answer: ['(?<=x)']}}`, "must be a valid regular expression (RE2 syntax)"},
		{`- {name: one, expect: {calls: [{tool: t, when: 'args.amount >'}]}}`, `case one: expect.calls[0].when "args.amount >" does not compile`},
	} {
		_, err := ReadCases(v, e, tt.data)
		if !errors.Is(err, ErrCasesInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ReadCases(%q) = %v; want an invalid-cases error holding %q", tt.data, err, tt.want)
		}
	}
}
