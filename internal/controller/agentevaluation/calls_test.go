package agentevaluation

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller/controllertest"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/seal"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/agentrun/agentrun/internal/transcript"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// endCalling ends a run as the AgentRun reconciler would, its transcript
// saved in one chunk sealed with kr: one turn calling tool with args
// (none when tool is ""), then the answer.
func endCalling(t *testing.T, kr *seal.Keyring, run *v1alpha1.AgentRun, tool, args string) {
	t.Helper()
	run = get(t, run)
	msgs := []loop.Message{{Role: loop.RoleAssistant, Turn: 2, Content: "Done."}}
	if tool != "" {
		msgs = append([]loop.Message{
			{Role: loop.RoleAssistant, Turn: 1, ToolCalls: []loop.ToolCall{{ID: "c1", Name: tool, Arguments: json.RawMessage(args)}}},
			{Role: loop.RoleTool, Turn: 1, CallID: "c1", Tool: tool, Content: "ok", Status: loop.ObsOK}}, msgs...)
	}
	ctx := context.Background()
	if err := transcript.Write(ctx, cluster.Client, cluster.Client, kr, run, 0, transcript.Chunk{Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	// One status write, as the operator's: the run ends with its
	// transcript counted.
	controllertest.EndRun(t, cluster.Client, run, endedInTwoTurns(loop.Completed, "Done."), loop.Convergence{TurnsToCompletion: 2}, time.Now(),
		func(st *v1alpha1.AgentRunStatus) {
			st.Transcript = &v1alpha1.TranscriptStatus{Chunks: 1, Messages: int32(len(msgs))}
		})
}

// A case that expects calls is scored on the calls in the run's
// transcript, read under the operator's seal: a required call made
// passes, a required call missing and a forbidden call made (by its
// arguments) fail with a reason naming the call, and a transcript the
// operator did not seal fails its case rather than being believed.
func TestEvaluation_callsAreScoredFromTheTranscript(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	b := makeEval(ns, "calls").concurrency(4)
	expect := func(name string, calls ...v1alpha1.CallExpectation) {
		b.e.Spec.Cases = append(b.e.Spec.Cases, v1alpha1.EvaluationCase{Name: name,
			Parameters: []v1alpha1.ParameterValue{{Name: "ticket", Value: "T-" + name}},
			Expect:     v1alpha1.EvaluationExpectation{Calls: calls}})
	}
	verify := v1alpha1.CallExpectation{Tool: "verify_identity"}
	bigRefund := v1alpha1.CallExpectation{Tool: "issue_refund", When: "args.amount > 100", Max: ptr.To[int32](0)}
	expect("verified", verify)
	expect("unverified", verify)
	expect("big-refund", bigRefund)
	expect("forged", verify)
	e := b.create(t)
	keys, forger := seal.Ephemeral(), seal.Ephemeral()
	testenv.StartManager(t, cluster.Config, ns, func(mgr ctrl.Manager) error {
		return NewReconciler(Config{Base: reconcilers.Base{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}, Keys: keys}).SetupWithManager(mgr)
	})
	g := NewWithT(t)
	var runs []v1alpha1.AgentRun
	g.Eventually(func() []string { runs = runsOf(t, e); return unfinished(runs) }, 20*time.Second, 10*time.Millisecond).Should(HaveLen(4))
	for i := range runs {
		switch runs[i].Name {
		case "calls-verified-1":
			endCalling(t, keys, &runs[i], "verify_identity", `{"customer":"cus_1"}`)
		case "calls-unverified-1":
			endCalling(t, keys, &runs[i], "", "")
		case "calls-big-refund-1":
			endCalling(t, keys, &runs[i], "issue_refund", `{"amount":500}`)
		case "calls-forged-1":
			endCalling(t, forger, &runs[i], "verify_identity", `{"customer":"cus_1"}`)
		default:
			t.Fatalf("unexpected run %s", runs[i].Name)
		}
	}
	got := completed(t, e).Status.Cases
	want := []v1alpha1.EvaluationCaseStatus{
		{Name: "verified", Runs: 1, Passed: 1},
		{Name: "unverified", Runs: 1, Failed: 1, FailedRun: "calls-unverified-1",
			FailureReason: "calls[0]: expected at least 1 call to verify_identity, the run made none"},
		{Name: "big-refund", Runs: 1, Failed: 1, FailedRun: "calls-big-refund-1",
			FailureReason: "calls[0]: expected no call to issue_refund where args.amount > 100, the run made 1 (the first in turn 1)"},
		{Name: "forged", Runs: 1, Failed: 1, FailedRun: "calls-forged-1"},
	}
	forged := "calls: the run's transcript cannot be read: "
	if len(got) == 4 && strings.HasPrefix(got[3].FailureReason, forged) {
		want[3].FailureReason = got[3].FailureReason
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(v1alpha1.EvaluationCaseStatus{}, "Results")); diff != "" {
		t.Errorf("status.cases (-want +got):\n%s (the forged case's reason starts %q)", diff, forged)
	}
}
