package controller

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/platform"
	"github.com/agentrun/agentrun/internal/runstatus"
	jsonpatch "github.com/evanphx/json-patch/v5"
)

// answersFrom reads the approval annotations (v1alpha1.ParseApprovalAnswer):
// the answers by call id, with who gave each and the argument digest an
// answer names (approve:sha256:...; see bindAnswers). Values that are not
// answers are left out, and so are answers already applied (in
// status.approvals, not stale): they are history, not news.
//
// Who gave an answer is as the API server authenticated them: the
// admission policy agentrun-approver-identity stamps the username into
// approved-by.agents.agentrun.dev/<callID> in the same request, and
// agentrun-approval refuses clients that write it themselves. The field
// manager is not used: any client chooses its own.
func answersFrom(run *v1alpha1.AgentRun) map[string]runstatus.Answer {
	answers := map[string]runstatus.Answer{}
	for k, v := range run.Annotations {
		id, ok := strings.CutPrefix(k, v1alpha1.ApprovalAnnotationPrefix)
		if !ok || id == "" {
			continue
		}
		a, err := v1alpha1.ParseApprovalAnswer(v)
		if err != nil {
			continue
		}
		by := run.Annotations[v1alpha1.ApprovedByAnnotationPrefix+id]
		if !applied(run, id, by) {
			answers[id] = runstatus.Answer{ApprovalAnswer: a, By: by}
		}
	}
	return answers
}

// applied reports whether the answer to id by by is in status.approvals
// already: an answer by the same person, or any answer once the call no
// longer waits. An approval of a call that needs several approvers, by
// another person than those recorded, is news.
func applied(run *v1alpha1.AgentRun, id, by string) bool {
	waits := waitsFor(run, id)
	return slices.ContainsFunc(run.Status.Approvals, func(r v1alpha1.ApprovalRecord) bool {
		return r.CallID == id && !r.Stale && (r.By == by || !waits)
	})
}

// waitsFor reports whether the call id is in status.pendingApprovals.
func waitsFor(run *v1alpha1.AgentRun, id string) bool {
	return slices.ContainsFunc(run.Status.PendingApprovals, func(p v1alpha1.PendingApproval) bool { return p.CallID == id })
}

// authors is who gave each answer, by call id, for the engine to count
// each approver of a call that needs several once.
func authors(answers map[string]runstatus.Answer) map[string]string {
	by := make(map[string]string, len(answers))
	for id, a := range answers {
		by[id] = a.By
	}
	return by
}

// unreadAnswers is a Warning note for each call waiting in
// status.pendingApprovals whose approval annotation holds no answer the
// operator takes (ParseApprovalAnswer refuses it: no decision, or a reason
// longer than v1alpha1.MaxApprovalReason, which the admission policy
// refuses first where it is installed): the call waits on, and the note
// says why.
func unreadAnswers(run *v1alpha1.AgentRun) []loop.Note {
	var notes []loop.Note
	for _, p := range run.Status.PendingApprovals {
		v, ok := run.Annotations[v1alpha1.ApprovalAnnotationPrefix+p.CallID]
		if !ok {
			continue
		}
		if _, err := v1alpha1.ParseApprovalAnswer(v); err != nil {
			notes = append(notes, loop.Note{Kind: NoteAnswerNotApplied, CallID: p.CallID, Warning: true, Message: fmt.Sprintf(
				"The answer to %s is not applied, and the call still waits: %s", p.CallID, clip.Cut(err.Error(), 512, runstatus.CutMark))})
		}
	}
	return notes
}

// decisions is what the engine takes of the answers: the decision of
// each, and the reason of each that gives one, by call id.
func decisions(answers map[string]runstatus.Answer) (map[string]loop.Answer, map[string]string) {
	if answers == nil {
		return nil, nil
	}
	d := make(map[string]loop.Answer, len(answers))
	var reasons map[string]string
	for id, a := range answers {
		d[id] = loop.Answer(a.Decision)
		if a.Reason != "" {
			if reasons == nil {
				reasons = map[string]string{}
			}
			reasons[id] = a.Reason
		}
	}
	return d, reasons
}

// NoteAnswerNotApplied is the event reason of an answer that named other
// arguments than the call has: it is not applied, and the call waits on.
const NoteAnswerNotApplied loop.NoteKind = "AnswerNotApplied"

// bindAnswers drops from answers every answer given for other arguments
// than its call has (the digest after the answer word, as kubectl agentrun
// approve sends it), with a Warning note for each: a run deleted and
// created again under the same name, with other arguments, while a person
// reviewed the first, does not take that person's answer.
func bindAnswers(s *loop.State, answers map[string]runstatus.Answer) []loop.Note {
	var notes []loop.Note
	for i := range s.Calls {
		c := &s.Calls[i]
		a, answered := answers[c.ID]
		want := a.Digest
		if !answered || want == "" {
			continue
		}
		if got := loop.ArgumentsDigest(c.Arguments); got != want {
			delete(answers, c.ID)
			notes = append(notes, loop.Note{Kind: NoteAnswerNotApplied, CallID: c.ID, Warning: true, Message: fmt.Sprintf(
				"The answer to %s (%s) was given for arguments %s, but the call waiting has arguments %s: it is not applied, and the call still waits",
				c.ID, c.Name, want, got)})
		}
	}
	return notes
}

// fitAnswers drops from answers every answer its waiting call does not
// take (a question takes answer::TEXT, a call waiting for approval does
// not; a call that needs several approvers takes no changes), with a
// Warning note for each that says what the call takes: the call waits on.
func fitAnswers(s *loop.State, answers map[string]runstatus.Answer) []loop.Note {
	var notes []loop.Note
	for i := range s.Calls {
		c := &s.Calls[i]
		a, ok := answers[c.ID]
		if !ok || c.State != loop.CallProposed || c.Verdict != loop.Ask {
			continue
		}
		why := loop.Misfit(c, loop.Answer(a.Decision), a.Edit != "")
		if why == "" {
			continue
		}
		delete(answers, c.ID)
		notes = append(notes, loop.Note{Kind: NoteAnswerNotApplied, CallID: c.ID, Warning: true, Message: fmt.Sprintf(
			"The answer to %s (%s) is not applied, and the call still waits: %s", c.ID, c.Name, why)})
	}
	return notes
}

// editsFrom applies the patch of each approval with changes
// (edit:DIGEST:PATCH) to the arguments of its waiting call, as a JSON
// merge patch (RFC 7386), and returns the edited arguments by call id for
// the engine to vet again; each answer keeps them (Edited) for
// status.approvals. Run after bindAnswers: the patch is applied only to
// the arguments the person was shown. An edit whose result is not a JSON
// object is dropped with a Warning note: the call waits on.
func editsFrom(s *loop.State, answers map[string]runstatus.Answer) (map[string]loop.Edit, []loop.Note) {
	var edits map[string]loop.Edit
	var notes []loop.Note
	for i := range s.Calls {
		c := &s.Calls[i]
		a, ok := answers[c.ID]
		if !ok || a.Edit == "" || c.State != loop.CallProposed {
			continue
		}
		edited, err := jsonpatch.MergePatch(c.Arguments, []byte(a.Edit))
		var obj map[string]json.RawMessage
		if err == nil {
			err = json.Unmarshal(edited, &obj)
		}
		if err != nil || obj == nil {
			delete(answers, c.ID)
			notes = append(notes, loop.Note{Kind: NoteAnswerNotApplied, CallID: c.ID, Warning: true, Message: fmt.Sprintf(
				"The changes given for %s (%s) do not make a JSON object of its arguments: they are not applied, and the call still waits",
				c.ID, c.Name)})
			continue
		}
		a.Edited = edited
		answers[c.ID] = a
		if edits == nil {
			edits = map[string]loop.Edit{}
		}
		edits[c.ID] = loop.Edit{Arguments: edited, By: a.By}
	}
	return edits, notes
}

// screenApprovers drops from answers every answer whose author the
// platform's policies do not let answer (a ServiceAccount not allowed, or
// the run's own author where self-approval is refused), and, unless
// acceptUnstamped, every answer whose author the API server did not
// record, with a Warning note for each: the call waits on for someone who
// may answer.
func screenApprovers(a platform.Approvers, answers map[string]runstatus.Answer, acceptUnstamped bool) []loop.Note {
	var notes []loop.Note
	for _, id := range slices.Sorted(maps.Keys(answers)) {
		by := answers[id].By
		why := a.Refuses(by)
		if by == "" && !acceptUnstamped {
			why = "the API server did not record who gave it (no " + v1alpha1.ApprovedByAnnotationPrefix + id +
				" annotation: the admission policy agentrun-approver-identity is not installed), and the operator applies only answers " +
				"whose author it knows (--accept-unstamped-answers, chart approvals.recordIdentity.enabled=false, applies them anyway)"
		}
		if why != "" {
			delete(answers, id)
			notes = append(notes, loop.Note{Kind: NoteAnswerNotApplied, CallID: id, Warning: true, Message: fmt.Sprintf(
				"The answer to %s is not applied, and the call still waits: %s", id, why)})
		}
	}
	return notes
}
