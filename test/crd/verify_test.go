package crd_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
)

// verifiedRun is a run with a verifier; %s is its name and %s its verify
// block (indented under spec).
const verifiedRun = `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: %s
spec:
  goal: Refund the duplicate charge.
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
	cases := []struct {
		name   string
		verify string
		// wantErr are parts of the message a person should see; none
		// means the manifest is valid.
		wantErr []string
	}{
		{name: "a declared verifier with every field", verify: "  verify: {tool: check_refund, maxTrials: 10, memory: 1, stallTrials: 3}\n"},
		{name: "a declared verifier with the defaults", verify: "  verify: {tool: check_refund}\n"},
		{
			name:    "a verifier that is not declared",
			verify:  "  verify: {tool: check_refnud}\n",
			wantErr: []string{"spec.verify.tool", "verify.tool must name a tool declared in spec.tools: check_refnud is not declared"},
		},
		{
			name:    "a verifier without a tool",
			verify:  "  verify: {maxTrials: 2}\n",
			wantErr: []string{"spec.verify.tool", "Required value"},
		},
		{
			name:    "more than ten trials",
			verify:  "  verify: {tool: check_refund, maxTrials: 11}\n",
			wantErr: []string{"spec.verify.maxTrials", "should be less than or equal to 10"},
		},
		{
			name:    "zero trials",
			verify:  "  verify: {tool: check_refund, maxTrials: 0}\n",
			wantErr: []string{"spec.verify.maxTrials", "should be greater than or equal to 1"},
		},
		{
			name:    "no memory",
			verify:  "  verify: {tool: check_refund, memory: 0}\n",
			wantErr: []string{"spec.verify.memory", "should be greater than or equal to 1"},
		},
		{
			name:    "stallTrials beyond ten",
			verify:  "  verify: {tool: check_refund, stallTrials: 11}\n",
			wantErr: []string{"spec.verify.stallTrials", "should be less than or equal to 10"},
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := create(testContext(t), fmt.Sprintf(verifiedRun, fmt.Sprintf("verify-%d", i), tc.verify))
			switch {
			case len(tc.wantErr) == 0 && err != nil:
				t.Fatalf("The API server rejected a valid manifest: %v", err)
			case len(tc.wantErr) > 0 && err == nil:
				t.Fatalf("The API server accepted the manifest; want an error saying %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("The error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestCreate_verifyDefaults(t *testing.T) {
	ctx := testContext(t)
	obj, err := create(ctx, fmt.Sprintf(verifiedRun, "verify-defaults", "  verify: {tool: check_refund}\n"))
	if err != nil {
		t.Fatalf("Cannot create the run: %v", err)
	}
	got := &agentsv1alpha1.AgentRun{}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	want := &agentsv1alpha1.VerifySpec{Tool: "check_refund", MaxTrials: ptr.To[int32](3), Memory: ptr.To[int32](3), StallTrials: ptr.To[int32](2)}
	if diff := cmp.Diff(want, got.Spec.Verify); diff != "" {
		t.Errorf("The defaulted verify differs (-want +got):\n%s", diff)
	}
}

func TestUpdate_verifyCannotChange(t *testing.T) {
	for i, patch := range []string{
		`{"spec": {"verify": {"maxTrials": 5}}}`,
		`{"spec": {"verify": null}}`,
	} {
		t.Run(patch, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			obj, err := create(ctx, fmt.Sprintf(verifiedRun, fmt.Sprintf("verify-edit-%d", i), "  verify: {tool: check_refund}\n"))
			if err != nil {
				t.Fatalf("Cannot create the run to edit: %v", err)
			}
			err = k8sClient.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)))
			if err == nil || !strings.Contains(err.Error(), "the spec of an AgentRun cannot change once created") {
				t.Fatalf("The API server did not refuse the change: %v", err)
			}
		})
	}
	t.Run("adding a verifier", func(t *testing.T) {
		ctx := testContext(t)
		obj, err := create(ctx, fmt.Sprintf(verifiedRun, "verify-edit-add", ""))
		if err != nil {
			t.Fatalf("Cannot create the run to edit: %v", err)
		}
		err = k8sClient.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"spec": {"verify": {"tool": "check_refund"}}}`)))
		if err == nil || !strings.Contains(err.Error(), "the spec of an AgentRun cannot change once created") {
			t.Fatalf("The API server did not refuse the change: %v", err)
		}
	})
}
