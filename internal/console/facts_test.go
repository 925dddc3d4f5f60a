package console

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// The run page's facts say which model a run fell back to and what its
// typed output is: the value on one line, or its size and digest when it
// was too large for status.
func TestFacts_theFallbackAndTheOutput(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   v1alpha1.AgentRunStatus
		want []fact
	}{
		{"neither", v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted, Model: &v1alpha1.ModelStatus{Active: "primary"}}, nil},
		{"a fallback and an output", v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted,
			Model:  &v1alpha1.ModelStatus{Active: "backup", Fallbacks: 1},
			Output: &runtime.RawExtension{Raw: []byte("{ \"decision\": \"refund\",\n \"note\": \"<b>\" }")}},
			[]fact{{"Model", "backup (fallback 1 of spec.model.fallbacks)"}, {"Output", `{"decision":"refund","note":"<b>"}`}}},
		{"too large for status", v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted, OutputDigest: "sha256:ab", OutputBytes: 20000},
			[]fact{{"Output", "20000 bytes, sha256:ab (too large for status: the last answer in the transcript)"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := factsOf(&v1alpha1.AgentRun{Status: tc.st})
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(fact{})); diff != "" {
				t.Errorf("facts (-want +got):\n%s", diff)
			}
		})
	}
}
