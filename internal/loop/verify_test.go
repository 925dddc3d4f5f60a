package loop

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// verifier makes tool name the run's verifier; its verdicts are played in
// order (the last one repeats), each an output and an exit code.
func (r *run) verifier(name string, maxTrials, memory, stall int, verdicts ...judged) *run {
	r.readTool(name)
	r.cfg.Verify = &Verify{Tool: name, MaxTrials: maxTrials, Memory: memory, StallTrials: stall}
	if len(verdicts) == 0 {
		return r
	}
	var mu sync.Mutex
	n := 0
	return r.output(name, func(Invocation) Result {
		mu.Lock()
		defer mu.Unlock()
		v := verdicts[min(n, len(verdicts)-1)]
		n++
		if v.exit == 0 {
			return Result{Output: []byte(v.out)}
		}
		res := Failed(FailExit, v.exit, "")
		res.Output = []byte(v.out)
		return res
	})
}

type judged struct {
	out  string
	exit int
}

func pass(out string) judged { return judged{out: out} }
func fail(out string) judged { return judged{out: out, exit: 1} }

// requests is a model that plays a script and keeps every request.
type requests struct {
	Scripted
	mu   sync.Mutex
	seen []*Request
}

func (m *requests) Complete(ctx context.Context, req *Request) (*Reply, error) {
	m.mu.Lock()
	m.seen = append(m.seen, req)
	m.mu.Unlock()
	return m.Scripted.Complete(ctx, req)
}

// goSeen runs the fixture and returns the final state and every request.
func (r *run) goSeen() (*State, []*Request) {
	r.t.Helper()
	m := &requests{Scripted: Scripted{Entries: r.script}}
	s := &State{}
	(&Runner{Engine: r.engine(), Model: m, Tools: r.tools,
		Sleep: func(_ context.Context, d time.Duration) { r.clock.Advance(d) }}).Run(context.Background(), s)
	return s, m.seen
}

func verifierRuns(ran []string, tool string) int {
	n := 0
	for _, x := range ran {
		if strings.HasSuffix(x, ":"+tool) {
			n++
		}
	}
	return n
}

func requestText(req *Request) string {
	var b strings.Builder
	for _, m := range req.Messages {
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestVerify_wrongThenRightCompletesAfterTwoTrialsWithTheFeedbackInTrialTwo(t *testing.T) {
	r := makeRun(t).readTool("lookup_order").
		verifier("check_refund", 0, 0, 0, fail("refund of 10.00 found, 20.00 expected"), pass("refund of 20.00 found")).
		then(calls(call("lookup_order", `{"id":"A-1"}`)), answer("Refunded 10.00."),
			calls(call("lookup_order", `{"id":"A-1"}`)), answer("Refunded 20.00."))
	s, seen := r.goSeen()

	expectOutcome(t, s, Completed)
	if !strings.Contains(s.Reason, "verified by check_refund") || !strings.Contains(s.Reason, "trial 2") {
		t.Errorf("reason = %q, want it to say trial 2 was verified by check_refund", s.Reason)
	}
	if got := verifierRuns(r.tools.Ran(), "check_refund"); got != 2 {
		t.Errorf("verifier ran %d times, want 2 (ran %v)", got, r.tools.Ran())
	}
	if s.Answer != "Refunded 20.00." || s.Verify.Trial != 2 || s.Verify.TrialsToVerify() != 2 {
		t.Errorf("answer %q, trial %d, trials to verify %d; want the second answer on trial 2", s.Answer, s.Verify.Trial, s.Verify.TrialsToVerify())
	}
	if len(seen) != 4 {
		t.Fatalf("%d model calls, want 4", len(seen))
	}
	// Trial 2 starts from the goal and the reflection, not trial 1's messages.
	first := seen[2]
	text := requestText(first)
	if !strings.Contains(text, "Previous attempt reflections:") || !strings.Contains(text, "refund of 10.00 found, 20.00 expected") {
		t.Errorf("trial 2's first request does not carry the feedback:\n%s", text)
	}
	if len(first.Messages) != 2 || first.Messages[0].Content != r.cfg.Goal {
		t.Errorf("trial 2's first request has %d messages starting %q, want the goal and the reflections", len(first.Messages), first.Messages[0].Content)
	}
	for _, req := range seen {
		for _, ts := range req.Tools {
			if ts.Name == "check_refund" {
				t.Fatalf("the verifier is offered to the model")
			}
		}
	}
	// The transcript keeps both trials, the verdicts and the reflection.
	var verdicts []string
	for _, m := range s.Transcript {
		if m.Role == RoleTool && m.Tool == "check_refund" {
			verdicts = append(verdicts, m.Content)
		}
	}
	want := []string{"Not verified by check_refund (exit code 1): refund of 10.00 found, 20.00 expected", "Verified by check_refund: refund of 20.00 found"}
	if fmt.Sprint(verdicts) != fmt.Sprint(want) {
		t.Errorf("verdicts in the transcript = %q, want %q", verdicts, want)
	}
}

func TestVerify_alwaysWrongEscalatesAfterMaxTrialsVerifierCalls(t *testing.T) {
	r := makeRun(t).verifier("check", 4, 0, 0, fail("wrong total")).
		then(answer("a1"), answer("a2"), answer("a3"), answer("a4"), answer("a5"))
	s, seen := r.goSeen()

	expectOutcome(t, s, Escalated)
	if got := verifierRuns(r.tools.Ran(), "check"); got != 4 {
		t.Errorf("verifier ran %d times, want maxTrials = 4", got)
	}
	if len(seen) != 4 {
		t.Errorf("%d model calls, want 4", len(seen))
	}
	for _, w := range []string{"4 trials", "verify.maxTrials", "wrong total", "still open"} {
		if !strings.Contains(s.Reason, w) {
			t.Errorf("reason %q does not say %q", s.Reason, w)
		}
	}
	last := requestText(seen[3])
	if c := strings.Count(last, " answered "); c != 3 {
		t.Errorf("trial 4 reads %d reflections, want 3 (trials 1 to 3):\n%s", c, last)
	}
}

func TestVerify_memoryKeepsTheNewestReflections(t *testing.T) {
	r := makeRun(t).verifier("check", 4, 1, 0, fail("no")).
		then(answer("a1"), answer("a2"), answer("a3"), answer("a4"))
	_, seen := r.goSeen()
	last := requestText(seen[3])
	if strings.Contains(last, `Trial 1 answered`) || strings.Contains(last, `Trial 2 answered`) || !strings.Contains(last, `Trial 3 answered "a3"`) {
		t.Errorf("with memory 1, trial 4 should read only trial 3's reflection:\n%s", last)
	}
}

func TestVerify_flatScoreEscalatesAfterStallTrials(t *testing.T) {
	r := makeRun(t).verifier("check", 6, 0, 2,
		fail(`{"score":0.4,"feedback":"two of five items refunded"}`), fail(`{"score":0.4,"feedback":"still two of five"}`)).
		then(answer("a1"), answer("a2"), answer("a3"), answer("a4"), answer("a5"), answer("a6"))
	s, _ := r.goSeen()

	expectOutcome(t, s, Escalated)
	if got := verifierRuns(r.tools.Ran(), "check"); got != 3 {
		t.Errorf("verifier ran %d times, want 3 (a first score, then 2 trials without improvement)", got)
	}
	for _, w := range []string{"verify.stallTrials", "0.40, 0.40, 0.40", "still two of five"} {
		if !strings.Contains(s.Reason, w) {
			t.Errorf("reason %q does not say %q", s.Reason, w)
		}
	}
	if d := s.Verify.LastVerdict(); d == nil || d.Verified || d.Score == nil || *d.Score != 0.4 {
		t.Errorf("last verdict = %+v, want not verified with score 0.4", d)
	}
}

func TestVerify_improvingScoreKeepsGoing(t *testing.T) {
	r := makeRun(t).verifier("check", 5, 0, 2,
		fail(`{"score":0.2}`), fail(`{"score":0.2}`), fail(`{"score":0.6}`), pass(`{"score":1,"feedback":"all refunded"}`)).
		then(answer("a1"), answer("a2"), answer("a3"), answer("a4"))
	s, _ := r.goSeen()
	expectOutcome(t, s, Completed)
	if !strings.Contains(s.Reason, "all refunded") || s.Verify.TrialsToVerify() != 4 {
		t.Errorf("reason %q, trials to verify %d; want the evidence and trial 4", s.Reason, s.Verify.TrialsToVerify())
	}
}

// failingVerifier runs to its answer a run whose verifier "check" fails
// with kind and detail on every call.
func failingVerifier(t *testing.T, kind FailureKind, detail string) (*run, *State) {
	t.Helper()
	r := makeRun(t).readTool("check").then(answer("done"))
	r.cfg.Verify = &Verify{Tool: "check"}
	r.output("check", func(Invocation) Result { return Failed(kind, 0, detail) })
	s, _ := r.goSeen()
	expectOutcome(t, s, ToolFailure)
	return r, s
}

func TestVerify_unavailableVerifierIsAToolFailure(t *testing.T) {
	r, s := failingVerifier(t, FailUnavailable, "connection refused")
	if !strings.HasPrefix(s.Reason, "the verifier could not run: ") || !strings.Contains(s.Reason, "connection refused") {
		t.Errorf("reason = %q, want it to name the verifier and the error", s.Reason)
	}
	if got := verifierRuns(r.tools.Ran(), "check"); got != DefaultToolRetry.MaxAttempts {
		t.Errorf("verifier tried %d times, want the tool's retry attempts (%d)", got, DefaultToolRetry.MaxAttempts)
	}
}

func TestVerify_invalidVerifierCallIsAToolFailure(t *testing.T) {
	_, s := failingVerifier(t, FailInvalid, "template error")
	if !strings.Contains(s.Reason, "could not judge") {
		t.Errorf("reason = %q", s.Reason)
	}
}

func TestVerify_ceilingsBindAcrossTrials(t *testing.T) {
	t.Run("turns", func(t *testing.T) {
		r := makeRun(t).maxTurns(3).readTool("lookup").verifier("check", 3, 0, 0, fail("no")).
			then(calls(call("lookup", `{"q":1}`)), answer("a1"), calls(call("lookup", `{"q":2}`)), answer("a2"))
		s, seen := r.goSeen()
		expectOutcome(t, s, BudgetExhausted)
		if len(seen) != 3 || s.Usage.Turns != 3 || s.Verify.Trial != 2 {
			t.Errorf("%d model calls, %d turns, trial %d; want trial 2 stopped at maxTurns 3", len(seen), s.Usage.Turns, s.Verify.Trial)
		}
	})
	t.Run("tool calls include the verifier's", func(t *testing.T) {
		r := makeRun(t).readTool("lookup").verifier("check", 3, 0, 0, fail("no")).
			then(calls(call("lookup", `{"q":1}`)), answer("a1"), answer("a2"))
		r.cfg.Budget.MaxToolCalls = new(2)
		s, _ := r.goSeen()
		expectOutcome(t, s, BudgetExhausted)
		if s.Usage.ToolCalls != 2 || verifierRuns(r.tools.Ran(), "check") != 1 || !strings.Contains(s.Reason, "toolCalls") {
			t.Errorf("tool calls %d, verifier runs %d, reason %q; want the second verification refused at maxToolCalls 2",
				s.Usage.ToolCalls, verifierRuns(r.tools.Ran(), "check"), s.Reason)
		}
	})
	t.Run("cost", func(t *testing.T) {
		r := makeRun(t).verifier("check", 3, 0, 0, fail("no")).then(answer("a1"), answer("a2"))
		r.cfg.Tools[0].MaxCost = MustMoney("0.60")
		r.cfg.Budget.MaxCost = new(MustMoney("1.00"))
		s, _ := r.goSeen()
		expectOutcome(t, s, BudgetExhausted)
		if verifierRuns(r.tools.Ran(), "check") != 1 || s.Usage.Cost != MustMoney("0.60") {
			t.Errorf("verifier runs %d, cost %s; want one verification charged and the second refused", verifierRuns(r.tools.Ran(), "check"), s.Usage.Cost)
		}
	})
}

func TestVerify_refusedTruncatedAndEmptyAnswersNeverReachTheVerifier(t *testing.T) {
	r := makeRun(t).verifier("check", 3, 0, 0, pass("ok")).
		then(ScriptEntry{Content: "Refunded 2", Truncated: true}, answer("  "), answer("Refunded 20.00."))
	s, _ := r.goSeen()
	expectOutcome(t, s, Completed)
	if got := verifierRuns(r.tools.Ran(), "check"); got != 1 {
		t.Errorf("verifier ran %d times, want only for the complete answer", got)
	}

	r = makeRun(t).verifier("check", 3, 0, 0, pass("ok")).then(ScriptEntry{Refusal: "I cannot help with refunds."})
	s, _ = r.goSeen()
	expectOutcome(t, s, GuardrailStop)
	if got := verifierRuns(r.tools.Ran(), "check"); got != 0 {
		t.Errorf("verifier ran %d times on a refusal", got)
	}
}

func TestVerify_verifierGetsAnswerTrialAndGoalAndIsNotLoopDetected(t *testing.T) {
	r := makeRun(t).verifier("check", 2, 0, 0, fail("no"), pass("yes")).then(answer("first"), answer("second"))
	var got []string
	r.tools.outputs["check"] = func(old func(Invocation) Result) func(Invocation) Result {
		return func(inv Invocation) Result {
			got = append(got, string(inv.Arguments))
			return old(inv)
		}
	}(r.tools.outputs["check"])
	s, _ := r.goSeen()
	expectOutcome(t, s, Completed)
	want := []string{`{"answer":"first","trial":1,"goal":"Find out what happened."}`, `{"answer":"second","trial":2,"goal":"Find out what happened."}`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("verifier arguments = %q, want %q", got, want)
	}
	if s.MaxDepth > 0 || len(s.Window) > 0 {
		t.Errorf("loop detection saw the verifier's calls: depth %d, window %q", s.MaxDepth, s.Window)
	}
}

func TestVerify_configErrors(t *testing.T) {
	for name, v := range map[string]Verify{
		"undeclared tool": {Tool: "nope"},
		"empty tool":      {Tool: " "},
		"too many trials": {Tool: "check", MaxTrials: 11},
	} {
		r := makeRun(t).readTool("check")
		r.cfg.Verify = &v
		if _, err := New(r.cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, v)
		}
	}
}

// TestVerify_resumesFromAnyStep persists the state as JSON after every
// step and resumes each step with a new engine, losing the results of the
// verifier's first dispatch as a crash would: the run ends as if nothing
// had happened, with its trials and reflections intact.
func TestVerify_resumesFromAnyStep(t *testing.T) {
	r := makeRun(t).readTool("lookup").verifier("check", 3, 0, 0).
		then(calls(call("lookup", `{"id":1}`)), answer("a1"), answer("a2"))
	r.output("check", func(inv Invocation) Result {
		if strings.Contains(string(inv.Arguments), `"answer":"a2"`) {
			return Result{Output: []byte("right amount")}
		}
		return Result{Output: []byte("wrong amount"), Failure: &Failure{Kind: FailExit, Code: 1}}
	})
	model := &requests{Scripted: Scripted{Entries: r.script}}
	s := &State{}
	in := Input{}
	lost := false
	for range 100 {
		e := r.engine()
		eff := e.Step(s, in)
		s = s.Clone()
		in = Input{}
		switch eff.Kind {
		case EffectFinish:
			expectOutcome(t, s, Completed)
			if s.Verify.Trial != 2 || verifierRuns(r.tools.Ran(), "check") != 3 {
				t.Errorf("trial %d, verifier runs %d; want trial 2 and 3 runs (one lost to the crash)", s.Verify.Trial, verifierRuns(r.tools.Ran(), "check"))
			}
			if !strings.Contains(requestText(model.seen[2]), "wrong amount") {
				t.Errorf("trial 2 lost its reflection across restarts")
			}
			return
		case EffectCallModel:
			in.Reply, in.ModelErr = model.Complete(context.Background(), eff.Request)
		case EffectRunTools:
			res := ExecuteBatch(context.Background(), r.tools, eff.Calls, eff.Concurrent)
			if !lost && eff.Calls[0].Tool == "check" {
				lost = true // the operator restarted: the result is gone
				continue
			}
			in.Results = res
		}
	}
	t.Fatal("the run did not end")
}

func TestVerify_verifierCallIsRebuiltFromTheTranscript(t *testing.T) {
	r := makeRun(t).verifier("check", 3, 0, 0, pass("ok")).then(answer("Refunded 20.00."))
	e := r.engine()
	s := &State{}
	eff := e.Step(s, Input{})
	reply, _ := (&Scripted{Entries: r.script}).Complete(context.Background(), eff.Request)
	eff = e.Step(s, Input{Reply: reply})
	if eff.Kind != EffectRunTools || len(eff.Calls) != 1 {
		t.Fatalf("effect = %+v, want the verifier's call", eff)
	}
	got, ok := e.VerifierCall(s.Clone())
	inv := eff.Calls[0]
	if !ok || got.ID != inv.CallID || got.Name != inv.Tool || string(got.Arguments) != string(inv.Arguments) {
		t.Fatalf("VerifierCall = %+v, %v; the engine dispatched %+v", got, ok, inv)
	}
	if _, ok := makeRun(t).engine().VerifierCall(s); ok {
		t.Fatalf("an engine without a verifier rebuilt a verifier call")
	}
}

// Issue 27, finding 7: the verifier's call skipped policy and guardrails,
// though its arguments hold what the model answered. It is vetted like a
// proposed call: a guardrail ends the run GuardrailStop, a denying policy
// Error, an asking one waits for a person; and an irreversible tool
// cannot be a verifier at all.
func TestVerify_verifierCallIsVetted(t *testing.T) {
	r := makeRun(t).verifier("check", 2, 0, 0, pass("yes")).then(answer("card 4111111111111111"))
	r.cfg.Guardrails = []Guardrail{{Name: "pan", Tools: []string{"*"}, Pattern: `\d{13,19}`, Severity: Block}}
	s, _ := r.goSeen()
	expectOutcome(t, s, GuardrailStop)
	if !strings.Contains(s.Reason, "guardrail:pan matched the verifier's call") || verifierRuns(r.tools.Ran(), "check") != 0 {
		t.Fatalf("reason %q, verifier runs %d", s.Reason, verifierRuns(r.tools.Ran(), "check"))
	}

	r = makeRun(t).verifier("check", 2, 0, 0, pass("yes")).then(answer("done"))
	r.cfg.Policy = Policy{Default: Deny}
	s, _ = r.goSeen()
	expectOutcome(t, s, Error)
	if !strings.Contains(s.Reason, "policy.default denies the verifier's call") {
		t.Fatalf("reason %q", s.Reason)
	}

	r = makeRun(t).verifier("check", 2, 0, 0, pass("yes")).then(answer("done"))
	r.cfg.Policy = Policy{Default: Ask}
	e := r.engine()
	st := &State{}
	e.Step(st, Input{})
	eff := e.Step(st, Input{Reply: &Reply{Content: "done"}})
	if eff.Kind != EffectAsk || len(eff.Pending) != 1 || eff.Pending[0].Rule != verifyRule {
		t.Fatalf("effect %v with %d pending, want the verifier's call asked about", eff.Kind, len(eff.Pending))
	}
	eff = e.Step(st, Input{Answers: map[string]Answer{eff.Pending[0].ID: Approve}})
	if eff.Kind != EffectRunTools || len(eff.Calls) != 1 || eff.Calls[0].Tool != "check" {
		t.Fatalf("after the approval: effect %v, calls %+v; want the verifier to run", eff.Kind, eff.Calls)
	}

	r = makeRun(t).tool("check", true, false)
	r.cfg.Verify = &Verify{Tool: "check"}
	if _, err := New(r.cfg); err == nil || !strings.Contains(err.Error(), "cannot be undone") {
		t.Fatalf("an irreversible verifier: %v", err)
	}
}
