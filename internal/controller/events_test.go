package controller

import (
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
)

// Issue 13, item 2: a turn that goes as planned used to record four
// events (turn started, model answered, call vetted, call finished), each
// a write to the API server. By default a run of N turns records N events
// (the model's answer on each turn) and its outcome; --event-verbosity=call
// records the turns' starts and every call's verdict and result as well.
func TestEvents_oneEventPerTurnByDefaultEveryCallAtCallVerbosity(t *testing.T) {
	ns := namespace(t)
	script := func(name string) *runBuilder {
		return makeRun(ns, name).readTool("lookup").
			calls("lookup", `{"q":1}`).calls("lookup", `{"q":2}`).calls("lookup", `{"q":3}`).answer("found it")
	}
	const turns = 4

	stop := startManager(t, &kits{tools: newTools()})
	run := script("quiet").create(t)
	expectOutcome(t, waitOutcome(t, run, 20*time.Second), v1alpha1.OutcomeCompleted, "turn 4")
	want := []string{}
	for range turns {
		want = append(want, "ModelAnswered")
	}
	want = append(want, "Completed")
	g := NewWithT(t)
	g.Eventually(func() []string { return eventReasons(t, ns, run.Name) }, 10*time.Second, 50*time.Millisecond).
		Should(ConsistOf(want), "at most one event per turn, and the outcome")
	stop()

	startWith(t, &kits{tools: newTools()}, managerSetup{config: func(c *Config) { c.EventVerbosity = EventsPerCall }})
	loud := script("loud").create(t)
	expectOutcome(t, waitOutcome(t, loud, 20*time.Second), v1alpha1.OutcomeCompleted, "turn 4")
	for range turns {
		want = append(want, "TurnStarted")
	}
	for range turns - 1 {
		want = append(want, "CallVetted", "CallFinished")
	}
	g.Eventually(func() []string { return eventReasons(t, ns, loud.Name) }, 10*time.Second, 50*time.Millisecond).
		Should(ConsistOf(want), "every turn's start, answer, and every call's verdict and result")
}

func TestParseEventVerbosity(t *testing.T) {
	for in, want := range map[string]EventVerbosity{"turn": EventsPerTurn, "call": EventsPerCall} {
		if got, err := ParseEventVerbosity(in); err != nil || got != want {
			t.Errorf("ParseEventVerbosity(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseEventVerbosity("all"); err == nil {
		t.Error("ParseEventVerbosity(\"all\") succeeded")
	}
}

// Issue 43, item 2: a cost ceiling over tools that declare no maxCostUSD
// covers only the model. The run says so as it starts: one Warning event
// naming the unpriced tools (a builtin tool costs nothing and is not
// named), and the run goes on.
func TestEvents_aRunWithUnpricedToolsSaysSoAsItStarts(t *testing.T) {
	ns := namespace(t)
	startManager(t, &kits{tools: newTools()})
	run := makeRun(ns, "unpriced").readTool("pods").writeTool("issue_refund", true).
		calls("pods", `{"name":"a"}`).answer("Done.").create(t)
	expectOutcome(t, waitOutcome(t, run, 20*time.Second), v1alpha1.OutcomeCompleted, "")
	NewWithT(t).Eventually(func() []string {
		return eventNotes(t, ns, "AgentRun", run.Name, corev1.EventTypeWarning, string(loop.NoteToolCostsUndeclared))
	}, 10*time.Second, 50*time.Millisecond).Should(ConsistOf(And(
		HavePrefix("Tool issue_refund declares no maxCostUSD: the cost ceiling of $1.0000 counts their calls as $0"),
		Not(ContainSubstring("pods")))))
}
