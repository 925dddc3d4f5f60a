package controller

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/platform"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/google/go-cmp/cmp"
	ctrl "sigs.k8s.io/controller-runtime"
)

func TestAnswersFrom_leavesOutWhatWasAppliedAndWhatIsNotAnAnswer(t *testing.T) {
	run := &v1alpha1.AgentRun{}
	run.Annotations = map[string]string{
		v1alpha1.ApprovalAnnotationPrefix + "t1-c1":   "approve", // applied already
		v1alpha1.ApprovalAnnotationPrefix + "t2-c1":   " Deny ",
		v1alpha1.ApprovedByAnnotationPrefix + "t2-c1": "jane",
		v1alpha1.ApprovalAnnotationPrefix + "t2-c2":   "maybe",
		v1alpha1.ApprovalAnnotationPrefix + "t3-c1":   "approve:SHA256:0B1E",
		"unrelated": "approve",
	}
	run.Status.Approvals = []v1alpha1.ApprovalRecord{{CallID: "t1-c1", Decision: "approve"}}
	want := map[string]runstatus.Answer{
		"t2-c1": {ApprovalAnswer: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalDeny}, By: "jane"},
		"t3-c1": {ApprovalAnswer: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: "sha256:0b1e"}},
	}
	if diff := cmp.Diff(want, answersFrom(run)); diff != "" {
		t.Fatalf("answers (-want +got):\n%s", diff)
	}
}

// The operator's half of binding an answer to what was reviewed: where the
// admission policy is not installed, an answer naming other arguments
// still does not apply.
func TestBindAnswers_otherArgumentsAreNotApplied(t *testing.T) {
	args := json.RawMessage(`{"amount_minor":999999}`)
	s := &loop.State{Calls: []loop.Call{{ToolCall: loop.ToolCall{ID: "t1-c1", Name: "refund", Arguments: args}}}}
	approve := func(digest string) map[string]runstatus.Answer {
		return map[string]runstatus.Answer{"t1-c1": {ApprovalAnswer: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: digest}}}
	}
	answers := approve("sha256:00")
	notes := bindAnswers(s, answers)
	if len(answers) != 0 || len(notes) != 1 || notes[0].Kind != NoteAnswerNotApplied {
		t.Fatalf("answers %v, notes %+v; want the answer dropped with one note", answers, notes)
	}
	answers = approve(loop.ArgumentsDigest(args))
	if notes := bindAnswers(s, answers); len(notes) != 0 || answers["t1-c1"].Decision != v1alpha1.ApprovalApprove {
		t.Fatalf("an answer for the call's own arguments was dropped: %+v", notes)
	}
	answers = approve("")
	if notes := bindAnswers(s, answers); len(notes) != 0 || answers["t1-c1"].Decision != v1alpha1.ApprovalApprove {
		t.Fatalf("an answer that names no arguments was dropped: %+v", notes)
	}
}

func TestScreenApprovers(t *testing.T) {
	bot := platform.ServiceAccountUser("ops", "approver-bot")
	allowBot := platform.Approvers{Author: "alice", Accounts: map[string][]string{"p": {bot}}}
	noSelf := platform.Approvers{Author: "alice", NoSelf: []string{"p"}, Accounts: map[string][]string{"p": nil}}
	for _, tc := range []struct {
		name    string
		a       platform.Approvers
		by      string
		applied bool
		why     string
	}{
		{"a person, no policy", platform.Approvers{}, "bob", true, ""},
		{"unknown approver (no stamp)", platform.Approvers{}, "", false, "did not record who gave it"},
		{"a ServiceAccount, no policy", platform.Approvers{}, bot, false, "no AgentRunPolicy allows ServiceAccounts"},
		{"a listed ServiceAccount", allowBot, bot, true, ""},
		{"an unlisted ServiceAccount", allowBot, platform.ServiceAccountUser("ops", "other"), false, "does not list"},
		{"the author, self-approval allowed", allowBot, "alice", true, ""},
		{"the author, self-approval refused", noSelf, "alice", false, "refuses self-approval"},
		{"another person, self-approval refused", noSelf, "bob", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answers := map[string]runstatus.Answer{"t1-c1": {ApprovalAnswer: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove}, By: tc.by}}
			notes := screenApprovers(tc.a, answers, false)
			if _, ok := answers["t1-c1"]; ok != tc.applied {
				t.Fatalf("applied %v, want %v (notes %+v)", ok, tc.applied, notes)
			}
			if !tc.applied && (len(notes) != 1 || !strings.Contains(notes[0].Message, tc.why)) {
				t.Fatalf("notes %+v; want one naming %q", notes, tc.why)
			}
		})
	}
}

// Where the identity policy is not installed (chart
// approvals.recordIdentity.enabled=false), the operator may be told to
// take unstamped answers; the platform's rules still apply to the rest.
func TestScreenApprovers_acceptingUnstampedAnswers(t *testing.T) {
	approve := v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove}
	answers := map[string]runstatus.Answer{"t1-c1": {ApprovalAnswer: approve},
		"t1-c2": {ApprovalAnswer: approve, By: platform.ServiceAccountUser("ops", "bot")}}
	notes := screenApprovers(platform.Approvers{}, answers, true)
	if _, ok := answers["t1-c1"]; !ok || len(answers) != 1 || len(notes) != 1 {
		t.Fatalf("answers %v, notes %+v; want the unstamped answer kept and the ServiceAccount's dropped", answers, notes)
	}
}

// Issue 28: the phases of one reconcile take the soonest requeue any of
// them asks for; the last phase's alone once won.
func TestCombine_takesTheSoonestRequeue(t *testing.T) {
	var r ctrl.Result
	for _, phase := range []ctrl.Result{{RequeueAfter: time.Second}, {}, {RequeueAfter: time.Minute}} {
		r = combine(r, phase)
	}
	if r.RequeueAfter != time.Second {
		t.Fatalf("requeue after %s; want the soonest, 1s", r.RequeueAfter)
	}
	if r := combine(ctrl.Result{}, ctrl.Result{}); r != (ctrl.Result{}) {
		t.Fatalf("no phase asked for a requeue, got %+v", r)
	}
}
