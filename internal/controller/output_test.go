package controller

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// typed gives the run a typed output with schema.
func (b *runBuilder) typed(schema string) *runBuilder {
	b.r.Spec.Output = &v1alpha1.OutputSpec{Schema: runtime.RawExtension{Raw: []byte(schema)}}
	return b
}

// Issue 45, item 1, through the operator: an answer that does not
// validate is a warning event and costs a turn; the one that does is
// status.output, with its digest and size.
func TestOutput_theValidatedAnswerIsStatusOutput(t *testing.T) {
	ns := namespace(t)
	startManager(t, &kits{tools: newTools()})
	answer := `{"decision": "refund", "amountMinor": 8240}`
	run := makeRun(ns, "typed").maxTurns(3).
		typed(`{"type":"object","properties":{"decision":{"enum":["refund","deny"]},"amountMinor":{"type":"integer"}},"required":["decision","amountMinor"]}`).
		answer(`{"decision": "refund", "amountMinor": "82.40"}`).answer(answer).create(t)

	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "the model gave a final answer on turn 2")
	var got any
	if done.Status.Output == nil || json.Unmarshal(done.Status.Output.Raw, &got) != nil {
		t.Fatalf("status.output = %v", done.Status.Output)
	}
	if d := cmp.Diff(map[string]any{"decision": "refund", "amountMinor": 8240.0}, got); d != "" {
		t.Errorf("status.output (-want +got):\n%s", d)
	}
	if done.Status.OutputBytes != int64(len(answer)) || len(done.Status.OutputDigest) != len("sha256:")+64 {
		t.Errorf("outputDigest %q, outputBytes %d", done.Status.OutputDigest, done.Status.OutputBytes)
	}
	if notes := eventNotes(t, ns, "AgentRun", "typed", corev1.EventTypeWarning, "OutputRejected"); len(notes) != 1 {
		t.Errorf("OutputRejected warnings %q, want one", notes)
	}
}

// A schema the API server lets through but the run cannot use ends the
// run Error, blamed on its configuration, naming output.schema.
func TestOutput_anUnusableSchemaEndsTheRunInvalid(t *testing.T) {
	ns := namespace(t)
	startManager(t, &kits{tools: newTools()})
	run := makeRun(ns, "untyped").typed(`{"type":"string"}`).answer(`"refund"`).create(t)
	expectInvalid(t, waitOutcome(t, run, 20*time.Second), "output.schema must describe a JSON object: set type: object")
}
