package controller

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/agentrun/agentrun/internal/testenv"
)

// countWrites counts every write the operator makes through c.
func countWrites(c client.Client, writes *atomic.Int64) client.Client {
	return hookClient{Client: c, before: func(context.Context, string, client.Object) error {
		writes.Add(1)
		return nil
	}}
}

// turnOf is the turn a request is for: one more than the model's replies
// in it.
func turnOf(req *loop.Request) int {
	turn := 1
	for _, msg := range req.Messages {
		if msg.Role == loop.RoleAssistant {
			turn++
		}
	}
	return turn
}

// noToolModel answers every turn with a truncated answer (a turn without
// tools that does not end the run) until turn n, then a final answer.
type noToolModel struct{ n int }

func (m noToolModel) Complete(_ context.Context, req *loop.Request) (*loop.Reply, error) {
	turn, u := turnOf(req), loop.TokenUsage{InputTokens: 10, OutputTokens: 1}
	if turn > m.n {
		return &loop.Reply{Content: "done", Usage: u}, nil
	}
	return &loop.Reply{Content: "…", Truncated: true, Usage: u}, nil
}

// BenchmarkTurnWrites measures API writes and wall time per no-tool turn,
// each against one bare status patch of the same kind of object measured
// in the same run. Targets: at most 1.5 writes per turn, at most 2x the
// bare patch's time.
func BenchmarkTurnWrites(b *testing.B) {
	ctx := context.Background()
	nsName := func() string {
		t := &testing.T{}
		return namespace(t)
	}()

	// The same number of no-tool turns through the operator.
	var writes atomic.Int64
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{Scheme: testenv.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		b.Fatal(err)
	}
	r := NewAgentRunReconciler(Config{Client: countWrites(mgr.GetClient(), &writes), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("agentrun"), Kits: &kits{tools: newTools(), model: noToolModel{n: b.N}}})
	if err := r.SetupWithManager(mgr); err != nil {
		b.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = mgr.Start(mctx) }()
	if !mgr.GetCache().WaitForCacheSync(mctx) {
		b.Fatal("cache did not sync")
	}
	run := makeRun(nsName, fmt.Sprintf("turns-%d", b.N)).maxTurns(int32(b.N + 1)).answer("x").
		budget(func(bs *v1alpha1.BudgetSpec) {
			bs.MaxTokens = ptr64(int64(b.N+1) * 100_000)
			bs.MaxWallClock = &metav1.Duration{Duration: time.Hour}
		}).r
	b.ResetTimer()
	start := time.Now()
	if err := k8sClient.Create(ctx, run); err != nil {
		b.Fatal(err)
	}
	for {
		cur := &v1alpha1.AgentRun{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(run), cur); err != nil {
			b.Fatal(err)
		}
		if cur.Status.Outcome != "" {
			if cur.Status.Outcome != v1alpha1.OutcomeCompleted || int(cur.Status.Usage.Turns) != b.N+1 {
				b.Fatalf("outcome %s after %d turns: %s", cur.Status.Outcome, cur.Status.Usage.Turns, cur.Status.Reason)
			}
			break
		}
		if time.Since(start) > 10*time.Minute {
			b.Fatal("the run did not finish")
		}
		time.Sleep(10 * time.Millisecond) // a light poll: at most 10 ms of overshoot over the whole run
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()

	// One bare status patch of the same object (same size), measured b.N
	// times once the operator has stopped.
	bare := &v1alpha1.AgentRun{}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(run), bare); err != nil {
		b.Fatal(err)
	}
	pstart := time.Now()
	for i := 0; i < b.N; i++ {
		before := bare.DeepCopy()
		bare.Status.Turn++
		if err := k8sClient.Status().Patch(ctx, bare, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			b.Fatal(err)
		}
	}
	patchTime := time.Since(pstart) / time.Duration(b.N)
	turns := float64(b.N + 1)
	perTurn := elapsed / time.Duration(b.N+1)
	// Events go out asynchronously through the recorder's own client; count
	// them apart (two per no-tool turn: turn started, model answered).
	evs := &eventsv1.EventList{}
	if err := k8sClient.List(ctx, evs, client.InNamespace(nsName)); err != nil {
		b.Fatal(err)
	}
	events := 0
	for _, e := range evs.Items {
		if e.Regarding.Name == run.Name {
			events += max(1, int(e.DeprecatedCount))
		}
	}
	b.ReportMetric(float64(events)/turns, "events/turn")
	b.ReportMetric(float64(writes.Load())/turns, "writes/turn")
	b.ReportMetric(float64(perTurn.Microseconds()), "µs/turn")
	b.ReportMetric(float64(patchTime.Microseconds()), "µs/bare-patch")
	b.ReportMetric(float64(perTurn)/float64(patchTime), "turn/bare-patch")
}
