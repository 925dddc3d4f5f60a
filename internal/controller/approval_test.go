package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/agentrun/agentrun/internal/transcript"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// adminName is the username envtest's client authenticates as.
var adminName string

// installApprovalPolicies applies config/admission and the user roles of
// config/rbac, then waits (bounded) until the API server enforces them: the
// mutating policy stamps who answered, and the validating policy refuses a
// client that writes the stamp itself.
func installApprovalPolicies(ctx context.Context) error {
	if err := testenv.Apply(ctx, k8sClient, testenv.ChartPolicies...); err != nil {
		return err
	}
	ssr := &authnv1.SelfSubjectReview{}
	if err := k8sClient.Create(ctx, ssr); err != nil {
		return err
	}
	adminName = ssr.Status.UserInfo.Username

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-probe-"}}
	if err := k8sClient.Create(ctx, ns); err != nil {
		return err
	}
	probe := makeRun(ns.Name, "probe").answer("ok").r
	created := false
	i := 0
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if !created {
			if err := k8sClient.Create(ctx, probe); err != nil {
				last = err.Error() // the CRD may not be served yet
				return false, nil
			}
			created = true
		}
		i++
		id := fmt.Sprintf("p%d", i)
		if err := patchAnnotations(ctx, k8sClient, probe, map[string]any{v1alpha1.ApprovalAnnotationPrefix + id: "approve"}, "probe"); err != nil {
			last = err.Error()
			return false, nil
		}
		cur := &v1alpha1.AgentRun{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(probe), cur); err != nil {
			return false, err
		}
		if cur.Annotations[v1alpha1.ApprovedByAnnotationPrefix+id] != adminName {
			last = "the approver was not stamped"
			return false, nil
		}
		err := patchAnnotations(ctx, k8sClient, probe, map[string]any{v1alpha1.ApprovedByAnnotationPrefix + "x" + id: "somebody"}, "probe")
		if err == nil || !strings.Contains(err.Error(), "record who answered") {
			last = fmt.Sprintf("a forged approved-by annotation was not refused: %v", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the policies are not enforced: %s: %w", last, err)
	}
	// No test's operator may run the probe.
	return client.IgnoreNotFound(k8sClient.Delete(ctx, probe))
}

func patchAnnotations(ctx context.Context, c client.Client, run *v1alpha1.AgentRun, ann map[string]any, fieldManager string) error {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	return c.Patch(ctx, run.DeepCopy(), client.RawPatch("application/merge-patch+json", body), client.FieldOwner(fieldManager))
}

// as returns a client that impersonates user.
func as(t *testing.T, user string, groups ...string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(restCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// bind grants the shipped ClusterRole role to subject in ns.
func bind(t *testing.T, ns, role string, subject rbacv1.Subject) {
	t.Helper()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: role + "-", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{subject}}
	if err := k8sClient.Create(context.Background(), rb); err != nil {
		t.Fatal(err)
	}
	cr := &rbacv1.ClusterRole{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: role}, cr); err != nil {
		t.Fatal(err)
	}
	authorized(t, ns, cr.Rules, subject)
}

// authorized waits (bounded, with testenv.Authorized) until the API
// server's authorizer, which learns of role bindings from a watch, allows
// subject what rules grant in ns: a request sent just after the binding
// was made may otherwise be refused for the delay.
func authorized(t *testing.T, ns string, rules []rbacv1.PolicyRule, subject rbacv1.Subject) {
	t.Helper()
	var who authzv1.SubjectAccessReviewSpec
	switch subject.Kind {
	case rbacv1.ServiceAccountKind:
		who.User = serviceaccount.MakeUsername(subject.Namespace, subject.Name)
	case rbacv1.GroupKind:
		who.User, who.Groups = "member-of-"+subject.Name, []string{subject.Name}
	default:
		who.User = subject.Name
	}
	if err := testenv.Authorized(context.Background(), k8sClient, who, ns, rules, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

// waitPending waits (bounded) until the run asks a person about n calls.
func waitPending(t *testing.T, run *v1alpha1.AgentRun, n int) *v1alpha1.AgentRun {
	t.Helper()
	var cur *v1alpha1.AgentRun
	NewWithT(t).Eventually(func() int {
		cur = get(t, run)
		return len(cur.Status.PendingApprovals)
	}, 20*time.Second, 20*time.Millisecond).Should(Equal(n))
	return cur
}

// An editor may patch an AgentRun but not answer its approvals: the API
// server refuses, naming the missing verb.
func TestApproval_patchWithoutApproveIsRefused(t *testing.T) {
	ns := namespace(t)
	bind(t, ns, "agentrun-editor", userSubject("pat"))
	run := refundRun(ns, "refund").create(t)
	pat := as(t, "pat")
	ctx := context.Background()

	if err := patchAnnotations(ctx, pat, run, map[string]any{"team": "payments"}, "kubectl-annotate"); err != nil {
		t.Fatalf("the editor may not patch the run at all: %v", err)
	}
	err := patchAnnotations(ctx, pat, run, map[string]any{v1alpha1.ApprovalAnnotationPrefix + "t1-c1": "approve"}, "kubectl-annotate")
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Fatalf("an approval by a user without the verb approve was admitted: %v", err)
	}
	for _, want := range []string{`needs the verb "approve" on agentruns.agents.agentrun.dev "refund" in namespace "` + ns + `"`, "pat does not have", "agentrun-approver"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	// Nor may the editor create a run that carries an answer.
	pre := makeRun(ns, "preanswered").answer("ok").r
	pre.Annotations = map[string]string{v1alpha1.ApprovalAnnotationPrefix + "t1-c1": "approve"}
	if err := pat.Create(ctx, pre); err == nil || !strings.Contains(err.Error(), `needs the verb "approve"`) {
		t.Fatalf("creating a run with an approval was not refused: %v", err)
	}
	// Removing an answer is not approving.
	if err := patchAnnotations(ctx, k8sClient, run, map[string]any{v1alpha1.ApprovalAnnotationPrefix + "t1-c1": "deny"}, "test"); err != nil {
		t.Fatal(err)
	}
	if err := patchAnnotations(ctx, pat, run, map[string]any{v1alpha1.ApprovalAnnotationPrefix + "t1-c1": nil}, "kubectl-annotate"); err != nil {
		t.Fatalf("removing an answer was refused: %v", err)
	}
}

// An approver's answer is admitted and recorded under the name the API
// server authenticated, whatever field manager the client chose; nobody can
// write that record by hand.
func TestApproval_approverIsRecordedByAuthenticatedName(t *testing.T) {
	ns := namespace(t)
	const jane = "jane.doe@example.com"
	bind(t, ns, "agentrun-approver", userSubject(jane))
	bind(t, ns, "agentrun-approver", userSubject("mallory"))
	tb := newTools()
	startManager(t, &kits{tools: tb})
	run := refundRun(ns, "refund").answer("Refunded.").create(t)
	waitPending(t, run, 1)
	ctx := context.Background()

	// mallory may approve, but not in jane's name: the API server stamps
	// the name it authenticated over the one she sent.
	err := patchAnnotations(ctx, as(t, "mallory"), run, map[string]any{
		v1alpha1.ApprovalAnnotationPrefix + "t1-c1": "approve", v1alpha1.ApprovedByAnnotationPrefix + "t1-c1": jane}, jane)
	if err != nil {
		t.Fatalf("mallory's approval was refused: %v", err)
	}
	if got := get(t, run).Annotations[v1alpha1.ApprovedByAnnotationPrefix+"t1-c1"]; got != "mallory" {
		t.Fatalf("approved-by = %q, want mallory", got)
	}
	done := waitOutcome(t, run, 20*time.Second)
	if len(done.Status.Approvals) != 1 || done.Status.Approvals[0].By != "mallory" {
		t.Fatalf("approvals = %+v, want one by mallory (not the field manager or the name she sent, %s)", done.Status.Approvals, jane)
	}

	run2 := refundRun(ns, "refund-2").answer("Refunded.").create(t)
	waitPending(t, run2, 1)
	if err := patchAnnotations(ctx, as(t, "mallory"), run2, map[string]any{v1alpha1.ApprovedByAnnotationPrefix + "t1-c1": jane}, "kubectl"); err == nil ||
		!strings.Contains(err.Error(), "record who answered") {
		t.Fatalf("a hand-written approved-by annotation was not refused: %v", err)
	}
	if err := patchAnnotations(ctx, as(t, jane), run2, map[string]any{v1alpha1.ApprovalAnnotationPrefix + "t1-c1": "approve"}, "cfo-someone-else"); err != nil {
		t.Fatalf("jane's approval was refused: %v", err)
	}
	done = waitOutcome(t, run2, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer")
	if len(done.Status.Approvals) != 1 || done.Status.Approvals[0].By != jane || done.Status.Approvals[0].Decision != v1alpha1.ApprovalApprove {
		t.Fatalf("approvals = %+v, want one approve by %s", done.Status.Approvals, jane)
	}
	if n := tb.counts()["t1-c1:issue_refund"]; n != 2 {
		t.Fatalf("executions = %v", tb.counts())
	}
}

// The run's own ServiceAccount never answers its approvals, even when it
// holds the verb approve.
func TestApproval_runsOwnServiceAccountIsRefused(t *testing.T) {
	ns := namespace(t)
	for _, sa := range []string{"default", "refunder"} {
		bind(t, ns, "agentrun-approver", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns})
	}
	ctx := context.Background()
	for _, c := range []struct{ run, specSA, actor string }{{"plain", "", "default"}, {"named", "refunder", "refunder"}} {
		run := refundRun(ns, c.run).
			with(func(s *v1alpha1.AgentRunSpec) { s.ServiceAccountName = c.specSA }).create(t)
		user := "system:serviceaccount:" + ns + ":" + c.actor
		err := patchAnnotations(ctx, as(t, user, "system:serviceaccounts", "system:serviceaccounts:"+ns, "system:authenticated"), run,
			map[string]any{v1alpha1.ApprovalAnnotationPrefix + "t1-c1": "approve"}, "kubectl-annotate")
		if err == nil || !strings.Contains(err.Error(), "the run's own ServiceAccount ("+user+") may not answer its approvals") {
			t.Fatalf("%s: an approval by the run's own ServiceAccount was not refused as such: %v", c.run, err)
		}
	}
	// Another account of the namespace that holds approve may answer.
	run := get(t, &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "named"}})
	other := "system:serviceaccount:" + ns + ":default"
	if err := patchAnnotations(ctx, as(t, other, "system:serviceaccounts", "system:authenticated"), run,
		map[string]any{v1alpha1.ApprovalAnnotationPrefix + "t1-c1": "approve"}, "kubectl-annotate"); err != nil {
		t.Fatalf("an approver that is not the run's account was refused: %v", err)
	}
}

// An approval applies to the arguments a person was shown: a checkpoint
// edited after the review voids it, and the call does not run.
func TestApproval_changedArgumentsVoidTheApproval(t *testing.T) {
	tb, run, cur := pendingRefund(t)
	if got, want := cur.Status.PendingApprovals[0].ArgumentsDigest, loop.ArgumentsDigest([]byte(`{"amount_minor":8240}`)); got != want {
		t.Fatalf("argumentsDigest = %q, want %q", got, want)
	}

	// Someone who may write status changes the call after the review.
	var cp map[string]any
	if err := json.Unmarshal(cur.Status.Checkpoint.Raw, &cp); err != nil {
		t.Fatal(err)
	}
	calls := cp["calls"].([]any)
	calls[0].(map[string]any)["arguments"] = map[string]any{"amount_minor": 99999999}
	edited := cur.DeepCopy()
	edited.Status.Checkpoint.Raw, _ = json.Marshal(cp)
	// Resealed with the operator's key: a status writer cannot (the run
	// would end on the seal, TestForgedStatusCheckpointIsNeverResumed),
	// but the comparison with the saved proposal holds even then.
	var err error
	if edited.Status.CheckpointSeal, err = transcript.SealCheckpoint(testKeys, edited.UID, &edited.Status); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Status().Update(context.Background(), edited); err != nil {
		t.Fatal(err)
	}
	annotate(t, run, "t1-c1", "approve")

	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeError, "the approval")
	for _, want := range []string{"t1-c1 (issue_refund) is void", loop.ArgumentsDigest([]byte(`{"amount_minor":8240}`)),
		loop.ArgumentsDigest([]byte(`{"amount_minor":99999999}`)), "did not run"} {
		if !strings.Contains(done.Status.Reason, want) {
			t.Errorf("reason %q does not say %q", done.Status.Reason, want)
		}
	}
	if n := tb.counts()["t1-c1:issue_refund"]; n != 0 {
		t.Fatalf("the changed call ran: %v", tb.counts())
	}
	NewWithT(t).Eventually(func() []string { return eventReasons(t, run.Namespace, run.Name) }, 10*time.Second, 50*time.Millisecond).Should(ContainElement(string(NoteApprovalVoided)))
}

// Issues 44 and 46: the value of an approval annotation is read twice, by
// the operator (v1alpha1.ParseApprovalAnswer) and by the admission policy
// agentrun-approval, whose CEL refuses an answer that names a digest no
// pending call has, or gives a reason longer than
// v1alpha1.MaxApprovalReason. Both must read the same digest and the same
// reason from every value: the API server admits each value the operator
// takes for an answer for a call that waits with the digest the operator
// reads, and refuses it for a call that waits with another digest exactly
// when the operator reads one; it refuses a value exactly when the
// operator refuses it for its reason's length. (A value the operator does
// not take for an answer for another cause is ignored by it, whatever the
// API server does; TestParseApprovalAnswer lists them.)
func TestAdmission_readsTheAnswerAsTheOperatorDoes(t *testing.T) {
	ctx := context.Background()
	digest := "sha256:" + strings.Repeat("0b1e", 16)
	bound := v1alpha1.MaxApprovalReason
	values := []string{
		"approve",
		"deny",
		"stop",
		"approve:" + digest,
		"deny:" + digest,
		"APPROVE:" + strings.ToUpper(digest),
		" approve:" + digest + " \n",
		"\tStop:" + digest,
		"approve:",
		"approve: ",
		"approve:\t" + digest,
		"approve: " + digest,
		"approve:" + digest + ":extra",
		"approve::" + digest,
		"approve:sha256:ÄB12",
		"approve:other",
		"deny::",
		"deny::Not 824.00: refund 82.40.\nAsk Finance: they know.",
		"deny:" + digest + ":Not 824.00: refund 82.40",
		"DENY:" + strings.ToUpper(digest) + ": Not 824.00 ",
		"deny:" + digest + ":",
		"deny:other:reason",
		"deny:a:b:c:d",
		"deny::" + strings.Repeat("é", bound),
		"deny:" + digest + ":" + strings.Repeat("x", bound) + " \n ",
		"deny::" + strings.Repeat("é", bound+1),
		"deny:" + digest + ":" + strings.Repeat(":", bound+1),
		"stop::" + strings.Repeat("x", bound) + ":",
		// Approvals with changes: bound to a digest, a JSON object of at
		// most MaxApprovalEdit characters (a patch may be longer than a
		// reason).
		"edit:" + digest + `:{"amount_minor":8240}`,
		"EDIT:" + strings.ToUpper(digest) + `: {"note":"a: b"} `,
		"edit:" + digest + `:{"note":"` + strings.Repeat("é", bound+100) + `"}`,
		"edit:" + digest + `:{"note":"` + strings.Repeat("é", v1alpha1.MaxApprovalEdit) + `"}`,
		`edit::{"amount_minor":8240}`,
		`edit:{"amount_minor":8240}`,
		"edit:" + digest + ":[8240]",
		"edit:" + digest,
		// Answers to the agent's question: the text is the reason.
		"answer::in_9f21: the March one",
		"ANSWER:" + strings.ToUpper(digest) + ":yes",
		"answer::",
		"answer:" + digest + ":" + strings.Repeat("x", bound+1),
	}
	run := makeRun(namespace(t), "digests").answer("ok").create(t)
	// Call t<i>-c1 waits with the digest the operator reads from value i
	// (or an unrelated one where it reads none), t<i>-c2 with another.
	var pending []v1alpha1.PendingApproval
	read := make([]v1alpha1.ApprovalAnswer, len(values))
	tooLong := make([]bool, len(values))
	for i, v := range values {
		a, err := v1alpha1.ParseApprovalAnswer(v)
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("at most %d", bound)) && !strings.HasPrefix(strings.ToLower(v), "edit") &&
			!strings.Contains(err.Error(), "gives no answer") {
			t.Fatalf("%q is not an answer to the operator: %v", v, err)
		}
		tooLong[i] = err != nil // refused for its reason's length, or as an edit
		read[i] = a
		own := a.Digest
		if own == "" {
			own = "sha256:unrelated"
		}
		pending = append(pending,
			v1alpha1.PendingApproval{CallID: fmt.Sprintf("t%d-c1", i), Tool: "refund", ArgumentsDigest: own},
			v1alpha1.PendingApproval{CallID: fmt.Sprintf("t%d-c2", i), Tool: "refund", ArgumentsDigest: "sha256:another"})
	}
	cur := get(t, run)
	cur.Status.PendingApprovals = pending
	if err := k8sClient.Status().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	answer := func(callID, v string) error {
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.ApprovalAnnotationPrefix + callID: v}}})
		return k8sClient.Patch(ctx, run.DeepCopy(), client.RawPatch("application/merge-patch+json", body), client.DryRunAll, client.FieldOwner("test"))
	}
	// The policy's message, or the expression that failed where the
	// message cannot be given (it would quote a line break).
	refusal := func(err error) bool {
		return strings.Contains(err.Error(), "names arguments that no pending call of digests has") ||
			strings.Contains(err.Error(), "failed expression: variables.digestMismatch.size() == 0")
	}
	tooLongRefusal := func(err error) bool {
		return err != nil && (strings.Contains(err.Error(), "is longer than 1024 characters") ||
			strings.Contains(err.Error(), "is not edit:DIGEST:PATCH") || strings.Contains(err.Error(), "gives no text"))
	}
	for i, v := range values {
		err := answer(fmt.Sprintf("t%d-c1", i), v)
		if tooLong[i] {
			if !tooLongRefusal(err) {
				t.Errorf("%q, which the operator refuses (a reason too long, an edit not bound or not an object), was not refused for it: %v", short(v), err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q for a call waiting with the digest the operator reads (%q) was refused: %v", short(v), read[i].Digest, err)
		}
		err = answer(fmt.Sprintf("t%d-c2", i), v)
		if err != nil && !refusal(err) {
			t.Errorf("%q: %v", short(v), err)
			continue
		}
		if refused, named := err != nil, read[i].Digest != ""; refused != named {
			t.Errorf("%q for a call waiting with another digest: refused %v, but the operator reads digest %q", short(v), refused, read[i].Digest)
		}
	}
}

// short is a value as a test message quotes it: a long reason is cut.
func short(v string) string {
	if len(v) > 120 {
		return v[:120] + "…"
	}
	return v
}

// Issue 46, item 1: a person denies a refund and says why; the model reads
// the reason as the refund's result and takes the route it names (it
// looks the invoice up, a different call), and the run completes. Without
// the reason the model would try the refund again and wait for a person
// once more. status.approvals records the reason with who gave it.
func TestApproval_aDenialsReasonReachesTheModelAndTheRunCompletes(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	const reason = "Not 824.00: the invoice says 82.40.\nLook the invoice up first: get_invoice in_9f21."
	model := modelFunc(func(_ context.Context, req *loop.Request) (*loop.Reply, error) {
		var last *loop.Message
		for i := range req.Messages {
			if m := &req.Messages[i]; m.Role == loop.RoleTool {
				last = m
			}
		}
		switch {
		case last == nil:
			return &loop.Reply{ToolCalls: []loop.ToolCall{{ID: "a", Name: "issue_refund", Arguments: []byte(`{"amount_minor":82400}`)}}}, nil
		case last.Tool == "issue_refund" && strings.Contains(last.Content, strconv.Quote(reason)):
			return &loop.Reply{ToolCalls: []loop.ToolCall{{ID: "b", Name: "get_invoice", Arguments: []byte(`{"invoice":"in_9f21"}`)}}}, nil
		case last.Tool == "issue_refund":
			// No reason to go on: the same refund again.
			return &loop.Reply{ToolCalls: []loop.ToolCall{{ID: "c", Name: "issue_refund", Arguments: []byte(`{"amount_minor":82400}`)}}}, nil
		}
		return &loop.Reply{Content: "The invoice says 82.40; no refund of 824.00 was issued."}, nil
	})
	startManager(t, &kits{tools: tb, model: model})
	run := refundRun(ns, "refund").readTool("get_invoice").create(t)
	waitPending(t, run, 1)

	if err := patchAnnotations(context.Background(), k8sClient, run, map[string]any{
		v1alpha1.ApprovalAnnotationPrefix + "t1-c1": v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalDeny, Reason: reason}.String()}, "test"); err != nil {
		t.Fatal(err)
	}
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "final answer")
	if diff := cmp.Diff(map[string]int{"t2-c1:get_invoice": 1}, tb.counts()); diff != "" {
		t.Errorf("executions (-want +got):\n%s", diff)
	}
	want := []v1alpha1.ApprovalRecord{{CallID: "t1-c1", Decision: v1alpha1.ApprovalDeny, By: adminName, Reason: reason}}
	if diff := cmp.Diff(want, done.Status.Approvals, cmpopts.IgnoreFields(v1alpha1.ApprovalRecord{}, "At")); diff != "" {
		t.Errorf("status.approvals (-want +got):\n%s", diff)
	}
	for _, m := range readTranscript(t, done) {
		if m.CallID == "t1-c1" && m.Role == loop.RoleTool && (m.Status != loop.ObsDeclined || !strings.Contains(m.Content, "Their reason: "+strconv.Quote(reason))) {
			t.Errorf("the transcript records the denied call as %s %q, want declined with the reason quoted", m.Status, m.Content)
		}
	}
}

// A value the operator does not take for an answer (here a reason past
// the bound, which the admission policy refuses first where it is
// installed) leaves its call waiting, with a note that says why; a value
// for a call that does not wait says nothing.
func TestUnreadAnswers(t *testing.T) {
	long := v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalDeny, Reason: strings.Repeat("x", v1alpha1.MaxApprovalReason+1)}.String()
	run := &v1alpha1.AgentRun{}
	run.Annotations = map[string]string{
		v1alpha1.ApprovalAnnotationPrefix + "t2-c1": long,
		v1alpha1.ApprovalAnnotationPrefix + "t2-c2": "deny::fine",
		v1alpha1.ApprovalAnnotationPrefix + "t1-c1": long, // answered long ago
	}
	run.Status.PendingApprovals = []v1alpha1.PendingApproval{{CallID: "t2-c1"}, {CallID: "t2-c2"}}
	notes := unreadAnswers(run)
	if len(notes) != 1 || notes[0].CallID != "t2-c1" || notes[0].Kind != NoteAnswerNotApplied ||
		!strings.Contains(notes[0].Message, "at most 1024") {
		t.Fatalf("notes = %+v, want one for t2-c1 that says a reason has at most 1024 characters", notes)
	}
}
