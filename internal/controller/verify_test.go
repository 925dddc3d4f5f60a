package controller

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// verifier declares tool name as the run's verifier.
func (b *runBuilder) verifier(name string, maxTrials, stallTrials int32) *runBuilder {
	b.readTool(name)
	b.r.Spec.Verify = &v1alpha1.VerifySpec{Tool: name, MaxTrials: ptr.To(maxTrials), StallTrials: ptr.To(stallTrials)}
	return b
}

// verifyByAnswer makes the verifier accept exactly the answer right; any
// other answer fails with exit code 1 and the output wrong.
func verifyByAnswer(tb *tools, tool, right, wrong string) {
	tb.funcs[tool] = func(_ context.Context, inv loop.Invocation) loop.Result {
		if strings.Contains(string(inv.Arguments), `"answer":"`+right+`"`) {
			return loop.Result{Output: []byte("refund re-3 of 20.00 found")}
		}
		r := loop.Failed(loop.FailExit, 1, "")
		r.Output = []byte(wrong)
		return r
	}
}

// seenModel plays the run's script and keeps every request it was sent.
type seenModel struct {
	mu    sync.Mutex
	inner loop.Model
	seen  []*loop.Request
}

func (m *seenModel) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	m.mu.Lock()
	m.seen = append(m.seen, req)
	m.mu.Unlock()
	return m.inner.Complete(ctx, req)
}

func (m *seenModel) requests() []*loop.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*loop.Request(nil), m.seen...)
}

func verifierCalls(tb *tools, tool string) int {
	n := 0
	for k, v := range tb.counts() {
		if strings.HasSuffix(k, ":"+tool) {
			n += v
		}
	}
	return n
}

func TestVerify_wrongThenRightIsCompletedOnTrialTwo(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	verifyByAnswer(tb, "check_refund", "Refunded 20.00.", "refund re-3 is 10.00, expected 20.00")
	b := makeRun(ns, "verified").readTool("lookup").verifier("check_refund", 3, 2).
		calls("lookup", `{"id":"A-1"}`).answer("Refunded 10.00.").
		calls("lookup", `{"id":"A-1"}`).answer("Refunded 20.00.")
	model := &seenModel{inner: &loop.Scripted{Entries: scriptOf(b)}}
	r, _ := startReconciler(t, &kits{tools: tb, model: model}, 0, nil)
	count, sum := verifiedTrials(t, r.Metrics)
	run := b.create(t)

	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "trial 2 (turn 4) was verified by check_refund: refund re-3 of 20.00 found")
	want := &v1alpha1.VerificationStatus{TrialsUsed: 2, LastVerdict: v1alpha1.VerdictVerified, TrialsToVerify: ptr.To(int32(2))}
	if diff := cmp.Diff(want, done.Status.Verification); diff != "" {
		t.Fatalf("status.verification (-want +got):\n%s", diff)
	}
	if done.Status.Answer != "Refunded 20.00." || done.Status.Usage.Turns != 4 || done.Status.Usage.PerTool["check_refund"] != 2 {
		t.Fatalf("answer %q, usage %+v", done.Status.Answer, done.Status.Usage)
	}
	reqs := model.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model calls, want 4", len(reqs))
	}
	trial2 := reqs[2].Messages
	if len(trial2) != 2 || !strings.Contains(trial2[1].Content, "Previous attempt reflections:") ||
		!strings.Contains(trial2[1].Content, "refund re-3 is 10.00, expected 20.00") {
		t.Fatalf("trial 2 does not start from the goal and the feedback: %+v", trial2)
	}
	// The reflection is in the transcript, not in status.
	msgs := readTranscript(t, done)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, string(m.Role))
	}
	if diff := cmp.Diff([]string{"assistant", "tool", "assistant", "tool", "user", "assistant", "tool", "assistant", "tool"}, roles); diff != "" {
		t.Fatalf("transcript roles (-want +got):\n%s", diff)
	}
	if !strings.Contains(msgs[4].Content, "refund re-3 is 10.00, expected 20.00") {
		t.Fatalf("the reflection is not in the transcript: %q", msgs[4].Content)
	}
	// The trials it needed are observed once, under its outcome.
	NewWithT(t).Eventually(func() []float64 {
		c, s := verifiedTrials(t, r.Metrics)
		return []float64{c - count, s - sum}
	}, 5*time.Second, 20*time.Millisecond).Should(Equal([]float64{1, 2}))
}

// verifiedTrials reads the sample count and sum of m's trials histogram of
// Completed runs.
func verifiedTrials(t *testing.T, m *Metrics) (count, sum float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.verificationTrials)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "agentrun_verification_trials" {
			continue
		}
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == "Completed" {
					return float64(metric.GetHistogram().GetSampleCount()), metric.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}

func TestVerify_endings(t *testing.T) {
	cases := []struct {
		name        string
		build       func(b *runBuilder, tb *tools)
		want        v1alpha1.Outcome
		reason      string
		verifierRan int
		check       func(t *testing.T, st *v1alpha1.AgentRunStatus)
	}{{
		name: "always wrong is escalated after maxTrials verifier calls",
		build: func(b *runBuilder, tb *tools) {
			verifyByAnswer(tb, "check", "never", "the refund is missing")
			b.verifier("check", 3, 2).answer("a1").answer("a2").answer("a3").answer("a4")
		},
		want: v1alpha1.OutcomeEscalated, reason: "did not verify any answer in 3 trials (verify.maxTrials); last feedback: Not verified by check (exit code 1): the refund is missing",
		verifierRan: 3,
		check: func(t *testing.T, st *v1alpha1.AgentRunStatus) {
			v := st.Verification
			if v == nil || v.TrialsUsed != 3 || v.LastVerdict != v1alpha1.VerdictNotVerified || v.TrialsToVerify != nil {
				t.Fatalf("status.verification = %+v", v)
			}
		},
	}, {
		name: "a flat score is escalated after stallTrials",
		build: func(b *runBuilder, tb *tools) {
			tb.funcs["check"] = func(context.Context, loop.Invocation) loop.Result {
				r := loop.Failed(loop.FailExit, 1, "")
				r.Output = []byte(`{"score": 0.5, "feedback": "half the items"}`)
				return r
			}
			b.verifier("check", 6, 2).answer("a1").answer("a2").answer("a3").answer("a4")
		},
		want: v1alpha1.OutcomeEscalated, reason: "has not improved for 2 trials (verify.stallTrials; scores 0.50, 0.50, 0.50)",
		verifierRan: 3,
		check: func(t *testing.T, st *v1alpha1.AgentRunStatus) {
			want := &v1alpha1.VerificationStatus{TrialsUsed: 3, LastVerdict: v1alpha1.VerdictNotVerified, LastScore: "0.50", Scores: []string{"0.50", "0.50", "0.50"}}
			if diff := cmp.Diff(want, st.Verification); diff != "" {
				t.Fatalf("status.verification (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "an unavailable verifier is a tool failure",
		build: func(b *runBuilder, tb *tools) {
			tb.funcs["check"] = func(context.Context, loop.Invocation) loop.Result {
				return loop.Failed(loop.FailUnavailable, 0, "connection refused")
			}
			b.verifier("check", 3, 2).answer("a1")
			b.r.Spec.Tools[len(b.r.Spec.Tools)-1].Retry = &v1alpha1.ToolRetry{MaxAttempts: ptr.To(int32(2)), InitialBackoff: &metav1.Duration{Duration: 10 * time.Millisecond}}
		},
		want: v1alpha1.OutcomeToolFailure, reason: "the verifier could not run: tool check (call t1-verify) stayed unavailable after 2 attempts",
		verifierRan: 2,
	}, {
		name: "ceilings bind across trials",
		build: func(b *runBuilder, tb *tools) {
			verifyByAnswer(tb, "check", "never", "no")
			b.maxTurns(3).readTool("lookup").verifier("check", 3, 2).
				calls("lookup", `{"q":1}`).answer("a1").calls("lookup", `{"q":2}`).answer("a2")
		},
		want: v1alpha1.OutcomeBudgetExhausted, reason: "turns",
		verifierRan: 1,
		check: func(t *testing.T, st *v1alpha1.AgentRunStatus) {
			if st.Usage.Turns != 3 || st.Verification.TrialsUsed != 2 {
				t.Fatalf("turns %d, trials used %d; want trial 2 stopped at maxTurns 3", st.Usage.Turns, st.Verification.TrialsUsed)
			}
		},
	}}
	// One manager serves the cases, one after the other; each case sets
	// the verifier's behaviour before its run is created.
	tb := newTools()
	startManager(t, &kits{tools: tb})
	ns := namespace(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := makeRun(ns, "verify-"+string(rune('a'+i)))
			tb.mu.Lock()
			tc.build(b, tb)
			tb.mu.Unlock()
			before := verifierCalls(tb, "check")
			run := b.create(t)
			done := waitOutcome(t, run, 20*time.Second)
			expectOutcome(t, done, tc.want, tc.reason)
			if got := verifierCalls(tb, "check") - before; got != tc.verifierRan {
				t.Fatalf("verifier ran %d times, want %d", got, tc.verifierRan)
			}
			if tc.check != nil {
				tc.check(t, &done.Status)
			}
		})
	}
}

// TestVerify_trialAndReflectionsSurviveARestart stops the operator while
// trial 2's first model call is in flight; a new operator resumes the run
// from its checkpoint and transcript, and trial 2 still reads trial 1's
// feedback.
func TestVerify_trialAndReflectionsSurviveARestart(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	verifyByAnswer(tb, "check", "right", "the amount is wrong")
	b := makeRun(ns, "verify-restart").verifier("check", 3, 2).answer("wrong").answer("right")
	script := &loop.Scripted{Entries: scriptOf(b)}
	stuck := make(chan struct{})
	first := loop.Model(modelFunc(func(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
		if req.EarlierAnswers > 0 {
			close(stuck)
			<-ctx.Done() // the operator stops during trial 2's call
			return nil, ctx.Err()
		}
		return script.Complete(ctx, req)
	}))
	stop := startManager(t, &kits{tools: tb, model: first})
	run := b.create(t)
	await(t, stuck, 20*time.Second, "trial 2 never started")
	stop()

	second := &seenModel{inner: script}
	startManager(t, &kits{tools: tb, model: second})
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "trial 2")
	reqs := second.requests()
	if len(reqs) != 1 || len(reqs[0].Messages) != 2 || !strings.Contains(reqs[0].Messages[1].Content, "the amount is wrong") {
		t.Fatalf("the resumed trial 2 does not read trial 1's reflection: %+v", reqs)
	}
	if got := verifierCalls(tb, "check"); got != 2 {
		t.Fatalf("verifier ran %d times, want 2", got)
	}
}

type modelFunc func(ctx context.Context, req *loop.Request) (*loop.Reply, error)

func (f modelFunc) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	return f(ctx, req)
}

// TestVerify_aTamperedVerifierCallIsVoid: the verifier's call in a
// checkpoint must be the one the engine makes of the final answer saved in
// the transcript; a status edit that changes its tool or its arguments
// (the answer the verifier judges) is refused like an edited proposal.
func TestVerify_aTamperedVerifierCallIsVoid(t *testing.T) {
	b := makeRun("default", "tampered").readTool("refund").verifier("check", 3, 2)
	cfg, err := kit.Config(&b.r.Spec)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := loop.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	state := func() *loop.State {
		s := &loop.State{Turn: 1, Phase: loop.PhaseAct, Verify: &loop.Verification{Trial: 1},
			Transcript: []loop.Message{{Role: loop.RoleAssistant, Turn: 1, Content: "Refunded 20.00."}}}
		tc, ok := eng.VerifierCall(s)
		if !ok {
			t.Fatal("no verifier call")
		}
		s.Calls = []loop.Call{{ToolCall: tc, Verdict: loop.Allow, Rule: "spec.verify", State: loop.CallDispatched}}
		return s
	}
	if reason, _ := checkProposals(state(), eng); reason != "" {
		t.Fatalf("the engine's own verifier call was refused: %s", reason)
	}
	for name, edit := range map[string]func(c *loop.Call){
		"another tool": func(c *loop.Call) { c.Name = "refund" },
		"another answer": func(c *loop.Call) {
			c.Arguments = []byte(`{"answer":"Refunded 0.","trial":1,"goal":"Find out what happened."}`)
		},
		"another call's id": func(c *loop.Call) { c.ID = "t1-c1" },
	} {
		s := state()
		edit(&s.Calls[0])
		if reason, _ := checkProposals(s, eng); !strings.Contains(reason, "is void") {
			t.Errorf("%s: checkProposals = %q, want the call void", name, reason)
		}
	}
}
