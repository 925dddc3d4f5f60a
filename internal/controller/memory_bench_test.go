package controller

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	. "github.com/onsi/gomega"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
)

// waitingModel answers no call until its context ends: every run it
// serves waits on the model, as a thousand runs do on a slow provider.
type waitingModel struct{ calls *atomic.Int64 }

func (m waitingModel) Complete(ctx context.Context, _ *loop.Request) (*loop.Reply, error) {
	m.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// BenchmarkActiveRunMemory measures the operator's heap per run in flight:
// 1,000 runs (three tools with parameter schemas and a policy condition,
// as a platform writes them) all waiting on the model. The figure is the
// live heap after a GC with the runs waiting, less the heap before they
// were created, over their number (B/run). Target: at most 50 KiB. Run it
// alone: go test -run XXX -bench ActiveRunMemory -benchtime 1x.
func BenchmarkActiveRunMemory(b *testing.B) {
	const runs = 1000
	var calls atomic.Int64
	for range b.N {
		calls.Store(0)
		ns := namespace(b)
		_, stop := startWith(b, &kits{tools: newTools(), model: waitingModel{calls: &calls}}, managerSetup{})
		before := liveHeap()
		for i := range runs {
			run := memoryRun(ns, fmt.Sprintf("m-%04d", i))
			if err := k8sClient.Create(context.Background(), run); err != nil {
				b.Fatal(err)
			}
		}
		g := NewWithT(b)
		g.Eventually(calls.Load, 5*time.Minute, 100*time.Millisecond).Should(BeNumerically(">=", runs), "not every run reached its model call")
		after := liveHeap()
		if p := os.Getenv("AGENTRUN_HEAP_PROFILE"); p != "" {
			writeHeapProfile(b, p) // what the runs hold, while they wait
		}
		b.ReportMetric(float64(after-before)/runs, "B/run")
		stop()
	}
}

func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func memoryRun(ns, name string) *v1alpha1.AgentRun {
	b := makeRun(ns, name).maxTurns(20).answer("done")
	schema := func(props string) *k8sruntime.RawExtension {
		return &k8sruntime.RawExtension{Raw: []byte(`{"type":"object","properties":{` + props + `},"additionalProperties":false}`)}
	}
	b.r.Spec.Tools = []v1alpha1.ToolSpec{
		{Name: "get_order", Description: "Read an order by its id.", Builtin: v1alpha1.BuiltinTool("kubernetes.get"),
			Parameters: schema(`"id":{"type":"string","maxLength":64},"fields":{"type":"array","items":{"type":"string"}}`)},
		{Name: "search", Description: "Search the knowledge base.", Builtin: v1alpha1.BuiltinTool("kubernetes.get"),
			Parameters: schema(`"query":{"type":"string"},"limit":{"type":"integer","minimum":1,"maximum":50}`)},
		{Name: "refund", Description: "Refund part of an order.", Builtin: v1alpha1.BuiltinTool("kubernetes.get"),
			Parameters: schema(`"order":{"type":"string"},"amount_minor":{"type":"integer","minimum":0}`)},
	}
	b.r.Spec.Policy = &v1alpha1.PolicySpec{Rules: []v1alpha1.PolicyRule{{Tools: []string{"refund"}, When: "args.amount_minor > 5000", Decision: v1alpha1.PolicyAsk}}}
	return b.r
}
