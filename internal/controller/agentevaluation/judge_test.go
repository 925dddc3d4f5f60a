package agentevaluation

import (
	"context"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// judged gives the evaluation a scripted judge, at a dollar per million
// input tokens and two per million output tokens.
func (b *evalBuilder) judged(minScore int32, script ...v1alpha1.ScriptStep) *evalBuilder {
	b.e.Spec.Judge = &v1alpha1.EvaluationJudge{Rubric: "The answer names the amount refunded.", MinScore: minScore,
		MaxCostUSD: "0.50", Model: v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted,
			Pricing: &v1alpha1.ModelPricing{Input: "1", Output: "2"}}, Script: script}}
	return b
}

// countedJudges builds judges as the operator does (kit.Builder.Judge),
// each counting its calls in calls.
func countedJudges(calls *int) func(context.Context, string, *v1alpha1.ModelSpec) (loop.Model, loop.Pricing, error) {
	return func(ctx context.Context, ns string, spec *v1alpha1.ModelSpec) (loop.Model, loop.Pricing, error) {
		m, p, err := (&kit.Builder{}).Judge(ctx, ns, spec)
		return modelFunc(func(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
			*calls++
			return m.Complete(ctx, req)
		}), p, err
	}
}

type modelFunc func(context.Context, *loop.Request) (*loop.Reply, error)

func (f modelFunc) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	return f(ctx, req)
}

// The reconciler judges each run once, as it is scored: a judge's reply
// that is not the verdict asked for fails the case with the reason, a
// score is kept with its rationale, and the judge's spend is counted. An
// operator restarted between the two (a new reconciler) does not judge
// the first run again.
func TestEvaluation_judgeScoresEachRunOnce(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	usage := &v1alpha1.ScriptUsage{InputTokens: 1000, OutputTokens: 100}
	e := makeEval(ns, "judged").concurrency(2).answering("garbled", "82").answering("clear", "82").
		judged(4, v1alpha1.ScriptStep{Content: "I would give it a 5.", Usage: usage},
			v1alpha1.ScriptStep{Content: `{"score": 5, "rationale": "Names the refund of 82.40."}`, Usage: usage}).create(t)
	var before, after int
	first := NewReconciler(Config{Base: reconcilers.Base{Client: cluster.Client, APIReader: cluster.Client}, Judges: countedJudges(&before)})
	reconcileOnce(t, first, e)
	finish(t, &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "judged-garbled-1"}}, "Refunded 82.40.")
	reconcileOnce(t, first, e)
	reconcileOnce(t, first, e)

	restarted := NewReconciler(Config{Base: reconcilers.Base{Client: cluster.Client, APIReader: cluster.Client}, Judges: countedJudges(&after)})
	reconcileOnce(t, restarted, e)
	finish(t, &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "judged-clear-1"}}, "Refunded 82.40.")
	reconcileOnce(t, restarted, e)

	if before != 1 || after != 1 {
		t.Errorf("judge calls: %d before the restart, %d after; want 1 and 1", before, after)
	}
	st := get(t, e).Status
	garbled, clear := st.Cases[0], st.Cases[1]
	if want := `judge: its reply is not that JSON object`; garbled.Failed != 1 || !strings.HasPrefix(garbled.FailureReason, want) ||
		!strings.Contains(garbled.FailureReason, "I would give it a 5.") {
		t.Errorf("case garbled: failed %d, reason %q; want 1 failed, a reason starting %q that quotes the reply", garbled.Failed, garbled.FailureReason, want)
	}
	got := []any{clear.Passed, ptr.Deref(clear.Results[0].JudgeScore, 0), clear.Results[0].JudgeRationale, clear.Results[0].JudgeCostUSD,
		st.Totals.Judged, st.Totals.JudgeMeanScore, st.Totals.JudgeCostUSD, st.Totals.JudgeTokens, st.Phase}
	want := []any{int32(1), int32(5), "Names the refund of 82.40.", v1alpha1.USD("0.0012"),
		int32(1), "5.00", v1alpha1.USD("0.0024"), int64(2200), v1alpha1.EvaluationFailed}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("case clear's result and the totals (-want +got):\n%s", diff)
	}
}

// A case's expect.judge needs spec.judge: the API server says so.
func TestEvaluation_aCaseJudgeNeedsTheSpecJudge(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	b := makeEval(ns, "no-judge").answering("one", "ok")
	b.e.Spec.Cases[0].Expect.Judge = &v1alpha1.CaseJudge{MinScore: ptr.To[int32](3)}
	err := cluster.Client.Create(context.Background(), b.e)
	if want := "a case's expect.judge changes spec.judge's rubric or minScore: set spec.judge"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("create: %v; want an error holding %q", err, want)
	}
}
