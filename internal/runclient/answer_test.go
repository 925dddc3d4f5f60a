package runclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// These are the operations' results as values: the answers' and cancels'
// writes and refusals are tested against a real API server, with the
// plugin's printing of them, in internal/plugin and internal/console.

var ref = runclient.Ref{Namespace: "shop", Name: "refund-1042"}

var refund = v1alpha1.PendingApproval{CallID: "t3-c1", Tool: "issue_refund", Arguments: `{"amount_minor":8240}`, ArgumentsDigest: "sha256:0b1e"}

func clientWith(t *testing.T, edit func(*v1alpha1.AgentRun)) (client.Client, *v1alpha1.AgentRun) {
	t.Helper()
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, UID: "uid-1"}}
	run.Status.Phase = v1alpha1.PhaseAwaitingApproval
	run.Status.PendingApprovals = []v1alpha1.PendingApproval{refund}
	if edit != nil {
		edit(run)
	}
	return fake.NewClientBuilder().WithScheme(kubescheme.Scheme).WithObjects(run).Build(), run
}

func annotation(t *testing.T, c client.Client) string {
	t.Helper()
	var got v1alpha1.AgentRun
	if err := c.Get(context.Background(), ref.Key(), &got); err != nil {
		t.Fatal(err)
	}
	return got.Annotations[v1alpha1.ApprovalAnnotationPrefix+"t3-c1"]
}

func TestAnswer_returnsWhatItAnswered(t *testing.T) {
	for _, tc := range []struct {
		name       string
		o          runclient.AnswerOptions
		want       runclient.Answered
		said       string
		annotation string
	}{
		{"an approval binds to the digest of the call it checked",
			runclient.AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove},
			runclient.Answered{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove, Digest: "sha256:0b1e", Call: &refund},
			"agentrun/refund-1042: t3-c1 approved", "approve:sha256:0b1e"},
		{"a person's approval of what they were shown",
			runclient.AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove, Shown: &runclient.Shown{UID: "uid-1", Digest: "sha256:0b1e"}},
			runclient.Answered{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove, Digest: "sha256:0b1e", Call: &refund},
			"agentrun/refund-1042: t3-c1 approved", "approve:sha256:0b1e"},
		{"a denial binds to nothing",
			runclient.AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalDeny},
			runclient.Answered{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalDeny, Call: &refund},
			"agentrun/refund-1042: t3-c1 denied", "deny"},
		{"stop",
			runclient.AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalStop},
			runclient.Answered{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalStop, Call: &refund},
			"agentrun/refund-1042: t3-c1 denied; the run will stop (ApprovalDenied)", "stop"},
		{"a forced answer is not checked, so it names no call and binds to nothing",
			runclient.AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove, Force: true},
			runclient.Answered{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove},
			"agentrun/refund-1042: t3-c1 approved", "approve"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := clientWith(t, nil)
			got, err := runclient.Answer(context.Background(), c, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("answered (-want +got):\n%s", diff)
			}
			if got.String() != tc.said {
				t.Errorf("String() = %q, want %q", got.String(), tc.said)
			}
			if a := annotation(t, c); a != tc.annotation {
				t.Errorf("annotation = %q, want %q", a, tc.annotation)
			}
		})
	}
}

func TestAnswer_refusesWithAReason(t *testing.T) {
	approve := runclient.AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove}
	for _, tc := range []struct {
		name string
		run  func(*v1alpha1.AgentRun)
		o    runclient.AnswerOptions
		want runclient.Reason
		says string
	}{
		{"the run ended", func(r *v1alpha1.AgentRun) { r.Status.Outcome = v1alpha1.OutcomeCompleted }, approve,
			runclient.RunEnded, "has already ended (Completed)"},
		{"the call does not wait", nil, runclient.AnswerOptions{Run: ref, CallID: "t9-c1", Decision: v1alpha1.ApprovalApprove},
			runclient.NotPending, "pending approvals:\n  t3-c1  issue_refund"},
		{"another answer waits for the operator", func(r *v1alpha1.AgentRun) {
			r.Annotations = map[string]string{v1alpha1.ApprovalAnnotationPrefix + "t3-c1": "deny"}
		}, approve, runclient.AnsweredAlready, `already answered "deny"`},
		{"the run was created again", nil,
			runclient.AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove, Shown: &runclient.Shown{UID: "uid-0", Digest: "sha256:0b1e"}},
			runclient.RunReplaced, "deleted and created again"},
		{"the arguments changed", nil,
			runclient.AnswerOptions{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove, Shown: &runclient.Shown{UID: "uid-1", Digest: "sha256:ffff"}},
			runclient.ArgumentsChanged, "other arguments (sha256:0b1e) than you were shown (sha256:ffff)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, run := clientWith(t, tc.run)
			before := run.Annotations[v1alpha1.ApprovalAnnotationPrefix+"t3-c1"]
			got, err := runclient.Answer(context.Background(), c, tc.o)
			var refused *runclient.Refused
			if !errors.As(err, &refused) {
				t.Fatalf("Answer = %+v, %v; want a refusal", got, err)
			}
			want := runclient.Refused{Reason: tc.want, Run: ref, CallID: tc.o.CallID}
			if diff := cmp.Diff(want, *refused, cmpopts.IgnoreUnexported(runclient.Refused{})); diff != "" {
				t.Errorf("refusal (-want +got):\n%s", diff)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("the refusal says %q, want it to say %q", err, tc.says)
			}
			if a := annotation(t, c); a != before {
				t.Errorf("a refused answer changed the annotation from %q to %q", before, a)
			}
		})
	}
}

func TestCancel_returnsWhatItDid(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(*v1alpha1.AgentRun)
		want runclient.Cancelled
		said string
	}{
		{"requested", nil, runclient.Cancelled{Run: ref},
			"agentrun/refund-1042: cancel requested; the run stops at the next turn boundary"},
		{"requested before", func(r *v1alpha1.AgentRun) { r.Spec.Cancel = true }, runclient.Cancelled{Run: ref, Already: true},
			"agentrun/refund-1042: cancel already requested"},
		{"ended", func(r *v1alpha1.AgentRun) { r.Status.Outcome = v1alpha1.OutcomeLoopDetected }, runclient.Cancelled{Run: ref, Ended: v1alpha1.OutcomeLoopDetected},
			"agentrun/refund-1042 has already ended (LoopDetected); nothing to cancel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := clientWith(t, tc.run)
			got, err := runclient.Cancel(context.Background(), c, runclient.CancelOptions{Run: ref})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("cancelled (-want +got):\n%s", diff)
			}
			if got.String() != tc.said {
				t.Errorf("String() = %q, want %q", got.String(), tc.said)
			}
			var after v1alpha1.AgentRun
			if err := c.Get(context.Background(), ref.Key(), &after); err != nil {
				t.Fatal(err)
			}
			if wantCancel := tc.want.Ended == ""; after.Spec.Cancel != wantCancel {
				t.Errorf("spec.cancel = %v, want %v", after.Spec.Cancel, wantCancel)
			}
		})
	}
}
