package console

import (
	"context"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// policyFor is an AgentRunPolicy that selects the namespaces labelled
// key=value: a test's policies govern its own namespace only, never the
// runs of the tests beside it.
func policyFor(t *testing.T, name, key, value string, spec v1alpha1.AgentRunPolicySpec) *v1alpha1.AgentRunPolicy {
	t.Helper()
	spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{key: value}}
	p := &v1alpha1.AgentRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	create(t, p)
	t.Cleanup(func() { _ = admin.Delete(context.Background(), p) })
	return p
}

// policyReader is a ClusterRole that reads the AgentRunPolicies and the
// namespaces' labels, as the operator's agentrun-platform-reader does
// (which envtest does not install).
func policyReader(t *testing.T) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "console-policy-reader"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"agentrunpolicies"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list"}},
	}}
	if err := admin.Create(context.Background(), role); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// Issue 49, item 1: the policies page shows what applies to a namespace:
// the AgentRunPolicies whose selectors pick its labels (as the operator
// picks them, platform.Select), in the order the operator applies them
// (by name, not by creation), each with its limits and its rules under the
// names a run's policy gives them; a policy that selects other namespaces
// is not among them.
func TestConsole_policiesPageShowsWhatAppliesToANamespaceInOrder(t *testing.T) {
	const key = "console-policies.agentrun.dev/tier"
	ns := namespace(t, "console-policies")
	labelled := &corev1.Namespace{}
	if err := admin.Get(context.Background(), client.ObjectKey{Name: ns}, labelled); err != nil {
		t.Fatal(err)
	}
	labelled.Labels[key] = "gold"
	if err := admin.Update(context.Background(), labelled); err != nil {
		t.Fatal(err)
	}
	policyReader(t)
	bind(t, "pia", "console-policy-reader", "")
	policyFor(t, ns+"-zz-refunds", key, "gold", v1alpha1.AgentRunPolicySpec{Rules: []v1alpha1.PlatformRule{
		{PolicyRule: v1alpha1.PolicyRule{Tools: []string{"issue_refund"}, Decision: v1alpha1.PolicyAsk, Name: "refunds-ask",
			When: "args.amount_minor > 1000", Reason: "Refunds need a person."},
			Match: []v1alpha1.ToolSelector{{Kinds: []v1alpha1.ToolKind{v1alpha1.ToolKindJob}}}},
	}})
	policyFor(t, ns+"-aa-ceilings", key, "gold", v1alpha1.AgentRunPolicySpec{
		Limits:        &v1alpha1.PlatformLimits{MaxTurns: ptr.To[int32](8), MaxCostUSD: "2.00"},
		Rules:         []v1alpha1.PlatformRule{{PolicyRule: v1alpha1.PolicyRule{Tools: []string{"*"}, Decision: v1alpha1.PolicyDeny, When: `tool == "delete_account"`}}},
		MaxAgentDepth: ptr.To[int32](1),
	})
	policyFor(t, ns+"-mm-silver", key, "silver", v1alpha1.AgentRunPolicySpec{MaxAgentDepth: ptr.To[int32](2)})

	ctx := tab(t)
	srv := consoleFor(t, "pia", ns)
	do(t, ctx, chromedp.Navigate(srv.URL+"/"), click(`nav a[href="/policies"]`), visible(`form.filter input[name=namespace]`),
		chromedp.SendKeys(`form.filter input[name=namespace]`, ns), click(`form.filter button`), visible(`[data-applies="`+ns+`"]`))
	got := eval[[]string](t, ctx, `[...document.querySelectorAll('article.policy')].map(a => a.dataset.policy)`)
	if diff := cmp.Diff([]string{ns + "-aa-ceilings", ns + "-zz-refunds"}, got); diff != "" {
		t.Errorf("the policies that govern %s, in the order they apply (-want +got):\n%s", ns, diff)
	}
	rules := eval[[]string](t, ctx, `[...document.querySelectorAll('tr[data-rule]')].map(r => r.dataset.rule + " " + r.querySelector('[data-decision]').textContent)`)
	want := []string{"AgentRunPolicy/" + ns + "-aa-ceilings.rules[0] deny", "AgentRunPolicy/" + ns + "-zz-refunds: refunds-ask ask"}
	if diff := cmp.Diff(want, rules); diff != "" {
		t.Errorf("the rules, in the order a run's policy has them (-want +got):\n%s", diff)
	}
	ceilings := `article[data-policy="` + ns + `-aa-ceilings"]`
	for sel, want := range map[string]string{
		ceilings + ` [data-limit="maxTurns"]`:                                        "8",
		ceilings + ` [data-limit="maxCostUSD"]`:                                      "2.00",
		ceilings + ` [data-selects]`:                                                 key + "=gold",
		`article[data-policy="` + ns + `-zz-refunds"] tr[data-rule] td:nth-child(3)`: "kinds job",
	} {
		if got := text(t, ctx, sel); got != want {
			t.Errorf("%s shows %q, want %q", sel, got, want)
		}
	}
	if got := eval[string](t, ctx, `document.querySelector('`+ceilings+` [data-policy-spec]').textContent`); !strings.Contains(got, "maxAgentDepth: 1") {
		t.Errorf("the rest of the policy's spec is %q, want its maxAgentDepth", got)
	}

	// Without a namespace the page lists every policy, the silver one too.
	do(t, ctx, chromedp.Navigate(srv.URL+"/policies"), visible(`article[data-policy="`+ns+`-mm-silver"]`))
}

// Issue 49, item 1: a person who may not list AgentRunPolicies sees the
// API server's refusal on the policies page, not an empty list.
func TestConsole_policiesPageSaysWhenThePersonMayNotListPolicies(t *testing.T) {
	ns := namespace(t, "console-policies-refused")
	bind(t, "quinn", "agentrun-viewer", ns)
	ctx := tab(t)
	srv := consoleFor(t, "quinn", ns)
	do(t, ctx, chromedp.Navigate(srv.URL+"/policies?namespace="+ns), visible(`[data-policies-problem]`))
	if got := text(t, ctx, `[data-policies-problem]`); !strings.Contains(got, `cannot list resource "agentrunpolicies"`) {
		t.Errorf("the page says %q, want the API server's refusal", got)
	}
}
