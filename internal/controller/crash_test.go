package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/agentrun/agentrun/internal/transcript"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var errCrashed = errors.New("the operator has crashed")

// crashPoint says where the first operator dies: before or after its
// write number write (1-based), or while its model call number model is
// in flight, or while the mutating tool runs. Zero everywhere: it never
// dies.
type crashPoint struct {
	write  int
	after  bool
	model  int
	inTool bool
}

func (p crashPoint) String() string {
	switch {
	case p.write > 0 && p.after:
		return fmt.Sprintf("after-write-%d", p.write)
	case p.write > 0:
		return fmt.Sprintf("before-write-%d", p.write)
	case p.model > 0:
		return fmt.Sprintf("during-model-call-%d", p.model)
	case p.inTool:
		return "during-refund"
	}
	return "no-crash"
}

// crashOutcome is what one scenario measured.
type crashOutcome struct {
	writes       int // writes the first operator made (a clean run: all of them)
	crashed      bool
	modelCalls   int64
	modelTokens  int64
	paidTurns    int32
	paidTokens   int64
	refunds      int
	lookups      int
	unknown      bool
	transcriptOK bool
	roles        string
}

// crashScenario runs the scripted run (two reads, an approved refund, a
// final answer) with an operator that dies at p, then a fresh operator to
// the end.
func crashScenario(t *testing.T, p crashPoint) crashOutcome {
	t.Helper()
	ns := namespace(t)
	b := makeRun(ns, "crash").readTool("lookup").with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "refund", Mutates: ref(true), Reversible: ref(false),
			HTTP: &v1alpha1.HTTPTool{URL: "http://billing.invalid/refund", Method: "POST"}})
	}).calls("lookup", `{"q":1}`, "lookup", `{"q":2}`).calls("refund", `{"amount_minor":8240}`).answer("Refunded.")

	var (
		crashOnce sync.Once
		dead      atomic.Bool
		writes    atomic.Int64
		crash     func()
	)
	die := func() { crashOnce.Do(func() { dead.Store(true); go crash() }) }

	tb := newTools()
	var refunds, lookups atomic.Int64
	tb.funcs["refund"] = func(ctx context.Context, _ loop.Invocation) loop.Result {
		if ctx.Err() != nil {
			return loop.Result{Failure: &loop.Failure{Kind: loop.FailUnknown, Detail: "stopped"}} // a dead operator runs nothing
		}
		refunds.Add(1)
		if p.inTool {
			die()
			<-ctx.Done()
		}
		return loop.Result{Output: []byte(`{"refund":"re_1"}`)}
	}
	tb.funcs["lookup"] = func(ctx context.Context, inv loop.Invocation) loop.Result {
		if ctx.Err() != nil {
			return loop.Result{Failure: &loop.Failure{Kind: loop.FailUnknown, Detail: "stopped"}}
		}
		lookups.Add(1)
		return loop.Result{Output: []byte(`{"found":"` + inv.CallID + `"}`)}
	}
	model := &countingModel{inner: &loop.Scripted{Entries: scriptOf(b)}}
	first := &crashModel{countingModel: model, dead: &dead}
	if p.model > 0 {
		first.at, first.die = int64(p.model), die
	}

	_, stop := startReconciler(t, &kits{tools: tb, model: first}, 0, func(c client.Client, cancel func()) client.Client {
		crash = cancel
		return hookClient{Client: c,
			before: func(_ context.Context, _ string, obj client.Object) error {
				if dead.Load() {
					return errCrashed
				}
				if obj.GetNamespace() != ns {
					return nil // another test's run, left over
				}
				n := int(writes.Add(1))
				if n == p.write && !p.after {
					die()
					return errCrashed
				}
				return nil
			},
			after: func(_ string, obj client.Object, _ error) {
				if p.after && obj.GetNamespace() == ns && int(writes.Load()) == p.write {
					die()
				}
			}}
	})
	run := b.create(t)
	drive := func(limit time.Duration) *v1alpha1.AgentRun {
		var cur *v1alpha1.AgentRun
		NewWithT(t).Eventually(func() bool {
			cur = get(t, run)
			if len(cur.Status.PendingApprovals) > 0 && cur.Annotations[v1alpha1.ApprovalAnnotationPrefix+"t2-c1"] == "" {
				annotate(t, run, "t2-c1", "approve")
			}
			return cur.Status.Outcome != "" || dead.Load()
		}, limit, 10*time.Millisecond).Should(BeTrue(), "%s: the run neither ended nor crashed", p)
		return cur
	}
	drive(30 * time.Second)
	// Stopped before reading whether it crashed: a crash after the run's
	// last write happens once that write has returned, which the test can
	// see before the hook has run.
	stop()
	out := crashOutcome{writes: int(writes.Load()), crashed: dead.Load()}

	// A fresh operator, the same outside world.
	_, stop = startReconciler(t, &kits{tools: tb, model: model}, 0, nil)
	defer stop() // one operator at a time, as leader election makes it
	NewWithT(t).Eventually(func() v1alpha1.Outcome { return drive(30 * time.Second).Status.Outcome }, 30*time.Second, 10*time.Millisecond).
		ShouldNot(BeEmpty())
	done := get(t, run)
	if done.Status.Outcome != v1alpha1.OutcomeCompleted {
		msgs, _ := transcript.Read(context.Background(), k8sClient, done)
		var roles []string
		for _, m := range msgs {
			roles = append(roles, string(m.Role)+":"+m.CallID+":"+clip.Cut(m.Content, 80, runstatus.CutMark))
		}
		t.Fatalf("%s: outcome %s: %s; usage %+v; model calls %d; transcript %q", p, done.Status.Outcome, done.Status.Reason, done.Status.Usage, model.calls.Load(), roles)
	}
	out.modelCalls, out.modelTokens = model.calls.Load(), model.tokens.Load()
	out.paidTurns = done.Status.Usage.Turns
	out.paidTokens = done.Status.Usage.InputTokens + done.Status.Usage.OutputTokens
	out.refunds, out.lookups = int(refunds.Load()), int(lookups.Load())
	msgs := readTranscript(t, done)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, string(m.Role)+":"+m.CallID)
		if m.CallID == "t2-c1" && strings.Contains(m.Content, "is unknown") {
			out.unknown = true
		}
	}
	out.roles = strings.Join(roles, " ")
	out.transcriptOK = out.roles == "assistant: tool:t1-c1 tool:t1-c2 assistant: tool:t2-c1 assistant:" &&
		int(done.Status.Transcript.Messages) == len(msgs)
	return out
}

// crashModel is the first operator's model: it stops answering once the
// operator is dead, and kills it during call number at.
type crashModel struct {
	*countingModel
	dead *atomic.Bool
	at   int64
	die  func()
	n    atomic.Int64
}

func (m *crashModel) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	if m.dead.Load() {
		return nil, context.Canceled
	}
	if m.at > 0 && m.n.Add(1) == m.at {
		// The call goes out (a turn the provider bills, whose tokens
		// nobody learns), and the operator dies before the reply is back.
		m.calls.Add(1)
		m.die()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return m.countingModel.Complete(ctx, req)
}

// TestCrash_atEveryWriteBoundaryOfATurn kills the operator before and
// after each of its writes in a run, and during each model call and the
// mutating tool, then lets a fresh operator finish the run. In every case:
// the mutating call ran at most once, no turn is lost, spend is never
// under-counted, and the transcript is whole.
func TestCrash_atEveryWriteBoundaryOfATurn(t *testing.T) {
	clean := crashScenario(t, crashPoint{})
	if clean.crashed || clean.refunds != 1 || clean.paidTurns != 3 || !clean.transcriptOK {
		t.Fatalf("the clean run: %+v", clean)
	}
	points := []crashPoint{}
	for w := 1; w <= clean.writes; w++ {
		points = append(points, crashPoint{write: w}, crashPoint{write: w, after: true})
	}
	for m := 1; m <= 3; m++ {
		points = append(points, crashPoint{model: m})
	}
	points = append(points, crashPoint{inTool: true})

	var unknown, overcharged, crashed, unreached int
	for _, p := range points {
		out := crashScenario(t, p)
		if !out.crashed {
			// A clean run makes a write or two more or less depending on
			// how the informer and the approval annotation interleave, so
			// the last two boundaries may not exist in this run (under
			// load, "after-write-14" was once never reached). Any earlier
			// one must be reached.
			if p.write > 0 && out.writes < p.write && p.write >= clean.writes-2 {
				unreached++
				t.Logf("%s: not reached, this run made %d writes", p, out.writes)
				continue
			}
			t.Errorf("%s: the operator never crashed (%d writes)", p, out.writes)
		}
		crashed++
		if out.refunds > 1 {
			t.Errorf("%s: the refund ran %d times", p, out.refunds)
		}
		if out.refunds == 0 && !out.unknown {
			t.Errorf("%s: the refund never ran and the model was not told its outcome is unknown", p)
		}
		if !out.transcriptOK {
			t.Errorf("%s: transcript is not whole: %s", p, out.roles)
		}
		if int64(out.paidTurns) < out.modelCalls || out.paidTokens < out.modelTokens {
			t.Errorf("%s: spend under-counted: paid %d turns, %d tokens for %d calls, %d tokens", p, out.paidTurns, out.paidTokens, out.modelCalls, out.modelTokens)
		}
		if int64(out.paidTurns) > out.modelCalls {
			overcharged++
		}
		if out.unknown {
			unknown++
		}
		t.Logf("%-22s refunds=%d lookups=%d model-calls=%d paid-turns=%d tokens=%d/%d unknown=%v", p, out.refunds, out.lookups,
			out.modelCalls, out.paidTurns, out.paidTokens, out.modelTokens, out.unknown)
	}
	if crashed < len(points)-4 {
		t.Errorf("only %d of %d crash points were reached", crashed, len(points))
	}
	t.Logf("crash points: %d (%d write boundaries before and after, 3 model calls, 1 tool), %d reached, %d beyond this run's last write; a clean run makes %d writes; "+
		"duplicate refunds: 0; lost turns: 0; runs charged for a lost call's reservation: %d; refunds reported unknown: %d",
		len(points), clean.writes, crashed, unreached, clean.writes, overcharged, unknown)
}
