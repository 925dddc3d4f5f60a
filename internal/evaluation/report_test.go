package evaluation

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// running is an evaluation of two cases, two repeats each, of which case
// a has one run passed and one failed and case b none scored.
func running() *v1alpha1.AgentEvaluation {
	e := &v1alpha1.AgentEvaluation{ObjectMeta: metav1.ObjectMeta{Name: "ev"}, Spec: v1alpha1.AgentEvaluationSpec{Repeats: 2,
		Cases: []v1alpha1.EvaluationCase{{Name: "a"}, {Name: "b"}}}}
	Record(CaseStatus(&e.Status, "a"), v1alpha1.EvaluationRunResult{Repeat: 2, Run: "ev-a-2", CostUSD: "0.5", RepeatedIntentDepth: 3},
		"outcome: expected Completed,\nthe run ended Escalated")
	Record(CaseStatus(&e.Status, "a"), v1alpha1.EvaluationRunResult{Repeat: 1, Run: "ev-a-1", Passed: true, CostUSD: "0.25",
		TurnsToCompletion: ptr.To[int32](3), RepeatedIntentDepth: 1, Headroom: "0.40", JudgeScore: ptr.To[int32](4), JudgeRationale: "Names the refund."}, "")
	SetStatus(e, map[string]int32{"b": 1}, metav1.Now())
	return e
}

// A running evaluation's table says which runs are not scored yet, and
// a reason is folded onto its row.
func TestWriteTable_aRunningEvaluation(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, running()); err != nil {
		t.Fatal(err)
	}
	want := `CASE   RUNS  PASSED  FAILED  COST     TURNS         DEPTH  HEADROOM  JUDGE  REASON
a      2     1       1       $0.7500  3             3      0.40      4.00   outcome: expected Completed, the run ended Escalated
b      1     0       0       $0.0000  -             -      -         -
TOTAL  4     1       1       $0.7500  p50 3, p95 3  3      0.40      4.00

Running: 1 of 4 runs passed (pass rate 0.50), 2 not scored yet
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

// The JUnit report has a testcase for every case and repeat of spec: a
// failure with its reason, a pass, or skipped when not scored; its
// reason is the caller's when it has one, else status's for the case's
// first failed run.
func TestJUnit_aTestcaseForEveryCaseAndRepeat(t *testing.T) {
	e := running()
	var b bytes.Buffer
	if err := WriteJUnit(&b, e, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), `<?xml version="1.0" encoding="UTF-8"?>`) {
		t.Errorf("no XML declaration:\n%s", b.String())
	}
	var got JUnitSuites
	if err := xml.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	failure := &JUnitFailure{Message: "outcome: expected Completed,\nthe run ended Escalated", Type: "EvaluationFailed",
		Text: "run ev-a-2: outcome: expected Completed,\nthe run ended Escalated"}
	want := JUnitSuites{XMLName: xml.Name{Local: "testsuites"}, Name: "ev", Tests: 4, Failures: 1, Skipped: 2, Suites: []JUnitSuite{{
		Name: "ev", Tests: 4, Failures: 1, Skipped: 2, Properties: []JUnitProperty{
			{Name: "passRate", Value: "0.50"}, {Name: "costUSD", Value: "0.7500"}, {Name: "turnsToCompletionP50", Value: "3"},
			{Name: "turnsToCompletionP95", Value: "3"}, {Name: "repeatedIntentDepthMax", Value: "3"}, {Name: "headroomP50", Value: "0.40"},
			{Name: "judgeMeanScore", Value: "4.00"}},
		Cases: []JUnitCase{
			{Name: "a/1", ClassName: "ev", SystemOut: "run ev-a-1 spent $0.25; the judge scored it 4 of 5: Names the refund."},
			{Name: "a/2", ClassName: "ev", Failure: failure, SystemOut: "run ev-a-2 spent $0.5"},
			{Name: "b/1", ClassName: "ev", Skipped: &JUnitSkipped{Message: "not scored yet"}},
			{Name: "b/2", ClassName: "ev", Skipped: &JUnitSkipped{Message: "not scored yet"}},
		}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JUnit (-want +got):\n%s", diff)
	}

	mine := JUnit(e, Reasons{"ev-a-2": "scored here"})
	if msg := mine.Suites[0].Cases[1].Failure.Message; msg != "scored here" {
		t.Errorf("with the caller's reasons, the failure says %q; want the caller's", msg)
	}
}

// With spec.variants, each row and JUnit test case names its variant,
// each variant has a total row, and what regressed follows the table.
func TestReport_variantsAndRegressions(t *testing.T) {
	e := &v1alpha1.AgentEvaluation{ObjectMeta: metav1.ObjectMeta{Name: "ev"}, Spec: v1alpha1.AgentEvaluationSpec{
		Variants: []v1alpha1.EvaluationVariant{{Name: "terse"}, {Name: "formal"}}, Cases: []v1alpha1.EvaluationCase{{Name: "a"}}}}
	Record(VariantCaseStatus(&e.Status, "terse", "a"), v1alpha1.EvaluationRunResult{Repeat: 1, Run: "ev-terse-a-1", Passed: true, CostUSD: "0.25"}, "")
	Record(VariantCaseStatus(&e.Status, "formal", "a"), v1alpha1.EvaluationRunResult{Repeat: 1, Run: "ev-formal-a-1", CostUSD: "0.5"}, "outcome")
	SetStatus(e, nil, metav1.Now())
	e.Status.Regressions = []v1alpha1.EvaluationRegression{{Variant: "formal", Message: "formal: case a passed in the baseline and now fails"}}
	var b bytes.Buffer
	if err := WriteTable(&b, e); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nterse/a ", "\nterse total ", "\nformal/a ", "\nformal total ", "\nTOTAL ",
		"\nregressed: formal: case a passed in the baseline and now fails\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}
	var names []string
	for _, tc := range JUnit(e, nil).Suites[0].Cases {
		names = append(names, tc.Name)
	}
	if diff := cmp.Diff([]string{"terse/a/1", "formal/a/1"}, names); diff != "" {
		t.Errorf("JUnit test cases (-want +got):\n%s", diff)
	}
}
