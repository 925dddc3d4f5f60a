package agentevaluation

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller/controllertest"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// get reads obj as the API server has it now.
func get[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	return testenv.Get(t, cluster.Client, obj)
}

// evalBuilder builds an AgentEvaluation as its manifest reads.
type evalBuilder struct{ e *v1alpha1.AgentEvaluation }

func makeEval(ns, name string) *evalBuilder {
	return &evalBuilder{&v1alpha1.AgentEvaluation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.AgentEvaluationSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "refund-investigator"}}}}
}

func (b *evalBuilder) repeats(n int32) *evalBuilder     { b.e.Spec.Repeats = n; return b }
func (b *evalBuilder) concurrency(n int32) *evalBuilder { b.e.Spec.Concurrency = n; return b }

// answering adds a case whose answer must match each of patterns.
func (b *evalBuilder) answering(name string, patterns ...v1alpha1.RE2Pattern) *evalBuilder {
	b.e.Spec.Cases = append(b.e.Spec.Cases, v1alpha1.EvaluationCase{Name: name,
		Parameters: []v1alpha1.ParameterValue{{Name: "ticket", Value: "T-" + name}},
		Expect:     v1alpha1.EvaluationExpectation{Answer: patterns}})
	return b
}

// create creates the evaluation and returns it as stored.
func (b *evalBuilder) create(t *testing.T) *v1alpha1.AgentEvaluation {
	t.Helper()
	if err := cluster.Client.Create(context.Background(), b.e); err != nil {
		t.Fatal(err)
	}
	return get(t, b.e)
}

// runsOf lists the evaluation's runs.
func runsOf(t *testing.T, e *v1alpha1.AgentEvaluation) []v1alpha1.AgentRun {
	t.Helper()
	var list v1alpha1.AgentRunList
	if err := cluster.Client.List(context.Background(), &list, client.InNamespace(e.Namespace),
		client.MatchingLabels{v1alpha1.LabelEvaluation: e.Name}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// unfinished are the runs of runs that have not ended.
func unfinished(runs []v1alpha1.AgentRun) []string {
	var out []string
	for i := range runs {
		if !runstatus.Finished(&runs[i]) {
			out = append(out, runs[i].Name)
		}
	}
	return out
}

// finish ends a run as the AgentRun reconciler would: Completed with
// answer, in two turns, for a cent.
func finish(t *testing.T, run *v1alpha1.AgentRun, answer string) {
	t.Helper()
	end(t, run, loop.Completed, answer, "")
}

// startEvaluator runs the evaluation reconciler alone in a manager for
// the test's namespace until the test ends.
func startEvaluator(t *testing.T, ns string) {
	t.Helper()
	testenv.StartManager(t, cluster.Config, ns, func(mgr ctrl.Manager) error {
		return NewReconciler(Config{Base: reconcilers.Base{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}}).SetupWithManager(mgr)
	})
}

// Two cases, two runs each, one at a time: the evaluation never has two
// runs unfinished, makes each run once, and counts each case's passes
// and failures; the run whose answer misses the case's pattern fails the
// case, with a reason that names the expectation and quotes the answer.
func TestEvaluation_oneRunAtATimeAndCountsEachCase(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	e := makeEval(ns, "refunds").repeats(2).concurrency(1).
		answering("double-charge", `refund(ed)? 82\.40`).
		answering("declined", `(?i)cannot refund`).create(t)
	startEvaluator(t, ns)
	answers := map[string]string{
		"refunds-double-charge-1": "We refunded 82.40 to your card.",
		"refunds-double-charge-2": "We refund 82.40 today.",
		"refunds-declined-1":      "We cannot refund a charge older than a year.",
		"refunds-declined-2":      "We refunded 82.40.",
	}
	g := NewWithT(t)
	var order []string
	for range answers {
		var next string
		g.Eventually(func() error {
			open := unfinished(runsOf(t, e))
			if len(open) > 1 {
				g.Expect(open).To(HaveLen(1), "more runs unfinished than spec.concurrency")
			}
			if len(open) == 0 {
				return fmt.Errorf("no run unfinished")
			}
			next = open[0]
			return nil
		}, 20*time.Second, 10*time.Millisecond).Should(Succeed())
		order = append(order, next)
		finish(t, &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: next}}, answers[next])
	}
	g.Eventually(func() v1alpha1.EvaluationPhase { return get(t, e).Status.Phase }, 20*time.Second, 20*time.Millisecond).
		Should(Equal(v1alpha1.EvaluationFailed))

	wantOrder := []string{"refunds-double-charge-1", "refunds-double-charge-2", "refunds-declined-1", "refunds-declined-2"}
	if diff := cmp.Diff(wantOrder, order); diff != "" {
		t.Errorf("the runs, in the order made (-want +got):\n%s", diff)
	}
	if runs := runsOf(t, e); len(runs) != 4 {
		t.Errorf("%d runs made; want 4", len(runs))
	}
	st := get(t, e).Status
	two := int32(2)
	want := []v1alpha1.EvaluationCaseStatus{
		{Name: "double-charge", Runs: 2, Passed: 2},
		{Name: "declined", Runs: 2, Passed: 1, Failed: 1, FailedRun: "refunds-declined-2",
			FailureReason: `answer[0]: expected a match for "(?i)cannot refund", the answer was "We refunded 82.40."`},
	}
	if diff := cmp.Diff(want, st.Cases, cmpopts.IgnoreFields(v1alpha1.EvaluationCaseStatus{}, "Results")); diff != "" {
		t.Errorf("status.cases (-want +got):\n%s", diff)
	}
	wantTotals := &v1alpha1.EvaluationTotals{Runs: 4, Passed: 3, Failed: 1, PassRate: "0.75", CostUSD: "0.0400",
		TurnsToCompletionP50: &two, TurnsToCompletionP95: &two}
	if diff := cmp.Diff(wantTotals, st.Totals); diff != "" {
		t.Errorf("status.totals (-want +got):\n%s", diff)
	}
	complete := findCondition(st.Conditions, v1alpha1.EvaluationConditionComplete)
	if complete == nil || complete.Status != metav1.ConditionTrue || complete.Reason != v1alpha1.ReasonEvaluationFailed ||
		!strings.Contains(complete.Message, "3 of 4 runs passed") {
		t.Errorf("Complete condition: %+v; want True, Failed, 3 of 4 runs passed", complete)
	}
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}

// reconcileOnce runs one reconcile of e by r, against the API server
// directly, and fails the test on an error.
func reconcileOnce(t *testing.T, r *Reconciler, e *v1alpha1.AgentEvaluation) {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(e)}); err != nil {
		t.Fatalf("reconciling %s: %v", e.Name, err)
	}
}

func directReconciler() *Reconciler {
	return NewReconciler(Config{Base: reconcilers.Base{Client: cluster.Client, APIReader: cluster.Client}})
}

// A restarted operator (a new reconciler, nothing in memory) that comes
// to an evaluation before or after its status was written makes no run
// twice: the runs' names are the case's and the repeat's, and the
// results already scored stay scored when their runs are gone.
func TestEvaluation_aRestartMakesNoRunTwice(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	e := makeEval(ns, "restart").repeats(2).concurrency(1).answering("one", "ok").create(t)
	reconcileOnce(t, directReconciler(), e)
	first := runsOf(t, e)
	if len(first) != 1 {
		t.Fatalf("%d runs after the first reconcile; want 1", len(first))
	}
	// The status write is lost (the operator died before it): a new
	// reconciler reads the evaluation as created.
	stale := get(t, e)
	stale.Status = v1alpha1.AgentEvaluationStatus{}
	if err := cluster.Client.Status().Update(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, directReconciler(), e)
	if got := runsOf(t, e); len(got) != 1 || got[0].UID != first[0].UID {
		t.Fatalf("after a restart the runs are %v; want only %s", names(got), first[0].Name)
	}
	// The first ends and is scored, and the second is made; the first is
	// then deleted (a TTL): a new reconciler does not make it again.
	finish(t, &first[0], "ok")
	reconcileOnce(t, directReconciler(), e)
	if err := cluster.Client.Delete(context.Background(), &first[0]); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, directReconciler(), e)
	second := runsOf(t, e)
	if len(second) != 1 || second[0].Name != "restart-one-2" {
		t.Fatalf("runs after the first was scored and deleted: %v; want only restart-one-2", names(second))
	}
	// The second ends; the evaluation is complete, and a complete
	// evaluation makes nothing again when its runs are gone.
	finish(t, &second[0], "ok")
	reconcileOnce(t, directReconciler(), e)
	if err := cluster.Client.Delete(context.Background(), &second[0]); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, directReconciler(), e)
	if got := runsOf(t, e); len(got) != 0 {
		t.Fatalf("runs were made again after their results were recorded: %v", names(got))
	}
	if st := get(t, e).Status; st.Phase != v1alpha1.EvaluationPassed || st.Totals.Passed != 2 || st.Cases[0].Runs != 2 {
		t.Fatalf("phase %s, %d passed, case runs %d; want Passed, 2, 2", st.Phase, st.Totals.Passed, st.Cases[0].Runs)
	}
}

func names(runs []v1alpha1.AgentRun) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.Name)
	}
	return out
}

// Each run is made from the evaluation's template with its case's
// parameters, labelled with the evaluation and the case, and controlled
// by the evaluation.
func TestEvaluation_runsAreOrdinaryRunsOfTheTemplate(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	e := makeEval(ns, "shape").concurrency(1).answering("one").answering("two").create(t)
	reconcileOnce(t, directReconciler(), e)
	runs := runsOf(t, e)
	if len(runs) != 1 {
		t.Fatalf("%d runs; want 1 (concurrency 1)", len(runs))
	}
	run := runs[0]
	got := []any{run.Name, run.Labels, run.Spec.TemplateRef, run.Spec.Parameters, metav1.IsControlledBy(&run, e)}
	want := []any{"shape-one-1", map[string]string{v1alpha1.LabelEvaluation: "shape", v1alpha1.LabelCase: "one"},
		&v1alpha1.TemplateRef{Name: "refund-investigator"}, []v1alpha1.ParameterValue{{Name: "ticket", Value: "T-one"}}, true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the run (name, labels, templateRef, parameters, controlled) (-want +got):\n%s", diff)
	}
}

// A run of the same name that is not the evaluation's fails its case with
// a reason; it is never adopted, scored or overwritten.
func TestEvaluation_aNameTakenByAnotherRunFailsTheCase(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	other := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-one-1"},
		Spec: v1alpha1.AgentRunSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "refund-investigator"}}}
	if err := cluster.Client.Create(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	e := makeEval(ns, "taken").answering("one").create(t)
	reconcileOnce(t, directReconciler(), e)
	st := get(t, e).Status
	if len(st.Cases) != 1 || st.Cases[0].Failed != 1 || !strings.Contains(st.Cases[0].FailureReason, "run taken-one-1 already exists and does not belong to this evaluation") {
		t.Fatalf("status.cases: %+v; want one failure naming the taken run", st.Cases)
	}
	if st.Phase != v1alpha1.EvaluationFailed {
		t.Errorf("phase %s; want Failed", st.Phase)
	}
}

// variants replaces the template with variants, each a name and its
// template's name.
func (b *evalBuilder) variants(nameTemplate ...string) *evalBuilder {
	b.e.Spec.TemplateRef = nil
	for i := 0; i+1 < len(nameTemplate); i += 2 {
		b.e.Spec.Variants = append(b.e.Spec.Variants, v1alpha1.EvaluationVariant{Name: nameTemplate[i],
			TemplateRef: v1alpha1.TemplateRef{Name: nameTemplate[i+1]}})
	}
	return b
}

// against compares the evaluation with the evaluation named baseline.
func (b *evalBuilder) against(baseline string) *evalBuilder {
	b.e.Spec.Baseline = &v1alpha1.EvaluationBaseline{Evaluation: baseline}
	return b
}

// refundCases gives b two cases, easy and hard, that both expect
// "refund", run four at a time.
func refundCases(b *evalBuilder) *evalBuilder {
	return b.concurrency(4).answering("easy", "refund").answering("hard", "refund")
}

// evaluatedBefore creates the evaluation "before" of refundCases with two
// variants, stable and change, of one agent, and ends its runs: each
// completes verified but the hard case's first, which escalates
// unverified.
func evaluatedBefore(t *testing.T, ns string) *v1alpha1.AgentEvaluation {
	t.Helper()
	before := refundCases(makeEval(ns, "before").variants("stable", "refund-v1", "change", "refund-v1")).create(t)
	endAll(t, before, 4, func(run string) (loop.Outcome, string, v1alpha1.Verdict) {
		if strings.HasSuffix(run, "-hard-1") {
			return loop.Escalated, "", v1alpha1.VerdictNotVerified
		}
		return loop.Completed, "refund", v1alpha1.VerdictVerified
	})
	return before
}

// completeOnlyRun ends e's one run Completed with the answer "ok"; the
// test fails unless e has made exactly one.
func completeOnlyRun(t *testing.T, e *v1alpha1.AgentEvaluation) {
	t.Helper()
	runs := runsOf(t, e)
	if len(runs) != 1 {
		t.Fatalf("%d runs; want 1", len(runs))
	}
	end(t, &runs[0], loop.Completed, "ok", "")
}

// baselineCompared reads e's status and its BaselineCompared condition,
// which must be there.
func baselineCompared(t *testing.T, e *v1alpha1.AgentEvaluation) (v1alpha1.AgentEvaluationStatus, *metav1.Condition) {
	t.Helper()
	st := get(t, e).Status
	c := findCondition(st.Conditions, v1alpha1.EvaluationConditionBaselineCompared)
	if c == nil {
		t.Fatal("no BaselineCompared condition")
	}
	return st, c
}

// end ends a run as the AgentRun reconciler would: with outcome and
// answer, in two turns, for a cent; a verdict ("" for a run without a
// verifier) is the verifier's.
func end(t *testing.T, run *v1alpha1.AgentRun, outcome loop.Outcome, answer string, verdict v1alpha1.Verdict) {
	t.Helper()
	controllertest.EndRun(t, cluster.Client, get(t, run), endedInTwoTurns(outcome, answer), loop.Convergence{TurnsToCompletion: 2}, time.Now(),
		func(st *v1alpha1.AgentRunStatus) {
			if verdict != "" {
				st.Verification = &v1alpha1.VerificationStatus{TrialsUsed: 1, LastVerdict: verdict}
			}
		})
}

// endedInTwoTurns is the engine's state of a run that ended with outcome
// and answer in two turns, for a cent.
func endedInTwoTurns(outcome loop.Outcome, answer string) loop.State {
	return loop.State{Turn: 2, Phase: loop.PhaseDone, Outcome: outcome, Answer: answer,
		Usage: loop.Usage{Turns: 2, Cost: loop.MustMoney("0.01")}}
}

// endAll waits for the evaluation to have made want runs, all
// unfinished, and ends each with how(run name).
func endAll(t *testing.T, e *v1alpha1.AgentEvaluation, want int, how func(run string) (loop.Outcome, string, v1alpha1.Verdict)) []v1alpha1.AgentRun {
	t.Helper()
	g := NewWithT(t)
	var runs []v1alpha1.AgentRun
	g.Eventually(func() []string { runs = runsOf(t, e); return unfinished(runs) }, 20*time.Second, 10*time.Millisecond).Should(HaveLen(want))
	for i := range runs {
		outcome, answer, verdict := how(runs[i].Name)
		end(t, &runs[i], outcome, answer, verdict)
	}
	return runs
}

// completed waits for the evaluation to leave Running and returns it.
func completed(t *testing.T, e *v1alpha1.AgentEvaluation) *v1alpha1.AgentEvaluation {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func() v1alpha1.EvaluationPhase { return get(t, e).Status.Phase }, 20*time.Second, 20*time.Millisecond).
		ShouldNot(Or(BeEmpty(), Equal(v1alpha1.EvaluationRunning)))
	return get(t, e)
}

// Two variants over two cases: each case runs once per variant, from the
// variant's template, named and labelled with the variant, and each
// variant's runs are counted apart; the totals add them up.
func TestEvaluation_variantsRunEachCaseAndAreCountedApart(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	e := makeEval(ns, "vs").variants("old", "refund-v1", "new", "refund-v2").concurrency(4).
		answering("double-charge", `refunded`).answering("declined", `(?i)cannot refund`).create(t)
	startEvaluator(t, ns)
	runs := endAll(t, e, 4, func(run string) (loop.Outcome, string, v1alpha1.Verdict) {
		if run == "vs-new-declined-1" {
			return loop.Completed, "We refunded it.", ""
		}
		return loop.Completed, "We refunded it. We cannot refund more.", ""
	})
	type made struct{ Name, Template, Variant, Case string }
	var got []made
	for _, r := range runs {
		got = append(got, made{r.Name, r.Spec.TemplateRef.Name, r.Labels[v1alpha1.LabelVariant], r.Labels[v1alpha1.LabelCase]})
	}
	want := []made{{"vs-new-declined-1", "refund-v2", "new", "declined"}, {"vs-new-double-charge-1", "refund-v2", "new", "double-charge"},
		{"vs-old-declined-1", "refund-v1", "old", "declined"}, {"vs-old-double-charge-1", "refund-v1", "old", "double-charge"}}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b made) bool { return a.Name < b.Name })); diff != "" {
		t.Errorf("the runs (name, template, variant label, case label) (-want +got):\n%s", diff)
	}

	st := completed(t, e).Status
	if st.Phase != v1alpha1.EvaluationFailed {
		t.Errorf("phase %s; want Failed (variant new failed a case)", st.Phase)
	}
	two := ptr.To[int32](2)
	wantVariants := []v1alpha1.EvaluationVariantStatus{
		{Name: "old", Cases: []v1alpha1.EvaluationCaseStatus{{Name: "double-charge", Runs: 1, Passed: 1}, {Name: "declined", Runs: 1, Passed: 1}},
			Totals: &v1alpha1.EvaluationTotals{Runs: 2, Passed: 2, PassRate: "1.00", CostUSD: "0.0200", TurnsToCompletionP50: two, TurnsToCompletionP95: two}},
		{Name: "new", Cases: []v1alpha1.EvaluationCaseStatus{{Name: "double-charge", Runs: 1, Passed: 1},
			{Name: "declined", Runs: 1, Failed: 1, FailedRun: "vs-new-declined-1",
				FailureReason: `answer[0]: expected a match for "(?i)cannot refund", the answer was "We refunded it."`}},
			Totals: &v1alpha1.EvaluationTotals{Runs: 2, Passed: 1, Failed: 1, PassRate: "0.50", CostUSD: "0.0200", TurnsToCompletionP50: two, TurnsToCompletionP95: two}},
	}
	if diff := cmp.Diff(wantVariants, st.Variants, cmpopts.IgnoreFields(v1alpha1.EvaluationCaseStatus{}, "Results")); diff != "" {
		t.Errorf("status.variants (-want +got):\n%s", diff)
	}
	wantTotals := &v1alpha1.EvaluationTotals{Runs: 4, Passed: 3, Failed: 1, PassRate: "0.75", CostUSD: "0.0400", TurnsToCompletionP50: two, TurnsToCompletionP95: two}
	if diff := cmp.Diff(wantTotals, st.Totals); diff != "" {
		t.Errorf("status.totals (-want +got):\n%s", diff)
	}
	if len(st.Cases) != 0 {
		t.Errorf("status.cases %+v; want none (they are per variant)", st.Cases)
	}
}

// A variant that stops verifying is Regressed against its baseline
// although its pass rate on outcomes alone went up: in the baseline its
// verifier accepted one answer and turned the other down (the run
// escalated); now both runs complete, and none is verified.
func TestEvaluation_aVariantThatStopsVerifyingRegresses(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	startEvaluator(t, ns)
	before := evaluatedBefore(t, ns)
	if st := completed(t, before).Status; st.Phase != v1alpha1.EvaluationFailed || st.Variants[1].Totals.VerifiedRate != "0.50" {
		t.Fatalf("baseline: phase %s, variant change %+v; want Failed, verified rate 0.50", st.Phase, st.Variants[1].Totals)
	}

	after := refundCases(makeEval(ns, "after").variants("stable", "refund-v1", "change", "refund-unverified").against("before")).create(t)
	endAll(t, after, 4, func(run string) (loop.Outcome, string, v1alpha1.Verdict) {
		switch {
		case strings.HasPrefix(run, "after-change-"):
			return loop.Completed, "refund", "" // no verifier any more: every run completes
		case strings.HasSuffix(run, "-hard-1"):
			return loop.Escalated, "", v1alpha1.VerdictNotVerified
		}
		return loop.Completed, "refund", v1alpha1.VerdictVerified
	})
	st := completed(t, after).Status
	if st.Variants[1].Totals.PassRate != "1.00" {
		t.Fatalf("variant change's pass rate %s; want 1.00, up from 0.50", st.Variants[1].Totals.PassRate)
	}
	want := []v1alpha1.EvaluationRegression{{Variant: "change", What: v1alpha1.RegressionVerifiedRate, Baseline: "0.50", Value: "0.00",
		Message: "variant change: the verified rate fell from 0.50 to 0.00, more than 0.05: fewer answers were accepted by a verifier, whatever the pass rate"}}
	if diff := cmp.Diff(want, st.Regressions); diff != "" {
		t.Errorf("status.regressions (-want +got):\n%s", diff)
	}
	compared := findCondition(st.Conditions, v1alpha1.EvaluationConditionBaselineCompared)
	complete := findCondition(st.Conditions, v1alpha1.EvaluationConditionComplete)
	got := []any{st.Phase, compared.Status, compared.Reason, complete.Status, complete.Reason}
	if diff := cmp.Diff([]any{v1alpha1.EvaluationRegressed, metav1.ConditionTrue, v1alpha1.ReasonEvaluationRegressed,
		metav1.ConditionTrue, v1alpha1.ReasonEvaluationRegressed}, got); diff != "" {
		t.Errorf("(phase, BaselineCompared, Complete) (-want +got):\n%s", diff)
	}
}

// A baseline that does not exist is a condition that says so; the
// evaluation ends as its runs say.
func TestEvaluation_aMissingBaselineIsACondition(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	e := makeEval(ns, "orphan").answering("one", "ok").against("never-made").create(t)
	r := directReconciler()
	reconcileOnce(t, r, e)
	if c := findCondition(get(t, e).Status.Conditions, v1alpha1.EvaluationConditionBaselineCompared); c == nil || c.Status != metav1.ConditionUnknown {
		t.Errorf("BaselineCompared while the run is unfinished: %+v; want Unknown", c)
	}
	completeOnlyRun(t, e)
	reconcileOnce(t, r, e)
	st, c := baselineCompared(t, e)
	got := []any{st.Phase, c.Status, c.Reason, c.Message, len(st.Regressions)}
	want := []any{v1alpha1.EvaluationPassed, metav1.ConditionFalse, v1alpha1.ReasonBaselineNotFound,
		"the baseline evaluation never-made does not exist in namespace " + ns + ": nothing was compared", 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(phase, BaselineCompared status, reason, message, regressions) (-want +got):\n%s", diff)
	}
}
