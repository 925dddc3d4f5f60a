package controller

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
)

// A call refused before policy (an unknown tool, arguments that are not
// JSON, arguments that break the tool's schema) is recorded as a Warning
// event on the AgentRun, as denials and approvals are, not only in the
// transcript.
func TestRun_everyRefusedCallIsAWarningEvent(t *testing.T) {
	ns := namespace(t)
	// The model is scripted in Go: an API object cannot hold arguments
	// that are not JSON.
	model := &loop.Scripted{Entries: []loop.ScriptEntry{
		{ToolCalls: []loop.ToolCall{
			{Name: "shout", Arguments: json.RawMessage(`{"text":"hello"}`)},
			{Name: "lookup", Arguments: json.RawMessage(`{"q":`)},
			{Name: "lookup", Arguments: json.RawMessage(`{"q":7}`)},
		}},
		{Content: "I could not look it up."},
	}}
	tb := newTools()
	startManager(t, &kits{tools: tb, model: model})
	run := makeRun(ns, "refusals").readTool("lookup").answer("unused: the Go model answers").with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools[0].Parameters = &runtime.RawExtension{Raw: []byte(`{"type":"object","properties":{"q":{"type":"string"}}}`)}
	}).create(t)
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer on turn 2")
	if len(tb.counts()) != 0 {
		t.Fatalf("a refused call ran: %v", tb.counts())
	}

	NewWithT(t).Eventually(func() []string { return warningsOn(t, run, string(loop.NoteCallVetted)) }, 10*time.Second, 50*time.Millisecond).Should(ContainElements(
		ContainSubstring(`t1-c1 shout: deny (unknown-tool): no tool is named "shout"`),
		ContainSubstring("t1-c2 lookup: deny (invalid-arguments): the arguments were refused: arguments are not valid JSON"),
		ContainSubstring("t1-c3 lookup: deny (invalid-arguments): the arguments do not match its parameters: at /q:"),
	))
}
