package console

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/evaluation"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// scoredEvaluation creates the AgentEvaluation name of the cases
// double-charge and formal-reply, two repeats each, over the variants
// named (or spec.templateRef when none), and writes the status the
// operator writes once every double-charge run passed and every
// formal-reply run of the variants in failing ("" without variants)
// failed. Each run is named
// run(variant, case, repeat). With baseline, the evaluation is compared
// with an evaluation in which every run passed.
func scoredEvaluation(t *testing.T, ns, name string, variants, failing []string, baseline bool,
	run func(variant, caseName string, repeat int32) string) {
	t.Helper()
	e := &v1alpha1.AgentEvaluation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.AgentEvaluationSpec{Repeats: 2,
			Cases: []v1alpha1.EvaluationCase{{Name: "double-charge"}, {Name: "formal-reply"}}},
	}
	groups := variants
	if len(variants) == 0 {
		e.Spec.TemplateRef = &v1alpha1.TemplateRef{Name: "refund-investigator"}
		groups = []string{""}
	}
	for _, v := range variants {
		e.Spec.Variants = append(e.Spec.Variants, v1alpha1.EvaluationVariant{Name: v, TemplateRef: v1alpha1.TemplateRef{Name: "refund-" + v}})
	}
	if baseline {
		e.Spec.Baseline = &v1alpha1.EvaluationBaseline{Evaluation: name + "-baseline"}
	}
	create(t, e)
	base := e.DeepCopy()
	score := func(e *v1alpha1.AgentEvaluation, failing []string) {
		for _, v := range groups {
			for rep := int32(1); rep <= 2; rep++ {
				for _, c := range []string{"double-charge", "formal-reply"} {
					why := ""
					if c == "formal-reply" && slices.Contains(failing, v) {
						why = `answer[0]: expected a match for "(?i)we apologise", repeat ` + strconv.Itoa(int(rep))
					}
					evaluation.Record(evaluation.VariantCaseStatus(&e.Status, v, c), v1alpha1.EvaluationRunResult{Repeat: rep,
						Run: run(v, c, rep), Passed: why == "", CostUSD: "0.0036", TurnsToCompletion: ptr.To[int32](1)}, why)
				}
			}
		}
	}
	score(e, failing)
	if baseline {
		b := base.DeepCopy()
		b.Name, b.Spec.Baseline = name+"-baseline", nil
		score(b, nil)
		evaluation.SetStatus(b, nil, metav1.Now())
		evaluation.SetStatusAgainst(e, b, nil, metav1.Now())
	} else {
		evaluation.SetStatus(e, nil, metav1.Now())
	}
	if err := admin.Status().Patch(context.Background(), e, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// runName names the runs of an evaluation in the tests apart from the
// names the operator gives its own (evaluation.RunName), so that a run
// the test makes is not one the operator makes too.
func runName(variant, caseName string, repeat int32) string {
	if variant != "" {
		variant += "-"
	}
	return "r-" + variant + caseName + "-" + strconv.Itoa(int(repeat))
}

// Issue 48, item 5 and issue 49, item 1: the evaluations page lists an
// evaluation with its pass rate; its page shows each case with the reason
// of its first failure, and each run links to that run's page.
func TestConsole_evaluationPageShowsEachCaseAndLinksToItsRuns(t *testing.T) {
	ns := namespace(t, "console-evaluations")
	bind(t, "val", "agentrun-viewer", ns)
	scoredEvaluation(t, ns, "refund-check", nil, []string{""}, false, runName)
	failed := refundRun(ns, runName("", "formal-reply", 1))
	failed.Spec.Model.Script = []v1alpha1.ScriptStep{{Content: "Refunded."}}
	failed.Spec.Tools, failed.Spec.Policy = nil, nil
	create(t, failed)

	ctx := tab(t)
	srv := consoleFor(t, "val", ns)
	row := `tr[data-evaluation="` + ns + `/refund-check"]`
	do(t, ctx, chromedp.Navigate(srv.URL+"/"), click(`nav a[href="/evaluations"]`), visible(row))
	got := eval[[]string](t, ctx, `[...document.querySelectorAll('`+row+` td')].slice(0, 5).map(td => td.textContent)`)
	if diff := cmp.Diff([]string{ns, "refund-check", "Failed", "2/4", "0.50"}, got); diff != "" {
		t.Errorf("the evaluations page's row (-want +got):\n%s", diff)
	}

	do(t, ctx, click(row+` a`), visible(`tr[data-case="formal-reply"]`))
	type caseRow struct{ Passed, Failed, Failure string }
	cases := eval[map[string]caseRow](t, ctx, `Object.fromEntries([...document.querySelectorAll("tr[data-case]")].map(r => [r.dataset.case,
		{Passed: r.querySelector("[data-passed]").textContent, Failed: r.querySelector("[data-failed]").textContent, Failure: r.querySelector("[data-failure]").textContent}]))`)
	want := map[string]caseRow{
		"double-charge": {Passed: "2", Failed: "0"},
		"formal-reply":  {Passed: "0", Failed: "2", Failure: runName("", "formal-reply", 1) + `: answer[0]: expected a match for "(?i)we apologise", repeat 1`},
	}
	if diff := cmp.Diff(want, cases); diff != "" {
		t.Errorf("the evaluation's cases (-want +got):\n%s", diff)
	}
	if phase := text(t, ctx, `[data-phase]`); phase != "Failed" {
		t.Errorf("the evaluation's phase is %q, want Failed", phase)
	}

	do(t, ctx, click(`tr[data-case="formal-reply"] a[data-result="1"]`), visible(`[data-goal]`))
	if path := eval[string](t, ctx, `location.pathname`); path != "/runs/"+ns+"/"+failed.Name {
		t.Errorf("the run's link opened %s, want the run's page", path)
	}
	NewWithT(t).Eventually(func() string { return text(t, ctx, `[data-goal]`) }, 30*time.Second, 100*time.Millisecond).
		Should(Equal(failed.Spec.Goal))
}

// Issue 48, item 5: an evaluation of two variants shows each variant's
// cases and totals; what regressed against the baseline is listed with
// the BaselineCompared condition.
func TestConsole_evaluationPageShowsVariantsAndRegressions(t *testing.T) {
	ns := namespace(t, "console-evaluations-variants")
	bind(t, "val", "agentrun-viewer", ns)
	scoredEvaluation(t, ns, "prompt-ab", []string{"terse", "formal"}, []string{"terse"}, true, runName)

	ctx := tab(t)
	srv := consoleFor(t, "val", ns)
	do(t, ctx, chromedp.Navigate(srv.URL+"/evaluations/"+ns+"/prompt-ab"), visible(`[data-regression]`))
	type variant struct {
		PassRate string
		Failed   map[string]string
	}
	got := eval[map[string]variant](t, ctx, `Object.fromEntries([...document.querySelectorAll("section.variant")].map(s => [s.dataset.variant,
		{PassRate: s.querySelector("[data-pass-rate]").textContent,
		 Failed: Object.fromEntries([...s.querySelectorAll("tr[data-case]")].map(r => [r.dataset.case, r.querySelector("[data-failed]").textContent]))}]))`)
	want := map[string]variant{
		"terse":  {PassRate: "0.50", Failed: map[string]string{"double-charge": "0", "formal-reply": "2"}},
		"formal": {PassRate: "1.00", Failed: map[string]string{"double-charge": "0", "formal-reply": "0"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the evaluation's variants (-want +got):\n%s", diff)
	}
	if phase := text(t, ctx, `[data-phase]`); phase != "Regressed" {
		t.Errorf("the evaluation's phase is %q, want Regressed", phase)
	}
	regressions := eval[[]string](t, ctx, `[...document.querySelectorAll("[data-regression]")].map(r => r.dataset.regression + " " + (r.dataset.variant || "") + " " + (r.dataset.case || ""))`)
	if diff := cmp.Diff([]string{"PassRate terse ", "Case terse formal-reply"}, regressions); diff != "" {
		t.Errorf("the regressions shown (-want +got):\n%s", diff)
	}
	if compared := text(t, ctx, `[data-compared]`); !strings.HasPrefix(compared, "BaselineCompared: True (Regressed)") {
		t.Errorf("the BaselineCompared condition shown is %q", compared)
	}
}
