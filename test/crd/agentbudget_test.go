package crd_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
)

// budget is an AgentBudget manifest named name whose spec is spec (YAML
// indented two spaces).
func budget(name, spec string) string { return manifest("AgentBudget", name, spec) }

func TestAgentBudget_acceptsValidManifests(t *testing.T) {
	cases := []struct{ name, manifest string }{
		{"the contract's example", budget("team-daily", `
  selector: {}
  window: 24h
  maxCostUSD: "100"
  maxTokens: 50000000
  maxConcurrentRuns: 20
  soft: []
`)},
		{"a soft weekly cost target and a hard concurrency cap", budget("weekly-target", `
  selector: {matchLabels: {team: research}}
  window: 168h
  maxCostUSD: "2500.50"
  maxConcurrentRuns: 5
  soft: [maxCostUSD]
`)},
		{"zero means zero", budget("kill-switch", `
  maxCostUSD: "0"
`)},
		{"only a token limit, window defaulted", budget("tokens-only", `
  maxTokens: 1000
`)},
		{"per-run shares of both limits", budget("shares", `
  maxCostUSD: "10"
  maxTokens: 1000
  perRun: {maxCostUSD: "2.50", maxTokens: 1000}
`)},
		{"a per-run fraction", budget("fraction", `
  maxCostUSD: "10"
  perRun: {fraction: "0.125"}
`)},
		{"a fraction of 1: one run may hold the whole budget", budget("fraction-one", `
  maxCostUSD: "10"
  perRun: {fraction: "1"}
`)},
		{"a per-run share equal to the limit", budget("share-all", `
  maxCostUSD: "10"
  perRun: {maxCostUSD: "10.00"}
`)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			expectCreate(testContext(t), t, tc.manifest, nil)
		})
	}
}

func TestAgentBudget_rejectsInvalidManifests(t *testing.T) {
	cases := []struct {
		name, manifest string
		wantErr        []string
	}{
		{"no limit at all", budget("no-limit", `  {window: 24h}`), []string{"an AgentBudget needs at least one limit: set maxCostUSD, maxTokens or maxConcurrentRuns"}},
		{"a float for money", budget("float-money", `  {maxCostUSD: "1e2"}`), []string{"spec.maxCostUSD", "must be an amount of US dollars written as a decimal string"}},
		{"a negative amount", budget("negative-money", `  {maxCostUSD: "-5"}`), []string{"spec.maxCostUSD"}},
		{"a window shorter than a minute", budget("short-window", `  {maxCostUSD: "1", window: 30s}`), []string{"window must be a duration of at least 1m"}},
		{"a window that is not a duration", budget("bad-window", `  {maxCostUSD: "1", window: daily}`), []string{"window must be a duration of at least 1m"}},
		{"soft names a limit that is not set", budget("soft-unset", `  {maxCostUSD: "1", soft: [maxTokens]}`), []string{"soft names maxTokens, which is not set"}},
		{"soft names an unknown limit", budget("soft-unknown", `  {maxCostUSD: "1", soft: [money]}`), []string{"spec.soft[0]", `Unsupported value: "money"`}},
		{"a negative token limit", budget("negative-tokens", `  {maxTokens: -1}`), []string{"spec.maxTokens", "greater than or equal to 0"}},
		{"a per-run share above the limit", budget("share-above", `  {maxCostUSD: "10", perRun: {maxCostUSD: "10.01"}}`), []string{"spec.perRun.maxCostUSD", "perRun.maxCostUSD 10.01 is more than the budget's maxCostUSD 10: one run cannot hold more than the whole budget"}},
		{"a per-run token share above the limit", budget("token-share-above", `  {maxTokens: 1000, perRun: {maxTokens: 1001}}`), []string{"spec.perRun.maxTokens", "perRun.maxTokens is more than the budget's maxTokens: one run cannot hold more than the whole budget"}},
		{"a per-run share of a limit that is not set", budget("share-unset", `  {maxTokens: 1000, perRun: {maxCostUSD: "1"}}`), []string{"spec.perRun.maxCostUSD", "perRun.maxCostUSD caps a run's share of maxCostUSD, which is not set"}},
		{"a per-run token share of a limit that is not set", budget("token-share-unset", `  {maxCostUSD: "1", perRun: {maxTokens: 10}}`), []string{"spec.perRun.maxTokens", "perRun.maxTokens caps a run's share of maxTokens, which is not set"}},
		{"a per-run share that is not a decimal", budget("share-float", `  {maxCostUSD: "10", perRun: {maxCostUSD: "2.5e0"}}`), []string{"spec.perRun.maxCostUSD", "must be an amount of US dollars written as a decimal string"}},
		{"a fraction of zero", budget("fraction-zero", `  {maxCostUSD: "10", perRun: {fraction: "0.0"}}`), []string{"spec.perRun.fraction", "perRun.fraction must be a decimal string greater than 0 and at most 1"}},
		{"a fraction above one", budget("fraction-above", `  {maxCostUSD: "10", perRun: {fraction: "1.5"}}`), []string{"spec.perRun.fraction", "perRun.fraction must be a decimal string greater than 0 and at most 1"}},
		{"a percentage for a fraction", budget("fraction-percent", `  {maxCostUSD: "10", perRun: {fraction: "25%"}}`), []string{"spec.perRun.fraction", "perRun.fraction must be a decimal string greater than 0 and at most 1"}},
		{"a negative per-run token share", budget("share-negative", `  {maxTokens: 1000, perRun: {maxTokens: -1}}`), []string{"spec.perRun.maxTokens", "greater than or equal to 0"}},
		{"more concurrent runs than the ledger can hold", budget("too-concurrent", `  {maxConcurrentRuns: 1000}`), []string{"spec.maxConcurrentRuns", "less than or equal to 256"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			expectCreate(testContext(t), t, tc.manifest, tc.wantErr)
		})
	}
}

func TestAgentBudget_defaultsTheWindowToADay(t *testing.T) {
	b := created(testContext(t), t, budget("default-window", `  {maxCostUSD: "10"}`), &agentsv1alpha1.AgentBudget{})
	if b.Spec.Window == nil || b.Spec.Window.Duration.String() != "24h0m0s" {
		t.Fatalf("window = %v, want 24h", b.Spec.Window)
	}
}

// `kubectl get ab` resolves the short name, and its columns show the
// limit, what is consumed and reserved, the active runs and the window.
func TestAgentBudget_kubectlGetShowsTheLedger(t *testing.T) {
	ctx := testContext(t)
	list := groupResources(t)
	i := slices.IndexFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "agentbudgets" })
	if i < 0 || !slices.Contains(list.APIResources[i].ShortNames, "ab") || !list.APIResources[i].Namespaced {
		t.Fatalf("agentbudgets is not a namespaced resource with short name ab: %+v", list.APIResources)
	}

	b := created(ctx, t, budget("columns", `  {maxCostUSD: "100", window: 24h}`), &agentsv1alpha1.AgentBudget{})
	b.Status = agentsv1alpha1.AgentBudgetStatus{ConsumedCostUSD: "98.20", ReservedCostUSD: "1.50", ActiveRuns: 3,
		Reservations: []agentsv1alpha1.BudgetReservation{{UID: "u1", Run: "a", LeasedCostUSD: "1.50"}},
		Conditions: []metav1.Condition{{Type: agentsv1alpha1.BudgetConditionExhausted, Status: metav1.ConditionTrue,
			Reason: agentsv1alpha1.ReasonBudgetRefused, Message: "refused", LastTransitionTime: metav1.Now()}}}
	if err := k8sClient.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	got := columns(ctx, t, "agentbudgets", "columns", 0)
	delete(got, "Name")
	delete(got, "Age")
	want := map[string]any{"Max Cost": "100", "Consumed": "98.20", "Reserved": "1.50", "Active": float64(3), "Window": "24h", "Exhausted": "True"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("kubectl get ab columns (-want +got):\n%s", d)
	}
}

// The ledger holds at most 256 leases: a status with more is refused, so
// that the hot object stays small.
func TestAgentBudget_reservationsAreBounded(t *testing.T) {
	ctx := testContext(t)
	b := created(ctx, t, budget("bounded", `  {maxCostUSD: "100"}`), &agentsv1alpha1.AgentBudget{})
	for i := range agentsv1alpha1.MaxBudgetReservations + 1 {
		b.Status.Reservations = append(b.Status.Reservations, agentsv1alpha1.BudgetReservation{
			UID: toUID(i), Run: "r", LeasedCostUSD: "0.01"})
	}
	err := k8sClient.Status().Update(ctx, b)
	if err == nil || !strings.Contains(err.Error(), "status.reservations") {
		t.Fatalf("257 reservations: err = %v, want a refusal naming status.reservations", err)
	}
}

func toUID(i int) types.UID {
	const hex = "0123456789abcdef"
	b := []byte("00000000-0000-0000-0000-000000000000")
	for p := len(b) - 1; i > 0 && p >= 0; p-- {
		if b[p] == '-' {
			continue
		}
		b[p] = hex[i%16]
		i /= 16
	}
	return types.UID(b)
}
