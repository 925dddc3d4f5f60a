package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	. "github.com/onsi/gomega"
)

// hostileKits builds kits as kits does, except for runs labelled hostile:
// slow-server stands for a run whose MCP servers answer the inspection
// slowly (the build waits until its context ends or the test does), and
// many-calls for a run whose model proposes 10,000 calls every turn.
type hostileKits struct {
	kits
	release chan struct{}
}

func (h *hostileKits) Build(ctx context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error) {
	switch run.Labels["hostile"] {
	case "slow-server":
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-h.release:
			return nil, fmt.Errorf("the test ended")
		}
	case "many-calls":
		k, err := h.kits.Build(ctx, run, grant)
		if err != nil {
			return nil, err
		}
		calls := make([]loop.ToolCall, 10_000)
		for i := range calls {
			calls[i] = loop.ToolCall{Name: "lookup", Arguments: json.RawMessage(fmt.Sprintf(`{"q":"%d"}`, i))}
		}
		entries := make([]loop.ScriptEntry, 12)
		for i := range entries {
			entries[i] = loop.ScriptEntry{ToolCalls: calls}
		}
		k.Model = &loop.Scripted{Entries: entries}
		return k, nil
	}
	return h.kits.Build(ctx, run, grant)
}

// Issue 27, finding 3: a run's kit was built on a reconcile worker, and
// building it inspects the run's MCP servers (30 s each, one after
// another), so four hostile runs held all four workers and no other
// tenant's run advanced; a reply of thousands of calls was vetted there
// too. With two runs of each kind in flight, a victim run still
// completes at once.
func TestVictimRunCompletesWhileHostileRunsTryToHoldTheOperator(t *testing.T) {
	ns := namespace(t)
	h := &hostileKits{kits: kits{tools: newTools()}, release: make(chan struct{})}
	t.Cleanup(func() { close(h.release) })
	startManagerWithWorkers(t, h, 2)
	for i, kind := range []string{"slow-server", "slow-server", "many-calls", "many-calls"} {
		b := makeRun(ns, fmt.Sprintf("hostile-%d", i)).readTool("lookup").answer("unused")
		b.r.Labels = map[string]string{"hostile": kind}
		b.create(t)
	}
	victim := makeRun(ns, "victim").readTool("lookup").calls("lookup", `{"q":"x"}`).answer("Found it.").create(t)
	start := time.Now()
	done := waitOutcome(t, victim, 15*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer")
	t.Logf("the victim completed in %s", time.Since(start).Round(time.Millisecond))
	// The runs of many calls were told the bound every turn and ran none.
	NewWithT(t).Eventually(func() string {
		return string(get(t, makeRun(ns, "hostile-2").r).Status.Outcome)
	}, 20*time.Second, 50*time.Millisecond).ShouldNot(BeEmpty())
	if n := len(h.tools.counts()); n != 1 {
		t.Fatalf("calls ran: %v, want only the victim's", h.tools.counts())
	}
}
