package controller

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// scriptedJudges builds a template's scripted judge as the operator's
// kit.Builder.Judge would, and counts the judge calls made.
type scriptedJudges struct{ calls atomic.Int32 }

func (j *scriptedJudges) build(_ context.Context, _ string, spec *v1alpha1.ModelSpec) (loop.Model, loop.Pricing, error) {
	return countedModel{m: &loop.Scripted{Entries: kit.Script(spec.Script)}, calls: &j.calls}, loop.Pricing{}, nil
}

type countedModel struct {
	m     loop.Model
	calls *atomic.Int32
}

func (c countedModel) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	c.calls.Add(1)
	return c.m.Complete(ctx, req)
}

// judgedTemplate is a template whose runs answer "Done." and whose judge
// samples fraction of the runs with these outcomes, and replies reply.
func judgedTemplate(t *testing.T, ns, name, fraction string, outcomes []v1alpha1.Outcome, reply string) *v1alpha1.AgentRunTemplate {
	t.Helper()
	tpl := makeTemplate(t, ns, name, makeRun(ns, "").answer("Done."))
	tpl.Spec.Judge = &v1alpha1.RunJudge{Rubric: "The answer names the ticket it closed.", MinScore: 4,
		Model:  v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted}, Script: []v1alpha1.ScriptStep{{Content: reply}}},
		Sample: v1alpha1.JudgeSample{Fraction: fraction, Outcomes: outcomes}}
	if err := k8sClient.Update(context.Background(), tpl); err != nil {
		t.Fatalf("giving the template %s a judge: %v", name, err)
	}
	return tpl
}

// waitJudged waits (bounded) for the run's judgement and returns the run.
func waitJudged(t *testing.T, run *v1alpha1.AgentRun) *v1alpha1.AgentRun {
	t.Helper()
	var out *v1alpha1.AgentRun
	NewWithT(t).Eventually(func() *v1alpha1.JudgementStatus {
		out = get(t, run)
		return out.Status.Judgement
	}, 20*time.Second, 20*time.Millisecond).ShouldNot(BeNil())
	return out
}

// Issue 48.4: a template's judge scores the finished runs it samples,
// once, into status.judgement and the metrics; a restart judges no run
// again.
func TestJudging_sampledRunJudgedOnce(t *testing.T) {
	ns := namespace(t)
	judges := &scriptedJudges{}
	withJudges := func(c *Config) { c.Judges = judges.build }
	r, stop := startWith(t, &kits{tools: newTools()}, managerSetup{config: withJudges})
	judgedTemplate(t, ns, "closer", "1", []v1alpha1.Outcome{v1alpha1.OutcomeCompleted}, `{"score": 2, "rationale": "It names no ticket."}`)
	run := waitJudged(t, runOf(t, ns, "first", "closer"))
	got := run.Status.Judgement
	want := &v1alpha1.JudgementStatus{Score: ptr.To[int32](2), MinScore: 4, Rationale: "It names no ticket.", Agreed: ptr.To(false),
		Tokens: got.Tokens, JudgedAt: got.JudgedAt}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status.judgement (-want +got):\n%s", diff)
	}
	if run.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Errorf("outcome = %s: judging changes no outcome", run.Status.Outcome)
	}
	// The score is observed after the write the test saw, and the
	// judgements gauge reads the operator's informer cache, which may
	// hold that write a moment after the API server answered it.
	NewWithT(t).Eventually(func() []float64 {
		fams := scrape(t, r.Metrics)
		return []float64{sample(fams, "agentrun_run_judge_score", map[string]string{"namespace": nsLabel(r.Metrics, ns), "template": "closer"}),
			sample(fams, "agentrun_run_judgements", map[string]string{"template": "closer", "emitted": "Completed", "agree": "false"})}
	}, 10*time.Second, 20*time.Millisecond).Should(Equal([]float64{1, 1}),
		"agentrun_run_judge_score observations, and agentrun_run_judgements{agree=false} (a Completed run scored below minScore)")

	// A restarted operator reconciles every run; it judges the new one,
	// and the first not again.
	stop()
	startWith(t, &kits{tools: newTools()}, managerSetup{config: withJudges})
	waitJudged(t, runOf(t, ns, "second", "closer"))
	g := NewWithT(t)
	g.Consistently(func() int32 { return judges.calls.Load() }, 2*time.Second, 50*time.Millisecond).Should(Equal(int32(2)),
		"one judge call for each of the two runs")
	if again := get(t, run).Status.Judgement; !again.JudgedAt.Equal(&got.JudgedAt) {
		t.Errorf("the first run was judged again at %v", again.JudgedAt)
	}
}

// Issue 48.4: runs the sample does not pick are not judged; a judge that
// replies garbage is a judgement that failed, saying why.
func TestJudging_sampleAndGarbage(t *testing.T) {
	ns := namespace(t)
	judges := &scriptedJudges{}
	startWith(t, &kits{tools: newTools()}, managerSetup{config: func(c *Config) { c.Judges = judges.build }})
	verdict := `{"score": 5, "rationale": "Names it."}`
	judgedTemplate(t, ns, "none", "0", nil, verdict)
	judgedTemplate(t, ns, "failures", "1", []v1alpha1.Outcome{v1alpha1.OutcomeBudgetExhausted, v1alpha1.OutcomeError}, verdict)
	judgedTemplate(t, ns, "garbage", "1", nil, "Sure! I'd give it 4/5.")
	garbage := waitJudged(t, runOf(t, ns, "garbage", "garbage")).Status.Judgement
	if garbage.Score != nil || garbage.Agreed != nil || !strings.Contains(garbage.Failure, "is not that JSON object") {
		t.Errorf("status.judgement = %+v, want no score and a failure that says the reply is not the JSON object asked for", garbage)
	}
	unpicked := []*v1alpha1.AgentRun{runOf(t, ns, "none", "none"), runOf(t, ns, "completed", "failures")}
	for _, run := range unpicked {
		expectOutcome(t, waitOutcome(t, run, 20*time.Second), v1alpha1.OutcomeCompleted, "")
	}
	g := NewWithT(t)
	g.Consistently(func() []string {
		var judged []string
		for _, run := range unpicked {
			if get(t, run).Status.Judgement != nil {
				judged = append(judged, run.Name)
			}
		}
		return judged
	}, 2*time.Second, 50*time.Millisecond).Should(BeEmpty(), "runs the sample does not pick are judged")
	g.Expect(judges.calls.Load()).To(Equal(int32(1)), "judge calls: only the garbage run's")
}

// Issue 48.4: the API server refuses a sample fraction that is not a
// decimal from 0 to 1, saying so.
func TestJudging_fractionIsValidated(t *testing.T) {
	ns := namespace(t)
	for _, tc := range []struct {
		fraction string
		refused  bool
	}{
		{"0", false}, {"0.25", false}, {"1", false}, {"1.0", false},
		{"10%", true}, {"1.5", true}, {"-0.1", true}, {".5", true}, {"", true},
	} {
		t.Run(tc.fraction, func(t *testing.T) {
			tpl := &v1alpha1.AgentRunTemplate{}
			tpl.Namespace, tpl.GenerateName = ns, "judged-"
			script := []v1alpha1.ScriptStep{{Content: "Done."}}
			tpl.Spec.Run.Goal, tpl.Spec.Run.Budget.MaxTurns = "Close the ticket.", 3
			tpl.Spec.Run.Model = v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted}, Script: script}
			tpl.Spec.Judge = &v1alpha1.RunJudge{Rubric: "Names the ticket.", Model: tpl.Spec.Run.Model, Sample: v1alpha1.JudgeSample{Fraction: tc.fraction}}
			err := k8sClient.Create(context.Background(), tpl)
			refused := err != nil && strings.Contains(err.Error(), `judge.sample.fraction must be a decimal string from "0" to "1"`)
			if refused != tc.refused || (err != nil && !refused) {
				t.Errorf("creating a template with sample.fraction %q: %v, want refused %v with a message naming the field", tc.fraction, err, tc.refused)
			}
		})
	}
}

// A template's judge samples production runs: a run an AgentEvaluation
// made from the template is left to the evaluation, which judges it.
func TestSampled_leavesAnEvaluationsRunsToIt(t *testing.T) {
	all := &v1alpha1.JudgeSample{Fraction: "1"}
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{UID: "u-1"}, Status: v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted}}
	if !sampled(run, all) {
		t.Fatal("fraction 1 does not pick a production run")
	}
	run.Labels = map[string]string{v1alpha1.LabelEvaluation: "refund-check"}
	if sampled(run, all) {
		t.Error("fraction 1 picks a run of evaluation refund-check")
	}
}
