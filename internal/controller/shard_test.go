package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// shardKits builds kits as kits does (each run's scripted model, the
// test's toolbox) and records every model call its manager makes: by run,
// the calls' places in the script. hold, when set, may block a call.
type shardKits struct {
	tools *tools
	hold  func(ctx context.Context, run string, call int)

	mu    sync.Mutex
	calls map[string][]int
}

func newShardKits(tb *tools) *shardKits { return &shardKits{tools: tb, calls: map[string][]int{}} }

func (k *shardKits) Build(ctx context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error) {
	kit, err := (&kits{tools: k.tools}).Build(ctx, run, grant)
	if err != nil {
		return nil, err
	}
	kit.Model = &recordingModel{kits: k, run: run.Name, inner: kit.Model}
	return kit, nil
}

func (k *shardKits) of(run string) []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.calls[run])
}

type recordingModel struct {
	kits  *shardKits
	run   string
	inner loop.Model
}

func (m *recordingModel) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err() // a stopped operator calls no model
	}
	call := req.EarlierAnswers + turnOf(req) - 1 // as loop.Scripted counts: this call's entry
	m.kits.mu.Lock()
	m.kits.calls[m.run] = append(m.kits.calls[m.run], call)
	m.kits.mu.Unlock()
	if m.kits.hold != nil {
		m.kits.hold(ctx, m.run, call)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return m.inner.Complete(ctx, req)
}

// startShard starts a manager for one shard of the runs in ns, wired as
// the operator wires --shard (ShardCache, Config.Shard).
func startShard(t *testing.T, kb KitBuilder, ns, shard string, more func(*ctrl.Options)) (*Metrics, func()) {
	t.Helper()
	r, stop := startWith(t, kb, managerSetup{
		options: func(o *ctrl.Options) {
			o.Cache.DefaultNamespaces, o.Cache.ByObject = map[string]cache.Config{ns: {}}, ShardCache(shard)
			if more != nil {
				more(o)
			}
		},
		config: func(c *Config) {
			c.Shard = shard
			c.Namespaces = []string{ns}
			c.UnclaimedEvery, c.UnclaimedAfter = 200*time.Millisecond, time.Second
		},
	})
	return r.Metrics, stop
}

func shardedRun(ns, name, shard string) *runBuilder {
	b := makeRun(ns, name).readTool("lookup").calls("lookup", `{"q":1}`).calls("lookup", `{"q":2}`).answer("Done.")
	if shard != "" {
		b.r.Labels = map[string]string{v1alpha1.LabelShard: shard}
	}
	return b
}

// Two shards and the unsharded default in one API server: each run is
// driven by its shard's manager alone, every model call of its script made
// once; a run labelled for a shard no manager serves is left alone, and the
// unsharded manager reports it in agentrun_runs_unclaimed.
func TestShards_driveDisjointRuns(t *testing.T) {
	ns := namespace(t)
	shards := []string{"a", "b", ""}
	managers := map[string]*shardKits{}
	var unsharded *Metrics // the one that reports agentrun_runs_unclaimed
	for _, s := range shards {
		managers[s] = newShardKits(newTools())
		if m, _ := startShard(t, managers[s], ns, s, nil); s == "" {
			unsharded = m
		}
	}
	var runs []*v1alpha1.AgentRun
	for _, s := range shards {
		for i := range 3 {
			runs = append(runs, shardedRun(ns, fmt.Sprintf("run-%s%d", s, i), s).create(t))
		}
	}
	orphan := shardedRun(ns, "orphan", "c").create(t)

	g := NewWithT(t)
	for _, run := range runs {
		g.Eventually(func() v1alpha1.Outcome { return get(t, run).Status.Outcome }, 60*time.Second, 20*time.Millisecond).
			Should(Equal(v1alpha1.OutcomeCompleted), "run %s", run.Name)
	}
	for _, run := range runs {
		shard := run.Labels[v1alpha1.LabelShard]
		for _, s := range shards {
			calls := managers[s].of(run.Name)
			if s == shard {
				g.Expect(calls).To(Equal([]int{0, 1, 2}), "run %s: its shard %q made each call of its script once", run.Name, s)
			} else {
				g.Expect(calls).To(BeEmpty(), "run %s (shard %q) was driven by shard %q", run.Name, shard, s)
			}
		}
	}
	g.Eventually(func() float64 {
		return sample(scrape(t, unsharded), "agentrun_runs_unclaimed", map[string]string{"shard": "c"})
	}, 30*time.Second, 100*time.Millisecond).Should(Equal(1.0), "the run of shard c is reported unclaimed")
	cur := get(t, orphan)
	g.Expect(cur.Status.Phase).To(BeEmpty(), "no manager serves shard c")
	for _, s := range shards {
		g.Expect(managers[s].of(orphan.Name)).To(BeEmpty(), "shard %q drove the run of shard c", s)
	}

	// A shard comes up for c: the run is driven, and no longer reported.
	managers["c"] = newShardKits(newTools())
	startShard(t, managers["c"], ns, "c", nil)
	g.Eventually(func() v1alpha1.Outcome { return get(t, orphan).Status.Outcome }, 60*time.Second, 20*time.Millisecond).
		Should(Equal(v1alpha1.OutcomeCompleted))
	g.Expect(managers["c"].of(orphan.Name)).To(Equal([]int{0, 1, 2}))
	g.Eventually(func() float64 {
		return sample(scrape(t, unsharded), "agentrun_runs_unclaimed", map[string]string{"shard": "c"})
	}, 30*time.Second, 100*time.Millisecond).Should(BeZero())
}

// Two replicas of one shard elect a leader; the leader stops while a model
// call is in flight. The other replica takes the lease and finishes the
// run: the calls the leader saved are not made again (only the one it was
// making when it stopped), every tool call ran once, and the run Completed.
func TestShards_failoverLosesNothing(t *testing.T) {
	ns := namespace(t)
	const shard = "f"
	election := func(o *ctrl.Options) {
		o.LeaderElection = true
		o.LeaderElectionID = "agentrun-shard-f.agents.agentrun.dev"
		o.LeaderElectionNamespace = ns
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = ptr.To(3*time.Second), ptr.To(2*time.Second), ptr.To(200*time.Millisecond)
	}
	tb := newTools()
	held := make(chan struct{})
	var once sync.Once
	first := newShardKits(tb)
	// The first replica's third model call (after two saved turns, each
	// with a tool call) waits until the replica stops.
	first.hold = func(ctx context.Context, _ string, call int) {
		if call == 2 {
			once.Do(func() { close(held) })
			<-ctx.Done()
		}
	}
	_, stopFirst := startShard(t, first, ns, shard, election)
	run := shardedRun(ns, "failover", shard).create(t)
	await(t, held, 60*time.Second, "the first replica never reached its third model call")
	// The second replica waits for the lease while the first holds it.
	second := newShardKits(tb)
	startShard(t, second, ns, shard, election)
	g := NewWithT(t)
	g.Consistently(func() []int { return second.of(run.Name) }, time.Second, 50*time.Millisecond).Should(BeEmpty(),
		"the standby drove the run while the leader held the lease")
	stopFirst()

	g.Eventually(func() v1alpha1.Outcome { return get(t, run).Status.Outcome }, 60*time.Second, 20*time.Millisecond).
		Should(Equal(v1alpha1.OutcomeCompleted))
	g.Expect(first.of(run.Name)).To(Equal([]int{0, 1, 2}), "the leader's calls, the last cut short")
	g.Expect(second.of(run.Name)).To(Equal([]int{2}), "the new leader repeats only the call in flight")
	g.Expect(tb.counts()).To(Equal(map[string]int{"t1-c1:lookup": 1, "t2-c1:lookup": 1}), "each tool call ran once")
	cur := get(t, run)
	g.Expect(cur.Status.Turn).To(BeEquivalentTo(3))
	g.Expect(cur.Status.Usage).NotTo(BeNil())
	g.Expect(cur.Status.Usage.Turns).To(BeEquivalentTo(4), "every model call made is charged, the one cut short too (it may have cost)")
}

// Issue 27, finding 7: anyone who could patch a run could move it to
// another shard while it ran (the other shard repeats the model call in
// flight and fails job calls). The admission policy refuses it while the
// run runs, and allows it before the run starts.
func TestShard_labelCannotMoveARunningRun(t *testing.T) {
	ns := namespace(t)
	startShard(t, &kits{tools: newTools()}, ns, "", nil)
	run := refundRun(ns, "refund").answer("Refunded.").create(t)
	waitPending(t, run, 1)
	ctx := context.Background()
	move := func(r *v1alpha1.AgentRun, shard any) error {
		return patchLabels(ctx, r, map[string]any{v1alpha1.LabelShard: shard})
	}
	err := move(run, "other")
	if err == nil || !strings.Contains(err.Error(), "cannot change while the run is running") {
		t.Fatalf("moving a running run to another shard: %v", err)
	}
	// A run nobody has started may be moved (here: out of a shard no
	// operator serves, to the operator of the tests).
	waiting := makeRun(run.Namespace, "unclaimed").answer("ok")
	waiting.r.Labels = map[string]string{v1alpha1.LabelShard: "nobody"}
	waiting.create(t)
	if err := move(waiting.r, nil); err != nil {
		t.Fatalf("moving a run that has not started: %v", err)
	}
	expectOutcome(t, waitOutcome(t, waiting.r, 20*time.Second), v1alpha1.OutcomeCompleted, "")
}

func patchLabels(ctx context.Context, run *v1alpha1.AgentRun, labels map[string]any) error {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	return k8sClient.Patch(ctx, run.DeepCopy(), client.RawPatch("application/merge-patch+json", body))
}
