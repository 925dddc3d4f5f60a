package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/telemetry"
	"github.com/agentrun/agentrun/internal/tools/agent"
	"github.com/agentrun/agentrun/internal/tools/job"
)

// Issue 45, items 2 and 3: a template as a tool, and one budget for the
// tree of runs it makes.

// startAgents runs the operator as it is deployed for agent tools: the
// kit builder's agent executor and the reconciler's ChildRuns share one
// set of wakeups. maxInFlight 0 is the default; config sets more of the
// reconciler's configuration (a tracer provider).
func startAgents(t *testing.T, maxInFlight int, config ...func(*Config)) {
	t.Helper()
	w := job.NewWakeups()
	b := &kit.Builder{}
	startWith(t, b, managerSetup{
		wrap: func(c client.Client, _ func()) client.Client {
			b.Agents = agent.Config{Client: c, Reader: k8sClient, Wakeups: w, MaxInFlight: maxInFlight, PollInterval: time.Second}
			return c
		},
		config: func(c *Config) {
			c.ChildRuns = w
			for _, f := range config {
				f(c)
			}
		},
	})
}

// investigator is a template whose run answers answer (a template string:
// $(params.account) is the call's account), priced so that each turn
// costs about a cent.
func investigator(t *testing.T, ns, name, answer string, budget func(*v1alpha1.BudgetSpec)) {
	t.Helper()
	b := makeRun(ns, "").maxTurns(3).answer(answer).budget(func(b *v1alpha1.BudgetSpec) { b.MaxCostUSD = "0.50" }).
		with(func(s *v1alpha1.AgentRunSpec) {
			s.Goal = "Investigate account $(params.account)."
			s.Model.Pricing = &v1alpha1.ModelPricing{Input: "5", Output: "5"}
		})
	if budget != nil {
		b.budget(budget)
	}
	makeTemplate(t, ns, name, b, v1alpha1.TemplateParameter{Name: "account", Required: true})
}

// agentTool is a tool that calls template tpl.
func agentTool(name, tpl string, f func(*v1alpha1.ToolSpec)) func(*v1alpha1.AgentRunSpec) {
	return func(s *v1alpha1.AgentRunSpec) {
		t := v1alpha1.ToolSpec{Name: name, Agent: &v1alpha1.AgentTool{TemplateRef: v1alpha1.TemplateRef{Name: tpl}}}
		if f != nil {
			f(&t)
		}
		s.Tools = append(s.Tools, t)
		s.Model.Pricing = &v1alpha1.ModelPricing{Input: "5", Output: "5"}
	}
}

// childrenOf lists the runs the parent's calls made.
func childrenOf(t *testing.T, parent *v1alpha1.AgentRun) []v1alpha1.AgentRun {
	t.Helper()
	return runsMatching(t, parent.Namespace, client.MatchingLabels{v1alpha1.LabelParentUID: string(parent.UID)})
}

// runsMatching lists the runs of ns that sel matches.
func runsMatching(t *testing.T, ns string, sel client.MatchingLabels) []v1alpha1.AgentRun {
	t.Helper()
	var l v1alpha1.AgentRunList
	if err := k8sClient.List(context.Background(), &l, client.InNamespace(ns), sel); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// completedWith waits for parent to end, fails the test unless it
// completed with n children (any number when n < 0), and returns it and
// them.
func completedWith(t *testing.T, parent *v1alpha1.AgentRun, n int) (*v1alpha1.AgentRun, []v1alpha1.AgentRun) {
	t.Helper()
	done := waitOutcome(t, parent, 60*time.Second)
	if done.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Fatalf("the parent ended %s: %s", done.Status.Outcome, done.Status.Reason)
	}
	kids := childrenOf(t, done)
	if n >= 0 && len(kids) != n {
		t.Fatalf("%d children, want %d", len(kids), n)
	}
	return done, kids
}

// observations are the parent's tool results, in order.
func observations(t *testing.T, run *v1alpha1.AgentRun) []string {
	t.Helper()
	var out []string
	for _, m := range readTranscript(t, run) {
		if m.Role == loop.RoleTool {
			out = append(out, m.Content)
		}
	}
	return out
}

// report reads an observation as the agent tool's JSON result.
func report(t *testing.T, obs string) agent.Report {
	t.Helper()
	var r agent.Report
	if err := json.Unmarshal([]byte(obs), &r); err != nil {
		t.Fatalf("the observation is not the child's report: %v\n%s", err, obs)
	}
	return r
}

func TestAgentTool_theParentReadsWhatItsChildEndedWith(t *testing.T) {
	ns := namespace(t)
	startAgents(t, 0)
	investigator(t, ns, "investigator", "Account $(params.account): <b>refund due</b>", nil)
	parent := makeRun(ns, "triage").with(agentTool("investigate", "investigator", nil)).
		budget(func(b *v1alpha1.BudgetSpec) { b.MaxCostUSD = "2" }).
		calls("investigate", `{"account":"acme"}`).answer("A refund is due.").create(t)

	done, kids := completedWith(t, parent, 1)
	child := kids[0]
	wantLabels := map[string]string{v1alpha1.LabelParent: "triage", v1alpha1.LabelRoot: "triage", v1alpha1.LabelDepth: "1"}
	for k, v := range wantLabels {
		if child.Labels[k] != v {
			t.Errorf("label %s is %q, want %q", k, child.Labels[k], v)
		}
	}
	if refs := child.OwnerReferences; len(refs) != 1 || refs[0].UID != done.UID || !ptr.Deref(refs[0].BlockOwnerDeletion, false) {
		t.Errorf("owner references %+v, want the parent's, blocking its deletion", refs)
	}
	if child.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Fatalf("the child ended %s: %s", child.Status.Outcome, child.Status.Reason)
	}
	if child.Spec.Goal != "Investigate account acme." {
		t.Errorf("the child's goal is %q: the call's account is not in it", child.Spec.Goal)
	}

	obs := observations(t, done)
	if len(obs) != 1 {
		t.Fatalf("%d observations, want 1", len(obs))
	}
	r := report(t, obs[0])
	if r.Outcome != "Completed" || r.Answer != "Account acme: <b>refund due</b>" || r.Run != child.Name {
		t.Errorf("report %+v, want the child's outcome, answer and name", r)
	}
	if r.Usage == nil || r.Usage.Turns != child.Status.Usage.Turns || r.Usage.CostUSD != child.Status.Usage.CostUSD {
		t.Errorf("report usage %+v, want the child's %+v", r.Usage, child.Status.Usage)
	}
	// What the child used is the parent's too, and said to be its child's.
	if diff := usageDiff(child.Status.Usage, done.Status.ChildUsage); diff != "" {
		t.Errorf("status.childUsage is not the child's usage: %s", diff)
	}
	if got, want := done.Status.Usage.Turns, 2+child.Status.Usage.Turns; got != want {
		t.Errorf("the parent's usage counts %d turns, want its 2 and the child's %d", got, child.Status.Usage.Turns)
	}
}

// usageDiff compares what the budget counts of two usages: turns, tokens,
// tool calls and cost.
func usageDiff(want, got *v1alpha1.UsageStatus) string {
	w, g := limits.Usage(want), limits.Usage(got)
	w.PerTool, g.PerTool, w.WallClock, g.WallClock = nil, nil, 0, 0
	if w.Turns != g.Turns || w.Tokens() != g.Tokens() || w.ToolCalls != g.ToolCalls || w.Cost != g.Cost {
		return fmt.Sprintf("want %d turns, %d tokens, %d tool calls, $%s; got %d, %d, %d, $%s",
			w.Turns, w.Tokens(), w.ToolCalls, w.Cost, g.Turns, g.Tokens(), g.ToolCalls, g.Cost)
	}
	return ""
}

// A child that ends BudgetExhausted is a result its parent reads, and the
// parent goes on to complete.
func TestAgentTool_aChildOutOfBudgetIsAResultTheParentReads(t *testing.T) {
	ns := namespace(t)
	startAgents(t, 0)
	// 100 tokens cannot hold one model call: the child ends at once.
	investigator(t, ns, "tight", "never said", func(b *v1alpha1.BudgetSpec) { b.MaxTokens = ptr64(100) })
	parent := makeRun(ns, "triage").with(agentTool("investigate", "tight", nil)).
		budget(func(b *v1alpha1.BudgetSpec) { b.MaxCostUSD = "2" }).
		calls("investigate", `{"account":"acme"}`).answer("The investigation could not run.").create(t)

	done := waitOutcome(t, parent, 60*time.Second)
	if done.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Fatalf("the parent ended %s (%s): a child's outcome is not its parent's", done.Status.Outcome, done.Status.Reason)
	}
	obs := observations(t, done)
	if len(obs) != 1 {
		t.Fatalf("%d observations, want 1", len(obs))
	}
	r := report(t, obs[0])
	if r.Outcome != string(v1alpha1.OutcomeBudgetExhausted) || !strings.Contains(r.Reason, "tokens") {
		t.Errorf("report %+v, want BudgetExhausted with the child's reason naming its tokens ceiling", r)
	}
}

// Dispatching a call again after a crash (between the child's creation
// and the parent's save) adopts the child the first dispatch made: one
// call never has two children. A run of that name another call made is
// left alone, and the call says so.
func TestAgentTool_aCallDispatchedAgainAdoptsItsChild(t *testing.T) {
	ns := namespace(t)
	investigator(t, ns, "investigator", "ok", nil)
	tpl := get(t, &v1alpha1.AgentRunTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "investigator"}})
	parent := makeRun(ns, "triage").with(agentTool("investigate", "investigator", nil)).answer("done").create(t)
	ex, err := agent.New(agent.Config{Client: k8sClient, PollInterval: 50 * time.Millisecond},
		agent.Parent{Name: parent.Name, Namespace: ns, UID: parent.UID}, []agent.Tool{{Name: "investigate", Template: tpl, FromArgs: true}})
	if err != nil {
		t.Fatal(err)
	}
	inv := loop.Invocation{CallID: "t1-c0", Tool: "investigate", Arguments: json.RawMessage(`{"account":"acme"}`),
		StartupGrace: time.Minute, Timeout: time.Minute, MaxResultBytes: 4096,
		Child: &loop.ChildBudget{Turns: 2, Tokens: 10_000, WallClock: time.Minute, Cost: loop.MustMoney("0.10"), ToolCalls: 3}}
	// The operator stops while the child runs (no manager drives it here).
	for _, resumed := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(2*time.Second, cancel)
		inv.Resumed = resumed
		res := ex.Execute(ctx, inv)
		cancel()
		if res.Failure == nil || res.Failure.Kind != loop.FailUnknown {
			t.Fatalf("dispatch (resumed %v): %+v, want an unknown outcome, the child left running", resumed, res)
		}
	}
	kids := childrenOf(t, parent)
	if len(kids) != 1 || kids[0].Name != agent.ChildName(parent.Name, parent.UID, "t1-c0") {
		t.Fatalf("children %d, want one, named after the call", len(kids))
	}
	if b := kids[0].Spec.Budget; b.MaxTurns != 2 || ptr.Deref(b.MaxTokens, 0) != 10_000 || budgetMoney(b.MaxCostUSD) != loop.MustMoney("0.10") || ptr.Deref(b.MaxToolCalls, 0) != 3 {
		t.Errorf("the child's budget is %+v, want what the call reserved", b)
	}

	// Another call's dispatch finds the name taken by a run it did not make.
	other := inv
	other.CallID = "t1-c1"
	squatter := makeRun(ns, agent.ChildName(parent.Name, parent.UID, "t1-c1")).answer("mine").create(t)
	res := ex.Execute(context.Background(), other)
	if res.Failure == nil || res.Failure.Kind != loop.FailInvalid || !strings.Contains(res.Failure.Detail, "was not made by call t1-c1") {
		t.Fatalf("result %+v, want a refusal saying the run is not this call's", res)
	}
	if got := get(t, squatter); got.Labels[v1alpha1.LabelParentUID] != "" {
		t.Errorf("the squatter was adopted: %v", got.Labels)
	}
}

func budgetMoney(u v1alpha1.USD) loop.Money {
	m, _ := loop.ParseMoney(string(u))
	return m
}

// Cancelling a parent cancels its live child, which ends; then the
// parent ends too.
func TestAgentTool_cancellingTheParentCancelsItsChild(t *testing.T) {
	ns := namespace(t)
	startAgents(t, 0)
	// The child waits for a person that never answers.
	b := makeRun(ns, "").maxTurns(3).calls("lookup", `{}`).answer("never").with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "lookup", HTTP: &v1alpha1.HTTPTool{URL: "http://127.0.0.1:9/lookup"}})
		s.Policy = &v1alpha1.PolicySpec{Default: v1alpha1.PolicyDecision("ask")}
	})
	makeTemplate(t, ns, "waiter", b, v1alpha1.TemplateParameter{Name: "account"})
	parent := makeRun(ns, "triage").with(agentTool("investigate", "waiter", nil)).
		calls("investigate", `{"account":"acme"}`).answer("done").create(t)

	g := NewWithT(t)
	var child v1alpha1.AgentRun
	g.Eventually(func() v1alpha1.Phase {
		kids := childrenOf(t, parent)
		if len(kids) != 1 {
			return ""
		}
		child = kids[0]
		return child.Status.Phase
	}, 60*time.Second, 50*time.Millisecond).Should(Equal(v1alpha1.PhaseAwaitingApproval), "the child never waited for its approval")

	patch := client.MergeFrom(parent.DeepCopy())
	parent.Spec.Cancel = true
	if err := k8sClient.Patch(context.Background(), parent, patch); err != nil {
		t.Fatal(err)
	}
	ended := waitOutcome(t, &child, 60*time.Second)
	if ended.Status.Outcome != v1alpha1.OutcomeApprovalDenied || !strings.Contains(ended.Status.Reason, "AgentRun/triage") {
		t.Errorf("the child ended %s (%s), want cancelled by its parent", ended.Status.Outcome, ended.Status.Reason)
	}
	if done := waitOutcome(t, parent, 60*time.Second); done.Status.Outcome != v1alpha1.OutcomeApprovalDenied {
		t.Errorf("the parent ended %s (%s), want cancelled", done.Status.Outcome, done.Status.Reason)
	}
}

// A call whose child would be deeper than maxDepth, or past the run's
// children in flight, makes no child and tells the model the limit.
func TestAgentTool_depthAndFanOutAreLimited(t *testing.T) {
	ns := namespace(t)
	startAgents(t, 1)
	investigator(t, ns, "investigator", "ok", nil)

	deep := makeRun(ns, "deep").with(agentTool("investigate", "investigator", func(t *v1alpha1.ToolSpec) { t.Agent.MaxDepth = ptr32(2) })).
		calls("investigate", `{"account":"acme"}`).answer("done")
	deep.r.Labels = map[string]string{v1alpha1.LabelDepth: "2", v1alpha1.LabelRoot: "top"}
	d := waitOutcome(t, deep.create(t), 60*time.Second)
	if obs := observations(t, d); len(obs) != 1 || !strings.Contains(obs[0], "depth 3") || !strings.Contains(obs[0], "maxDepth is 2") {
		t.Errorf("observations %q, want a refusal naming the depth and maxDepth", obs)
	}
	if n := len(childrenOf(t, d)); n != 0 {
		t.Errorf("%d children past maxDepth", n)
	}

	// Two calls of a read-only agent tool run together; one run may have
	// one child in flight.
	wide := makeRun(ns, "wide").with(agentTool("investigate", "investigator", func(t *v1alpha1.ToolSpec) { t.Mutates = ptr.To(false) })).
		budget(func(b *v1alpha1.BudgetSpec) { b.MaxCostUSD = "2" }).
		calls("investigate", `{"account":"a"}`, "investigate", `{"account":"b"}`).answer("done").create(t)
	w := waitOutcome(t, wide, 60*time.Second)
	obs := observations(t, w)
	refused := 0
	for _, o := range obs {
		if strings.Contains(o, "1 children in flight, the most it may have at once") {
			refused++
		}
	}
	if len(obs) != 2 || refused != 1 || len(childrenOf(t, w)) != 1 {
		t.Errorf("%d observations, %d refused, %d children; want one child and one refusal naming the limit (%s: %s):\n%s",
			len(obs), refused, len(childrenOf(t, w)), w.Status.Outcome, w.Status.Reason, strings.Join(obs, "\n"))
	}
}

// Several children, each given all the parent can spare, never take the
// tree past the root's maxCostUSD, and each is counted once: the parent's
// usage is its own and its children's.
func TestAgentTool_theTreeSpendsNoMoreThanTheRootsCeiling(t *testing.T) {
	ns := namespace(t)
	startAgents(t, 0)
	// Each child turn reserves about 4,100 tokens at $5 a million: $0.02.
	// The parent keeps its next turn (the result it reads, at most 16
	// KiB, and its largest answer) out of what it shares: more than $0.09,
	// which left its children no money and so made none.
	investigator(t, ns, "investigator", "ok", func(b *v1alpha1.BudgetSpec) { b.MaxTurns = 2 })
	b := makeRun(ns, "triage").with(agentTool("investigate", "investigator", nil)).
		budget(func(b *v1alpha1.BudgetSpec) { b.MaxCostUSD = "0.30" })
	for i := range 4 {
		b.calls("investigate", fmt.Sprintf(`{"account":"a%d"}`, i))
	}
	done := waitOutcome(t, b.answer("done").create(t), 90*time.Second)

	root := limits.Usage(done.Status.Usage)
	if root.Cost > loop.MustMoney("0.30") {
		t.Fatalf("the tree spent $%s, past the root's $0.30 (%s: %s)", root.Cost, done.Status.Outcome, done.Status.Reason)
	}
	kids := childrenOf(t, done)
	if len(kids) < 2 {
		t.Fatalf("%d children; the test needs several (%s: %s)\n%s", len(kids), done.Status.Outcome, done.Status.Reason, strings.Join(observations(t, done), "\n"))
	}
	var sum loop.Usage
	for _, k := range kids {
		if k.Spec.Budget.MaxCostUSD == "" || loop.MustMoney(string(k.Spec.Budget.MaxCostUSD)) == 0 {
			t.Errorf("child %s was made with no money (maxCostUSD %q): it could not take a turn", k.Name, k.Spec.Budget.MaxCostUSD)
		}
		u := limits.Usage(k.Status.Usage)
		sum.Cost += u.Cost
		sum.Turns += u.Turns
	}
	if c := limits.Usage(done.Status.ChildUsage); c.Cost != sum.Cost || c.Turns != sum.Turns {
		t.Errorf("status.childUsage: $%s in %d turns; the children used $%s in %d", c.Cost, c.Turns, sum.Cost, sum.Turns)
	}
	if own := root.Cost - sum.Cost; own <= 0 {
		t.Errorf("the parent's own spend is $%s: its usage ($%s) must hold its children's ($%s) and its own", own, root.Cost, sum.Cost)
	}
}

// A child carries its parent's labels, so the AgentBudget that selects the
// parent selects the child too; the budget counts each run of the tree
// once: what it consumed is the parent's usage, which holds the child's.
func TestAgentTool_anAgentBudgetCountsEachRunOfTheTreeOnce(t *testing.T) {
	ns := namespace(t)
	b := makeBudget(t, ns, "team", func(s *v1alpha1.AgentBudgetSpec) {
		s.MaxCostUSD = "5"
		s.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	})
	startAgents(t, 0)
	investigator(t, ns, "investigator", "ok", nil)
	pb := makeRun(ns, "triage").with(agentTool("investigate", "investigator", nil)).
		calls("investigate", `{"account":"acme"}`).answer("done")
	pb.r.Labels = map[string]string{"team": "a"}
	done, kids := completedWith(t, pb.create(t), -1)
	if len(kids) != 1 || kids[0].Labels["team"] != "a" || !slices.Contains(kids[0].Status.AgentBudgets, "team") {
		t.Fatalf("children %d; want one, labelled team=a and held by the budget", len(kids))
	}
	if spentBy(t, &kids[0]) == 0 {
		t.Fatal("the child spent nothing: the test needs a priced child")
	}
	expectSettled(t, b, []*v1alpha1.AgentRun{done}, 0)
}

// Issue 45, item 4: a parent whose two agent calls ran lists both
// children in status.children, with how each ended and what it cost.
func TestAgentTool_theParentListsItsChildrenInStatus(t *testing.T) {
	ns := namespace(t)
	startAgents(t, 0)
	investigator(t, ns, "investigator", "refund due", nil)
	investigator(t, ns, "tight", "never said", func(b *v1alpha1.BudgetSpec) { b.MaxTokens = ptr64(100) })
	parent := makeRun(ns, "triage").with(agentTool("investigate", "investigator", nil)).with(agentTool("check", "tight", nil)).
		budget(func(b *v1alpha1.BudgetSpec) { b.MaxCostUSD = "2" }).
		calls("investigate", `{"account":"acme"}`).calls("check", `{"account":"acme"}`).answer("done").create(t)

	done, kids := completedWith(t, parent, 2)
	var want []v1alpha1.ChildRunStatus
	for _, k := range kids {
		call, _, _ := strings.Cut(k.Annotations[v1alpha1.AnnotationParentCall], "/")
		want = append(want, v1alpha1.ChildRunStatus{Name: k.Name, CallID: call, Outcome: string(k.Status.Outcome),
			Turns: int32(limits.Usage(k.Status.Usage).Turns), CostUSD: limits.Usage(k.Status.Usage).Cost.String()})
	}
	byName := func(a, b v1alpha1.ChildRunStatus) int { return strings.Compare(a.Name, b.Name) }
	got := slices.Clone(done.Status.Children)
	slices.SortFunc(want, byName)
	slices.SortFunc(got, byName)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("status.children (-want +got):\n%s", diff)
	}
	outcomes := []string{got[0].Outcome, got[1].Outcome}
	slices.Sort(outcomes)
	if w := []string{string(v1alpha1.OutcomeBudgetExhausted), string(v1alpha1.OutcomeCompleted)}; !slices.Equal(outcomes, w) {
		t.Errorf("the children ended %v, want %v", outcomes, w)
	}
	if done.Status.ChildrenOmitted != 0 {
		t.Errorf("status.childrenOmitted is %d, want 0", done.Status.ChildrenOmitted)
	}
}

// Issue 45, item 4: the child's invoke_agent span is in its parent's
// trace, a child of the span of the call that made it.
func TestAgentTool_theChildsTraceNestsUnderTheParentsCall(t *testing.T) {
	ns := namespace(t)
	exp := tracetest.NewInMemoryExporter()
	startAgents(t, 0, func(c *Config) { c.TracerProvider = telemetry.NewProvider(sdktrace.WithSyncer(exp)) })
	investigator(t, ns, "investigator", "refund due", nil)
	parent := makeRun(ns, "triage").with(agentTool("investigate", "investigator", nil)).
		budget(func(b *v1alpha1.BudgetSpec) { b.MaxCostUSD = "2" }).
		calls("investigate", `{"account":"acme"}`).answer("done").create(t)
	_, kids := completedWith(t, parent, 1)
	child := kids[0]

	span := func(name string) tracetest.SpanStub {
		var found tracetest.SpanStub
		NewWithT(t).Eventually(func() bool {
			for _, sp := range exp.GetSpans() {
				if sp.Name == name {
					found = sp
					return true
				}
			}
			return false
		}, 10*time.Second, 20*time.Millisecond).Should(BeTrue(), "a span %q", name)
		return found
	}
	call := span("execute_tool investigate")
	run := span("invoke_agent " + child.Name)
	if got, want := run.Parent.SpanID(), call.SpanContext.SpanID(); got != want {
		t.Errorf("the child's invoke_agent span has the parent span %s, want the call's %s", got, want)
	}
	if got, want := run.SpanContext.TraceID(), call.SpanContext.TraceID(); got != want {
		t.Errorf("the child's run is in trace %s, want its parent's %s", got, want)
	}
	if sc, err := telemetry.ParseTraceParent(child.Status.TraceParent); err != nil || sc.SpanID() != run.SpanContext.SpanID() {
		t.Errorf("the child's status.traceParent %q does not name its invoke_agent span %s", child.Status.TraceParent, run.SpanContext.SpanID())
	}
	if top := span("invoke_agent triage"); top.Parent.IsValid() {
		t.Errorf("the parent's invoke_agent span has a parent %s; a run no agent tool made is the root of its trace", top.Parent.SpanID())
	}
}

// Issue 45's storm: eight children made by one reply, read-only so that
// they run at once, all in the namespace's AgentBudget with their parent.
// Each child completes; the tree stays inside the root's maxCostUSD, and the budget's ledger,
// which every run of the tree reserves from and settles into at the same
// time (its compare-and-swap), ends counting the tree once: what the
// root says it spent, its children's included.
func TestAgentTool_aStormOfChildrenStaysInsideTheRootAndTheLedger(t *testing.T) {
	ns := namespace(t)
	b := makeBudget(t, ns, "team", func(s *v1alpha1.AgentBudgetSpec) { s.MaxCostUSD = "5" })
	startAgents(t, 8)
	investigator(t, ns, "investigator", "ok", func(b *v1alpha1.BudgetSpec) { b.MaxTurns = 2 })
	pb := makeRun(ns, "storm").with(agentTool("investigate", "investigator", func(t *v1alpha1.ToolSpec) {
		// The parent keeps room to read eight results: 2 KiB each, not
		// the default 16 KiB, which at $5 a million would take its $0.50.
		t.Mutates, t.MaxResultBytes = ptr.To(false), ptr.To[int32](2048)
		t.Agent.Budget = &v1alpha1.ChildBudget{MaxTurns: ptr.To[int32](2), MaxTokens: ptr.To[int64](10_000), MaxCostUSD: "0.04"}
	})).budget(func(b *v1alpha1.BudgetSpec) { b.MaxCostUSD, b.MaxTokens = "0.50", ptr.To[int64](200_000) })
	var calls []string
	for i := range 8 {
		calls = append(calls, "investigate", fmt.Sprintf(`{"account":"a%d"}`, i))
	}
	pb.calls(calls...)
	pb.r.Labels = map[string]string{"team": "a"}
	done := waitOutcome(t, pb.answer("done").create(t), 120*time.Second)

	root := limits.Usage(done.Status.Usage)
	if root.Cost > loop.MustMoney("0.50") {
		t.Fatalf("the tree spent $%s, past the root's $0.50 (%s: %s)", root.Cost, done.Status.Outcome, done.Status.Reason)
	}
	kids := childrenOf(t, done)
	if len(kids) != 8 {
		t.Fatalf("%d children, want 8 (%s: %s)\n%s", len(kids), done.Status.Outcome, done.Status.Reason, strings.Join(observations(t, done), "\n"))
	}
	var sum loop.Money
	for i := range kids {
		if kids[i].Status.Outcome != v1alpha1.OutcomeCompleted || !slices.Contains(kids[i].Status.AgentBudgets, "team") {
			t.Errorf("child %s: want Completed and held by the budget (%s: %s)", kids[i].Name, kids[i].Status.Outcome, kids[i].Status.Reason)
		}
		sum += spentBy(t, &kids[i])
	}
	if sum == 0 || sum > root.Cost {
		t.Errorf("the children spent $%s of the root's $%s", sum, root.Cost)
	}
	expectSettled(t, b, []*v1alpha1.AgentRun{done}, 0)
}
