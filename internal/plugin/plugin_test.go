package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/seal"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/agentrun/agentrun/internal/transcript"
	"github.com/agentrun/agentrun/internal/version"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

var (
	k8sClient  client.WithWatch
	kubeconfig string // an admin kubeconfig file for the API server
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(env *envtest.Environment, cfg *rest.Config) (func() error, error) {
		var err error
		if k8sClient, err = client.NewWithWatch(cfg, client.Options{Scheme: kubescheme.Scheme}); err != nil {
			return nil, err
		}
		if kubeconfig, err = writeKubeconfig(env); err != nil {
			return nil, err
		}
		return func() error { return os.RemoveAll(filepath.Dir(kubeconfig)) }, nil
	}))
}

func writeKubeconfig(env *envtest.Environment) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "alice", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "kubectl-agentrun-test")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}

var nsCount atomic.Int32

// newNamespace gives each test a namespace of its own.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("plugin-%d", nsCount.Add(1))}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func transcriptWrite(ctx context.Context, run *v1alpha1.AgentRun, n int, msgs []loop.Message) error {
	return transcript.Write(ctx, k8sClient, k8sClient, seal.Ephemeral(), run, n, transcript.Chunk{Messages: msgs})
}

// runBuilder builds an AgentRun for a test.
type runBuilder struct{ run *v1alpha1.AgentRun }

// makeRun is a minimal valid AgentRun: a scripted model with one answer.
func makeRun(ns, name string) *runBuilder {
	return &runBuilder{run: &v1alpha1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.AgentRunSpec{
			AgentSpec: v1alpha1.AgentSpec{
				Goal: "Find out why the customer was charged twice.",
				Model: v1alpha1.ModelSpec{
					ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
					Script:        []v1alpha1.ScriptStep{{Content: "x"}},
				},
				Budget: v1alpha1.BudgetSpec{MaxTurns: 3},
			},
		},
	}}
}

func (b *runBuilder) create(t *testing.T) *v1alpha1.AgentRun {
	t.Helper()
	if err := k8sClient.Create(context.Background(), b.run); err != nil {
		t.Fatal(err)
	}
	return b.run
}

// setStatus changes the run's status with the status subresource.
func setStatus(t *testing.T, run *v1alpha1.AgentRun, change func(*v1alpha1.AgentRunStatus)) {
	t.Helper()
	ctx := context.Background()
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(run), run); err != nil {
		t.Fatal(err)
	}
	base := run.DeepCopy()
	change(&run.Status)
	if err := k8sClient.Status().Patch(ctx, run, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

func checkpoint(t *testing.T, tail ...loop.Message) *runtime.RawExtension {
	t.Helper()
	raw, err := json.Marshal(loop.State{Phase: loop.PhaseModel, Turn: 1, Transcript: tail})
	if err != nil {
		t.Fatal(err)
	}
	return &runtime.RawExtension{Raw: raw}
}

func pending(ids ...string) []v1alpha1.PendingApproval {
	var out []v1alpha1.PendingApproval
	for _, id := range ids {
		out = append(out, v1alpha1.PendingApproval{
			CallID: id, Tool: "issue_refund", Arguments: `{"amount_minor":8240}`,
			Rule: "policy.rules[0]", Reason: "Refunds above 50.00 need a person.",
		})
	}
	return out
}

func get(t *testing.T, run *v1alpha1.AgentRun) *v1alpha1.AgentRun {
	t.Helper()
	return testenv.Get(t, k8sClient, run)
}

// managedBy reports whether manager owns the field at path (f:metadata,
// f:annotations, ...) in the run's managed fields.
func managedBy(run *v1alpha1.AgentRun, manager string, path ...string) bool {
	for _, e := range run.ManagedFields {
		if e.Manager != manager || e.FieldsV1 == nil {
			continue
		}
		var node map[string]any
		if json.Unmarshal(e.FieldsV1.GetRawBytes(), &node) != nil {
			continue
		}
		found := true
		for _, p := range path {
			next, ok := node[p].(map[string]any)
			if !ok {
				found = false
				break
			}
			node = next
		}
		if found {
			return true
		}
	}
	return false
}

// longArgs are arguments longer than a terminal line or two.
var longArgs = `{"amount_minor":8240,"note":"` + strings.Repeat("refund for the double charge; ", 200) + `"}`

func TestAnswer_setsAnnotationAsKubectlAgentrun(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		decision v1alpha1.ApprovalDecision
		want     string
		// annotation is the value set: an approval names the digest of
		// the arguments it shows, so it binds to them.
		annotation string
	}{
		{v1alpha1.ApprovalApprove, "t3-c1 issue_refund (arguments sha256:0b1e):\n" + longArgs + "\nagentrun/r-approve: t3-c1 approved\n", "approve:sha256:0b1e"},
		{v1alpha1.ApprovalDeny, "agentrun/r-deny: t3-c1 denied\n", "deny"},
		{v1alpha1.ApprovalStop, "agentrun/r-stop: t3-c1 denied; the run will stop (ApprovalDenied)\n", "stop"},
	} {
		t.Run(string(tc.decision), func(t *testing.T) {
			ns := newNamespace(t)
			run := makeRun(ns, "r-"+string(tc.decision)).create(t)
			setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
				s.PendingApprovals = pending("t3-c1")
				// The arguments a person approves are shown whole.
				s.PendingApprovals[0].Arguments, s.PendingApprovals[0].ArgumentsDigest = longArgs, "sha256:0b1e"
			})

			var out bytes.Buffer
			err := Answer(ctx, k8sClient, AnswerOptions{
				Run: Ref{Namespace: ns, Name: run.Name}, CallID: "t3-c1", Decision: tc.decision,
			}, &out)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			got := get(t, run)
			if v := got.Annotations["approval.agents.agentrun.dev/t3-c1"]; v != tc.annotation {
				t.Errorf("annotation = %q, want %q", v, tc.annotation)
			}
			if !managedBy(got, FieldManager, "f:metadata", "f:annotations", "f:approval.agents.agentrun.dev/t3-c1") {
				t.Errorf("the annotation is not managed by %s: %+v", FieldManager, got.ManagedFields)
			}
		})
	}
}

func TestAnswer_refusesCallThatIsNotPendingAndListsPendingOnes(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseAwaitingApproval
		s.PendingApprovals = pending("t3-c1", "t3-c2")
	})
	ref := Ref{Namespace: ns, Name: "r"}

	var out bytes.Buffer
	err := Answer(ctx, k8sClient, AnswerOptions{Run: ref, CallID: "t9-c1", Decision: v1alpha1.ApprovalApprove}, &out)
	want := `t9-c1 is not waiting for approval on agentrun/r
pending approvals:
  t3-c1  issue_refund {"amount_minor":8240}
  t3-c2  issue_refund {"amount_minor":8240}
use --force to set the annotation anyway`
	if err == nil {
		t.Fatal("approve of a call that is not pending succeeded")
	}
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
	if a := get(t, run).Annotations; len(a) != 0 {
		t.Errorf("a refused answer changed the annotations: %v", a)
	}

	// --force sets it all the same.
	if err := Answer(ctx, k8sClient, AnswerOptions{Run: ref, CallID: "t9-c1", Decision: v1alpha1.ApprovalApprove, Force: true}, &out); err != nil {
		t.Fatal(err)
	}
	if v := get(t, run).Annotations["approval.agents.agentrun.dev/t9-c1"]; v != "approve" {
		t.Errorf("with --force the annotation = %q, want approve", v)
	}
}

func TestAnswer_refusesWhenNothingWaitsOrTheRunEnded(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	ref := Ref{Namespace: ns, Name: "r"}
	answer := func(d v1alpha1.ApprovalDecision) string {
		err := Answer(ctx, k8sClient, AnswerOptions{Run: ref, CallID: "t2-c1", Decision: d}, &bytes.Buffer{})
		if err == nil {
			return ""
		}
		return err.Error()
	}

	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseRunning
		s.Approvals = []v1alpha1.ApprovalRecord{{CallID: "t2-c1", Decision: v1alpha1.ApprovalApprove, By: "bob"}}
	})
	want := "t2-c1 is not waiting for approval on agentrun/r (it was already answered approve by bob): " +
		"no call waits for an answer (phase Running)\nuse --force to set the annotation anyway"
	if diff := cmp.Diff(want, answer(v1alpha1.ApprovalDeny)); diff != "" {
		t.Errorf("answered call (-want +got):\n%s", diff)
	}

	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) { s.Outcome, s.Reason = v1alpha1.OutcomeCompleted, "done" })
	want = "agentrun/r has already ended (Completed): no call waits for an answer"
	if diff := cmp.Diff(want, answer(v1alpha1.ApprovalApprove)); diff != "" {
		t.Errorf("ended run (-want +got):\n%s", diff)
	}
}

func TestAnswer_refusesToReplaceAnAnswerNotYetActedOn(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) { s.PendingApprovals = pending("t3-c1") })
	ref := Ref{Namespace: ns, Name: "r"}

	if err := Answer(ctx, k8sClient, AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalDeny}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	// The same answer again is harmless.
	if err := Answer(ctx, k8sClient, AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalDeny}, &bytes.Buffer{}); err != nil {
		t.Errorf("repeating the same answer: %v", err)
	}
	err := Answer(ctx, k8sClient, AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `already answered "deny"`) {
		t.Errorf("changing the answer: err = %v, want a refusal naming the earlier answer", err)
	}
	if v := get(t, run).Annotations["approval.agents.agentrun.dev/t3-c1"]; v != "deny" {
		t.Errorf("annotation = %q, want deny kept", v)
	}
}

// An earlier answer is read as the operator reads it
// (v1alpha1.ParseApprovalAnswer): " Deny " set with kubectl annotate is
// deny, so answering deny again is the same answer, and approve changes it.
func TestAnswer_readsTheEarlierAnswerAsTheOperatorDoes(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) { s.PendingApprovals = pending("t3-c1") })
	ref := Ref{Namespace: ns, Name: "r"}
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"approval.agents.agentrun.dev/t3-c1":" Deny "}}}`))
	if err := k8sClient.Patch(ctx, run.DeepCopy(), patch); err != nil {
		t.Fatal(err)
	}
	if err := Answer(ctx, k8sClient, AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalDeny}, &bytes.Buffer{}); err != nil {
		t.Errorf("answering deny after \" Deny \": %v", err)
	}
	err := Answer(ctx, k8sClient, AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "already answered") {
		t.Errorf("changing the answer: err = %v, want a refusal naming the earlier answer", err)
	}
}

func TestAnswer_rejectsBadInputBeforeCallingTheServer(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		callID   string
		decision v1alpha1.ApprovalDecision
		want     string
	}{
		{"t3 c1", "approve", `"t3 c1" is not a call id: call ids look like t3-c1, or p1-E2 for a plan's step (see status.pendingApprovals)`},
		{"", "approve", `"" is not a call id: call ids look like t3-c1, or p1-E2 for a plan's step (see status.pendingApprovals)`},
		{"t3-c1", "maybe", `unknown answer "maybe": use approve, deny, stop or answer`},
	} {
		err := Answer(ctx, nil, AnswerOptions{Run: Ref{Namespace: "x", Name: "r"}, CallID: tc.callID, Decision: tc.decision}, &bytes.Buffer{})
		if err == nil || err.Error() != tc.want {
			t.Errorf("Answer(%q, %q) = %v, want %q", tc.callID, tc.decision, err, tc.want)
		}
	}
}

func TestAnswer_namesAMissingRun(t *testing.T) {
	ns := newNamespace(t)
	err := Answer(context.Background(), k8sClient, AnswerOptions{Run: Ref{Namespace: ns, Name: "nope"}, CallID: "t1-c1", Decision: "approve"}, &bytes.Buffer{})
	want := fmt.Sprintf(`agentrun "nope" not found in namespace %q`, ns)
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

func TestCancel_setsOnlySpecCancel(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	before := get(t, run)
	ref := Ref{Namespace: ns, Name: "r"}

	var out bytes.Buffer
	if err := Cancel(ctx, k8sClient, ref, &out); err != nil {
		t.Fatal(err)
	}
	after := get(t, run)
	if !after.Spec.Cancel {
		t.Fatal("spec.cancel is not true after cancel")
	}
	wantSpec := before.Spec
	wantSpec.Cancel = true
	if diff := cmp.Diff(wantSpec, after.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if !managedBy(after, FieldManager, "f:spec", "f:cancel") {
		t.Errorf("spec.cancel is not managed by %s", FieldManager)
	}
	if err := Cancel(ctx, k8sClient, ref, &out); err != nil {
		t.Fatal(err)
	}
	want := "agentrun/r: cancel requested; the run stops at the next turn boundary\n" +
		"agentrun/r: cancel already requested\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestCancel_leavesAnEndedRunAlone(t *testing.T) {
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) { s.Outcome, s.Reason = v1alpha1.OutcomeLoopDetected, "loop" })
	var out bytes.Buffer
	if err := Cancel(context.Background(), k8sClient, Ref{Namespace: ns, Name: "r"}, &out); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("agentrun/r has already ended (LoopDetected); nothing to cancel\n", out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if get(t, run).Spec.Cancel {
		t.Error("cancel changed an ended run")
	}
}

// conversation is a short run's transcript: two turns saved in chunks, the
// third still in the checkpoint.
var conversation = []loop.Message{
	{Role: loop.RoleAssistant, Turn: 1, ToolCalls: []loop.ToolCall{
		{ID: "t1-c1", Name: "identify_account", Arguments: json.RawMessage(`{ "email": "r.okafor@northwind.example" }`)},
	}},
	{Role: loop.RoleTool, Turn: 1, CallID: "t1-c1", Tool: "identify_account", Status: "ok", Content: `{"account":"acct_7"}`},
	{Role: loop.RoleAssistant, Turn: 2, Content: "Two invoices look alike.", ToolCalls: []loop.ToolCall{
		{ID: "t2-c1", Name: "issue_refund", Arguments: json.RawMessage(`{"amount_minor":8240}`)},
		{ID: "t2-c2", Name: "send_email", Arguments: json.RawMessage(`{"to":"r.okafor"}`)},
	}},
	{Role: loop.RoleTool, Turn: 2, CallID: "t2-c1", Tool: "issue_refund", Status: "declined", Content: "a person declined this call"},
	{Role: loop.RoleTool, Turn: 2, CallID: "t2-c2", Tool: "send_email", Status: "ok", Content: "sent"},
	{Role: loop.RoleContext, Turn: 3, Content: "Context compacted before turn 3 (clear): cleared 1 tool result(s) of 15 bytes before turn 2; about 31000 input tokens before, about 9000 after"},
	{Role: loop.RoleAssistant, Turn: 3, Content: "Two separate charges:\ninvoice 1 and invoice 2."},
}

const conversationText = `goal: Find out why the customer was charged twice.
[t1] assistant -> identify_account {"email":"r.okafor@northwind.example"}
[t1] tool t1-c1 (identify_account, ok): {"account":"acct_7"}
[t2] assistant: Two invoices look alike.
[t2] assistant -> issue_refund {"amount_minor":8240}
[t2] assistant -> send_email {"to":"r.okafor"}
[t2] tool t2-c1 (issue_refund, declined): a person declined this call
[t2] tool t2-c2 (send_email, ok): sent
[t3] --- Context compacted before turn 3 (clear): cleared 1 tool result(s) of 15 bytes before turn 2; about 31000 input tokens before, about 9000 after ---
[t3] assistant: Two separate charges:
    invoice 1 and invoice 2.
`

func TestTranscript_readsChunksThenCheckpointTail(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	if err := transcriptWrite(ctx, run, 0, conversation[:2]); err != nil {
		t.Fatal(err)
	}
	if err := transcriptWrite(ctx, run, 1, conversation[2:5]); err != nil {
		t.Fatal(err)
	}
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Transcript = &v1alpha1.TranscriptStatus{Chunks: 2, Messages: 5}
		s.Checkpoint = checkpoint(t, conversation[5:]...)
	})
	ref := Ref{Namespace: ns, Name: "r"}

	var text bytes.Buffer
	if err := Transcript(ctx, k8sClient, ref, OutputText, &text); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(conversationText, text.String()); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}

	var js bytes.Buffer
	if err := Transcript(ctx, k8sClient, ref, OutputJSON, &js); err != nil {
		t.Fatal(err)
	}
	var got []loop.Message
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatalf("-o json is not a JSON list of messages: %v\n%s", err, js.String())
	}
	// Arguments come back compacted by the API round trip of the chunk.
	if diff := cmp.Diff(len(conversation), len(got)); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	for i := range got {
		if got[i].Role != conversation[i].Role || got[i].Content != conversation[i].Content || got[i].CallID != conversation[i].CallID {
			t.Errorf("message %d = %+v, want %+v", i, got[i], conversation[i])
		}
	}

	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Outcome, s.Reason = v1alpha1.OutcomeCompleted, "The model gave a final answer."
	})
	text.Reset()
	if err := Transcript(ctx, k8sClient, ref, OutputText, &text); err != nil {
		t.Fatal(err)
	}
	want := conversationText + "outcome: Completed\nreason: The model gave a final answer.\n"
	if diff := cmp.Diff(want, text.String()); diff != "" {
		t.Errorf("text of an ended run (-want +got):\n%s", diff)
	}
}

// Issue 44: the transcript of a run made from a template shows the goal
// the model was given, once the operator has resolved it.
func TestTranscript_showsTheResolvedGoalOfATemplatedRun(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t-1042"},
		Spec: v1alpha1.AgentRunSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "refund-investigator"},
			Parameters: []v1alpha1.ParameterValue{{Name: "ticket", Value: "T-1042"}}}}
	if err := k8sClient.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	ref := Ref{Namespace: ns, Name: run.Name}
	transcript := func() string {
		t.Helper()
		var text bytes.Buffer
		if err := Transcript(ctx, k8sClient, ref, OutputText, &text); err != nil {
			t.Fatal(err)
		}
		return text.String()
	}
	if diff := cmp.Diff("template: refund-investigator ticket=\"T-1042\"\n", transcript()); diff != "" {
		t.Errorf("before the operator resolved the run (-want +got):\n%s", diff)
	}
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Template = &v1alpha1.TemplateStatus{Name: "refund-investigator", Digest: "sha256:00",
			Goal: "Investigate ticket T-1042:\nwas the customer charged twice?"}
	})
	want := "template: refund-investigator ticket=\"T-1042\"\n" +
		"goal: Investigate ticket T-1042:\n    was the customer charged twice?\n"
	if diff := cmp.Diff(want, transcript()); diff != "" {
		t.Errorf("once resolved (-want +got):\n%s", diff)
	}
}

// The end of a transcript (and of watch) says which model the run ended
// on when it fell back, and what its typed output is: the value, or, when
// it was too large for status, its size and digest.
func TestPrintTranscript_endsWithTheFallbackAndTheOutput(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   v1alpha1.AgentRunStatus
		want string
	}{
		{"plain", v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted, Reason: "done"},
			"outcome: Completed\nreason: done\n"},
		{"a fallback and an output", v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted, Reason: "done",
			Model:  &v1alpha1.ModelStatus{Active: "backup", Fallbacks: 1},
			Output: &runtime.RawExtension{Raw: []byte(`{ "decision": "refund",` + "\n" + ` "amount_minor": 8240 }`)}},
			"outcome: Completed\nreason: done\nmodel: backup (fallback 1 of spec.model.fallbacks)\n" +
				`output: {"decision":"refund","amount_minor":8240}` + "\n"},
		{"an output too large for status", v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted, Reason: "done",
			Model: &v1alpha1.ModelStatus{Active: "primary"}, OutputDigest: "sha256:ab", OutputBytes: 20000},
			"outcome: Completed\nreason: done\noutput: 20000 bytes, sha256:ab (too large for status: the last answer above)\n"},
		{"a digest of an answer that did not complete", v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeBudgetExhausted, Reason: "turns",
			OutputDigest: "sha256:ab", OutputBytes: 12},
			"outcome: BudgetExhausted\nreason: turns\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := &v1alpha1.AgentRun{Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{Goal: "g"}}, Status: tc.st}
			var out bytes.Buffer
			if err := PrintTranscript(&out, run, nil, OutputText); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff("goal: g\n"+tc.want, out.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestTranscript_saysWhichChunkIsMissing(t *testing.T) {
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) { s.Transcript = &v1alpha1.TranscriptStatus{Chunks: 1} })
	err := Transcript(context.Background(), k8sClient, Ref{Namespace: ns, Name: "r"}, OutputText, &bytes.Buffer{})
	want := "reading the transcript of agentrun/r: the run's saved transcript is incomplete: transcript chunk " +
		transcript.ChunkName(run.UID, 0) + " (1 of 1) is missing"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

// syncBuffer is written by watch's goroutine and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestWatch_printsProgressAndEndsWithTheOutcome(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseRunning
		s.Checkpoint = checkpoint(t, conversation[0])
	})

	type result struct {
		run *v1alpha1.AgentRun
		err error
	}
	out := &syncBuffer{}
	done := make(chan result, 1)
	go func() {
		// A resync of an hour: everything below must arrive through the
		// API server's watches.
		r, err := Watch(ctx, k8sClient, WatchOptions{Run: Ref{Namespace: ns, Name: "r"}, Resync: time.Hour}, out)
		done <- result{r, err}
	}()
	eventually := func(s string) {
		t.Helper()
		g.Eventually(out.String, 15*time.Second, 20*time.Millisecond).Should(ContainSubstring(s))
	}
	eventually("phase: Running\n")

	// A new message and a chunk flush.
	if err := transcriptWrite(ctx, run, 0, conversation[:2]); err != nil {
		t.Fatal(err)
	}
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Transcript = &v1alpha1.TranscriptStatus{Chunks: 1, Messages: 2}
		s.Checkpoint = checkpoint(t, conversation[2])
	})
	eventually("[t2] assistant -> send_email {\"to\":\"r.okafor\"}\n")

	// An Event about the run.
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r.approval"},
		EventTime:  metav1.NowMicro(),
		Regarding: corev1.ObjectReference{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "AgentRun", Namespace: ns, Name: "r", UID: run.UID,
		},
		ReportingController: "agents.agentrun.dev/agentrun-controller",
		ReportingInstance:   "test",
		Action:              "Vet",
		Reason:              v1alpha1.ReasonApprovalRequested,
		Type:                corev1.EventTypeNormal,
		Note:                "issue_refund t2-c1 waits for a person",
	}
	if err := k8sClient.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	eventually("event: Normal ApprovalRequested: issue_refund t2-c1 waits for a person\n")

	// A call waits for a person.
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseAwaitingApproval
		s.PendingApprovals = pending("t2-c1")
	})
	eventually(`phase: AwaitingApproval
approval needed: t2-c1 issue_refund {"amount_minor":8240} (policy.rules[0]: Refunds above 50.00 need a person.)
  approve: kubectl agentrun approve r t2-c1
  deny:    kubectl agentrun deny r t2-c1
  stop:    kubectl agentrun stop r t2-c1
`)

	// The run ends: the rest of the transcript is flushed with the outcome.
	if err := transcriptWrite(ctx, run, 1, conversation[2:]); err != nil {
		t.Fatal(err)
	}
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.PendingApprovals = nil
		s.Approvals = []v1alpha1.ApprovalRecord{{CallID: "t2-c1", Decision: v1alpha1.ApprovalDeny, By: "alice", Reason: "Not 824.00:\n\"82.40\""}}
		s.Transcript = &v1alpha1.TranscriptStatus{Chunks: 2, Messages: 7}
		s.Checkpoint = checkpoint(t)
		s.Phase = v1alpha1.PhaseSucceeded
		s.Outcome, s.Reason = v1alpha1.OutcomeCompleted, "The model gave a final answer."
	})

	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatalf("watch did not end with the run; it printed:\n%s", out.String())
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.run.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Errorf("returned outcome %q, want Completed", res.run.Status.Outcome)
	}
	want := `goal: Find out why the customer was charged twice.
[t1] assistant -> identify_account {"email":"r.okafor@northwind.example"}
phase: Running
[t1] tool t1-c1 (identify_account, ok): {"account":"acct_7"}
[t2] assistant: Two invoices look alike.
[t2] assistant -> issue_refund {"amount_minor":8240}
[t2] assistant -> send_email {"to":"r.okafor"}
event: Normal ApprovalRequested: issue_refund t2-c1 waits for a person
phase: AwaitingApproval
approval needed: t2-c1 issue_refund {"amount_minor":8240} (policy.rules[0]: Refunds above 50.00 need a person.)
  approve: kubectl agentrun approve r t2-c1
  deny:    kubectl agentrun deny r t2-c1
  stop:    kubectl agentrun stop r t2-c1
[t2] tool t2-c1 (issue_refund, declined): a person declined this call
[t2] tool t2-c2 (send_email, ok): sent
[t3] --- Context compacted before turn 3 (clear): cleared 1 tool result(s) of 15 bytes before turn 2; about 31000 input tokens before, about 9000 after ---
[t3] assistant: Two separate charges:
    invoice 1 and invoice 2.
answered: t2-c1 deny by alice (reason: "Not 824.00:\n\"82.40\"")
phase: Succeeded
outcome: Completed
reason: The model gave a final answer.
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("watch output (-want +got):\n%s", diff)
	}
}

// The operator records the Event that names a run's outcome after the
// status write that ended the run. watch prints it before the outcome
// even when it comes after the run's end, waiting for it up to FinishWait.
func TestWatch_waitsForTheEventThatRecordsTheOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) { s.Phase = v1alpha1.PhaseRunning })

	out, done := watchInBackground(t, ctx, k8sClient, ns, WatchOptions{FinishWait: 30 * time.Second})
	g := NewWithT(t)
	g.Eventually(out.String, 15*time.Second, 20*time.Millisecond).Should(ContainSubstring("phase: Running"))
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseSucceeded
		s.Outcome, s.Reason = v1alpha1.OutcomeCompleted, "the model gave a final answer on turn 1"
	})
	g.Eventually(out.String, 15*time.Second, 20*time.Millisecond).Should(ContainSubstring("phase: Succeeded"))
	// Only now is the event recorded.
	if err := k8sClient.Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r.finished"},
		EventTime:  metav1.NowMicro(),
		Regarding: corev1.ObjectReference{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "AgentRun", Namespace: ns, Name: "r", UID: run.UID,
		},
		ReportingController: "agents.agentrun.dev/agentrun-controller",
		ReportingInstance:   "test",
		Action:              "RunFinished",
		Reason:              string(v1alpha1.OutcomeCompleted),
		Type:                corev1.EventTypeNormal,
		Note:                "Completed: the model gave a final answer on turn 1",
	}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, ctx, done, out)
	if want := "phase: Succeeded\nevent: Normal Completed: Completed: the model gave a final answer on turn 1\noutcome: Completed\n"; !strings.Contains(out.String(), want) {
		t.Errorf("watch printed\n%s\nwant it to end with the event before the outcome:\n%s", out.String(), want)
	}
}

func TestWatch_endsWhenTheRunIsDeleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) { s.Phase = v1alpha1.PhaseRunning })

	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		_, err := Watch(ctx, k8sClient, WatchOptions{Run: Ref{Namespace: ns, Name: "r"}, Resync: time.Hour}, out)
		done <- err
	}()
	NewWithT(t).Eventually(out.String, 15*time.Second, 20*time.Millisecond).Should(ContainSubstring("phase: Running"))
	if err := k8sClient.Delete(ctx, run); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || err.Error() != "agentrun/r was deleted before it ended" {
			t.Errorf("err = %v, want the run's deletion", err)
		}
	case <-ctx.Done():
		t.Fatal("watch did not notice the deletion")
	}
}

// TestMain_honoursKubectlFlagsAndExitStatus runs the command as kubectl
// would: with --kubeconfig and -n, checking the exit status.
func TestMain_honoursKubectlFlagsAndExitStatus(t *testing.T) {
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseAwaitingApproval
		s.PendingApprovals = pending("t3-c1")
	})
	kubectl := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		out, inErr string
	}{
		{"approve", []string{"approve", "r", "t3-c1"}, 0, "t3-c1 issue_refund:\n{\"amount_minor\":8240}\nagentrun/r: t3-c1 approved\n", ""},
		{"approve a call that does not wait", []string{"approve", "r", "t4-c1"}, 1, "", "error: t4-c1 is not waiting for approval on agentrun/r\npending approvals:\n  t3-c1"},
		{"missing argument", []string{"deny", "r"}, 1, "", "error: missing CALLID: usage: kubectl agentrun deny NAME CALLID\n"},
		{"unknown run", []string{"cancel", "nope"}, 1, "", fmt.Sprintf("error: agentrun \"nope\" not found in namespace %q\n", ns)},
		{"bad format", []string{"transcript", "r", "-o", "yaml"}, 1, "", "error: unknown output format \"yaml\": use -o text or -o json\n"},
		{"transcript", []string{"transcript", "r", "-o", "json"}, 0, "[]\n", ""},
		{"version", []string{"version", "-o", "json"}, 0, version.Get().JSON() + "\n", ""},
		{"version, bad format", []string{"version", "-o", "yaml"}, 1, "", "error: --output \"yaml\": want json"},
	} {
		code, out, errOut := kubectl(tc.args...)
		if code != tc.code || out != tc.out || !strings.Contains(errOut, tc.inErr) || (tc.inErr == "" && errOut != "") {
			t.Errorf("%s: kubectl agentrun %s = %d, stdout %q, stderr %q; want %d, %q, stderr with %q",
				tc.name, strings.Join(tc.args, " "), code, out, errOut, tc.code, tc.out, tc.inErr)
		}
	}

	// watch exits 1 for a run that ended any other way than Completed, and
	// names the namespace in the commands it prints.
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseFailed
		s.Outcome, s.Reason = v1alpha1.OutcomeEscalated, "t3-c1 waited longer than approvalTimeout (1h0m0s)"
	})
	code, out, errOut := kubectl("watch", "r", "--timeout", "30s")
	want := `goal: Find out why the customer was charged twice.
phase: Failed
outcome: Escalated
reason: t3-c1 waited longer than approvalTimeout (1h0m0s)
`
	if code != 1 || errOut != "" {
		t.Errorf("watch of an escalated run = %d, stderr %q; want 1 and nothing on stderr", code, errOut)
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("watch output (-want +got):\n%s", diff)
	}
}

// Issue 46: deny --reason sets the reason after an empty digest
// (deny::REASON), as the operator reads it; the reason may hold colons and
// line breaks, and is printed quoted. A reason past the bound is refused
// before the server is asked, and approve takes no reason.
func TestDeny_withAReason(t *testing.T) {
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseAwaitingApproval
		s.PendingApprovals = pending("t3-c1", "t3-c2")
	})
	kubectl := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	const reason = "Not 824.00: the invoice says 82.40.\nAsk Finance."
	code, out, errOut := kubectl("deny", "r", "t3-c1", "--reason", " "+reason+"\n")
	if code != 0 || errOut != "" {
		t.Fatalf("deny --reason = %d, stderr %q", code, errOut)
	}
	if want := `agentrun/r: t3-c1 denied (reason: "Not 824.00: the invoice says 82.40.\nAsk Finance.")` + "\n"; out != want {
		t.Errorf("deny --reason printed %q, want %q", out, want)
	}
	v := get(t, run).Annotations[v1alpha1.ApprovalAnnotationPrefix+"t3-c1"]
	if v != "deny::"+reason {
		t.Errorf("annotation = %q, want %q", v, "deny::"+reason)
	}
	if a, err := v1alpha1.ParseApprovalAnswer(v); err != nil || a.Reason != reason || a.Digest != "" {
		t.Errorf("the operator reads %q as %+v, %v; want the reason %q and no digest", v, a, err, reason)
	}

	long := strings.Repeat("x", v1alpha1.MaxApprovalReason+1)
	for _, tc := range []struct {
		args  []string
		inErr string
	}{
		{[]string{"deny", "r", "t3-c2", "--reason", long}, "at most 1024"},
		{[]string{"approve", "r", "t3-c2", "--reason", "fine"}, "unknown flag: --reason"},
	} {
		code, out, errOut := kubectl(tc.args...)
		if code != 1 || out != "" || !strings.Contains(errOut, tc.inErr) {
			t.Errorf("kubectl agentrun %s = %d, stdout %q, stderr %q; want 1 and an error with %q", tc.args[0], code, out, errOut, tc.inErr)
		}
	}
	if _, answered := get(t, run).Annotations[v1alpha1.ApprovalAnnotationPrefix+"t3-c2"]; answered {
		t.Error("a refused answer set the annotation of t3-c2")
	}
}

// noWatch is a client whose watches the server refuses, as RBAC without the
// watch verb would.
type noWatch struct{ client.WithWatch }

func (noWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, apierrors.NewForbidden(v1alpha1.GroupVersion.WithResource("agentruns").GroupResource(), "", errors.New("no watch"))
}

func TestWatch_pollsWhenWatchesAreRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)

	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		_, err := Watch(ctx, noWatch{k8sClient}, WatchOptions{Run: Ref{Namespace: ns, Name: "r"}, Resync: 50 * time.Millisecond}, out)
		done <- err
	}()
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) { s.Phase = v1alpha1.PhaseRunning })
	NewWithT(t).Eventually(out.String, 15*time.Second, 20*time.Millisecond).Should(ContainSubstring("phase: Running"))
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseFailed
		s.Outcome, s.Reason = v1alpha1.OutcomeBudgetExhausted, "turns: 3 of 3 used"
	})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatalf("watch did not end by polling; it printed:\n%s", out.String())
	}
	if !strings.HasSuffix(out.String(), "phase: Failed\noutcome: BudgetExhausted\nreason: turns: 3 of 3 used\n") {
		t.Errorf("watch output does not end with the outcome:\n%s", out.String())
	}
}

// What a model or tool wrote is printed without its escape sequences and
// control characters, by transcript and by watch; newlines and tabs stay.
func TestTranscriptAndWatch_stripTerminalEscapes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := newNamespace(t)
	run := makeRun(ns, "r").create(t)
	hostile := []loop.Message{
		{Role: loop.RoleAssistant, Turn: 1, Content: "\x1b[2J\x1b[Hall\tfine\x1b]0;owned\x07"},
		{Role: loop.RoleTool, Turn: 1, CallID: "t1-c1", Tool: "lookup", Status: "ok", Content: "refund 99999999\r\x1b[1Arefund 1\u202e"},
	}
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Checkpoint = checkpoint(t, hostile...)
		s.Outcome, s.Reason = v1alpha1.OutcomeCompleted, "done \x1b[31mred"
	})
	ref := Ref{Namespace: ns, Name: "r"}

	var text bytes.Buffer
	if err := Transcript(ctx, k8sClient, ref, OutputText, &text); err != nil {
		t.Fatal(err)
	}
	w := &syncBuffer{}
	if _, err := Watch(ctx, k8sClient, WatchOptions{Run: ref, Resync: time.Hour}, w); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"transcript": text.String(), "watch": w.String()} {
		if strings.ContainsAny(out, "\x1b\r\x07\u202e") {
			t.Errorf("%s printed terminal control: %q", name, out)
		}
		if !strings.Contains(out, "all\tfine") || !strings.Contains(out, "refund 99999999") {
			t.Errorf("%s lost the text itself: %q", name, out)
		}
	}
}
