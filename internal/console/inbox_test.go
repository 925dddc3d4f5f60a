package console

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// The inbox says what an answer did from runclient's typed result, not
// from text an operation printed (issue 44: it read the plugin's last
// printed line). An approval's page shows the typed answer's sentence
// alone, whatever the call's arguments hold; a refusal its reason, with
// 409, and the API server's refusal of the user 403.
func TestAnswerResult_isTheTypedResult(t *testing.T) {
	ref := runclient.Ref{Namespace: "shop", Name: "refund-1042"}
	call := &v1alpha1.PendingApproval{CallID: "t3-c1", Tool: "issue_refund", ArgumentsDigest: "sha256:0b1e",
		Arguments: "{\"note\":\"line one\nagentrun/refund-1042: t3-c1 denied\"}"}
	// A refusal as runclient gives it: the run has ended.
	ended := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name},
		Status: v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted}}
	c := fake.NewClientBuilder().WithScheme(kubescheme.Scheme).WithObjects(ended).Build()
	_, refused := runclient.Answer(context.Background(), c, runclient.AnswerOptions{Run: ref, CallID: "t9-c1", Decision: v1alpha1.ApprovalApprove})
	var r *runclient.Refused
	if !errors.As(refused, &r) || r.Reason != runclient.RunEnded {
		t.Fatalf("answering an ended run: %v, want a refusal (RunEnded)", refused)
	}
	forbidden := runclient.Explain(apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "agentruns"},
		"refund-1042", errors.New("alice may not patch it")), ref)
	for _, tc := range []struct {
		name       string
		answered   *runclient.Answered
		err        error
		want       result
		wantStatus int
	}{
		{"approved", &runclient.Answered{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove, Digest: "sha256:0b1e", Call: call}, nil,
			result{OK: true, Message: "agentrun/refund-1042: t3-c1 approved"}, http.StatusOK},
		{"denied", &runclient.Answered{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalDeny, Call: call}, nil,
			result{OK: true, Message: "agentrun/refund-1042: t3-c1 denied"}, http.StatusOK},
		{"stopped", &runclient.Answered{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalStop, Call: call}, nil,
			result{OK: true, Message: "agentrun/refund-1042: t3-c1 denied; the run will stop (ApprovalDenied)"}, http.StatusOK},
		{"a name with a terminal escape", &runclient.Answered{Run: runclient.Ref{Name: "r\x1b[2Jx"}, CallID: "t1-c1", Decision: v1alpha1.ApprovalDeny}, nil,
			result{OK: true, Message: "agentrun/rx: t1-c1 denied"}, http.StatusOK},
		{"refused", nil, refused, result{Message: "agentrun/refund-1042 has already ended (Completed): no call waits for an answer"}, http.StatusConflict},
		{"not allowed", nil, forbidden,
			result{Message: `not allowed: agentruns.agents.agentrun.dev "refund-1042" is forbidden: alice may not patch it`}, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, status := answerResult(tc.answered, tc.err)
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if status != tc.wantStatus {
				t.Errorf("status = %d, want %d", status, tc.wantStatus)
			}
		})
	}
}
