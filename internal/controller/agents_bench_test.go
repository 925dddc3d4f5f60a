package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/tools/agent"
	"github.com/agentrun/agentrun/internal/tools/job"
)

// BenchmarkAgentChild measures what one child run costs the operator
// beyond its own turns (issue 45): the operator's API writes (creates,
// updates, patches, deletes, status writes; events apart), its CPU and the
// wall time, for b.N trees of a parent that calls an agent tool once and
// answers (2 turns) and its child that answers at once (1 turn), against
// b.N pairs of the same work without the tree: a parent that calls a read
// tool (a job tool run as a local process) and answers, and a separate
// 1-turn run. The difference per child is
// reported as writes/child, cpu-µs/child and µs/child; ns/op is one tree.
//
//	go test ./internal/controller -run '^$' -bench BenchmarkAgentChild -benchtime 10x
func BenchmarkAgentChild(b *testing.B) {
	ctx := context.Background()
	ns := namespace(b)
	var writes atomic.Int64
	w := job.NewWakeups()
	kb := &kit.Builder{LocalJobs: true, LocalDir: b.TempDir()}
	startWith(b, kb, managerSetup{
		wrap: func(c client.Client, _ func()) client.Client {
			c = countWrites(c, &writes)
			kb.Agents = agent.Config{Client: c, Reader: k8sClient, Wakeups: w, PollInterval: time.Second}
			return c
		},
		config: func(c *Config) { c.ChildRuns = w },
	})

	child := makeRun(ns, "").maxTurns(3).answer("Account $(params.account): a refund is due.").
		budget(func(bs *v1alpha1.BudgetSpec) { bs.MaxCostUSD = "0.50" }).
		with(func(s *v1alpha1.AgentRunSpec) { s.Goal = "Investigate account $(params.account)." })
	raw, err := json.Marshal(child.r.Spec)
	if err != nil {
		b.Fatal(err)
	}
	tpl := &v1alpha1.AgentRunTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "investigator"},
		Spec: v1alpha1.AgentRunTemplateSpec{Parameters: []v1alpha1.TemplateParameter{{Name: "account", Required: true}}}}
	if err := json.Unmarshal(raw, &tpl.Spec.Run); err != nil {
		b.Fatal(err)
	}
	if err := k8sClient.Create(ctx, tpl); err != nil {
		b.Fatal(err)
	}
	budget := func(bs *v1alpha1.BudgetSpec) { bs.MaxCostUSD = "2" }

	// measure runs the runs mk(i) returns for i < b.N, one at a time to
	// their end, and returns the operator's writes, its CPU and the time.
	measure := func(mk func(i int) []*v1alpha1.AgentRun) (int64, time.Duration, time.Duration) {
		before, cpu0, start := writes.Load(), cpuTime(b), time.Now()
		for i := 0; i < b.N; i++ {
			runs := mk(i)
			for _, r := range runs {
				if err := k8sClient.Create(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
			for _, r := range runs {
				if got := benchOutcome(b, r); got.Status.Outcome != v1alpha1.OutcomeCompleted {
					b.Fatalf("%s ended %s: %s", r.Name, got.Status.Outcome, got.Status.Reason)
				}
			}
		}
		return writes.Load() - before, cpuTime(b) - cpu0, time.Since(start)
	}

	b.ResetTimer()
	treeWrites, treeCPU, treeTime := measure(func(i int) []*v1alpha1.AgentRun {
		return []*v1alpha1.AgentRun{makeRun(ns, fmt.Sprintf("tree-%d", i)).with(agentTool("investigate", "investigator", nil)).
			budget(budget).calls("investigate", `{"account":"acme"}`).answer("A refund is due.").r}
	})
	b.StopTimer()
	// Every tree made one child, and only one.
	var l v1alpha1.AgentRunList
	if err := k8sClient.List(ctx, &l, client.InNamespace(ns), client.HasLabels{v1alpha1.LabelParent}); err != nil {
		b.Fatal(err)
	}
	if len(l.Items) != b.N {
		b.Fatalf("%d children for %d trees", len(l.Items), b.N)
	}
	flatWrites, flatCPU, flatTime := measure(func(i int) []*v1alpha1.AgentRun {
		return []*v1alpha1.AgentRun{
			makeRun(ns, fmt.Sprintf("flat-%d", i)).budget(budget).
				calls("lookup", `{"account":"acme"}`).answer("A refund is due.").
				with(func(s *v1alpha1.AgentRunSpec) {
					s.Model.Pricing = &v1alpha1.ModelPricing{Input: "5", Output: "5"}
					s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "lookup", Mutates: ptr.To(false),
						Job: &v1alpha1.JobTool{Image: "example.com/tools:1", Command: []string{"sh", "-c", "cat >/dev/null; echo '{}'"}}})
				}).r,
			makeRun(ns, fmt.Sprintf("alone-%d", i)).maxTurns(3).answer("Account acme: a refund is due.").
				budget(func(bs *v1alpha1.BudgetSpec) { bs.MaxCostUSD = "0.50" }).r,
		}
	})
	n := float64(b.N)
	b.ReportMetric(float64(treeWrites)/n, "writes/tree")
	b.ReportMetric(float64(flatWrites)/n, "writes/flat")
	b.ReportMetric(float64(treeWrites-flatWrites)/n, "writes/child")
	b.ReportMetric(float64((treeCPU-flatCPU).Microseconds())/n, "cpu-µs/child")
	b.ReportMetric(float64((treeTime-flatTime).Microseconds())/n, "µs/child")
}

// cpuTime is the CPU (user and system) this process has used: the
// operator's, since envtest's API server and etcd are other processes.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchOutcome waits (bounded) for the run to end.
func benchOutcome(b *testing.B, run *v1alpha1.AgentRun) *v1alpha1.AgentRun {
	deadline := time.Now().Add(time.Minute)
	for {
		cur := &v1alpha1.AgentRun{}
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(run), cur); err != nil {
			b.Fatal(err)
		}
		if cur.Status.Outcome != "" {
			return cur
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s did not end within a minute", run.Name)
		}
		time.Sleep(10 * time.Millisecond) // a light poll, as BenchmarkTurnWrites
	}
}
