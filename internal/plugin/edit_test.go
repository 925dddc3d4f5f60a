package plugin

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"k8s.io/apimachinery/pkg/runtime"
)

// Issue 46, item 2: approve --set and --patch answer with changes, typed
// by the tool's parameter schema (and, where it says nothing, by the
// proposed value), bound to the digest of the arguments shown.
func TestAnswer_approveWithChangesTypesEachValue(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	b := makeRun(ns, "r")
	b.run.Spec.Tools = []v1alpha1.ToolSpec{{Name: "issue_refund", Builtin: v1alpha1.BuiltinTool("kubernetes.get"),
		Parameters: &runtime.RawExtension{Raw: []byte(`{"type":"object","properties":{"amount_minor":{"type":"integer"},` +
			`"note":{"type":"string"},"urgent":{"type":["boolean","null"]},"rate":{"type":"number"}}}`)}}}
	run := b.create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.PendingApprovals = pending("t3-c1")
		s.PendingApprovals[0].Arguments = `{"amount_minor":82400,"note":"x","count":2,"currency":"EUR"}`
		s.PendingApprovals[0].ArgumentsDigest = "sha256:0b1e"
	})
	ref := Ref{Namespace: ns, Name: "r"}

	for _, tc := range []struct {
		name        string
		patch       string
		set         []string
		wantErr     string
		wantPatched string
	}{
		{name: "refused: not an integer", set: []string{"amount_minor=82.40"}, wantErr: "amount_minor is an integer (the tool's parameters say so)"},
		{name: "refused: not a boolean", set: []string{"urgent=yes please"}, wantErr: "urgent is a boolean"},
		{name: "refused: typed as proposed", set: []string{"count=two"}, wantErr: "count is an integer (the proposed value is one)"},
		{name: "refused: not key=value", set: []string{"amount_minor"}, wantErr: "is not key=value"},
		{name: "refused: patch not an object", patch: "[1]", wantErr: "is not a JSON object"},
		{name: "typed", patch: `{"memo": null, "note": "overwritten"}`,
			set:         []string{"amount_minor=8240", "note=12", "urgent=true", "rate=0.5", "currency=USD"},
			wantPatched: `edit:sha256:0b1e:{"amount_minor":8240,"currency":"USD","memo":null,"note":"12","rate":0.5,"urgent":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Answer(ctx, k8sClient, AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove, Edit: tc.patch, Set: tc.set}, &out)
			got := get(t, run).Annotations[v1alpha1.ApprovalAnnotationPrefix+"t3-c1"]
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one that says %q", err, tc.wantErr)
				}
				if got != "" {
					t.Errorf("a refused edit set the annotation to %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.wantPatched {
				t.Errorf("annotation = %q, want %q", got, tc.wantPatched)
			}
			if !strings.Contains(out.String(), "t3-c1 approved with changes") {
				t.Errorf("output %q does not say the call was approved with changes", out.String())
			}
		})
	}
}

// The transcript of an edited call shows the proposal, what ran, and who
// changed it.
func TestPrintTranscript_showsAnEditedCall(t *testing.T) {
	run := &v1alpha1.AgentRun{Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{Goal: "g"}}}
	msgs := []loop.Message{
		{Role: loop.RoleAssistant, Turn: 1, ToolCalls: []loop.ToolCall{{ID: "t1-c1", Name: "issue_refund", Arguments: []byte(`{"amount_minor":82400}`)}}},
		{Role: loop.RoleTool, Turn: 1, CallID: "t1-c1", Tool: "issue_refund", Status: loop.ObsOK, Content: "ok",
			Arguments: []byte(`{"amount_minor":8240}`), EditedBy: "alice"},
	}
	var out bytes.Buffer
	if err := PrintTranscript(&out, run, msgs, OutputText); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`{"amount_minor":82400}`, `edited t1-c1 by alice: {"amount_minor":8240}`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the transcript does not show %q:\n%s", want, out.String())
		}
	}
}
