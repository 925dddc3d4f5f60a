package controller

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
)

// logLines collects the operator's log as JSON objects.
type logLines struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (l *logLines) add(s string) {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m = map[string]any{"msg": s, "unparsed": true}
	}
	l.mu.Lock()
	l.lines = append(l.lines, m)
	l.mu.Unlock()
}

// of returns the lines about one run (by namespace and name), in order,
// whose message is one of msgs.
func (l *logLines) of(ns, name string, msgs ...string) []map[string]any {
	want := map[string]bool{}
	for _, m := range msgs {
		want[m] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, m := range l.lines {
		if m["namespace"] == ns && m["name"] == name && want[m["msg"].(string)] {
			out = append(out, m)
		}
	}
	return out
}

// startLoggedManager runs the operator with its log captured, reading
// trace ids with traceIDOf.
func startLoggedManager(t *testing.T, kb KitBuilder, traceIDOf func(context.Context, *v1alpha1.AgentRun) string) *logLines {
	t.Helper()
	logs := &logLines{}
	startWith(t, kb, managerSetup{
		options: func(o *ctrl.Options) { o.Logger = funcr.NewJSON(logs.add, funcr.Options{}) },
		config:  func(c *Config) { c.traceIDOf = traceIDOf },
	})
	return logs
}

var transitionMsgs = []string{"Run started", "Run asked for approval", "Approval answered", "Run refused", "Run finished"}

// One structured line per transition, each naming the run: started,
// asked, answered, finished with its outcome; a run that cannot start
// logs its outcome too; and a trace id when the run has one.
func TestLog_oneLinePerTransition(t *testing.T) {
	traceIDOf := func(_ context.Context, run *v1alpha1.AgentRun) string {
		if run.Name == "traced" {
			return "4bf92f3577b34da6a3ce929d0e0e4736"
		}
		return ""
	}
	ns := namespace(t)
	logs := startLoggedManager(t, &brokenKits{kits: kits{tools: newTools()}, broken: "broken"}, traceIDOf)
	g := NewWithT(t)
	const wait, tick = 20 * time.Second, 20 * time.Millisecond

	run := makeRun(ns, "refund").writeTool("refund", false).calls("refund", `{"order":"A-1"}`).answer("Refunded.").create(t)
	g.Eventually(func() int { return len(get(t, run).Status.PendingApprovals) }, wait, tick).Should(Equal(1))
	annotate(t, run, "t1-c1", "approve")
	expectOutcome(t, waitOutcome(t, run, wait), v1alpha1.OutcomeCompleted, "")

	var lines []map[string]any
	g.Eventually(func() int {
		lines = logs.of(ns, "refund", transitionMsgs...)
		return len(lines)
	}, wait, tick).Should(BeNumerically(">=", 4))
	var msgs []string
	for _, l := range lines {
		msgs = append(msgs, l["msg"].(string))
		g.Expect(l).NotTo(HaveKey("traceID"))
	}
	g.Expect(msgs).To(Equal([]string{"Run started", "Run asked for approval", "Approval answered", "Run finished"}))
	g.Expect(lines[1]).To(HaveKeyWithValue("callID", "t1-c1"))
	g.Expect(lines[1]).To(HaveKeyWithValue("tool", "refund"))
	g.Expect(lines[2]).To(HaveKeyWithValue("decision", "approve"))
	g.Expect(lines[2]).To(HaveKeyWithValue("by", adminName))
	g.Expect(lines[3]).To(HaveKeyWithValue("outcome", "Completed"))
	g.Expect(lines[3]).To(HaveKey("costUSD"))

	// A run that cannot start: one line, with the outcome.
	broken := makeRun(ns, "broken").answer("x").create(t)
	expectInvalid(t, waitOutcome(t, broken, wait), "cannot start")
	g.Eventually(func() []map[string]any { return logs.of(ns, "broken", transitionMsgs...) }, wait, tick).Should(
		ConsistOf(And(HaveKeyWithValue("msg", "Run finished"), HaveKeyWithValue("outcome", "Error"))))

	traced := makeRun(ns, "traced").answer("done").create(t)
	expectOutcome(t, waitOutcome(t, traced, wait), v1alpha1.OutcomeCompleted, "")
	g.Eventually(func() []map[string]any { return logs.of(ns, "traced", "Run started", "Run finished") }, wait, tick).Should(
		HaveEach(HaveKeyWithValue("traceID", "4bf92f3577b34da6a3ce929d0e0e4736")))
}

// brokenKits builds runs as kits does, except the run named broken, whose
// kit cannot be built.
type brokenKits struct {
	kits
	broken string
}

func (b *brokenKits) Build(ctx context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error) {
	if run.Name == b.broken {
		return nil, errors.New("a condition does not compile")
	}
	return b.kits.Build(ctx, run, grant)
}
