package controller

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// attempts records each attempt of a tool: its idempotency key, its
// attempt number and when it started.
type attempts struct {
	mu   sync.Mutex
	keys []string
	nums []int
	at   []time.Time
}

func (a *attempts) record(inv loop.Invocation) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.keys = append(a.keys, inv.IdempotencyKey)
	a.nums = append(a.nums, inv.Attempt)
	a.at = append(a.at, time.Now())
	return len(a.keys)
}

func (a *attempts) snapshot() ([]string, []int, []time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.keys...), append([]int(nil), a.nums...), append([]time.Time(nil), a.at...)
}

func retryPolicy(attempts int32, initial, maxBackoff time.Duration) *v1alpha1.ToolRetry {
	return &v1alpha1.ToolRetry{MaxAttempts: &attempts, InitialBackoff: &metav1.Duration{Duration: initial},
		MaxBackoff: &metav1.Duration{Duration: maxBackoff}}
}

func TestRun_unavailableToolIsRetriedWithBackoffThenEndsToolFailure(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	rec := &attempts{}
	tb.funcs["lookup"] = func(_ context.Context, inv loop.Invocation) loop.Result {
		rec.record(inv)
		return loop.Failed(loop.FailUnavailable, 0, "GET http://billing.default.svc/invoices: connection refused")
	}
	run := makeRun(ns, "refused").readTool("lookup").with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools[0].Retry = retryPolicy(3, 300*time.Millisecond, 600*time.Millisecond)
	}).calls("lookup", `{"q":1}`).answer("The billing service is down.").create(t)
	startManager(t, &kits{tools: tb})

	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeToolFailure, "tool lookup (call t1-c1) stayed unavailable after 3 attempts")
	if !strings.Contains(done.Status.Reason, "connection refused") {
		t.Fatalf("reason %q does not carry the last error", done.Status.Reason)
	}
	keys, nums, at := rec.snapshot()
	key := string(done.UID) + "/t1-c1"
	if diff := cmp.Diff([]string{key, key, key}, keys); diff != "" {
		t.Fatalf("idempotency keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{1, 2, 3}, nums); diff != "" {
		t.Fatalf("attempt numbers (-want +got):\n%s", diff)
	}
	// The backoffs (0.3s then 0.6s, jittered to at least half) passed
	// between the attempts; no worker waited them out.
	if at[1].Sub(at[0]) < 150*time.Millisecond || at[2].Sub(at[1]) < 300*time.Millisecond {
		t.Fatalf("attempts at %v: the backoff was not waited", at)
	}
	if u := done.Status.Usage; u == nil || u.ToolCalls != 3 {
		t.Fatalf("usage = %+v, want 3 tool calls (every attempt counts)", done.Status.Usage)
	}
}

func TestRun_retryBackoffSurvivesAManagerRestart(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	rec := &attempts{}
	tb.funcs["lookup"] = func(_ context.Context, inv loop.Invocation) loop.Result {
		if rec.record(inv) == 1 {
			return loop.Result{Failure: &loop.Failure{Kind: loop.FailHTTP, Code: 429, Detail: "429 Too Many Requests", RetryAfter: 3 * time.Second}}
		}
		return loop.Result{Output: []byte(`{"invoices":2}`)}
	}
	run := makeRun(ns, "restart-backoff").readTool("lookup").calls("lookup", `{"q":1}`).answer("Two invoices.").create(t)
	stop := startManager(t, &kits{tools: tb})

	// The first attempt failed and the retry waits in the newest saved
	// checkpoint (in status, or in the chunk that holds the answer and
	// the failed attempt).
	NewWithT(t).Eventually(func() string {
		return newestCheckpoint(t, run)
	}, 20*time.Second, 20*time.Millisecond).Should(ContainSubstring(`"retryAt"`))
	stop()

	startManager(t, &kits{tools: tb})
	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 2")
	keys, nums, at := rec.snapshot()
	if len(keys) != 2 || keys[0] != keys[1] || keys[0] != string(done.UID)+"/t1-c1" || nums[1] != 2 {
		t.Fatalf("attempts: keys %v, numbers %v", keys, nums)
	}
	if at[1].Sub(at[0]) < 3*time.Second {
		t.Fatalf("the retry came %s after the 429, before the 3s the server asked for", at[1].Sub(at[0]))
	}
}

func TestRun_modelOutageIsRetriedThenEndsToolFailure(t *testing.T) {
	ns := namespace(t)
	run := makeRun(ns, "outage").with(func(s *v1alpha1.AgentRunSpec) {
		n := int32(3)
		s.Model.Retry = &v1alpha1.ModelRetry{MaxAttempts: &n, InitialBackoff: &metav1.Duration{Duration: 100 * time.Millisecond}}
	}).step(v1alpha1.ScriptStep{Error: "HTTP 503 upstream overloaded", Transient: true}).create(t)
	startManager(t, &kits{tools: newTools()})

	done := waitOutcome(t, run, 30*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeToolFailure, "the model provider stayed unavailable after 3 attempts")
	if u := done.Status.Usage; u == nil || u.Turns != 1 {
		t.Fatalf("usage = %+v, want 1 turn (retries are not turns)", done.Status.Usage)
	}
}
