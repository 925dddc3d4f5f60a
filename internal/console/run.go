package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/kubeevent"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/plugin"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/agentrun/agentrun/internal/safeterm"
	"github.com/agentrun/agentrun/internal/seal"
	"github.com/agentrun/agentrun/internal/transcript"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// runData is the page of one run.
type runData struct {
	Key, Namespace, Name           string
	Phase, Outcome, Reason, Answer string
	Goal, Template, Started, Ended string
	Ceilings                       []bar
	CeilingsNote                   string
	Facts                          []fact // convergence, context, verification
	Pending                        []pendingCall
	Approvals                      []approvalRow
	Turns                          []turnView
	EventsNote                     string
	Transcript                     []transcriptPart
	TranscriptNote                 string
	// SealNote says why the transcript's signatures were not checked (""
	// when they were).
	SealNote string
	Result   *result
	// UID is the run's, for the forms that must act on the run shown.
	UID string
	// ContinuedFrom is the run a follow-up continued, as status names it
	// (or spec, before the operator has read it), and the link to it.
	ContinuedFrom, ContinuedFromLink string
	// Parent is the run whose call made this one (the label
	// agents.agentrun.dev/parent), and the link to it; Children are the
	// runs this one's calls made, as status.children lists them, and
	// ChildrenOmitted the older ones it leaves out.
	Parent, ParentLink string
	Children           []childRow
	ChildrenOmitted    int32
	// CanContinue: the run has finished, so the page offers to continue
	// it (POST /continue); a run made from a template is continued from
	// the same template, with the follow-up's own goal.
	CanContinue bool
	// CanRerun: the run has finished, so the page offers to re-run it
	// (POST /rerun). CanCancel: it has not, and no one has asked it to
	// stop, so the page offers to cancel it (POST /cancel);
	// CancelRequested: someone has (spec.cancel), and it has not stopped
	// yet.
	CanRerun, CanCancel, CancelRequested bool
	// Escalation is the run's open escalation (nil when it has none, or
	// it is resolved), with the form that acknowledges or resolves it;
	// Handoff is what status.escalation says, for any escalated run.
	Escalation *escalation
	Handoff    []fact
}

// transcriptPart is the text of one piece of the transcript (a chunk
// Secret, or the checkpoint), marked when the operator did not sign it.
type transcriptPart struct {
	Source, Text string
	Unsealed     string // why it is not the operator's; "" when its signature verifies or was not checked
}

type fact struct{ Name, Value string }

// handoffFacts are what status.escalation says of an escalated run: its
// owner, since when, who acknowledged and resolved it, and the note.
func handoffFacts(e *v1alpha1.EscalationStatus) []fact {
	if e == nil {
		return nil
	}
	owner := safeterm.Clean(e.Owner)
	if owner == "" {
		owner = "none (no owner label, spec.escalation.owner or policy escalationOwner)"
	}
	out := []fact{{"Owner", owner}, {"Escalated", stamp(e.Since.Time)}}
	if e.AcknowledgedAt != nil {
		out = append(out, fact{"Acknowledged", safeterm.Clean(e.AcknowledgedBy) + ", " + stamp(e.AcknowledgedAt.Time)})
	}
	if e.ResolvedAt != nil {
		out = append(out, fact{"Resolved", safeterm.Clean(e.ResolvedBy) + ", " + stamp(e.ResolvedAt.Time)})
	}
	if e.Note != "" {
		out = append(out, fact{"Note", safeterm.Clean(e.Note)})
	}
	return out
}

// childRow is one child run on its parent's page.
type childRow struct{ Name, Link, CallID, Outcome, Turns, Cost string }

// bar is one ceiling as the page draws it: consumed and reserved against
// the limit. Percentages are of the limit, and capped so that the bar
// stays in its box.
type bar struct {
	Name, Field               string
	Consumed, Reserved, Limit string
	ConsumedPct, ReservedPct  int64
	Soft, Over, AnyReserved   bool
}

type approvalRow struct{ CallID, Decision, By, At, Reason string }

// turnView is one turn of the timeline (Turn 0 holds what belongs to no
// turn: the run's start and end, plan steps; Turn -1 a follow-up's
// earlier conversation).
type turnView struct {
	Turn  int
	Items []item
}

// item is one line of the timeline.
type item struct {
	Kind    string // answer, call, result, compaction, approval, or an event's reason
	At      string
	Text    string
	Warning bool
	// Unsealed says why the transcript chunk this item comes from is not
	// the operator's ("" when it is, or was not checked).
	Unsealed string
	// Record is a result's call record (verdict, rule, duration, result
	// size), from the transcript: every call has one, whatever events the
	// operator recorded.
	Record string
}

// recordText is a call's record for a person: "allow by policy.default,
// 250ms, 21 bytes"; "" for a message without one (written before the
// engine recorded them).
func recordText(r *loop.CallRecord) string {
	if r == nil {
		return ""
	}
	parts := []string{string(r.Verdict)}
	if r.Rule != "" {
		parts[0] += " by " + r.Rule
	}
	if r.DurationMs > 0 {
		parts = append(parts, (time.Duration(r.DurationMs) * time.Millisecond).String())
	}
	if r.ResultBytes > 0 {
		parts = append(parts, fmt.Sprintf("%d bytes", r.ResultBytes))
	}
	return oneLine(strings.Join(parts, ", "))
}

func (s *Server) run(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	self := "/runs/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
	q := url.Values{"kind": {"run"}, "namespace": {ns}, "name": {name}}
	v := view{Title: name, Page: "run", Live: self + "?fragment=1", Events: "/events?" + q.Encode()}
	run := &v1alpha1.AgentRun{}
	if err := u.c.Get(r.Context(), types.NamespacedName{Namespace: ns, Name: name}, run); err != nil {
		return v, err
	}
	d := &runData{Key: ns + "/" + name, Namespace: ns, Name: name,
		Phase: string(run.Status.Phase), Outcome: string(run.Status.Outcome),
		Reason: safeterm.Clean(run.Status.Reason), Answer: safeterm.Clean(run.Status.Answer),
		Goal: safeterm.Clean(run.Goal()), Template: templateOf(run)}
	if d.Phase == "" {
		d.Phase = "Pending"
	}
	if t := run.Status.StartTime; t != nil {
		d.Started = stamp(t.Time)
	}
	if t := run.Status.CompletionTime; t != nil {
		d.Ended = stamp(t.Time)
	}
	d.UID = string(run.UID)
	d.CanContinue = run.Status.Outcome != ""
	d.CanRerun = run.Status.Outcome != ""
	d.CanCancel = run.Status.Outcome == "" && !run.Spec.Cancel
	d.CancelRequested = run.Status.Outcome == "" && run.Spec.Cancel
	d.Escalation, d.Handoff = escalationOf(run, "run", ""), handoffFacts(run.Status.Escalation)
	if ref := run.Spec.ContinueFrom; ref != nil {
		d.ContinuedFrom, d.ContinuedFromLink = ref.Name, "/runs/"+url.PathEscape(ns)+"/"+url.PathEscape(ref.Name)
		if c := run.Status.ContinuedFrom; c != nil && c.Name == ref.Name {
			d.ContinuedFrom += " (" + string(c.Outcome)
			if c.Archived {
				d.ContinuedFrom += ", read from the archive"
			}
			d.ContinuedFrom += ")"
		}
	}
	d.Parent, d.ParentLink, d.Children = familyOf(run)
	d.ChildrenOmitted = run.Status.ChildrenOmitted
	d.Ceilings, d.CeilingsNote = ceilingsOf(run)
	d.Facts = factsOf(run)
	d.Pending = pendingOf(run)
	for _, a := range run.Status.Approvals {
		row := approvalRow{CallID: a.CallID, Decision: string(a.Decision), By: a.By, Reason: safeterm.Clean(a.Reason)}
		if a.At != nil {
			row.At = stamp(a.At.Time)
		}
		if a.Stale {
			row.Decision += " (stale: not applied)"
		}
		if e := a.Edit; e != nil {
			// Approved with changes: the change, and what became of it.
			row.Decision += " with changes " + safeterm.Clean(e.Patch)
			if e.Refused != "" {
				row.Reason = safeterm.Clean(e.Refused)
			}
		}
		d.Approvals = append(d.Approvals, row)
	}
	d.Turns, d.EventsNote, d.Transcript, d.TranscriptNote, d.SealNote = s.story(r.Context(), u, run)
	v.Data = d
	return v, nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// ceilingsOf draws each ceiling the run is admitted by, from the table the
// engine admits by (loop.Ceilings), and a bar per tool limit: the limits
// the operator wrote in status.limits (its template's, as a platform policy
// capped them), or, before it has, the spec's budget.
func ceilingsOf(run *v1alpha1.AgentRun) ([]bar, string) {
	spec := &run.Spec.Budget
	switch {
	case run.Status.Limits != nil:
		spec = &run.Status.Limits.Budget
	case run.Spec.TemplateRef != nil && run.Spec.Goal == "":
		return nil, "This run takes its budget from template " + run.Spec.TemplateRef.Name + "; its ceilings show once the operator has built it."
	}
	budget, err := limits.Budget(spec)
	if err != nil {
		return nil, "The budget cannot be read: " + err.Error()
	}
	b := loop.Config{Budget: budget}.Normalize().Budget
	used, reserved := limits.Usage(run.Status.Usage), limits.Usage(run.Status.Reserved)
	var bars []bar
	for _, c := range loop.Ceilings() {
		lim := c.Limit(&b)
		bars = append(bars, newBar(string(c.Dim), c.Field, c.Used(used), c.Used(reserved), lim,
			slices.Contains(b.Soft, c.Dim), func(n int64) string { return show(c.Unit, n) }))
	}
	tools := make([]string, 0, len(b.PerTool))
	for t := range b.PerTool {
		tools = append(tools, t)
	}
	sort.Strings(tools)
	for _, t := range tools {
		bars = append(bars, newBar("perTool "+t, "perTool."+t, int64(used.PerTool[t]), int64(reserved.PerTool[t]),
			int64(b.PerTool[t]), slices.Contains(b.Soft, loop.DimPerTool), func(n int64) string { return fmt.Sprint(n) }))
	}
	return bars, ""
}

func newBar(name, field string, used, reserved, limit int64, soft bool, show func(int64) string) bar {
	b := bar{Name: name, Field: field, Consumed: show(used), Reserved: show(reserved), Limit: show(limit), Soft: soft,
		Over: used > limit, AnyReserved: reserved > 0}
	b.ConsumedPct = pctOf(used, limit)
	b.ReservedPct = min(pctOf(reserved, limit), 100-b.ConsumedPct)
	return b
}

func pctOf(n, of int64) int64 {
	switch {
	case of <= 0 && n > 0:
		return 100
	case of <= 0 || n <= 0:
		return 0
	}
	return min(n*100/of, 100)
}

// show writes an amount of a ceiling's measure as a manifest would.
func show(u loop.Unit, n int64) string {
	switch u {
	case loop.UnitDuration:
		return time.Duration(n).Round(time.Second).String()
	case loop.UnitUSD:
		return "$" + loop.Money(n).String()
	}
	return fmt.Sprint(n)
}

// familyOf is the run's parent, with the link to its page, and its
// children as status.children lists them, each with the link to its page.
func familyOf(run *v1alpha1.AgentRun) (parent, parentLink string, children []childRow) {
	page := func(name string) string { return "/runs/" + url.PathEscape(run.Namespace) + "/" + url.PathEscape(name) }
	if p := run.Labels[v1alpha1.LabelParent]; p != "" {
		parent, parentLink = p, page(p)
		if call := run.Annotations[v1alpha1.AnnotationParentCall]; call != "" {
			parent += " (call " + call + ")"
		}
	}
	for _, c := range run.Status.Children {
		children = append(children, childRow{Name: c.Name, Link: page(c.Name), CallID: c.CallID, Outcome: c.Outcome,
			Turns: fmt.Sprint(c.Turns), Cost: "$" + c.CostUSD})
	}
	return parent, parentLink, children
}

func factsOf(run *v1alpha1.AgentRun) []fact {
	var fs []fact
	add := func(name, value string) {
		if value != "" {
			fs = append(fs, fact{name, value})
		}
	}
	st := &run.Status
	add("Turn", nonZero(int64(st.Turn)))
	if c := st.Convergence; c != nil {
		if c.TurnsToCompletion != nil {
			add("Turns to completion", fmt.Sprint(*c.TurnsToCompletion))
		}
		add("Repeated intent depth", nonZero(int64(c.RepeatedIntentDepth)))
		keys := make([]string, 0, len(c.Headroom))
		for k := range c.Headroom {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			add("Headroom "+k, c.Headroom[k])
		}
	}
	if c := st.Context; c != nil {
		add("Context window", nonZero(c.MaxInputTokens))
		add("Context strategy", string(c.Strategy))
		add("Compactions", nonZero(int64(c.Compactions)))
		add("Last input tokens", nonZero(c.LastInputTokens))
	}
	if v := st.Verification; v != nil {
		add("Verification trials", nonZero(int64(v.TrialsUsed)))
		add("Last verdict", string(v.LastVerdict))
		add("Scores", strings.Join(v.Scores, ", "))
	}
	if us := st.Usage; us != nil {
		add("Input tokens", nonZero(us.InputTokens))
		add("Output tokens", nonZero(us.OutputTokens))
		add("Cached input tokens", nonZero(us.CachedInputTokens))
	}
	add("AgentBudgets", strings.Join(st.AgentBudgets, ", "))
	if m := st.Model; m != nil && m.Fallbacks > 0 {
		add("Model", fmt.Sprintf("%s (fallback %d of spec.model.fallbacks)", m.Active, m.Fallbacks))
	}
	switch {
	case st.Output != nil && len(st.Output.Raw) > 0:
		add("Output", excerpt(plugin.CompactArguments(st.Output.Raw), 4096))
	case st.OutputDigest != "" && st.Outcome == v1alpha1.OutcomeCompleted:
		add("Output", fmt.Sprintf("%d bytes, %s (too large for status: the last answer in the transcript)", st.OutputBytes, st.OutputDigest))
	}
	return fs
}

func nonZero(n int64) string {
	if n == 0 {
		return ""
	}
	return strconv.FormatInt(n, 10)
}

// story is the run's timeline and transcript: its Events, grouped by turn,
// and, where the user may read the run's transcript Secrets, each turn's
// answer, calls and results, and the whole transcript, with every piece the
// operator did not sign marked (or a note saying why signatures were not
// checked).
func (s *Server) story(ctx context.Context, u *user, run *v1alpha1.AgentRun) (turns []turnView, eventsNote string, text []transcriptPart, textNote, sealNote string) {
	byTurn := map[int]*turnView{}
	at := func(t int) *turnView {
		if byTurn[t] == nil {
			byTurn[t] = &turnView{Turn: t}
		}
		return byTurn[t]
	}

	var parts []transcript.Part
	v, sealNote := s.verifier(ctx, u, run.Namespace)
	var err error
	if v != nil {
		parts, err = transcript.ReadMarked(ctx, u.c, v, run)
	} else {
		var msgs []loop.Message
		msgs, err = transcript.Read(ctx, u.c, run)
		parts = []transcript.Part{{Messages: msgs}}
	}
	switch {
	case err == nil:
		for _, p := range parts {
			unsealed := ""
			if p.Unsealed != nil {
				unsealed = safeterm.Clean(p.Unsealed.Error())
			}
			var b strings.Builder
			for _, m := range p.Messages {
				b.WriteString(plugin.FormatMessage(m))
			}
			text = append(text, transcriptPart{Source: p.Source, Text: safeterm.Clean(b.String()), Unsealed: unsealed})
			for _, m := range p.Messages {
				// A follow-up's earlier conversation (turns before 0) is
				// one group, before the follow-up's own turns.
				tv := at(max(m.Turn, -1))
				add := func(it item) {
					it.Unsealed = unsealed
					tv.Items = append(tv.Items, it)
				}
				switch m.Role {
				case loop.RoleAssistant:
					if m.Content != "" {
						add(item{Kind: "answer", Text: excerpt(m.Content, 4000)})
					}
					for _, c := range m.ToolCalls {
						add(item{Kind: "call", Text: c.ID + " " + c.Name + " " + excerpt(plugin.CompactArguments(c.Arguments), 2000)})
					}
				case loop.RoleTool:
					st := string(m.Status)
					if st == "" {
						st = "ok"
					}
					add(item{Kind: "result", Text: m.CallID + " (" + m.Tool + ", " + st + "): " + excerpt(m.Content, 600),
						Warning: st != "ok", Record: recordText(m.Record)})
				case loop.RoleContext:
					add(item{Kind: "compaction", Text: excerpt(m.Content, 600)})
				}
			}
		}
	case forbidden(err):
		textNote = fmt.Sprintf("You may not read this run's transcript: it is kept in Secrets in namespace %s, and reading it needs get and list on secrets there.", run.Namespace)
	default:
		textNote = "The transcript cannot be read: " + safeterm.Clean(err.Error())
	}

	// The core API's Events: the same objects as events.k8s.io's, and
	// the ones the built-in view role lets people read.
	var evs corev1.EventList
	if err := u.c.List(ctx, &evs, client.InNamespace(run.Namespace), client.MatchingFields{"involvedObject.uid": string(run.UID)}); err != nil {
		if forbidden(err) {
			eventsNote = "You may not list Events in namespace " + run.Namespace + ": the timeline shows the transcript only. (" + safeterm.Clean(err.Error()) + ")"
		} else {
			eventsNote = "The run's Events cannot be read: " + safeterm.Clean(err.Error())
		}
	}
	sort.SliceStable(evs.Items, func(i, j int) bool {
		return kubeevent.LastSeen(&evs.Items[i]).Before(kubeevent.LastSeen(&evs.Items[j]))
	})
	for i := range evs.Items {
		e := &evs.Items[i]
		tv := at(turnOfAction(e.Action))
		tv.Items = append(tv.Items, item{Kind: e.Reason, At: stamp(kubeevent.LastSeen(e)), Text: excerpt(e.Message, 1200), Warning: e.Type == "Warning"})
	}
	for _, a := range run.Status.Approvals {
		tv := at(turnOfAction(a.CallID))
		txt := a.CallID + " " + string(a.Decision)
		if a.By != "" {
			txt += " by " + a.By
		}
		it := item{Kind: "approval", Text: txt + runclient.Because(a.Reason)}
		if a.At != nil {
			it.At = stamp(a.At.Time)
		}
		tv.Items = append(tv.Items, it)
	}
	for _, tv := range byTurn {
		turns = append(turns, *tv)
	}
	sort.Slice(turns, func(i, j int) bool { return turns[i].Turn < turns[j].Turn })
	return turns, eventsNote, text, textNote, sealNote
}

// verifier reads the public keys of the keys the operator seals runs'
// saved state with, which it publishes in a ConfigMap beside them, with the
// user's credentials, to check the signatures of the transcript shown. When
// it cannot, it says why, and what that means for the transcript of a run
// in namespace ns.
func (s *Server) verifier(ctx context.Context, u *user, ns string) (*seal.Verifier, string) {
	unchecked := "The transcript's signatures are not checked, so nothing below is known to be the operator's: anyone who may write Secrets in namespace " +
		ns + " could have written it. "
	if s.o.Keys.Name == "" {
		return nil, unchecked + "The console was not told where the operator keeps its keys (--state-keys-secret)."
	}
	at := types.NamespacedName{Namespace: s.o.Keys.Namespace, Name: seal.PublicKeysName(s.o.Keys.Name)}
	cm := &corev1.ConfigMap{}
	if err := u.c.Get(ctx, at, cm); err != nil {
		if forbidden(err) || apierrors.IsNotFound(err) {
			return nil, unchecked + "Checking them needs get on ConfigMap " + at.String() +
				", where the operator publishes its public keys when it starts; you may not read it, or it does not exist."
		}
		return nil, unchecked + "The operator's public keys cannot be read: " + safeterm.Clean(err.Error())
	}
	v, err := seal.ParsePublicKeys(cm.Data)
	if err != nil {
		return nil, unchecked + "ConfigMap " + at.String() + ": " + safeterm.Clean(err.Error())
	}
	return v, ""
}

// turnOfAction reads the turn from an event's action or a call id:
// "CallVetted t3-c1", "ModelAnswered t3", "t3-c1". 0 when it names none.
func turnOfAction(s string) int {
	if i := strings.LastIndexByte(s, ' '); i >= 0 {
		s = s[i+1:]
	}
	if !strings.HasPrefix(s, "t") {
		return 0
	}
	s = s[1:]
	if i := strings.IndexByte(s, '-'); i >= 0 {
		s = s[:i]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// excerpt is s cleaned and cut to about n bytes, marked where cut.
func excerpt(s string, n int) string {
	return clip.Cut(safeterm.Clean(s), n, " [...]")
}
