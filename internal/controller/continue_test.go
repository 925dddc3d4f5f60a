package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/openai"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// requestLog is a kit builder whose models (the runs' scripted models)
// record every request's messages, by run.
type requestLog struct {
	kits
	mu   sync.Mutex
	sent map[string][][]loop.Message
}

func newRequestLog() *requestLog {
	return &requestLog{kits: kits{tools: newTools()}, sent: map[string][][]loop.Message{}}
}

func (l *requestLog) Build(ctx context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error) {
	k, err := l.kits.Build(ctx, run, grant)
	if err != nil {
		return nil, err
	}
	k.Model = &recordedModel{log: l, run: run.Name, inner: k.Model}
	return k, nil
}

func (l *requestLog) requests(run string) [][]loop.Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent[run]
}

type recordedModel struct {
	log   *requestLog
	run   string
	inner loop.Model
}

func (m *recordedModel) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	m.log.mu.Lock()
	m.log.sent[m.run] = append(m.log.sent[m.run], append([]loop.Message(nil), req.Messages...))
	m.log.mu.Unlock()
	return m.inner.Complete(ctx, req)
}

// said is a request's messages as "role: content" lines.
func said(msgs []loop.Message) []string {
	var out []string
	for _, m := range msgs {
		line := string(m.Role) + ": " + m.Content
		for _, c := range m.ToolCalls {
			line += " [" + c.Name + " " + string(c.Arguments) + "]"
		}
		out = append(out, line)
	}
	return out
}

// slowShop is the run the tests continue: it looks the database up
// and answers; a note tool it never calls is denied by its policy.
func slowShop(ns, name string) *runBuilder {
	return makeRun(ns, name).readTool("lookup").writeTool("note", true).
		calls("lookup", `{"name":"db"}`).answer("The database is slow.").
		with(func(s *v1alpha1.AgentRunSpec) {
			s.Goal = "Why is the shop slow?"
			s.Policy = &v1alpha1.PolicySpec{Default: v1alpha1.PolicyAllow, Rules: []v1alpha1.PolicyRule{
				{Name: "no-notes", Tools: []string{"note"}, Decision: v1alpha1.PolicyDeny}}}
		})
}

// followUp is a follow-up of earlier as kubectl agentrun continue makes
// it: the earlier spec, a new goal and script.
func followUp(earlier *v1alpha1.AgentRun, name string, edit func(*v1alpha1.AgentRunSpec)) *runBuilder {
	b := &runBuilder{r: &v1alpha1.AgentRun{}}
	b.r.Namespace, b.r.Name = earlier.Namespace, name
	b.r.Spec = *earlier.Spec.DeepCopy()
	b.r.Spec.Goal = "How do I fix it?"
	b.r.Spec.ContinueFrom = &v1alpha1.ContinueFrom{Name: earlier.Name}
	b.r.Spec.Model.Script = nil
	b.answer("Add an index on orders.created_at.")
	if edit != nil {
		edit(&b.r.Spec)
	}
	return b
}

// followUpSees is what a follow-up of "Why is the shop slow?" (one lookup,
// then "The database is slow.") asking "How do I fix it?" sends first.
var followUpSees = []string{
	"user: This run continues an earlier run: its conversation follows as it was, and your goal now is the last user message before your first reply.",
	"user: Why is the shop slow?",
	`assistant:  [lookup {"name":"db"}]`,
	`tool: {"ok":true,"call":"t1-c1"}`,
	"assistant: The database is slow.",
	"user: How do I fix it?",
}

// Issue 47, item 3: a follow-up of a finished run sends the earlier
// conversation, then its own goal, to the model; it is bounded by its own
// ceilings; status and a label name the run it continues.

func TestContinue_aFollowUpSendsTheEarlierConversationThenItsGoal(t *testing.T) {
	ns := namespace(t)
	log := newRequestLog()
	startManager(t, log)
	first := waitOutcome(t, slowShop(ns, "slow-shop").create(t), 20*time.Second)
	expectOutcome(t, first, v1alpha1.OutcomeCompleted, "")

	// maxTurns 1: the earlier run's two turns do not count.
	next := followUp(first, "slow-shop-fix", func(s *v1alpha1.AgentRunSpec) { s.Budget.MaxTurns = 1 }).create(t)
	done := waitOutcome(t, next, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
	if done.Status.Answer != "Add an index on orders.created_at." || done.Status.Usage.Turns != 1 {
		t.Errorf("answer %q after %d turns", done.Status.Answer, done.Status.Usage.Turns)
	}

	reqs := log.requests(next.Name)
	if len(reqs) != 1 {
		t.Fatalf("the follow-up made %d model calls, want 1", len(reqs))
	}
	if diff := cmp.Diff(followUpSees, said(reqs[0])); diff != "" {
		t.Errorf("the follow-up's request (-want +got):\n%s", diff)
	}
	wantFrom := &v1alpha1.ContinuedFromStatus{Name: first.Name, UID: string(first.UID), Outcome: v1alpha1.OutcomeCompleted}
	if diff := cmp.Diff(wantFrom, done.Status.ContinuedFrom); diff != "" {
		t.Errorf("status.continuedFrom (-want +got):\n%s", diff)
	}
	if got := done.Labels[v1alpha1.LabelContinuedFrom]; got != first.Name {
		t.Errorf("label %s = %q, want %q", v1alpha1.LabelContinuedFrom, got, first.Name)
	}

	// A follow-up of the follow-up: the whole chain, once each.
	third := followUp(done, "slow-shop-verify", func(s *v1alpha1.AgentRunSpec) { s.Goal = "Is it fixed?" }).create(t)
	expectOutcome(t, waitOutcome(t, third, 20*time.Second), v1alpha1.OutcomeCompleted, "")
	reqs = log.requests(third.Name)
	want := append(followUpSees[:len(followUpSees):len(followUpSees)], "assistant: Add an index on orders.created_at.", "user: Is it fixed?")
	if len(reqs) != 1 {
		t.Fatalf("the second follow-up made %d model calls, want 1", len(reqs))
	}
	if diff := cmp.Diff(want, said(reqs[0])); diff != "" {
		t.Errorf("the second follow-up's request (-want +got):\n%s", diff)
	}
}

// A follow-up may not be wider than the run it continues: it ends Error
// (InvalidConfiguration) before any model call, naming what it widens.
func TestContinue_aWideningFollowUpIsRefusedNamingWhatItWidens(t *testing.T) {
	ns := namespace(t)
	log := newRequestLog()
	startManager(t, log)
	first := waitOutcome(t, slowShop(ns, "narrow").create(t), 20*time.Second)
	expectOutcome(t, first, v1alpha1.OutcomeCompleted, "")

	for _, tc := range []struct {
		name   string
		edit   func(*v1alpha1.AgentRunSpec)
		reason string
	}{{
		name: "a tool the earlier run did not have",
		edit: func(s *v1alpha1.AgentRunSpec) {
			s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "drop_table", Builtin: "kubernetes.get"})
		},
		reason: "tool drop_table (spec.tools[2]) is not a tool of the earlier run",
	}, {
		name:   "a denied tool allowed",
		edit:   func(s *v1alpha1.AgentRunSpec) { s.Policy.Rules[0].Decision = v1alpha1.PolicyAllow },
		reason: "policy rule no-notes (policy.rules[0], tools note) decides allow where the earlier run's policy rule no-notes",
	}, {
		name:   "a denying rule dropped",
		edit:   func(s *v1alpha1.AgentRunSpec) { s.Policy.Rules = nil },
		reason: "the earlier run's policy rule no-notes (policy.rules[0], tools note) is missing",
	}, {
		name:   "another account",
		edit:   func(s *v1alpha1.AgentRunSpec) { s.ServiceAccountName = "admin" },
		reason: `serviceAccountName "admin" is not the earlier run's ""`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			run := followUp(first, "wider-"+strings.ReplaceAll(tc.name, " ", "-"), tc.edit).create(t)
			done := waitOutcome(t, run, 20*time.Second)
			expectInvalid(t, done, "it would be wider than AgentRun narrow, which it continues: "+tc.reason)
			if n := len(log.requests(run.Name)); n != 0 {
				t.Errorf("the refused follow-up made %d model calls", n)
			}
		})
	}

	// Narrower is fine: a tool dropped (with the rule that named only it),
	// the default made stricter.
	ok := followUp(first, "narrower", func(s *v1alpha1.AgentRunSpec) {
		s.Tools, s.Policy = s.Tools[:1], &v1alpha1.PolicySpec{Default: v1alpha1.PolicyAsk, Rules: []v1alpha1.PolicyRule{
			{Tools: []string{"lookup"}, Decision: v1alpha1.PolicyDeny}}}
	}).create(t)
	expectOutcome(t, waitOutcome(t, ok, 20*time.Second), v1alpha1.OutcomeCompleted, "")
}

// A follow-up of a run that has not finished is refused at once, saying
// so: it does not wait.
func TestContinue_aFollowUpOfAnUnfinishedRunIsRefused(t *testing.T) {
	ns := namespace(t)
	log := newRequestLog()
	startManager(t, log)
	waiting := makeRun(ns, "waiting").writeTool("refund", false).calls("refund", `{"amount":5}`).answer("Refunded.").create(t)
	NewWithT(t).Eventually(func() int32 { return get(t, waiting).Status.PendingApprovalCount }, 20*time.Second, 20*time.Millisecond).
		Should(Equal(int32(1)), "the run waits for an approval")

	run := followUp(get(t, waiting), "too-soon", nil).create(t)
	done := waitOutcome(t, run, 20*time.Second)
	expectInvalid(t, done, "AgentRun waiting has not finished (phase AwaitingApproval); a follow-up continues a finished run")
	if n := len(log.requests(run.Name)); n != 0 {
		t.Errorf("the refused follow-up made %d model calls", n)
	}

	gone := followUp(get(t, waiting), "of-nothing", func(s *v1alpha1.AgentRunSpec) { s.ContinueFrom.Name = "never-ran" }).create(t)
	expectInvalid(t, waitOutcome(t, gone, 20*time.Second),
		"AgentRun never-ran does not exist in namespace "+ns+" (and the operator has no archive to read a deleted run from)")
}

// A follow-up of a run deleted after it ended reads it from the archive
// (a real PostgreSQL).
func TestContinue_aDeletedRunIsContinuedFromTheArchive(t *testing.T) {
	ns := namespace(t)
	store := openArchive(t)
	log := newRequestLog()
	startWith(t, log, managerSetup{config: withArchive(store)})
	// Its time to live has passed as soon as it ends and is archived.
	first := slowShop(ns, "expired").with(func(s *v1alpha1.AgentRunSpec) { s.TTLSecondsAfterFinished = ptr.To[int32](0) }).create(t)
	NewWithT(t).Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(first), &v1alpha1.AgentRun{}))
	}, 30*time.Second, 20*time.Millisecond).Should(BeTrue(), "the earlier run is archived and deleted")

	next := followUp(first, "expired-fix", nil).create(t)
	done := waitOutcome(t, next, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
	if c := done.Status.ContinuedFrom; c == nil || !c.Archived || c.Outcome != v1alpha1.OutcomeCompleted || c.UID != string(first.UID) {
		t.Errorf("status.continuedFrom = %+v, want the archived run %s, Completed", c, first.UID)
	}
	reqs := log.requests(next.Name)
	if len(reqs) != 1 {
		t.Fatalf("the follow-up made %d model calls, want 1", len(reqs))
	}
	got := said(reqs[0])
	if len(got) != 6 || got[1] != "user: Why is the shop slow?" || got[4] != "assistant: The database is slow." || got[5] != "user: How do I fix it?" {
		t.Errorf("the follow-up's request: %q", got)
	}
}

func TestNarrower_whatWidensAFollowUp(t *testing.T) {
	deny, ask, allow := v1alpha1.PolicyDeny, v1alpha1.PolicyAsk, v1alpha1.PolicyAllow
	rule := func(d v1alpha1.PolicyDecision, tools ...string) v1alpha1.PolicyRule {
		return v1alpha1.PolicyRule{Tools: tools, Decision: d}
	}
	when := func(r v1alpha1.PolicyRule) v1alpha1.PolicyRule { r.When = "args.amount > 5"; return r }
	spec := func(def v1alpha1.PolicyDecision, rules ...v1alpha1.PolicyRule) *v1alpha1.AgentRunSpec {
		s := &v1alpha1.AgentRunSpec{}
		s.Tools = []v1alpha1.ToolSpec{{Name: "a", Builtin: "kubernetes.get"}, {Name: "b", Builtin: "kubernetes.get"}}
		s.Policy = &v1alpha1.PolicySpec{Default: def, Rules: rules}
		return s
	}
	earlier := spec(ask, rule(allow, "a"), rule(deny, "b"), rule(ask, "*"))
	for _, tc := range []struct {
		name   string
		follow *v1alpha1.AgentRunSpec
		want   string
	}{
		{"the same", spec(ask, rule(allow, "a"), rule(deny, "b"), rule(ask, "*")), ""},
		{"an allow rule dropped", spec(ask, rule(deny, "b"), rule(ask, "*")), ""},
		{"a rule made stricter", spec(ask, rule(deny, "b"), rule(deny, "*")), ""},
		{"a deny rule of its own first", spec(ask, rule(deny, "a"), rule(deny, "b"), rule(ask, "*")), ""},
		{"a rule of its own last, as strict as the default", spec(deny, rule(deny, "b"), rule(ask, "*"), rule(ask, "a")), ""},
		{"the default stricter", spec(deny, rule(deny, "b"), rule(ask, "*")), ""},
		{"the default looser", spec(allow, rule(deny, "b"), rule(ask, "*")), "policy.default allow is looser than the earlier run's ask"},
		{"a deny made ask", spec(ask, rule(ask, "b"), rule(ask, "*")), "policy.rules[0] (tools b, ask) decides ask where the earlier run's policy.rules[1] (tools b, deny) decides deny"},
		{"an ask rule dropped", spec(ask, rule(deny, "b")), "the earlier run's policy.rules[2] (tools *, ask) is missing"},
		{"two rules swapped", spec(ask, rule(ask, "*"), rule(deny, "b")), "the earlier run's policy.rules[2] (tools *, ask) is missing"},
		{"an allow rule over a deny", spec(ask, rule(allow, "b"), rule(deny, "b"), rule(ask, "*")), "policy.rules[0] (tools b, allow) decides allow where the earlier run's policy.rules[1] (tools b, deny) decides deny"},
		{"an allow rule of its own", spec(ask, when(rule(allow, "b")), rule(deny, "b"), rule(ask, "*")), "policy.rules[0] (tools b, allow) is not in the earlier run's policy"},
		{"an ask rule of its own before a kept one", spec(ask, when(rule(ask, "b")), rule(deny, "b"), rule(ask, "*")), "policy.rules[0] (tools b, ask) is not in the earlier run's policy"},
		{"an ask rule of its own after the kept ones", spec(ask, rule(deny, "b"), rule(ask, "*"), when(rule(ask, "b"))), ""},
		{"a deny rule of its own anywhere", spec(ask, rule(deny, "b"), when(rule(deny, "a")), rule(ask, "*")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := narrower(earlier, tc.follow); !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
				t.Errorf("narrower = %q, want %q", got, tc.want)
			}
		})
	}

	// Tools, grants, guardrails.
	withGrant := spec(ask, rule(deny, "b"), rule(ask, "*"))
	withGrant.Policy.Grants = []string{"a"}
	dropped := spec(ask, rule(ask, "*"))
	dropped.Tools = dropped.Tools[:1]
	changed := spec(ask, rule(deny, "b"), rule(ask, "*"))
	changed.Tools[0].Builtin = "kubernetes.list"
	guarded := spec(ask, rule(allow, "a"), rule(deny, "b"), rule(ask, "*"))
	guarded.Guardrails = []v1alpha1.GuardrailSpec{{Name: "cards", Pattern: `\d{16}`, Severity: v1alpha1.GuardrailBlock}}
	unguarded := spec(ask, rule(allow, "a"), rule(deny, "b"), rule(ask, "*"))
	halted := spec(ask, rule(allow, "a"), rule(deny, "b"), rule(ask, "*"))
	halted.Guardrails = []v1alpha1.GuardrailSpec{{Name: "cards2", Pattern: `\d{16}`, Severity: v1alpha1.GuardrailHalt}}
	for _, tc := range []struct {
		name            string
		earlier, follow *v1alpha1.AgentRunSpec
		want            string
	}{
		{"a grant added", earlier, withGrant, "policy.grants waives the ask of tool a"},
		{"a tool dropped, with the rule that named only it", earlier, dropped, ""},
		{"a tool changed", earlier, changed, "tool a (spec.tools[0]) differs from the earlier run's tool of that name"},
		{"a guardrail dropped", guarded, unguarded, "the earlier run's guardrail cards is missing or loosened"},
		{"a guardrail made to halt", guarded, halted, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := narrower(tc.earlier, tc.follow); !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
				t.Errorf("narrower = %q, want %q", got, tc.want)
			}
		})
	}
}

// loopbackFollowUp is a kit builder whose run named follow (and only it)
// calls an OpenAI-compatible server on loopback through the openai
// adapter, the earlier runs their scripts.
type loopbackFollowUp struct {
	kits
	follow string
	model  loop.Model
}

func (l *loopbackFollowUp) Build(ctx context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error) {
	k, err := l.kits.Build(ctx, run, grant)
	if err == nil && run.Name == l.follow {
		k.Model = l.model
	}
	return k, err
}

// Issue 47 item 3's Done-when, at the wire: the body the model server
// receives for a follow-up holds the earlier conversation (its goal, the
// call and its result, the answer), then the new goal.
func TestContinue_theModelServerReceivesTheEarlierConversation(t *testing.T) {
	ns := namespace(t)
	bodies := make(chan []byte, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- b
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop",`+
			`"message":{"role":"assistant","content":"Add an index on orders.created_at."}}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}`)
	}))
	defer srv.Close()
	m, err := openai.New(model.Config{BaseURL: srv.URL + "/v1", Model: "m", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	startManager(t, &loopbackFollowUp{kits: kits{tools: newTools()}, follow: "wire-fix", model: m})
	first := waitOutcome(t, slowShop(ns, "wire-shop").create(t), 20*time.Second)
	expectOutcome(t, first, v1alpha1.OutcomeCompleted, "")
	done := waitOutcome(t, followUp(first, "wire-fix", nil).create(t), 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")

	var body struct {
		Messages []struct {
			Role      string `json:"role"`
			Content   string `json:"content"`
			ToolCalls []struct {
				Function struct{ Name, Arguments string } `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(<-bodies, &body); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, msg := range body.Messages[1:] { // after the system prompt
		line := msg.Role + ": " + msg.Content
		for _, c := range msg.ToolCalls {
			line += " [" + c.Function.Name + " " + c.Function.Arguments + "]"
		}
		got = append(got, line)
	}
	if diff := cmp.Diff(followUpSees, got); diff != "" {
		t.Errorf("the messages the model server received (-want +got):\n%s", diff)
	}
}

// Issue 47 item 3, for the runs most people continue (made from a
// template, by a schedule): kubectl agentrun continue makes the follow-up
// from the same template and parameters with its own goal, and the model
// gets the earlier conversation, then that goal.
func TestContinue_aRunMadeFromATemplateIsContinuedWithItsOwnGoal(t *testing.T) {
	ns := namespace(t)
	log := newRequestLog()
	startManager(t, log)
	makeTemplate(t, ns, "shop", slowShop(ns, "unused"))
	first := waitOutcome(t, runOf(t, ns, "templated-shop", "shop"), 20*time.Second)
	expectOutcome(t, first, v1alpha1.OutcomeCompleted, "")

	next, err := runclient.Continue(context.Background(), k8sClient, runclient.ContinueOptions{
		Run: runclient.Ref{Namespace: ns, Name: first.Name}, Goal: "How do I fix it?", Name: "templated-fix"})
	if err != nil {
		t.Fatal(err)
	}
	done := waitOutcome(t, next, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
	if done.Status.ContinuedFrom == nil || done.Status.ContinuedFrom.Name != first.Name || done.Spec.TemplateRef == nil {
		t.Errorf("continuedFrom %+v, templateRef %+v", done.Status.ContinuedFrom, done.Spec.TemplateRef)
	}
	if got := resolvedGoal(t, done); got != "How do I fix it?" {
		t.Errorf("the follow-up was built with goal %q", got)
	}
	reqs := log.requests(next.Name)
	if len(reqs) == 0 {
		t.Fatal("the follow-up made no model call")
	}
	if diff := cmp.Diff(followUpSees, said(reqs[0])); diff != "" {
		t.Errorf("the follow-up's first request (-want +got):\n%s", diff)
	}
}

// A follow-up is held to the spec the earlier run ran. An earlier run made
// from a template that never built (its parameters were refused) ran
// none: the follow-up is refused, and the template as it is now (fixed
// since) is not resolved for the earlier run, nor kept with it.
func TestContinue_anEarlierRunNeverBuiltFromItsTemplateIsNotContinued(t *testing.T) {
	ns := namespace(t)
	startManager(t, newRequestLog())
	tpl := makeTemplate(t, ns, "shop", slowShop(ns, "unused"), v1alpha1.TemplateParameter{Name: "area", Required: true})
	first := waitOutcome(t, runOf(t, ns, "never-built", "shop"), 20*time.Second)
	if first.Status.Outcome == "" || first.Status.Outcome == v1alpha1.OutcomeCompleted {
		t.Fatalf("the run without its required parameter ended %q: %s", first.Status.Outcome, first.Status.Reason)
	}
	// The operator writes the template's status meanwhile: update it on a
	// fresh read until the write holds.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := get(t, tpl)
		cur.Spec.Parameters[0].Required = false
		return k8sClient.Update(context.Background(), cur)
	}); err != nil {
		t.Fatal(err)
	}
	next, err := runclient.Continue(context.Background(), k8sClient, runclient.ContinueOptions{
		Run: runclient.Ref{Namespace: ns, Name: first.Name}, Goal: "And now?", Name: "after-never-built"})
	if err != nil {
		t.Fatal(err)
	}
	expectInvalid(t, waitOutcome(t, next, 20*time.Second), "it was never built from AgentRunTemplate shop")
	err = k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: ResolvedSpecName(first.UID)}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a resolved spec was kept for the earlier run: %v", err)
	}
}
