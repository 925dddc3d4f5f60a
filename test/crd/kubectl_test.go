package crd_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	agentsv1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
)

// groupResources is what discovery says of the API group, as kubectl
// reads it.
func groupResources(t *testing.T) *metav1.APIResourceList {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	list, err := dc.ServerResourcesForGroupVersion(agentsv1alpha1.GroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// `kubectl get agents` resolves through discovery: the category agents
// (which is not the singular name, so it cannot be mistaken for one) and
// the existing short name and category stay.
func TestDiscovery_agentsCategoryListsRuns(t *testing.T) {
	list := groupResources(t)
	i := slices.IndexFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "agentruns" })
	if i < 0 {
		t.Fatalf("agentruns not in discovery: %+v", list.APIResources)
	}
	r := list.APIResources[i]
	if !slices.Contains(r.Categories, "agents") || !slices.Contains(r.Categories, "agentrun") || !slices.Contains(r.ShortNames, "ar") ||
		r.SingularName == "agents" {
		t.Fatalf("categories %v, short names %v, singular %q", r.Categories, r.ShortNames, r.SingularName)
	}
}

// kubectl expands a category before it tries a resource's names, so a
// category that is also another resource's name takes that name over:
// with AgentBudget in the category agentrun, `kubectl annotate agentrun
// NAME key=value`, the way a person approves a call, failed with "you
// must specify only one resource". A category that is some resource's
// name may hold that resource only.
func TestDiscovery_noCategoryShadowsAResourceName(t *testing.T) {
	list := groupResources(t)
	owner := map[string]string{} // a name kubectl accepts -> its resource
	for _, r := range list.APIResources {
		for _, n := range append([]string{r.Name, r.SingularName}, r.ShortNames...) {
			owner[n] = r.Name
		}
	}
	for _, r := range list.APIResources {
		for _, c := range r.Categories {
			if o, ok := owner[c]; ok && o != r.Name {
				t.Errorf("%s is in the category %q, which is a name of %s: kubectl %s NAME would mean both", r.Name, c, o, c)
			}
		}
	}
}

// `kubectl get agentruns -o wide` asks the API server for a Table; its
// wide columns (priority 1) show budget headroom, the cost ceiling the run
// is admitted by, the calls waiting for a person and the run a follow-up
// continued, read from status.
func TestPrinterColumns_wideShowsHeadroomAndPendingApprovals(t *testing.T) {
	ctx := testContext(t)
	run := created(ctx, t, fmt.Sprintf(runToEdit, "wide-columns"), &agentsv1alpha1.AgentRun{})
	run.Status = agentsv1alpha1.AgentRunStatus{
		Phase: agentsv1alpha1.PhaseAwaitingApproval, Turn: 2,
		Convergence:          &agentsv1alpha1.ConvergenceStatus{Headroom: map[string]string{"turns": "0.33", "tokens": "0.90", "cost": "0.75"}},
		PendingApprovals:     []agentsv1alpha1.PendingApproval{{CallID: "t2-c1", Tool: "pod_events"}, {CallID: "t2-c2", Tool: "pod_events"}},
		PendingApprovalCount: 2,
		Limits: &agentsv1alpha1.LimitsStatus{Budget: agentsv1alpha1.BudgetSpec{MaxTurns: 3, MaxCostUSD: "0.5000"},
			ApprovalTimeout: metav1.Duration{Duration: time.Hour}},
	}
	if err := k8sClient.Status().Update(ctx, run); err != nil {
		t.Fatal(err)
	}

	wide := columns(ctx, t, "agentruns", "wide-columns", 1)
	want := map[string]any{"Turns Left": "0.33", "Tokens Left": "0.90", "Cost Left": "0.75", "Max Cost": "0.5000", "Approvals": float64(2), "Reason": nil, "Continues": nil}
	if diff := cmp.Diff(want, wide); diff != "" {
		t.Fatalf("wide columns (-want +got):\n%s", diff)
	}
}
