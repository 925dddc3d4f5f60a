package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
)

// The sample evaluation and the template it names (sample 12).
var (
	sampleEvaluation = filepath.Join("..", "..", "config", "samples", "15-evaluation.yaml")
	sampleTemplate   = filepath.Join("..", "..", "config", "samples", "12-template.yaml")
)

func eval(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = execute(append([]string{"eval"}, args...), strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// junitReport is a JUnit XML report as the common parsers read it
// (Jenkins' JUnit plugin, GitLab, dorny/test-reporter): written here
// from the format, not from the types that write it.
type junitReport struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Suites   []struct {
		Name     string `xml:"name,attr"`
		Tests    int    `xml:"tests,attr"`
		Failures int    `xml:"failures,attr"`
		Cases    []struct {
			Name      string `xml:"name,attr"`
			ClassName string `xml:"classname,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
			} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func readJUnit(t *testing.T, path string) junitReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r junitReport
	if err := xml.Unmarshal(b, &r); err != nil {
		t.Fatalf("the JUnit file does not parse: %v\n%s", err, b)
	}
	return r
}

// junitSummary is what a CI system shows of a report: the counts, and
// each testcase with its failure message ("" for a pass).
func junitSummary(r junitReport) []string {
	out := []string{}
	for _, s := range r.Suites {
		out = append(out, "suite "+s.Name+" tests="+itoa(s.Tests)+" failures="+itoa(s.Failures))
		for _, c := range s.Cases {
			msg := ""
			if c.Failure != nil {
				msg = c.Failure.Message
			}
			out = append(out, c.ClassName+"."+c.Name+": "+msg)
		}
	}
	return append(out, "total tests="+itoa(r.Tests)+" failures="+itoa(r.Failures))
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// Issue 48: agentrun eval runs the sample evaluation with no cluster,
// prints a table of its cases and exits 0 when every run passed.
func TestEval_sampleEvaluationPassesAndExitsZero(t *testing.T) {
	junit := filepath.Join(t.TempDir(), "report.xml")
	code, stdout, stderr := eval(t, "-f", sampleEvaluation, "-t", sampleTemplate, "--junit", junit)
	if code != 0 {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	want := `CASE           RUNS  PASSED  FAILED  COST     TURNS         DEPTH  HEADROOM  JUDGE  REASON
double-charge  1     1       0       $0.0036  1             -      0.67      -
formal-reply   1     1       0       $0.0036  1             -      0.67      -
TOTAL          2     2       0       $0.0072  p50 1, p95 1  -      0.67      -

Passed: 2 of 2 runs passed (pass rate 1.00)
`
	if diff := cmp.Diff(want, stdout); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	if !strings.Contains(stderr, "refund-check-double-charge-1 (case double-charge, repeat 1): Completed, passed") {
		t.Errorf("stderr does not report the run's end:\n%s", stderr)
	}
	wantJUnit := []string{"suite refund-check tests=2 failures=0",
		"refund-check.double-charge/1: ", "refund-check.formal-reply/1: ", "total tests=2 failures=0"}
	if diff := cmp.Diff(wantJUnit, junitSummary(readJUnit(t, junit))); diff != "" {
		t.Errorf("JUnit report (-want +got):\n%s", diff)
	}
}

// Issue 48: a case whose answer expectation the run misses fails the
// evaluation: exit 1, the reason in the table and in the JUnit file,
// which a common parser reads.
func TestEval_aMissedExpectationFailsWithItsReason(t *testing.T) {
	manifest := strings.Replace(readManifest(t, sampleEvaluation), `'(?i)we are sorry'`, `'(?i)we apologi[sz]e'`, 1)
	manifest = strings.Replace(manifest, "repeats: 1", "repeats: 2", 1)
	path := filepath.Join(t.TempDir(), "evaluation.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	junit := filepath.Join(t.TempDir(), "report.xml")
	code, stdout, stderr := eval(t, "-f", path, "-t", sampleTemplate, "--junit", junit)
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	reason := `answer[0]: expected a match for "(?i)we apologi[sz]e", the answer was "The customer was charged twice for the August subscription; ` +
		`the second charge of 82.40 is due back. Draft reply: we are sorry for the double charge and have refunded 82.40 to your card."`
	want := `CASE           RUNS  PASSED  FAILED  COST     TURNS         DEPTH  HEADROOM  JUDGE  REASON
double-charge  2     2       0       $0.0072  1,1           -      0.67      -
formal-reply   2     0       2       $0.0072  1,1           -      0.67      -      ` + reason + `
TOTAL          4     2       2       $0.0144  p50 1, p95 1  -      0.67      -

Failed: 2 of 4 runs passed (pass rate 0.50)
`
	if diff := cmp.Diff(want, stdout); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	wantJUnit := []string{"suite refund-check tests=4 failures=2",
		"refund-check.double-charge/1: ", "refund-check.double-charge/2: ",
		"refund-check.formal-reply/1: " + reason, "refund-check.formal-reply/2: " + reason,
		"total tests=4 failures=2"}
	if diff := cmp.Diff(wantJUnit, junitSummary(readJUnit(t, junit))); diff != "" {
		t.Errorf("JUnit report (-want +got):\n%s", diff)
	}
}

// Issue 48's sample: the refund investigator against a terser variant
// on three cases, with a scripted judge. The terse variant misses one
// case's answer and the judge scores another below minScore: exit 1, the
// judge's means by variant in the JSON status, its scores in the JUnit
// report, which a common parser reads.
func TestEval_judgedSampleComparesTwoVariants(t *testing.T) {
	sample := filepath.Join("..", "..", "config", "samples", "16-evaluation-judged.yaml")
	junit := filepath.Join(t.TempDir(), "report.xml")
	code, stdout, stderr := eval(t, "-f", sample, "-t", sampleTemplate, "-o", "json", "--junit", junit)
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var st v1alpha1.AgentEvaluationStatus
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("-o json is not a status: %v\n%s", err, stdout)
	}
	got := []any{st.Phase, st.Variants[0].Totals.Passed, st.Variants[0].Totals.JudgeMeanScore, st.Variants[1].Totals.Passed,
		st.Variants[1].Totals.JudgeMeanScore, st.Variants[1].Cases[2].FailureReason, st.Totals.Judged, st.Totals.JudgeCostUSD}
	want := []any{v1alpha1.EvaluationFailed, int32(3), "5.00", int32(1), "3.00",
		"judge: scored 2 of 5, below minScore 4: Does not say why the refund is due.", int32(5), v1alpha1.USD("0.0028")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(phase, current passed and mean, terse passed, mean and reason, judged, judge cost) (-want +got):\n%s", diff)
	}
	report := readJUnit(t, junit)
	if report.Tests != 6 || report.Failures != 2 {
		t.Errorf("JUnit: %d tests, %d failures; want 6 and 2", report.Tests, report.Failures)
	}
}

// -o json prints the AgentEvaluation's status, as the operator writes it.
func TestEval_jsonIsTheEvaluationStatus(t *testing.T) {
	code, stdout, stderr := eval(t, "-f", sampleEvaluation, "-t", sampleTemplate, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	var st v1alpha1.AgentEvaluationStatus
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("-o json is not a status: %v\n%s", err, stdout)
	}
	got := []any{st.Phase, st.Totals.Passed, st.Totals.PassRate, st.Totals.CostUSD, len(st.Cases), st.Cases[0].Results[0].Run}
	want := []any{v1alpha1.EvaluationPassed, int32(2), "1.00", v1alpha1.USD("0.0072"), 2, "refund-check-double-charge-1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(phase, passed, passRate, cost, cases, first run) (-want +got):\n%s", diff)
	}
}

// A usage error, or a manifest that cannot make its runs, exits 2 with
// nothing run: a CI job tells a broken gate from a failed one.
func TestEval_usageAndManifestErrorsExitTwo(t *testing.T) {
	badParam := strings.Replace(readManifest(t, sampleEvaluation), "{name: ticket, value: T-1043}", "{name: ticket, value: ticket-1043}", 1)
	noTemplate := manifestFile(t, readManifest(t, sampleEvaluation))
	withTemplate := readManifest(t, sampleTemplate)
	withTemplate = withTemplate[:strings.Index(withTemplate, "---")]
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no file", nil, "-f FILE is required"},
		{"unknown flag", []string{"--nope"}, "unknown flag: --nope"},
		{"two formats", []string{"-f", sampleEvaluation, "-o", "yaml"}, `-o "yaml": the only output format is json`},
		{"not an evaluation", []string{"-f", sampleTemplate}, "an evaluation file holds no AgentRun"},
		{"the template missing", []string{"-f", noTemplate}, `case double-charge: AgentRun "refund-check-double-charge-1": spec.templateRef names the AgentRunTemplate "refund-investigator", which is not in the file`},
		{"a parameter the template refuses", []string{"-f", manifestFile(t, withTemplate+"---\n"+badParam)},
			`case formal-reply: AgentRun "refund-check-formal-reply-1": parameter "ticket" must match the pattern ^T-[0-9]+$, and "ticket-1043" does not`},
		{"a template whose runs need the archive", []string{"-f", manifestFile(t, strings.Replace(withTemplate, "    budget:\n", "    memory: {name: notes}\n    budget:\n", 1)+
			"---\n"+readManifest(t, sampleEvaluation))}, `case double-charge: AgentRun "refund-check-double-charge-1" sets spec.memory`},
		{"an evaluation the CRD refuses", []string{"-f", manifestFile(t, strings.Replace(readManifest(t, sampleEvaluation), "repeats: 1", "repeats: 11", 1))},
			"spec.repeats: Invalid value: 11: spec.repeats in body should be less than or equal to 10"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := eval(t, tc.args...)
			if code != 2 || stdout != "" || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d (want 2), stdout %q, stderr does not say %q:\n%s", code, stdout, tc.want, stderr)
			}
		})
	}
}

// An evaluation of two variants (both the sample's template here) runs
// each case once per variant and names them in the table.
func TestEval_variantsAreRunAndReportedApart(t *testing.T) {
	manifest := strings.Replace(readManifest(t, sampleEvaluation), "  templateRef: {name: refund-investigator}",
		"  variants:\n  - {name: a, templateRef: {name: refund-investigator}}\n  - {name: b, templateRef: {name: refund-investigator}}", 1)
	path := filepath.Join(t.TempDir(), "evaluation.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := eval(t, "-f", path, "-t", sampleTemplate)
	if code != 0 {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"\na/double-charge ", "\nb/formal-reply ", "\na total ", "\nb total "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "4 runs (2 cases, repeats 1)") || !strings.Contains(stderr, "variant b (AgentRunTemplate refund-investigator)") {
		t.Errorf("the progress does not say what runs:\n%s", stderr)
	}
}
