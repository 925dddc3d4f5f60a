package crd_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
)

// verifiedRun is a run with a verifier; %s is its name and %s its verify
// block (indented under spec).
const verifiedRun = namedRun + `  goal: Refund the duplicate charge.
  model:
    provider: scripted
    script: [{content: Refunded.}]
  budget: {maxTurns: 6}
  tools:
  - name: issue_refund
    mutates: true
    http: {url: "http://billing.default.svc/refunds", method: POST}
  - name: check_refund
    job: {image: "ghcr.io/acme/check-refund:1", command: [check-refund]}
%s`

func TestCreate_verify(t *testing.T) {
	cases := []specCase{
		{name: "a declared verifier with every field", spec: "  verify: {tool: check_refund, maxTrials: 10, memory: 1, stallTrials: 3}\n"},
		{name: "a declared verifier with the defaults", spec: "  verify: {tool: check_refund}\n"},
		{
			name:    "a verifier that is not declared",
			spec:    "  verify: {tool: check_refnud}\n",
			wantErr: []string{"spec.verify.tool", "verify.tool must name a tool declared in spec.tools: check_refnud is not declared"},
		},
		{
			name:    "a verifier without a tool",
			spec:    "  verify: {maxTrials: 2}\n",
			wantErr: []string{"spec.verify.tool", "Required value"},
		},
		{
			name:    "more than ten trials",
			spec:    "  verify: {tool: check_refund, maxTrials: 11}\n",
			wantErr: []string{"spec.verify.maxTrials", "should be less than or equal to 10"},
		},
		{
			name:    "zero trials",
			spec:    "  verify: {tool: check_refund, maxTrials: 0}\n",
			wantErr: []string{"spec.verify.maxTrials", "should be greater than or equal to 1"},
		},
		{
			name:    "no memory",
			spec:    "  verify: {tool: check_refund, memory: 0}\n",
			wantErr: []string{"spec.verify.memory", "should be greater than or equal to 1"},
		},
		{
			name:    "stallTrials beyond ten",
			spec:    "  verify: {tool: check_refund, stallTrials: 11}\n",
			wantErr: []string{"spec.verify.stallTrials", "should be less than or equal to 10"},
		},
	}
	expectCreates(t, verifiedRun, "verify", cases)
}

func TestCreate_verifyDefaults(t *testing.T) {
	got := created(testContext(t), t, fmt.Sprintf(verifiedRun, "verify-defaults", "  verify: {tool: check_refund}\n"), &agentsv1alpha1.AgentRun{})
	want := &agentsv1alpha1.VerifySpec{Tool: "check_refund", MaxTrials: ptr.To[int32](3), Memory: ptr.To[int32](3), StallTrials: ptr.To[int32](2)}
	if diff := cmp.Diff(want, got.Spec.Verify); diff != "" {
		t.Errorf("The defaulted verify differs (-want +got):\n%s", diff)
	}
}

func TestUpdate_verifyCannotChange(t *testing.T) {
	expectEditsRefused(t, verifiedRun, "verify", "  verify: {tool: check_refund}\n",
		`{"spec": {"verify": {"maxTrials": 5}}}`,
		`{"spec": {"verify": null}}`)
	t.Run("adding a verifier", func(t *testing.T) {
		expectPatchRefused(testContext(t), t, fmt.Sprintf(verifiedRun, "verify-edit-add", ""), `{"spec": {"verify": {"tool": "check_refund"}}}`, specChangeRefused)
	})
}
