package crd_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
)

func TestCreate_contextPolicy(t *testing.T) {
	cases := []specCase{
		{name: "no policy", spec: ""},
		{name: "every field", spec: "  context: {maxInputTokens: 30000, keepRecentTurns: 6, strategy: summarize, summaryMaxOutputTokens: 2048}\n"},
		{name: "an unknown strategy", spec: "  context: {strategy: truncate}\n",
			wantErr: []string{"spec.context.strategy", `supported values: "clear", "summarize"`}},
		{name: "no recent turns kept", spec: "  context: {keepRecentTurns: 0}\n",
			wantErr: []string{"spec.context.keepRecentTurns", "should be greater than or equal to 1"}},
		{name: "too many recent turns kept", spec: "  context: {keepRecentTurns: 1001}\n",
			wantErr: []string{"spec.context.keepRecentTurns", "should be less than or equal to 1000"}},
		{name: "a limit too small to hold a turn", spec: "  context: {maxInputTokens: 100}\n",
			wantErr: []string{"spec.context.maxInputTokens", "should be greater than or equal to 1024"}},
		{name: "a summary bound without summarize", spec: "  context: {summaryMaxOutputTokens: 512}\n",
			wantErr: []string{"spec.context", "context.summaryMaxOutputTokens applies to strategy summarize only"}},
		{name: "a summary bound too small", spec: "  context: {strategy: summarize, summaryMaxOutputTokens: 10}\n",
			wantErr: []string{"spec.context.summaryMaxOutputTokens", "should be greater than or equal to 64"}},
	}
	expectCreates(t, plannedRun, "context", cases)
}

func TestCreate_contextDefaults(t *testing.T) {
	got := created(testContext(t), t, fmt.Sprintf(plannedRun, "context-defaults", "  context: {}\n"), &agentsv1alpha1.AgentRun{})
	want := &agentsv1alpha1.ContextSpec{KeepRecentTurns: ptr.To[int32](4), Strategy: agentsv1alpha1.ContextClear}
	if diff := cmp.Diff(want, got.Spec.Context); diff != "" {
		t.Errorf("The defaulted context policy differs (-want +got):\n%s", diff)
	}
}

func TestUpdate_contextCannotChange(t *testing.T) {
	expectEditsRefused(t, plannedRun, "context", "  context: {maxInputTokens: 30000}\n",
		`{"spec": {"context": {"maxInputTokens": 40000}}}`,
		`{"spec": {"context": null}}`)
}
