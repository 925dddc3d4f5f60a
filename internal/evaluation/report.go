package evaluation

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// Reasons are the failure reasons of an evaluation's failed runs, by run
// name, when the caller scored them itself (agentrun eval). Status keeps
// only each case's first failed run's reason (failureReason); a report
// made from status alone says so for the others.
type Reasons map[string]string

// reason is why the failed run res of case cs failed.
func (r Reasons) reason(cs *v1alpha1.EvaluationCaseStatus, res v1alpha1.EvaluationRunResult) string {
	if why, ok := r[res.Run]; ok {
		return why
	}
	if res.Run == cs.FailedRun && cs.FailureReason != "" {
		return cs.FailureReason
	}
	return fmt.Sprintf("run %s missed an expectation; the evaluation's status keeps the reason of the case's first failed run (%s) only",
		res.Run, cs.FailedRun)
}

// WriteTable prints e's results: one row a case (its runs, how many
// passed and failed, what they spent, the turns each Completed run took,
// the deepest repeated intent, the median headroom the Completed runs
// left, the judge's mean score, and why the first failed run failed),
// named VARIANT/CASE with spec.variants and followed by each variant's
// totals; the totals; a line that says how the evaluation ended; and what
// regressed against the baseline, one line each.
func WriteTable(w io.Writer, e *v1alpha1.AgentEvaluation) error {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tRUNS\tPASSED\tFAILED\tCOST\tTURNS\tDEPTH\tHEADROOM\tJUDGE\tREASON")
	for _, g := range Groups(&e.Status) {
		prefix := ""
		if g.Name != "" {
			prefix = g.Name + "/"
		}
		for i := range g.Cases {
			cs := &g.Cases[i]
			var ct tally
			var turns []string
			for _, r := range cs.Results {
				ct.add(r)
				if r.TurnsToCompletion != nil {
					turns = append(turns, strconv.Itoa(int(*r.TurnsToCompletion)))
				}
			}
			t := ct.totals()
			fmt.Fprintf(tw, "%s%s\t%d\t%d\t%d\t$%s\t%s\t%s\t%s\t%s\t%s\n", prefix, cs.Name, cs.Runs, cs.Passed, cs.Failed, ct.cost,
				orDash(strings.Join(turns, ",")), depth(t), orDash(t.HeadroomP50), orDash(t.JudgeMeanScore), oneLine(cs.FailureReason))
		}
		if g.Name != "" {
			totalRow(tw, g.Name+" total", g.Totals)
		}
	}
	totalRow(tw, "TOTAL", e.Status.Totals)
	_ = tw.Flush() // into a buffer
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if _, err := fmt.Fprintln(w, strings.TrimRight(line, " ")); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(w, "\n%s: %s\n", orDash(string(e.Status.Phase)), summary(e)); err != nil {
		return err
	}
	for _, r := range e.Status.Regressions {
		if _, err := fmt.Fprintf(w, "regressed: %s\n", oneLine(r.Message)); err != nil {
			return err
		}
	}
	return nil
}

// totalRow is the row of totals t, named name; none when t is nil.
func totalRow(tw io.Writer, name string, t *v1alpha1.EvaluationTotals) {
	if t == nil {
		return
	}
	turns := "-"
	if t.TurnsToCompletionP50 != nil && t.TurnsToCompletionP95 != nil {
		turns = fmt.Sprintf("p50 %d, p95 %d", *t.TurnsToCompletionP50, *t.TurnsToCompletionP95)
	}
	fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t$%s\t%s\t%s\t%s\t%s\t\n", name, t.Runs, t.Passed, t.Failed, orZero(string(t.CostUSD)), turns,
		depth(t), orDash(t.HeadroomP50), orDash(t.JudgeMeanScore))
}

// depth is the deepest repeated intent of t, "-" when no run recorded one.
func depth(t *v1alpha1.EvaluationTotals) string {
	if t.RepeatedIntentDepthMax == 0 {
		return "-"
	}
	return strconv.Itoa(int(t.RepeatedIntentDepthMax))
}

// summary is how many runs passed, and the pass rate once one is scored.
func summary(e *v1alpha1.AgentEvaluation) string {
	t := e.Status.Totals
	if t == nil {
		return "no run scored yet"
	}
	s := fmt.Sprintf("%d of %d runs passed", t.Passed, t.Runs)
	if t.PassRate != "" {
		s += " (pass rate " + t.PassRate + ")"
	}
	if n := t.Runs - t.Passed - t.Failed; n > 0 {
		s += fmt.Sprintf(", %d not scored yet", n)
	}
	return s
}

// JUnitSuites is the root of a JUnit XML report, in the shape the common
// parsers (Jenkins, GitLab, GitHub's test reporters) read: testsuites,
// one testsuite, one testcase a run.
type JUnitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Suites   []JUnitSuite `xml:"testsuite"`
}

// JUnitSuite is an evaluation's runs, and its measures as properties.
type JUnitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Properties []JUnitProperty `xml:"properties>property,omitempty"`
	Cases      []JUnitCase     `xml:"testcase"`
}

// JUnitProperty is one measure of the evaluation: a field of its totals
// (status.totals, or a variant's, named VARIANT/FIELD), as status
// writes it.
type JUnitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

// JUnitCase is one run of a case: named CASE/REPEAT, its class the
// evaluation's name.
type JUnitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Failure   *JUnitFailure `xml:"failure,omitempty"`
	Skipped   *JUnitSkipped `xml:"skipped,omitempty"`
	// SystemOut names the run and what it spent.
	SystemOut string `xml:"system-out,omitempty"`
}

// JUnitFailure is why a run failed: the message is the reason.
type JUnitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// JUnitSkipped is a run not scored yet.
type JUnitSkipped struct {
	Message string `xml:"message,attr"`
}

// JUnit is e's results as a JUnit report: one testcase for every case
// and repeat of spec, failed with the reason when the run missed an
// expectation, skipped when it is not scored yet.
func JUnit(e *v1alpha1.AgentEvaluation, reasons Reasons) JUnitSuites {
	suite := JUnitSuite{Name: e.Name}
	groups := Groups(&e.Status)
	for _, v := range Variants(e) {
		for _, c := range Cases(e) {
			name := c.Name
			if v.Name != "" {
				name = v.Name + "/" + c.Name
			}
			suite.add(e.Name, name, findCase(groups, v.Name, c.Name), max(e.Spec.Repeats, 1), reasons)
		}
	}
	for _, g := range groups {
		if g.Name != "" {
			suite.Properties = append(suite.Properties, properties(g.Name+"/", g.Totals)...)
		}
	}
	suite.Properties = append(suite.Properties, properties("", e.Status.Totals)...)
	return JUnitSuites{Name: e.Name, Tests: suite.Tests, Failures: suite.Failures, Skipped: suite.Skipped, Suites: []JUnitSuite{suite}}
}

// properties are the measures of t that are set, their names prefixed.
func properties(prefix string, t *v1alpha1.EvaluationTotals) []JUnitProperty {
	if t == nil {
		return nil
	}
	var out []JUnitProperty
	add := func(name, value string) {
		if value != "" {
			out = append(out, JUnitProperty{Name: prefix + name, Value: value})
		}
	}
	num := func(p *int32) string {
		if p == nil || *p == 0 {
			return ""
		}
		return strconv.Itoa(int(*p))
	}
	add("passRate", t.PassRate)
	add("costUSD", string(t.CostUSD))
	add("turnsToCompletionP50", num(t.TurnsToCompletionP50))
	add("turnsToCompletionP95", num(t.TurnsToCompletionP95))
	add("repeatedIntentDepthMax", num(&t.RepeatedIntentDepthMax))
	add("headroomP50", t.HeadroomP50)
	add("judgeMeanScore", t.JudgeMeanScore)
	add("judgeCostUSD", string(t.JudgeCostUSD))
	return out
}

// findCase is the status of case name of variant among groups; nil when
// none is recorded yet.
func findCase(groups []Group, variant, name string) *v1alpha1.EvaluationCaseStatus {
	for _, g := range groups {
		if g.Name != variant {
			continue
		}
		for i := range g.Cases {
			if g.Cases[i].Name == name {
				return &g.Cases[i]
			}
		}
	}
	return nil
}

// add adds a testcase for each repeat of the case named name (cs its
// status), of the evaluation named class.
func (suite *JUnitSuite) add(class, name string, cs *v1alpha1.EvaluationCaseStatus, repeats int32, reasons Reasons) {
	for rep := int32(1); rep <= repeats; rep++ {
		tc := JUnitCase{Name: fmt.Sprintf("%s/%d", name, rep), ClassName: class}
		res, ok := resultOf(cs, rep)
		switch {
		case !ok:
			tc.Skipped = &JUnitSkipped{Message: "not scored yet"}
			suite.Skipped++
		case !res.Passed:
			why := reasons.reason(cs, res)
			tc.Failure = &JUnitFailure{Message: why, Type: "EvaluationFailed", Text: fmt.Sprintf("run %s: %s", res.Run, why)}
			suite.Failures++
		}
		if ok {
			tc.SystemOut = fmt.Sprintf("run %s spent $%s", res.Run, orZero(string(res.CostUSD)))
			if res.JudgeScore != nil {
				tc.SystemOut += fmt.Sprintf("; the judge scored it %d of %d: %s", *res.JudgeScore, v1alpha1.JudgeMaxScale, res.JudgeRationale)
			}
		}
		suite.Cases = append(suite.Cases, tc)
		suite.Tests++
	}
}

// WriteJUnit writes JUnit(e, reasons) as an XML document.
func WriteJUnit(w io.Writer, e *v1alpha1.AgentEvaluation, reasons Reasons) error {
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(JUnit(e, reasons)); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// resultOf is the result of repeat among the case's, if scored.
func resultOf(cs *v1alpha1.EvaluationCaseStatus, repeat int32) (v1alpha1.EvaluationRunResult, bool) {
	if cs == nil {
		return v1alpha1.EvaluationRunResult{}, false
	}
	for _, r := range cs.Results {
		if r.Repeat == repeat {
			return r, true
		}
	}
	return v1alpha1.EvaluationRunResult{}, false
}

// oneLine folds s onto one line, for a table cell.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}
