package agentevaluation

import (
	"context"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fromConfigMap has the evaluation read more cases from key cases.yaml
// of ConfigMap name.
func (b *evalBuilder) fromConfigMap(name string) *evalBuilder {
	b.e.Spec.CasesFrom = &v1alpha1.EvaluationCasesSource{ConfigMapKeyRef: v1alpha1.ConfigMapKeySelector{Name: name, Key: "cases.yaml"}}
	return b
}

func makeConfigMap(t *testing.T, ns, name, cases string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"cases.yaml": cases}}
	if err := cluster.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

// The cases of spec.casesFrom's ConfigMap follow the inline ones: their
// runs are made and scored as the inline cases' are, and the cases read
// are kept in status, so that a later edit of the ConfigMap changes
// nothing.
func TestEvaluation_casesFromAConfigMapFollowTheInlineOnes(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	cm := makeConfigMap(t, ns, "more-cases", `
- name: too-old
  parameters: [{name: ticket, value: T-7}]
  expect: {answer: ['too old']}
`)
	e := makeEval(ns, "from-cm").concurrency(2).answering("double-charge", "82").fromConfigMap(cm.Name).create(t)
	r := directReconciler()
	reconcileOnce(t, r, e)
	cm.Data["cases.yaml"] = "- {name: other}"
	if err := cluster.Client.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	for _, run := range runsOf(t, e) {
		finish(t, &run, "Refunded 82.40.")
	}
	reconcileOnce(t, r, e)

	st := get(t, e).Status
	var got []string
	for _, cs := range st.Cases {
		got = append(got, cs.Name+" "+cs.FailureReason)
	}
	want := []string{"double-charge ", `too-old answer[0]: expected a match for "too old", the answer was "Refunded 82.40."`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cases and reasons (-want +got):\n%s", diff)
	}
	c := findCondition(st.Conditions, v1alpha1.EvaluationConditionCasesRead)
	if len(st.CasesFrom) != 1 || st.CasesFrom[0].Name != "too-old" || c == nil || c.Status != metav1.ConditionTrue || st.Phase != v1alpha1.EvaluationFailed {
		t.Errorf("status.casesFrom %v, CasesRead %+v, phase %s; want too-old, True, Failed", st.CasesFrom, c, st.Phase)
	}
}

// A ConfigMap that is missing, lacks the key or does not hold valid
// cases is a CasesRead condition that says what is wrong, and no run is
// made.
func TestEvaluation_aMalformedConfigMapIsACondition(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	makeConfigMap(t, ns, "not-a-list", "name: one\n")
	makeConfigMap(t, ns, "bad-name", "- {name: Bad_Name}\n")
	tests := []struct{ eval, configMap, reason, message string }{
		{"missing", "nowhere", v1alpha1.ReasonCasesNotFound, "ConfigMap nowhere does not exist in namespace " + ns},
		{"not-a-list", "not-a-list", v1alpha1.ReasonCasesInvalid, "ConfigMap not-a-list key cases.yaml: invalid cases: it does not hold a list of cases"},
		{"bad-name", "bad-name", v1alpha1.ReasonCasesInvalid, `spec.cases[1].name: Invalid value: "Bad_Name"`},
	}
	for _, tt := range tests {
		e := makeEval(ns, tt.eval).answering("one", "ok").fromConfigMap(tt.configMap).create(t)
		reconcileOnce(t, directReconciler(), e)
		c := findCondition(get(t, e).Status.Conditions, v1alpha1.EvaluationConditionCasesRead)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tt.reason || !strings.Contains(c.Message, tt.message) {
			t.Errorf("%s: CasesRead %+v; want False, %s, a message holding %q", tt.eval, c, tt.reason, tt.message)
		}
		if runs := runsOf(t, e); len(runs) != 0 {
			t.Errorf("%s: %d runs made; want none", tt.eval, len(runs))
		}
	}
}

// An evaluation needs cases, inline or from a ConfigMap: the API server
// says so, and takes one with casesFrom alone.
func TestEvaluation_needsCasesInlineOrFromAConfigMap(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	none := makeEval(ns, "no-cases").e
	err := cluster.Client.Create(context.Background(), none)
	if want := "an evaluation needs cases: set spec.cases, spec.casesFrom or both"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("create with no cases: %v; want an error holding %q", err, want)
	}
	if err := cluster.Client.Create(context.Background(), makeEval(ns, "only-from").fromConfigMap("cases").e); err != nil {
		t.Errorf("create with casesFrom alone: %v", err)
	}
}
