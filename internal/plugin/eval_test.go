package plugin

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/evaluation"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// scoredEvaluation creates the AgentEvaluation name with two cases of two
// repeats, and writes the status the operator writes once double-charge
// passed twice and formal-reply failed twice.
func scoredEvaluation(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	e := &v1alpha1.AgentEvaluation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.AgentEvaluationSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "refund-investigator"}, Repeats: 2,
			Cases: []v1alpha1.EvaluationCase{{Name: "double-charge"}, {Name: "formal-reply"}}},
	}
	if err := k8sClient.Create(ctx, e); err != nil {
		t.Fatal(err)
	}
	base := e.DeepCopy()
	for rep := int32(1); rep <= 2; rep++ {
		evaluation.Record(evaluation.CaseStatus(&e.Status, "double-charge"), v1alpha1.EvaluationRunResult{Repeat: rep,
			Run: evaluation.RunName(name, "", "double-charge", rep), Passed: true, CostUSD: "0.0036", TurnsToCompletion: ptr.To[int32](1)}, "")
		evaluation.Record(evaluation.CaseStatus(&e.Status, "formal-reply"), v1alpha1.EvaluationRunResult{Repeat: rep,
			Run: evaluation.RunName(name, "", "formal-reply", rep), CostUSD: "0.0036", TurnsToCompletion: ptr.To[int32](1)},
			fmt.Sprintf(`answer[0]: expected a match for "(?i)we apologise", repeat %d`, rep))
	}
	evaluation.SetStatus(e, nil, metav1.Now())
	if err := k8sClient.Status().Patch(ctx, e, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// Issue 48, item 5: kubectl agentrun eval prints a live evaluation's
// report from its status, the same table agentrun eval prints, writes its
// JUnit report, and exits 1 when the evaluation ended Failed.
func TestEval_printsTheReportOfALiveEvaluation(t *testing.T) {
	ns := newNamespace(t)
	scoredEvaluation(t, ns, "refund-check")
	junit := filepath.Join(t.TempDir(), "report.xml")
	var out, errOut bytes.Buffer
	code := Main([]string{"--kubeconfig", kubeconfig, "-n", ns, "eval", "refund-check", "--junit", junit}, &out, &errOut)
	if code != 1 || errOut.Len() > 0 {
		t.Errorf("eval of a failed evaluation = %d, stderr %q; want 1 and nothing on stderr", code, errOut.String())
	}
	want := `CASE           RUNS  PASSED  FAILED  COST     TURNS         DEPTH  HEADROOM  JUDGE  REASON
double-charge  2     2       0       $0.0072  1,1           -      -         -
formal-reply   2     0       2       $0.0072  1,1           -      -         -      answer[0]: expected a match for "(?i)we apologise", repeat 1
TOTAL          4     2       2       $0.0144  p50 1, p95 1  -      -         -

Failed: 2 of 4 runs passed (pass rate 0.50)
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("eval (-want +got):\n%s", diff)
	}

	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Suite    struct {
			Cases []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &report); err != nil {
		t.Fatalf("the JUnit file does not parse: %v\n%s", err, b)
	}
	got := []string{fmt.Sprintf("tests=%d failures=%d", report.Tests, report.Failures)}
	for _, c := range report.Suite.Cases {
		msg := ""
		if c.Failure != nil {
			msg = c.Failure.Message
		}
		got = append(got, c.Name+": "+msg)
	}
	wantJUnit := []string{"tests=4 failures=2", "double-charge/1: ", "double-charge/2: ",
		`formal-reply/1: answer[0]: expected a match for "(?i)we apologise", repeat 1`,
		"formal-reply/2: run refund-check-formal-reply-2 missed an expectation; the evaluation's status keeps the reason of the case's first failed run (refund-check-formal-reply-1) only"}
	if diff := cmp.Diff(wantJUnit, got); diff != "" {
		t.Errorf("JUnit report (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		args       []string
		code       int
		out, inErr string
	}{
		{[]string{"eval", "nope"}, 1, "", fmt.Sprintf("error: agentevaluation \"nope\" not found in namespace %q\n", ns)},
		{[]string{"eval", "refund-check", "-o", "yaml"}, 1, "", "error: unknown output format \"yaml\": use -o text or -o json\n"},
		{[]string{"eval"}, 1, "", "error: missing NAME: usage: kubectl agentrun eval NAME\n"},
	} {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--kubeconfig", kubeconfig, "-n", ns}, tc.args...), &out, &errOut)
		if code != tc.code || out.String() != tc.out || !strings.Contains(errOut.String(), tc.inErr) {
			t.Errorf("kubectl agentrun %s = %d, stdout %q, stderr %q; want %d, %q, stderr with %q",
				strings.Join(tc.args, " "), code, out.String(), errOut.String(), tc.code, tc.out, tc.inErr)
		}
	}
}

// -o json prints the evaluation's status.
func TestEval_jsonIsTheStatus(t *testing.T) {
	ns := newNamespace(t)
	scoredEvaluation(t, ns, "refund-check")
	var out bytes.Buffer
	err := Eval(context.Background(), k8sClient, Ref{Namespace: ns, Name: "refund-check"}, OutputJSON, &out, nil)
	if exit, ok := err.(*ExitError); !ok || exit.Code != 1 {
		t.Errorf("Eval of a failed evaluation = %v, want exit status 1", err)
	}
	for _, want := range []string{`"phase": "Failed"`, `"passRate": "0.50"`, `"failedRun": "refund-check-formal-reply-1"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-o json does not hold %s:\n%s", want, out.String())
		}
	}
}
