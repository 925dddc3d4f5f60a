package controller

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kit"
)

// ledgerServer is an MCP server on loopback with a read-only tool,
// lookup_invoice, and one its annotations call destructive,
// void_invoice; it counts the calls of each.
func ledgerServer(t *testing.T) (url string, calls func() map[string]int) {
	t.Helper()
	var mu sync.Mutex
	counts := map[string]int{}
	s := mcp.NewServer(&mcp.Implementation{Name: "ledger", Version: "v1"}, nil)
	yes := true
	for _, tool := range []*mcp.Tool{
		{Name: "lookup_invoice", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		{Name: "void_invoice", Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}},
	} {
		mcp.AddTool(s, tool, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			counts[tool.Name]++
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: tool.Name + " done"}}}, nil, nil
		})
	}
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp", func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for k, v := range counts {
			out[k] = v
		}
		return out
	}
}

// governedLedger serves the ledger MCP server as the MCPServer "ledger"
// of ns, under a platform rule that asks about every mutating mcp tool of
// its URL; it returns the server's calls and the policy.
func governedLedger(t *testing.T, ns string) (func() map[string]int, *v1alpha1.AgentRunPolicy) {
	t.Helper()
	url, calls := ledgerServer(t)
	if err := k8sClient.Create(context.Background(), &v1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ledger"},
		Spec: v1alpha1.MCPServerSpec{URL: url}}); err != nil {
		t.Fatal(err)
	}
	p := govern(t, ns, v1alpha1.AgentRunPolicySpec{Rules: []v1alpha1.PlatformRule{{
		PolicyRule: v1alpha1.PolicyRule{Tools: []string{"*"}, Mutating: true, Decision: v1alpha1.PolicyAsk, Reason: "changes to the ledger are reviewed"},
		Match:      []v1alpha1.ToolSelector{{Kinds: []v1alpha1.ToolKind{v1alpha1.ToolKindMCP}, URLs: []string{url}}},
	}}})
	return calls, p
}

func serverRefTool(name, server, tool string) v1alpha1.ToolSpec {
	return v1alpha1.ToolSpec{Name: name, MCP: &v1alpha1.MCPTool{ServerRef: &v1alpha1.MCPServerRef{Name: server}, Tool: tool}}
}

// Issue 50, item 1: a platform rule that selects mcp tools by their
// server's URL and matches mutating ones applies to the tools of an
// MCPServer a run names, by the server's URL and the tools' annotations:
// the destructive tool waits for a person, the read-only one does not,
// though the run declares neither.
func TestMCPServerRef_platformRuleMatchesADestructiveToolByItsAnnotation(t *testing.T) {
	ns := namespace(t)
	calls, p := governedLedger(t, ns)
	run := makeRun(ns, "void").with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = []v1alpha1.ToolSpec{serverRefTool("lookup", "ledger", "lookup_invoice"), serverRefTool("void", "ledger", "void_invoice")}
	}).calls("lookup", `{}`).calls("void", `{}`).answer("Voided.").create(t)
	startManager(t, &kit.Builder{})

	pending := waitPending(t, run, 1).Status.PendingApprovals[0]
	if pending.Tool != "void" || pending.Rule != "AgentRunPolicy/"+p.Name+".rules[0]" || pending.Reason != "changes to the ledger are reviewed" {
		t.Fatalf("waiting: tool %s by %q (%q); want void by the platform's rule", pending.Tool, pending.Rule, pending.Reason)
	}
	if got := calls(); got["lookup_invoice"] != 1 || got["void_invoice"] != 0 {
		t.Fatalf("calls before the answer = %v; want lookup_invoice once, void_invoice not yet", got)
	}
	annotate(t, run, pending.CallID, "approve")
	done := waitOutcome(t, run, 20*time.Second)
	if done.Status.Outcome != v1alpha1.OutcomeCompleted || calls()["void_invoice"] != 1 {
		t.Fatalf("outcome %s (%s), calls %v", done.Status.Outcome, done.Status.Reason, calls())
	}
}

// A serverRef to an MCPServer that does not include the tool ends the run
// before it starts, saying so.
func TestMCPServerRef_excludedToolFailsTheRun(t *testing.T) {
	ns := namespace(t)
	url, _ := ledgerServer(t)
	if err := k8sClient.Create(context.Background(), &v1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ledger"},
		Spec: v1alpha1.MCPServerSpec{URL: url, IncludeTools: []string{"lookup_invoice"}}}); err != nil {
		t.Fatal(err)
	}
	excluded := makeRun(ns, "excluded").with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = []v1alpha1.ToolSpec{serverRefTool("void", "ledger", "void_invoice")}
	}).answer("done").create(t)
	startManager(t, &kit.Builder{})
	expectInvalid(t, waitOutcome(t, excluded, 20*time.Second),
		`the run cannot start: tools[0] (void): MCPServer ledger does not include tool "void_invoice"; its includeTools are lookup_invoice`)
}

// A run whose MCPServer does not exist yet waits for it (a GitOps tool
// may apply the run first), saying so in an event, and runs once it is
// created. (Past TemplateWait it ends Error, as for a missing template.)
func TestMCPServerRef_waitsForAServerAppliedAfterTheRun(t *testing.T) {
	ns := namespace(t)
	url, calls := ledgerServer(t)
	run := makeRun(ns, "early").with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = []v1alpha1.ToolSpec{serverRefTool("lookup", "ledger", "lookup_invoice")}
	}).calls("lookup", `{}`).answer("Found.").create(t)
	startManager(t, &kit.Builder{})
	g := NewWithT(t)
	g.Eventually(func() []string {
		return eventNotes(t, ns, "AgentRun", run.Name, corev1.EventTypeWarning, ReasonMCPServerNotFound)
	}, 10*time.Second, 50*time.Millisecond).Should(ContainElement(
		`tools[0] (lookup): MCPServer "ledger" does not exist in namespace ` + ns + `; waiting up to 1m0s for it`))
	if out := get(t, run).Status.Outcome; out != "" {
		t.Fatalf("the run ended %s while its MCPServer could still be created", out)
	}
	if err := k8sClient.Create(context.Background(), &v1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ledger"},
		Spec: v1alpha1.MCPServerSpec{URL: url}}); err != nil {
		t.Fatal(err)
	}
	expectOutcome(t, waitOutcome(t, run, 30*time.Second), v1alpha1.OutcomeCompleted, "")
	if calls()["lookup_invoice"] != 1 {
		t.Errorf("calls %v, want lookup_invoice once", calls())
	}
}

func serverToolsEntry(name, server string, tools ...string) v1alpha1.ToolSpec {
	return v1alpha1.ToolSpec{Name: name, MCP: &v1alpha1.MCPTool{ServerRef: &v1alpha1.MCPServerRef{Name: server}, Tools: tools}}
}

// Issue 50, item 1: one entry picks several of an MCPServer's tools
// (mcp.tools); each is a tool of the run named <entry>__<tool>, which the
// model calls and the server answers. A platform rule matching mutating
// tools of the server's URL sees each as it sees a single-tool entry: it
// asks about the tool the server calls destructive, not the read-only
// one. An operator restart while the run waits builds it again with the
// same tools, and the run finishes.
func TestMCPServerRef_toolsPicksSeveralToolsOfTheServer(t *testing.T) {
	ns := namespace(t)
	calls, p := governedLedger(t, ns)
	run := makeRun(ns, "void-both").with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = []v1alpha1.ToolSpec{serverToolsEntry("ledger", "ledger", "lookup_invoice", "void_invoice")}
	}).calls("ledger__lookup_invoice", `{}`).calls("ledger__void_invoice", `{}`).answer("Voided.").create(t)
	stop := startManager(t, &kit.Builder{})

	pending := waitPending(t, run, 1).Status.PendingApprovals[0]
	if pending.Tool != "ledger__void_invoice" || pending.Rule != "AgentRunPolicy/"+p.Name+".rules[0]" || pending.Reason != "changes to the ledger are reviewed" {
		t.Fatalf("waiting: tool %s by %q (%q); want ledger__void_invoice by the platform's rule", pending.Tool, pending.Rule, pending.Reason)
	}
	if got := calls(); got["lookup_invoice"] != 1 || got["void_invoice"] != 0 {
		t.Fatalf("calls before the answer = %v; want lookup_invoice once, void_invoice not yet", got)
	}
	stop()
	startManager(t, &kit.Builder{})
	annotate(t, run, pending.CallID, "approve")
	done := waitOutcome(t, run, 20*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
	if got := calls(); got["lookup_invoice"] != 1 || got["void_invoice"] != 1 {
		t.Errorf("calls = %v; want each tool once", got)
	}
	if d := cmp.Diff([]string{"lookup_invoice done", "void_invoice done"}, observations(t, done)); d != "" {
		t.Errorf("tool results (-want +got):\n%s", d)
	}
}

// An entry whose mcp.tools cannot all be tools of the run ends the run
// before it starts (Error, InvalidConfiguration), saying why: a tool the
// server does not offer, an expanded name another tool has, one longer
// than a tool name may be.
func TestMCPServerRef_toolsThatCannotBeExpandedFailTheStart(t *testing.T) {
	ns := namespace(t)
	url, calls := ledgerServer(t)
	if err := k8sClient.Create(context.Background(), &v1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ledger"},
		Spec: v1alpha1.MCPServerSpec{URL: url}}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("l", 52)
	cases := []struct {
		name  string
		tools []v1alpha1.ToolSpec
		want  string
	}{
		{name: "not-offered", tools: []v1alpha1.ToolSpec{serverToolsEntry("ledger", "ledger", "lookup_invoice", "refund_invoice")},
			want: `the run cannot start: tool ledger__refund_invoice: MCP server ` + url + ` does not offer tool "refund_invoice"; it offers: lookup_invoice, void_invoice`},
		{name: "collision", tools: []v1alpha1.ToolSpec{serverRefTool("ledger__lookup_invoice", "ledger", "lookup_invoice"),
			serverToolsEntry("ledger", "ledger", "lookup_invoice")},
			want: `the run cannot start: tools: the tool name ledger__lookup_invoice is declared twice`},
		{name: "too-long", tools: []v1alpha1.ToolSpec{serverToolsEntry(long, "ledger", "lookup_invoice")},
			want: `the run cannot start: tools[0] (` + long + `): mcp.tools "lookup_invoice" makes the tool name ` + long + `__lookup_invoice, which model providers refuse: it is 68 characters long, and tool names have at most 64`},
	}
	var runs []*v1alpha1.AgentRun
	for _, tc := range cases {
		runs = append(runs, makeRun(ns, tc.name).with(func(s *v1alpha1.AgentRunSpec) { s.Tools = tc.tools }).
			calls("ledger__lookup_invoice", `{}`).answer("done").create(t))
	}
	startManager(t, &kit.Builder{})
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expectInvalid(t, waitOutcome(t, runs[i], 20*time.Second), tc.want)
		})
	}
	if got := calls(); len(got) != 0 {
		t.Errorf("calls %v; want none", got)
	}
}
