package console

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/agentrun/agentrun/internal/safeterm"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// pendingCall is one call that waits for a person, with what the person
// needs to decide: the tool, the arguments whole, their digest, and the
// rule that asked.
type pendingCall struct {
	Key                          string // NAMESPACE/NAME/CALLID, the buttons' hook
	Namespace, Name, CallID      string
	UID                          types.UID // the run's: the answer is for this object only
	Tool, Arguments, Digest      string
	Rule, Reason, Requested, Age string
	// Question and Choices: what the agent asks, when the call is a
	// question (builtin person.ask).
	Question string
	Choices  []string
	// Approvals is how many distinct people must approve the call, when
	// more than one, and ApprovedBy who have so far.
	Approvals  int32
	ApprovedBy []string
	// Parent is the run whose agent tool made this one (its label), so
	// that the person sees whose child asks.
	Parent string
	at     time.Time
}

// waitsForAPerson reports whether a call of run waits for a person: the
// runs whose calls the inbox lists.
func waitsForAPerson(run *v1alpha1.AgentRun) bool {
	return run.Status.Outcome == "" && len(run.Status.PendingApprovals) > 0
}

// escalationOpen reports whether run ended Escalated, the operator
// recorded its hand-off (status.escalation), and no one has resolved it:
// the runs whose escalations the inbox lists.
func escalationOpen(run *v1alpha1.AgentRun) bool {
	e := run.Status.Escalation
	return run.Status.Outcome == v1alpha1.OutcomeEscalated && e != nil && e.ResolvedAt == nil
}

func pendingOf(run *v1alpha1.AgentRun) []pendingCall {
	if !waitsForAPerson(run) {
		return nil
	}
	var out []pendingCall
	for _, p := range run.Status.PendingApprovals {
		c := pendingCall{Key: run.Namespace + "/" + run.Name + "/" + p.CallID, Namespace: run.Namespace, Name: run.Name, UID: run.UID,
			CallID: p.CallID, Tool: p.Tool, Arguments: safeterm.Clean(prettyJSON(p.Arguments)), Digest: p.ArgumentsDigest,
			Rule: safeterm.Clean(p.Rule), Reason: safeterm.Clean(p.Reason), Question: safeterm.Clean(p.Question), at: run.CreationTimestamp.Time}
		c.Approvals, c.Parent = p.Approvals, safeterm.Clean(run.Labels[v1alpha1.LabelParent])
		for _, by := range p.ApprovedBy {
			c.ApprovedBy = append(c.ApprovedBy, safeterm.Clean(by))
		}
		for _, ch := range p.Choices {
			c.Choices = append(c.Choices, safeterm.Clean(ch))
		}
		if p.RequestedAt != nil {
			c.at = p.RequestedAt.Time
			c.Requested = stamp(p.RequestedAt.Time)
		}
		out = append(out, c)
	}
	return out
}

// escalation is a run that ended Escalated and that no one has resolved:
// its owner, since when, who took it, and the form that acknowledges or
// resolves it.
type escalation struct {
	Key             string // NAMESPACE/NAME, the buttons' hook
	Namespace, Name string
	UID             types.UID
	Owner, Reason   string
	Since, Age      string
	// AcknowledgedBy is who took it, when someone has; Note the latest
	// note given.
	AcknowledgedBy, Note string
	// MaxNote is the longest note the API takes.
	MaxNote int
	// Back is the page the form returns to: inbox or run.
	Back, Filter string
	at           time.Time
}

// escalationOf is run's open escalation, nil unless escalationOpen.
func escalationOf(run *v1alpha1.AgentRun, back, filter string) *escalation {
	if !escalationOpen(run) {
		return nil
	}
	e := run.Status.Escalation
	return &escalation{Key: run.Namespace + "/" + run.Name, Namespace: run.Namespace, Name: run.Name, UID: run.UID,
		Owner: safeterm.Clean(e.Owner), Reason: safeterm.Clean(run.Status.Reason), Since: stamp(e.Since.Time),
		AcknowledgedBy: safeterm.Clean(e.AcknowledgedBy), Note: safeterm.Clean(e.Note), MaxNote: v1alpha1.MaxAckNote,
		Back: back, Filter: filter, at: e.Since.Time}
}

// prettyJSON indents arguments that are JSON, and leaves others as they
// are (status may hold a cut or invalid text, marked).
func prettyJSON(s string) string {
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(s), "", "  "); err != nil {
		return s
	}
	return b.String()
}

// result is what an answer did (runclient.Answered in words), or the
// refusal.
type result struct {
	OK      bool
	Message string
}

type inboxData struct {
	Namespace string
	Calls     []pendingCall
	// Escalations are the runs handed to people that no one has resolved,
	// oldest first.
	Escalations []escalation
	Result      *result
	Note        string
}

func (s *Server) inbox(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	return s.inboxView(r, u, r.URL.Query().Get("namespace"), nil)
}

func (s *Server) inboxView(r *http.Request, u *user, ns string, res *result) (view, error) {
	d := &inboxData{Namespace: ns, Result: res}
	q := url.Values{}
	if ns != "" {
		q.Set("namespace", ns)
	}
	self := "/inbox?" + join(q.Encode(), "fragment=1")
	v := view{Title: "Inbox", Page: "inbox", Data: d, Live: self, Events: "/events?" + join(q.Encode(), "kind=inbox")}
	runs, note, err := s.inboxRuns(r.Context(), u, ns)
	if err != nil {
		return v, err
	}
	d.Note = note
	now := time.Now()
	for i := range runs {
		for _, c := range pendingOf(&runs[i]) {
			c.Age = now.Sub(c.at).Round(time.Second).String()
			d.Calls = append(d.Calls, c)
		}
		if e := escalationOf(&runs[i], "inbox", ns); e != nil {
			e.Age = now.Sub(e.at).Round(time.Second).String()
			d.Escalations = append(d.Escalations, *e)
		}
	}
	slices.SortStableFunc(d.Escalations, func(a, b escalation) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.Key, b.Key)) })
	// Oldest first.
	slices.SortStableFunc(d.Calls, func(a, b pendingCall) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.Key, b.Key)) })
	return v, nil
}

// inboxRuns reads the runs the inbox can show: those waiting for a person
// (status.phase AwaitingApproval) and those that escalated
// (status.outcome Escalated), selected by the API server through the
// CRD's selectable fields, so that the inbox reads a handful of runs
// however many finished ones the cluster keeps. An API server that does
// not know the fields (a CRD installed before them) refuses the selector;
// the inbox then reads every run, as it did before.
func (s *Server) inboxRuns(ctx context.Context, u *user, ns string) ([]v1alpha1.AgentRun, string, error) {
	waiting := client.MatchingFields{v1alpha1.FieldPhase: string(v1alpha1.PhaseAwaitingApproval)}
	escalated := client.MatchingFields{v1alpha1.FieldOutcome: string(v1alpha1.OutcomeEscalated)}
	var first v1alpha1.AgentRunList
	sc, err := s.scopeOf(ctx, u, ns, &first, waiting)
	if apierrors.IsBadRequest(err) {
		sc, err = s.scopeOf(ctx, u, ns, &first)
		if err != nil {
			return nil, "", err
		}
		runs, err := listRuns(ctx, u, sc, &first)
		return runs, sc.Note, err
	}
	if err != nil {
		return nil, "", err
	}
	runs, err := listRuns(ctx, u, sc, &first, waiting)
	if err != nil {
		return nil, "", err
	}
	more, err := listRuns(ctx, u, sc, nil, escalated)
	if err != nil {
		return nil, "", err
	}
	return append(runs, more...), sc.Note, nil
}

// editDecision is the edit form's button: approve with the arguments in
// its box.
const editDecision v1alpha1.ApprovalDecision = "edit"

// answer writes the approval annotation as the user, through the same
// operation as `kubectl agentrun approve|deny|stop` (runclient.Answer),
// with the reason typed in the call's box for a Deny or a Stop, or the
// arguments typed in its edit box for Approve with changes: it
// refuses a call that no longer waits, and binds an approval to the
// arguments' digest. The inbox is shown again with what the typed answer
// says happened; a refusal is shown as runclient or the API server gave it,
// with its status code.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	if !s.checkToken(r, u) {
		return view{Title: "Refused", Page: "error", Status: http.StatusForbidden,
			Data: "This form is out of date or did not come from this console: reload the page and answer again."}, nil
	}
	ns, name, call := r.PostFormValue("namespace"), r.PostFormValue("name"), r.PostFormValue("call")
	decision := v1alpha1.ApprovalDecision(r.PostFormValue("decision"))
	// The form names the run and the arguments it showed: an answer is
	// never given to a run created again under the name, or to other
	// arguments, after the page was read.
	shown := &runclient.Shown{UID: types.UID(r.PostFormValue("uid")), Digest: r.PostFormValue("digest")}
	if shown.UID == "" {
		return view{Title: "Refused", Page: "error", Status: http.StatusBadRequest,
			Data: "This form does not say which run it showed: reload the page and answer again."}, nil
	}
	// The reason box goes with Deny and Stop; Approve takes no reason. A
	// browser sends a text area's line breaks as CRLF: the person typed LF.
	reason, edited := "", ""
	if choice := r.PostFormValue("choice"); choice != "" {
		// A choice the agent offered with its question: that is the
		// answer.
		decision = v1alpha1.ApprovalReply
		r.PostForm.Set("reason", choice)
	}
	switch decision {
	case editDecision:
		// Approve with changes: the edit box holds the whole arguments;
		// runclient makes the merge patch from the ones shown.
		decision, edited = v1alpha1.ApprovalApprove, r.PostFormValue("arguments")
	case v1alpha1.ApprovalApprove:
	default:
		reason = strings.ReplaceAll(r.PostFormValue("reason"), "\r\n", "\n")
	}
	a, err := runclient.Answer(r.Context(), u.c, runclient.AnswerOptions{Run: runclient.Ref{Namespace: ns, Name: name}, CallID: call,
		Decision: decision, Reason: reason, Arguments: edited, Shown: shown})
	res, status := answerResult(a, err)
	back := r.PostFormValue("back")
	if back == "run" {
		return s.runPageWith(w, r, u, runclient.Ref{Namespace: ns, Name: name}, res, status)
	}
	v, verr := s.inboxView(r, u, r.PostFormValue("filter"), res)
	v.Status = status
	return v, verr
}

// answerResult is what the page says of an answer (or of a refused
// follow-up), and its status code:
// what the answer did, or why it was refused (403 when the API server
// refused the user, else 409).
func answerResult(a fmt.Stringer, err error) (*result, int) {
	switch {
	case err == nil:
		return &result{OK: true, Message: safeterm.Clean(a.String())}, http.StatusOK
	case forbidden(err):
		return &result{Message: safeterm.Clean(err.Error())}, http.StatusForbidden
	}
	return &result{Message: safeterm.Clean(err.Error())}, http.StatusConflict
}

// ack acknowledges or resolves the escalation of the run the form showed,
// as the user, through the same operation as `kubectl agentrun ack`
// (runclient.Ack, bound to the run's UID), with the note typed in its box.
// The page it came from is shown again with what happened, or the
// refusal as runclient or the API server gave it.
func (s *Server) ack(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	if !s.checkToken(r, u) {
		return view{Title: "Refused", Page: "error", Status: http.StatusForbidden,
			Data: "This form is out of date or did not come from this console: reload the page and acknowledge again."}, nil
	}
	ns, name := r.PostFormValue("namespace"), r.PostFormValue("name")
	uid := types.UID(r.PostFormValue("uid"))
	if uid == "" {
		return view{Title: "Refused", Page: "error", Status: http.StatusBadRequest,
			Data: "This form does not say which run it showed: reload the page and acknowledge again."}, nil
	}
	a, err := runclient.Ack(r.Context(), u.c, runclient.AckOptions{Run: runclient.Ref{Namespace: ns, Name: name},
		Resolve: r.PostFormValue("do") == "resolve", Note: strings.ReplaceAll(r.PostFormValue("note"), "\r\n", "\n"), UID: uid})
	res, status := answerResult(a, err)
	if r.PostFormValue("back") == "run" {
		return s.runPageWith(w, r, u, runclient.Ref{Namespace: ns, Name: name}, res, status)
	}
	v, verr := s.inboxView(r, u, r.PostFormValue("filter"), res)
	v.Status = status
	return v, verr
}

// withPath gives a copy of r the path values of a run's page.
func withPath(r *http.Request, ns, name string) *http.Request {
	r2 := r.Clone(r.Context())
	r2.SetPathValue("namespace", ns)
	r2.SetPathValue("name", name)
	return r2
}

// continueRun creates a follow-up of the finished run the form showed
// (runclient.Continue, bound to the run's UID) and opens its page; a
// refusal is shown on the earlier run's page.
func (s *Server) continueRun(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	ref, uid, refused := s.runForm(r, u, "continue")
	if refused != nil {
		return *refused, nil
	}
	// A browser sends a text area's line breaks as CRLF: the person typed LF.
	goal := strings.ReplaceAll(r.PostFormValue("goal"), "\r\n", "\n")
	run, err := runclient.Continue(r.Context(), u.c, runclient.ContinueOptions{Run: ref, Goal: goal, UID: uid})
	if err == nil {
		http.Redirect(w, r, runPage(run.Namespace, run.Name), http.StatusSeeOther)
		return view{}, nil
	}
	res, status := answerResult(nil, err)
	return s.runPageWith(w, r, u, ref, res, status)
}
