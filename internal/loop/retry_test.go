package loop

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sleeps runs the fixture like go_, recording every backoff the runner
// waits (on the fake clock).
func (r *run) goSleeping() (*State, []time.Duration) {
	r.t.Helper()
	var waits []time.Duration
	s := &State{}
	(&Runner{Engine: r.engine(), Model: &Scripted{Entries: r.script}, Tools: r.tools, Approve: r.approve,
		Sleep: func(_ context.Context, d time.Duration) { waits = append(waits, d); r.clock.Advance(d) }}).Run(context.Background(), s)
	return s, waits
}

func refused(Invocation) Result {
	return Failed(FailUnavailable, 0, "GET http://billing.default.svc/invoices: connection refused")
}

func TestRetry_readWithConnectionRefusedIsRetriedWithBackoffThenEndsToolFailure(t *testing.T) {
	r := makeRun(t).readTool("find_invoices").
		then(calls(call("find_invoices", `{"account":"acct_7"}`)), answer("The billing service is down.")).
		output("find_invoices", refused)
	s, waits := r.goSleeping()
	expectOutcome(t, s, ToolFailure)
	for _, want := range []string{"find_invoices", "after 3 attempts", "connection refused"} {
		if !strings.Contains(s.Reason, want) {
			t.Errorf("reason %q does not name %q", s.Reason, want)
		}
	}
	if diff := cmp.Diff([]string{"t1-c1:find_invoices", "t1-c1:find_invoices", "t1-c1:find_invoices"}, r.tools.Ran()); diff != "" {
		t.Fatalf("attempts (-want +got):\n%s", diff)
	}
	// Exponential backoff with jitter in [0.5, 1.5) of 1s, then of 2s.
	if len(waits) != 2 || waits[0] < 500*time.Millisecond || waits[0] >= 1500*time.Millisecond ||
		waits[1] < time.Second || waits[1] >= 3*time.Second {
		t.Fatalf("backoffs = %v, want one in [0.5s,1.5s) then one in [1s,3s)", waits)
	}
	// Every attempt is a tool call; the perTool limit counts the call once.
	if s.Usage.ToolCalls != 3 || s.Usage.PerTool["find_invoices"] != 1 {
		t.Fatalf("usage: %d tool calls, perTool %v; want 3 and 1", s.Usage.ToolCalls, s.Usage.PerTool)
	}
	if s.Usage.WallClock < waits[0]+waits[1] {
		t.Fatalf("wall clock %s does not include the backoffs %v", s.Usage.WallClock, waits)
	}
	// The failed call's observation is in the transcript.
	if obs := toolMessages(s); len(obs) != 1 || obs[0].Status != ObsFailed || !strings.Contains(obs[0].Content, "could not be reached") {
		t.Fatalf("observations = %+v", obs)
	}
}

func TestRetry_recoveredReadIsObservedAsSuccess(t *testing.T) {
	attempts := 0
	r := makeRun(t).readTool("find_invoices").
		then(calls(call("find_invoices", `{}`)), answer("Two invoices.")).
		output("find_invoices", func(inv Invocation) Result {
			attempts++
			if inv.Attempt != attempts {
				t.Errorf("invocation says attempt %d, this is attempt %d", inv.Attempt, attempts)
			}
			if attempts == 1 {
				return Failed(FailTimeout, 0, "no answer within 30s")
			}
			return Result{Output: []byte(`{"count":2}`)}
		})
	s, waits := r.goSleeping()
	expectOutcome(t, s, Completed)
	if attempts != 2 || len(waits) != 1 {
		t.Fatalf("attempts %d, waits %v", attempts, waits)
	}
	if obs := toolMessages(s); len(obs) != 1 || obs[0].Status != ObsOK || obs[0].Content != `{"count":2}` {
		t.Fatalf("observations = %+v", obs)
	}
}

func TestRetry_honoursRetryAfterOf429(t *testing.T) {
	n := 0
	r := makeRun(t).readTool("search").
		then(calls(call("search", `{"q":"refund"}`)), answer("done")).
		output("search", func(Invocation) Result {
			n++
			if n == 1 {
				return Result{Failure: &Failure{Kind: FailHTTP, Code: 429, Detail: "429 Too Many Requests", RetryAfter: 7 * time.Second}}
			}
			return Result{Output: []byte("ok")}
		})
	s, waits := r.goSleeping()
	expectOutcome(t, s, Completed)
	if len(waits) != 1 || waits[0] != 7*time.Second {
		t.Fatalf("waits = %v, want the 7s the server asked for", waits)
	}
}

func TestRetry_notTransientFailuresAreObservedNotRetried(t *testing.T) {
	for _, f := range []*Failure{
		{Kind: FailHTTP, Code: 404, Detail: "404 Not Found"},
		{Kind: FailHTTP, Code: 501, Detail: "501 Not Implemented"},
		{Kind: FailExit, Code: 2, Detail: "bad flag"},
		{Kind: FailInvalid, Detail: "bad template"},
		{Kind: FailTool, Detail: "account locked"},
	} {
		r := makeRun(t).readTool("a").then(calls(call("a", `{}`)), answer("gave up")).
			output("a", func(Invocation) Result { return Result{Failure: f} })
		s, waits := r.goSleeping()
		expectOutcome(t, s, Completed)
		if len(r.tools.Ran()) != 1 || len(waits) != 0 {
			t.Errorf("%s %d: ran %v, waited %v", f.Kind, f.Code, r.tools.Ran(), waits)
		}
	}
}

func TestRetry_mutatingCallIsNotRetriedUnlessDeclaredSafe(t *testing.T) {
	script := []ScriptEntry{calls(call("refund", `{"invoice":"in_8c04"}`)), answer("refunded")}

	r := makeRun(t).tool("refund", true, true).then(script...).output("refund", refused)
	s, waits := r.goSleeping()
	expectOutcome(t, s, ToolFailure)
	if len(r.tools.Ran()) != 1 || len(waits) != 0 || !strings.Contains(s.Reason, "retry.mutatingSafe") || !strings.Contains(s.Reason, "refund") {
		t.Fatalf("ran %v, waits %v, reason %q", r.tools.Ran(), waits, s.Reason)
	}

	// Declared safe: retried, every attempt with the same idempotency key.
	var keys []string
	n := 0
	r = makeRun(t).tool("refund", true, true).then(script...).output("refund", func(inv Invocation) Result {
		keys = append(keys, inv.IdempotencyKey)
		if n++; n < 3 {
			return Result{Failure: &Failure{Kind: FailHTTP, Code: 503, Detail: "503 Service Unavailable"}}
		}
		return Result{Output: []byte(`{"refund":"re_1"}`)}
	})
	r.cfg.RunID = "uid-7"
	r.cfg.Tools[0].Retry = RetryPolicy{MutatingSafe: true}
	s, waits = r.goSleeping()
	expectOutcome(t, s, Completed)
	if diff := cmp.Diff([]string{"uid-7/t1-c1", "uid-7/t1-c1", "uid-7/t1-c1"}, keys); diff != "" || len(waits) != 2 {
		t.Fatalf("keys (-want +got):\n%s\nwaits %v", diff, waits)
	}
}

func TestRetry_retriesAreReservedAgainstTheCeilings(t *testing.T) {
	// maxToolCalls: the first attempt and one retry fit, a third does not.
	r := makeRun(t).readTool("a").then(calls(call("a", `{}`)), answer("x")).output("a", refused)
	r.cfg.Budget.MaxToolCalls = new(2)
	s, _ := r.goSleeping()
	expectOutcome(t, s, ToolFailure)
	if len(r.tools.Ran()) != 2 || s.Usage.ToolCalls != 2 || !strings.Contains(s.Reason, "does not fit the budget") ||
		!strings.Contains(s.Reason, "toolCalls ceiling") {
		t.Fatalf("ran %v, %d calls, reason %q", r.tools.Ran(), s.Usage.ToolCalls, s.Reason)
	}

	// Wall clock: the backoff and the retry's timeout are reserved before
	// the wait; a retry that cannot finish inside the ceiling never starts.
	r = makeRun(t).readTool("a").then(calls(call("a", `{}`)), answer("x")).output("a", refused)
	r.cfg.Budget.MaxWallClock = 100 * time.Second
	r.cfg.Model.Timeout = 10 * time.Second
	r.cfg.Tools[0].Timeout = 30 * time.Second
	r.cfg.Tools[0].Retry = RetryPolicy{MaxAttempts: 5, InitialBackoff: 20 * time.Second, MaxBackoff: 20 * time.Second}
	r.tools.took = 30 * time.Second // every attempt runs into its deadline
	s, _ = r.goSleeping()
	expectOutcome(t, s, ToolFailure)
	if !strings.Contains(s.Reason, "wallClock ceiling") || s.Usage.WallClock > r.cfg.Budget.MaxWallClock {
		t.Fatalf("reason %q, wall clock %s", s.Reason, s.Usage.WallClock)
	}
}

func TestRetry_waitSurvivesARestartAndKeepsTheKey(t *testing.T) {
	r := makeRun(t).readTool("a")
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("a", `{}`)}}})
	key := eff.Calls[0].IdempotencyKey
	eff = e.Step(s, Input{Results: []Result{{CallID: "t1-c1", Failure: &Failure{Kind: FailUnavailable, Detail: "connection refused"}}}})
	if eff.Kind != EffectWait || s.RetryAt == nil || !eff.Until.Equal(*s.RetryAt) {
		t.Fatalf("effect %+v, retryAt %v", eff, s.RetryAt)
	}
	until := eff.Until

	// The operator restarts during the backoff: a new engine, the state
	// from its checkpoint, nothing in flight.
	s = s.Clone()
	e = r.engine()
	if eff = e.Step(s, Input{}); eff.Kind != EffectWait || !eff.Until.Equal(until) {
		t.Fatalf("before the backoff passed: %+v", eff)
	}
	r.clock.Advance(until.Sub(r.clock.Now()))
	eff = e.Step(s, Input{})
	if eff.Kind != EffectRunTools || len(eff.Calls) != 1 || eff.Calls[0].IdempotencyKey != key || eff.Calls[0].Attempt != 2 {
		t.Fatalf("after the backoff: %+v", eff)
	}
}

func TestRetry_modelOutageIsRetriedWithBackoffThenEndsToolFailure(t *testing.T) {
	r := makeRun(t).then(ScriptEntry{Error: "HTTP 503 upstream overloaded", Transient: true})
	s, waits := r.goSleeping()
	expectOutcome(t, s, ToolFailure)
	if !strings.Contains(s.Reason, "after 5 attempts") || !strings.Contains(s.Reason, "HTTP 503 upstream overloaded") {
		t.Fatalf("reason = %q", s.Reason)
	}
	// 2s, 4s, 8s, 16s, each jittered into [0.5, 1.5) of itself.
	if len(waits) != 4 {
		t.Fatalf("waits = %v, want 4", waits)
	}
	var total time.Duration
	for i, w := range waits {
		base := (2 * time.Second) << i
		if w < base/2 || w >= base*3/2 {
			t.Errorf("wait %d = %s, want in [%s, %s)", i+1, w, base/2, base*3/2)
		}
		total += w
	}
	if total < 15*time.Second {
		t.Fatalf("the outage was given up after %s of backoff", total)
	}
	if s.Usage.Turns != 1 {
		t.Fatalf("turns = %d, want 1 (retries of a call are not turns)", s.Usage.Turns)
	}
}

// flaky fails its first n calls with err, then plays its script.
type flaky struct {
	n   int
	err error
	Model
	calls int
}

func (f *flaky) Complete(ctx context.Context, req *Request) (*Reply, error) {
	f.calls++
	if f.calls <= f.n {
		return nil, f.err
	}
	return f.Model.Complete(ctx, req)
}

type providerDown struct{ after time.Duration }

func (providerDown) Error() string               { return "anthropic: HTTP 529 after 1 attempt: overloaded" }
func (providerDown) Transient() bool             { return true }
func (p providerDown) RetryAfter() time.Duration { return p.after }

func TestRetry_modelRecoversAfterRetriesHonouringRetryAfter(t *testing.T) {
	r := makeRun(t).then(answer("done"))
	m := &flaky{n: 2, err: providerDown{after: 45 * time.Second}, Model: &Scripted{Entries: r.script}}
	var waits []time.Duration
	s := &State{}
	(&Runner{Engine: r.engine(), Model: m, Tools: r.tools,
		Sleep: func(_ context.Context, d time.Duration) { waits = append(waits, d); r.clock.Advance(d) }}).Run(context.Background(), s)
	expectOutcome(t, s, Completed)
	if m.calls != 3 || s.Attempt != 3 || len(waits) != 2 || waits[0] != 45*time.Second || waits[1] != 45*time.Second {
		t.Fatalf("calls %d, attempt %d, waits %v", m.calls, s.Attempt, waits)
	}
}

func TestRetry_permanentModelErrorIsNotRetried(t *testing.T) {
	r := makeRun(t).then(ScriptEntry{Error: "HTTP 401 invalid key"})
	s, waits := r.goSleeping()
	expectOutcome(t, s, ToolFailure)
	if len(waits) != 0 || !strings.Contains(s.Reason, "HTTP 401 invalid key") {
		t.Fatalf("waits %v, reason %q", waits, s.Reason)
	}
	var te TransientError
	if errors.As(errors.New("x"), &te) {
		t.Fatal("a plain error is not transient")
	}
}

func TestRetry_modelRetryIsReservedAgainstTheWallClock(t *testing.T) {
	r := makeRun(t).then(ScriptEntry{Error: "connection refused", Transient: true})
	r.cfg.Budget.MaxWallClock = 70 * time.Second
	r.cfg.Model.Timeout = 30 * time.Second
	r.cfg.Model.Retry = RetryPolicy{MaxAttempts: 10, InitialBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second}
	s, waits := r.goSleeping()
	expectOutcome(t, s, ToolFailure)
	if !strings.Contains(s.Reason, "does not fit the budget") || !strings.Contains(s.Reason, "wallClock") {
		t.Fatalf("reason = %q", s.Reason)
	}
	if len(waits) == 0 || s.Usage.WallClock > r.cfg.Budget.MaxWallClock {
		t.Fatalf("waits %v, wall clock %s", waits, s.Usage.WallClock)
	}
}

func TestRetry_cancelDuringTheBackoffChargesNoModelCall(t *testing.T) {
	r := makeRun(t)
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	eff := e.Step(s, Input{ModelErr: providerDown{}})
	if eff.Kind != EffectWait {
		t.Fatalf("effect = %+v", eff)
	}
	e.Step(s, Input{Cancel: true})
	expectOutcome(t, s, ApprovalDenied)
	if s.Usage.Tokens() != 0 || s.Usage.Cost != 0 {
		t.Fatalf("usage = %+v, want nothing charged", s.Usage)
	}
}
