package controller

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/platform"
	"github.com/google/go-cmp/cmp"
	ctrl "sigs.k8s.io/controller-runtime"
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

// The operator's half of binding an answer to what was reviewed: where the
// admission policy is not installed, an answer naming other arguments
// still does not apply.
func TestBindAnswers_otherArgumentsAreNotApplied(t *testing.T) {
	args := json.RawMessage(`{"amount_minor":999999}`)
	s := &loop.State{Calls: []loop.Call{{ToolCall: loop.ToolCall{ID: "t1-c1", Name: "refund", Arguments: args}}}}
	answers := map[string]loop.Answer{"t1-c1": loop.Approve}
	notes := bindAnswers(s, answers, map[string]string{"t1-c1": "sha256:00"})
	if len(answers) != 0 || len(notes) != 1 || notes[0].Kind != NoteAnswerNotApplied {
		t.Fatalf("answers %v, notes %+v; want the answer dropped with one note", answers, notes)
	}
	answers = map[string]loop.Answer{"t1-c1": loop.Approve}
	if notes := bindAnswers(s, answers, map[string]string{"t1-c1": loop.ArgumentsDigest(args)}); len(notes) != 0 || answers["t1-c1"] != loop.Approve {
		t.Fatalf("an answer for the call's own arguments was dropped: %+v", notes)
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
			answers := map[string]loop.Answer{"t1-c1": loop.Approve}
			notes := screenApprovers(tc.a, answers, map[string]string{"t1-c1": tc.by}, false)
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
	answers := map[string]loop.Answer{"t1-c1": loop.Approve, "t1-c2": loop.Approve}
	by := map[string]string{"t1-c2": platform.ServiceAccountUser("ops", "bot")}
	notes := screenApprovers(platform.Approvers{}, answers, by, true)
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
