package controller

import (
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
)

func TestAnswersFrom_leavesOutWhatWasAppliedAndWhatIsNotAnAnswer(t *testing.T) {
	run := &v1alpha1.AgentRun{}
	run.Annotations = map[string]string{
		v1alpha1.ApprovalAnnotationPrefix + "t1-c1": "approve", // applied already
		v1alpha1.ApprovalAnnotationPrefix + "t2-c1": " Deny ",
		v1alpha1.ApprovalAnnotationPrefix + "t2-c2": "maybe",
		"unrelated": "approve",
	}
	run.Status.Approvals = []v1alpha1.ApprovalRecord{{CallID: "t1-c1", Decision: "approve"}}
	got, _, _ := answersFrom(run)
	if diff := cmp.Diff(map[string]loop.Answer{"t2-c1": loop.DenyAnswer}, got); diff != "" {
		t.Fatalf("answers (-want +got):\n%s", diff)
	}
}
