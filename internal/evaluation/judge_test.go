package evaluation

import (
	"context"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestParseVerdict(t *testing.T) {
	tests := []struct {
		reply     string
		score     int32
		rationale string
		err       string // a part of the error; "" for none
	}{
		{reply: `{"score": 4, "rationale": "Names the refund and its amount."}`, score: 4, rationale: "Names the refund and its amount."},
		{reply: " \n{\"rationale\":\"ok\",\"score\":1}\n", score: 1, rationale: "ok"},
		{reply: ``, err: "its reply is empty"},
		{reply: "   ", err: "its reply is empty"},
		{reply: `The answer is great, 5/5.`, err: "is not that JSON object"},
		{reply: "```json\n{\"score\": 4, \"rationale\": \"ok\"}\n```", err: "is not that JSON object"},
		{reply: `[4, "ok"]`, err: "is not that JSON object"},
		{reply: `{"score": 4, "rationale": "ok", "confidence": 0.9}`, err: "is not that JSON object"},
		{reply: `{"score": 4, "rationale": "ok"} and more`, err: "has more after the JSON object"},
		{reply: `{"score": 4, "rationale": "ok"}{"score": 1, "rationale": "no"}`, err: "has more after the JSON object"},
		{reply: `{"rationale": "ok"}`, err: "has no score"},
		{reply: `{"score": 0, "rationale": "ok"}`, err: "has the score 0, not a whole number from 1 to 5"},
		{reply: `{"score": 6, "rationale": "ok"}`, err: "has the score 6"},
		{reply: `{"score": 4.5, "rationale": "ok"}`, err: "has the score 4.5"},
		{reply: `{"score": 99999999999, "rationale": "ok"}`, err: "has the score 99999999999"},
		{reply: `{"score": "4", "rationale": "ok"}`, err: `has the score "4"`},
		{reply: `{"score": 4}`, err: "has no rationale"},
		{reply: `{"score": 4, "rationale": "  "}`, err: "has no rationale"},
	}
	for _, tt := range tests {
		score, rationale, err := ParseVerdict(tt.reply)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if (tt.err == "") != (err == nil) || !strings.Contains(gotErr, tt.err) {
			t.Errorf("ParseVerdict(%q): error %q, want one holding %q", tt.reply, gotErr, tt.err)
			continue
		}
		if score != tt.score || rationale != tt.rationale {
			t.Errorf("ParseVerdict(%q) = %d, %q; want %d, %q", tt.reply, score, rationale, tt.score, tt.rationale)
		}
	}
}

// countingModel is a scripted judge that counts its calls.
type countingModel struct {
	loop.Scripted
	calls int
}

func (m *countingModel) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	m.calls++
	return m.Scripted.Complete(ctx, req)
}

// judgedEval is an evaluation of one case with three repeats, judged by
// model at a dollar per million input tokens and two per million output.
func judgedEval(spec *v1alpha1.EvaluationJudge) *v1alpha1.AgentEvaluation {
	return &v1alpha1.AgentEvaluation{ObjectMeta: metav1.ObjectMeta{Name: "refunds"},
		Spec: v1alpha1.AgentEvaluationSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "refund-investigator"}, Repeats: 3,
			Cases: []v1alpha1.EvaluationCase{{Name: "double-charge"}}, Judge: spec}}
}

func answered(name, answer string) *v1alpha1.AgentRun {
	return &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:   v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{Goal: "Investigate ticket T-1."}},
		Status: v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted, Answer: answer}}
}

// judgeAll scores, judges and records each repeat's run, in order, as the
// reconciler and agentrun eval do, and returns the reasons.
func judgeAll(t *testing.T, e *v1alpha1.AgentEvaluation, j *Judge, answers ...string) []string {
	t.Helper()
	c := &e.Spec.Cases[0]
	var whys []string
	for i, a := range answers {
		rep := int32(i + 1)
		run := answered(RunName(e.Name, "", c.Name, rep), a)
		why := Score(&c.Expect, run)
		res := ResultOf(rep, run, why)
		why, err := j.JudgeResult(context.Background(), e, c, run, RunIndex(e, "", 0, rep), &res, why)
		if err != nil {
			t.Fatal(err)
		}
		Record(CaseStatus(&e.Status, c.Name), res, why)
		whys = append(whys, why)
	}
	SetStatus(e, nil, metav1.Now())
	return whys
}

// A judge's reply that is not the verdict asked for fails the run's case
// with a reason that says what was wrong and quotes it; nothing panics,
// every run is scored, and the call's tokens are still counted.
func TestJudge_garbageIsAScoredFailureWithReason(t *testing.T) {
	usage := loop.TokenUsage{InputTokens: 300, OutputTokens: 20}
	model := &loop.Scripted{Entries: []loop.ScriptEntry{
		{Content: "Looks good to me!", Usage: usage},
		{Content: `{"score": 9, "rationale": "Excellent."}`, Usage: usage},
		{Content: "", Usage: usage},
	}}
	e := judgedEval(&v1alpha1.EvaluationJudge{Rubric: "Names the amount refunded.", MinScore: 4})
	whys := judgeAll(t, e, &Judge{Spec: e.Spec.Judge, Model: model}, "Refunded 82.40.", "Refunded 82.40.", "Refunded 82.40.")
	for i, want := range []string{"judge: its reply is not that JSON object", "judge: its reply has the score 9, not a whole number from 1 to 5",
		"judge: its reply is empty"} {
		if !strings.HasPrefix(whys[i], want) {
			t.Errorf("run %d: reason %q, want one starting %q", i+1, whys[i], want)
		}
	}
	if !strings.Contains(whys[0], `"Looks good to me!"`) {
		t.Errorf("reason %q does not quote the reply", whys[0])
	}
	cs := e.Status.Cases[0]
	if cs.Failed != 3 || cs.FailureReason != whys[0] || cs.Results[0].JudgeScore != nil {
		t.Errorf("case status: failed %d, reason %q, first score %v; want 3 failed, the first reason, no score", cs.Failed, cs.FailureReason, cs.Results[0].JudgeScore)
	}
	if got := e.Status.Totals; got.JudgeTokens != 3*320 || got.Judged != 0 || got.JudgeMeanScore != "" || e.Status.Phase != v1alpha1.EvaluationFailed {
		t.Errorf("totals: judge tokens %d, judged %d, mean %q, phase %s; want 960 tokens, none judged, no mean, Failed",
			got.JudgeTokens, got.Judged, got.JudgeMeanScore, e.Status.Phase)
	}
}

// A scripted judge scores run i with its entry i: a score at or above
// minScore passes, one below fails with the score and the rationale;
// each run keeps its score and rationale, the totals their mean; a run
// that missed another expectation is not judged.
func TestJudge_scriptedJudgeScoresEachRun(t *testing.T) {
	model := &countingModel{Scripted: loop.Scripted{Entries: []loop.ScriptEntry{
		{Content: `{"score": 5, "rationale": "Names the refund of 82.40."}`},
		{Content: `{"score": 2, "rationale": "Does not say how much was refunded."}`},
		{Content: `{"score": 5, "rationale": "never asked"}`},
	}}}
	e := judgedEval(&v1alpha1.EvaluationJudge{Rubric: "Names the amount refunded.", MinScore: 4})
	e.Spec.Cases[0].Expect.Answer = []v1alpha1.RE2Pattern{`(?i)refund`}
	whys := judgeAll(t, e, &Judge{Spec: e.Spec.Judge, Model: model}, "Refunded 82.40.", "Refunded.", "Nothing to do.")

	want := []string{"", "judge: scored 2 of 5, below minScore 4: Does not say how much was refunded.",
		`answer[0]: expected a match for "(?i)refund", the answer was "Nothing to do."`}
	if diff := cmp.Diff(want, whys); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}
	res := e.Status.Cases[0].Results
	got := []any{ptr.Deref(res[0].JudgeScore, 0), res[0].JudgeRationale, ptr.Deref(res[1].JudgeScore, 0), res[2].JudgeScore == nil, model.calls}
	if diff := cmp.Diff([]any{int32(5), "Names the refund of 82.40.", int32(2), true, 2}, got); diff != "" {
		t.Errorf("scores, rationale, calls (-want +got):\n%s", diff)
	}
	if tot := e.Status.Totals; tot.Judged != 2 || tot.JudgeMeanScore != "3.50" || tot.Passed != 1 {
		t.Errorf("totals: judged %d, mean %q, passed %d; want 2, 3.50, 1", tot.Judged, tot.JudgeMeanScore, tot.Passed)
	}

	// A case's own minScore replaces the judge's.
	e = judgedEval(&v1alpha1.EvaluationJudge{Rubric: "Names the amount refunded.", MinScore: 4})
	e.Spec.Cases[0].Expect.Judge = &v1alpha1.CaseJudge{MinScore: ptr.To[int32](2)}
	model.calls = 0
	if whys := judgeAll(t, e, &Judge{Spec: e.Spec.Judge, Model: model}, "Refunded 82.40.", "Refunded."); whys[1] != "" {
		t.Errorf("a score of 2 against the case's minScore 2: reason %q, want a pass", whys[1])
	}
}

// The judge's spend is priced, recorded per run and summed, and its
// ceilings hold: a call that could pass maxCostUSD is not made, and the
// run it was for fails saying so.
func TestJudge_spendIsCountedAndHeldToItsCeiling(t *testing.T) {
	verdict := loop.ScriptEntry{Content: `{"score": 5, "rationale": "Good."}`, Usage: loop.TokenUsage{InputTokens: 1000, OutputTokens: 100}}
	model := &countingModel{Scripted: loop.Scripted{Entries: []loop.ScriptEntry{verdict, verdict, verdict}}}
	// Each call is priced 1000*$1/M + 100*$2/M = $0.0012; a call's worst
	// case (its estimated input, some 700 tokens, and 1000 output tokens)
	// is some $0.0027: the third call could pass $0.005.
	spec := &v1alpha1.EvaluationJudge{Rubric: "Names the amount refunded.", MinScore: 4, MaxCostUSD: "0.005",
		Model: v1alpha1.ModelSpec{MaxOutputTokens: ptr.To[int32](1000)}}
	e := judgedEval(spec)
	j := &Judge{Spec: spec, Model: model, Pricing: loop.Pricing{Input: loop.MustMoney("1"), Output: loop.MustMoney("2")}}
	whys := judgeAll(t, e, j, "Refunded 82.40.", "Refunded 82.40.", "Refunded 82.40.")

	if whys[0] != "" || whys[1] != "" || !strings.HasPrefix(whys[2], "judge: not called: its calls have spent $0.0024 of maxCostUSD $0.005, and this one may cost $0.002") {
		t.Errorf("reasons %q: want two passes, then the ceiling", whys)
	}
	res := e.Status.Cases[0].Results
	got := []any{res[0].JudgeCostUSD, res[0].JudgeTokens, res[2].JudgeCostUSD, e.Status.Totals.JudgeCostUSD, e.Status.Totals.JudgeTokens, model.calls}
	if diff := cmp.Diff([]any{v1alpha1.USD("0.0012"), int64(1100), v1alpha1.USD(""), v1alpha1.USD("0.0024"), int64(2200), 2}, got); diff != "" {
		t.Errorf("per run and total spend, calls (-want +got):\n%s", diff)
	}

	// maxTokens holds as maxCostUSD does: a call may use some 700 + 200.
	spec = &v1alpha1.EvaluationJudge{Rubric: "r", MaxTokens: ptr.To[int64](1900), Model: v1alpha1.ModelSpec{MaxOutputTokens: ptr.To[int32](200)}}
	e = judgedEval(spec)
	model.calls = 0
	whys = judgeAll(t, e, &Judge{Spec: spec, Model: model}, "a", "b", "c")
	if whys[0] != "" || !strings.HasPrefix(whys[1], "judge: not called: its calls have used 1100 of maxTokens 1900") || model.calls != 1 {
		t.Errorf("reasons %q, %d calls: want a pass, then the token ceiling, one call", whys, model.calls)
	}
}

// A judge whose model could not be built fails each run it would judge,
// saying why; a failed call does too.
func TestJudge_unavailableOrFailingModelFailsTheRun(t *testing.T) {
	e := judgedEval(&v1alpha1.EvaluationJudge{Rubric: "r"})
	whys := judgeAll(t, e, &Judge{Spec: e.Spec.Judge, Unavailable: "reading the API key from Secret judge-key key apiKey: not found"}, "a")
	if want := "judge: its model cannot be called: reading the API key"; !strings.HasPrefix(whys[0], want) {
		t.Errorf("reason %q, want one starting %q", whys[0], want)
	}
	e = judgedEval(&v1alpha1.EvaluationJudge{Rubric: "r"})
	whys = judgeAll(t, e, &Judge{Spec: e.Spec.Judge, Model: &loop.Scripted{Entries: []loop.ScriptEntry{{Error: "HTTP 500"}}}}, "a", "b")
	if want := "judge: the call failed: scripted model: HTTP 500"; whys[0] != want || !strings.Contains(whys[1], "script exhausted") {
		t.Errorf("reasons %q, want %q then the script exhausted", whys, want)
	}
}

// The judge is shown the rubric, the goal, the answer and the typed
// output, and asked for the verdict's schema.
func TestJudge_requestShowsTheRun(t *testing.T) {
	var got *loop.Request
	model := modelFunc(func(_ context.Context, req *loop.Request) (*loop.Reply, error) {
		got = req
		return &loop.Reply{Content: `{"score": 5, "rationale": "ok"}`}, nil
	})
	e := judgedEval(&v1alpha1.EvaluationJudge{Rubric: "Names the amount refunded.", Model: v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Name: "judge-1"}}})
	judgeAll(t, e, &Judge{Spec: e.Spec.Judge, Model: model}, "Refunded 82.40.")
	want := "Rubric:\nNames the amount refunded.\n\nThe agent's goal:\nInvestigate ticket T-1.\n\nThe agent's answer:\nRefunded 82.40.\n"
	if got == nil || got.Messages[0].Content != want || got.Model != "judge-1" || string(got.Output) != onScale(judgeSchema) || !strings.Contains(got.System, `{"score": <a whole number from 1 to 5>`) {
		t.Errorf("request %+v, want the prompt %q, model judge-1 and the verdict's schema", got, want)
	}
}

type modelFunc func(context.Context, *loop.Request) (*loop.Reply, error)

func (f modelFunc) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	return f(ctx, req)
}
