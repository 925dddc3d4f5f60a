package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/model/modeltest"
)

// Issue 42, finding 8 (build item 7): the operator's egress allow-list was
// operator-wide, so opening an internal address for one team opened it to
// every tenant's model baseURL and HTTP and MCP tools. An AgentRunPolicy's
// spec.egress opens it for the namespaces the policy selects only. Here
// the operator opens nothing beyond its defaults and the model server
// listens on loopback: a run in namespace A is refused, and once a policy
// selecting A allows 127.0.0.0/8, A's next run reaches the server while a
// run in namespace B, which the policy does not select, is still refused.
func TestEgress_platformPolicyOpensAnAddressForItsNamespacesOnly(t *testing.T) {
	srv := modeltest.NewServer(t, modeltest.Reply([]byte(`{"id":"c1","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"finish_reason":"stop",`+
		`"message":{"role":"assistant","content":"All done."}}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}`)))
	host := strings.TrimPrefix(srv.URL, "http://")
	model := func(s *v1alpha1.AgentRunSpec) {
		s.Model = v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "gpt-test", BaseURL: srv.URL + "/v1"}}
		s.Budget.MaxCostUSD = "1"
	}
	startManager(t, &kit.Builder{Egress: egress.NewClients(&egress.Policy{})})
	a, b := namespace(t), namespace(t)

	refused := "egress to " + host + " refused: loopback address (the operator's egress policy; allow it with --egress-allow-cidrs, " +
		"or per namespace with an AgentRunPolicy's spec.egress.allowCIDRs)"
	expectRefused := func(run *v1alpha1.AgentRun) {
		t.Helper()
		expectEnded(t, waitOutcome(t, run, 30*time.Second), v1alpha1.OutcomeToolFailure, string(v1alpha1.OutcomeToolFailure), refused)
	}
	expectRefused(makeRun(a, "before").with(model).create(t))

	p := govern(t, a, v1alpha1.AgentRunPolicySpec{Egress: &v1alpha1.PlatformEgress{AllowCIDRs: []string{"127.0.0.0/8", "::1"}}})
	allowed := makeRun(a, "after").with(model).create(t)
	elsewhere := makeRun(b, "after").with(model).create(t)
	if out := waitOutcome(t, allowed, 30*time.Second); out.Status.Outcome != v1alpha1.OutcomeCompleted || out.Status.Answer != "All done." {
		t.Errorf("the run of namespace %s, which AgentRunPolicy %s opens loopback to: %s (%s), answer %q; want Completed with the server's answer",
			a, p.Name, out.Status.Outcome, out.Status.Reason, out.Status.Answer)
	}
	expectRefused(elsewhere)
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("the server was asked %d times; want once, by the run the policy opens it to", n)
	}
}
