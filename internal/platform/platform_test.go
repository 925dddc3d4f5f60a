package platform

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func policy(name string, f func(*v1alpha1.AgentRunPolicySpec)) v1alpha1.AgentRunPolicy {
	p := v1alpha1.AgentRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	f(&p.Spec)
	return p
}

func names(ps []v1alpha1.AgentRunPolicy) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestSelect(t *testing.T) {
	pols := []v1alpha1.AgentRunPolicy{
		policy("z-every", func(*v1alpha1.AgentRunPolicySpec) {}),
		policy("team-a", func(s *v1alpha1.AgentRunPolicySpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
		}),
		policy("not-sandbox", func(s *v1alpha1.AgentRunPolicySpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"sandbox"}}}}
		}),
		policy("broken", func(s *v1alpha1.AgentRunPolicySpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tier", Operator: "Resembles"}}}
		}),
	}
	for _, tc := range []struct {
		labels map[string]string
		want   []string
	}{
		{map[string]string{"team": "a"}, []string{"broken", "not-sandbox", "team-a", "z-every"}},
		{map[string]string{"team": "b", "tier": "sandbox"}, []string{"broken", "z-every"}},
	} {
		if diff := cmp.Diff(tc.want, names(Select(pols, tc.labels))); diff != "" {
			t.Errorf("labels %v (-want +got):\n%s", tc.labels, diff)
		}
	}
}

func run(f func(*v1alpha1.AgentRunSpec)) *v1alpha1.AgentRun {
	r := &v1alpha1.AgentRun{Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{
		Goal: "g", Budget: v1alpha1.BudgetSpec{MaxTurns: 20},
		Model: v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "gpt-x"}},
	}}}
	if f != nil {
		f(&r.Spec)
	}
	return r
}

func TestApply_lowersCeilingsAndLeavesTheRunAlone(t *testing.T) {
	r := run(func(s *v1alpha1.AgentRunSpec) {
		s.Budget.MaxCostUSD = "5"
		s.Budget.MaxToolCalls = ptr(int32(3))
		s.Tools = []v1alpha1.ToolSpec{{Name: "slow", Timeout: &metav1.Duration{Duration: time.Hour}}, {Name: "default"}}
	})
	p := policy("limits", func(s *v1alpha1.AgentRunPolicySpec) {
		s.Limits = &v1alpha1.PlatformLimits{MaxTurns: ptr(int32(8)), MaxTokens: ptr(int64(100_000)), MaxCostUSD: "1.50",
			MaxToolCalls: ptr(int32(10)), MaxWallClock: &metav1.Duration{Duration: time.Hour},
			MaxApprovalTimeout: &metav1.Duration{Duration: 2 * time.Hour}, MaxToolTimeout: &metav1.Duration{Duration: 10 * time.Second}}
	})
	got, changes, err := Apply(r, []v1alpha1.AgentRunPolicy{p})
	if err != nil {
		t.Fatal(err)
	}
	b := got.Spec.Budget
	if b.MaxTurns != 8 || *b.MaxTokens != 100_000 || b.MaxCostUSD != "1.50" || *b.MaxToolCalls != 3 || b.MaxWallClock.Duration != time.Hour ||
		got.Spec.ApprovalTimeout.Duration != 2*time.Hour || got.Spec.Tools[0].Timeout.Duration != 10*time.Second || got.Spec.Tools[1].Timeout.Duration != 10*time.Second {
		t.Fatalf("budget %+v, approval timeout %v, tools %+v", b, got.Spec.ApprovalTimeout, got.Spec.Tools)
	}
	if len(changes) != 7 || !strings.Contains(strings.Join(changes, "\n"), "budget.maxTurns lowered from 20 to 8 by AgentRunPolicy limits") {
		t.Fatalf("changes %q", changes)
	}
	if r.Spec.Budget.MaxTurns != 20 || r.Spec.Budget.MaxTokens != nil || r.Spec.Tools[0].Timeout.Duration != time.Hour {
		t.Fatal("Apply changed the run it was given")
	}
}

func TestApply_pricesOnlyRise(t *testing.T) {
	p := policy("prices", func(s *v1alpha1.AgentRunPolicySpec) {
		s.Pricing = []v1alpha1.ModelPrice{
			{Model: "*", ModelPricing: v1alpha1.ModelPricing{Input: "1", Output: "1"}},
			{Model: "gpt-x", ModelPricing: v1alpha1.ModelPricing{Input: "2.50", Output: "10"}},
		}
	})
	for _, tc := range []struct {
		name  string
		model string
		own   *v1alpha1.ModelPricing
		want  v1alpha1.ModelPricing
	}{
		{"no own prices", "gpt-x", nil, v1alpha1.ModelPricing{Input: "2.50", Output: "10"}},
		{"own prices lower", "gpt-x", &v1alpha1.ModelPricing{Input: "0", Output: "0.01"}, v1alpha1.ModelPricing{Input: "2.50", Output: "10"}},
		{"own prices higher", "gpt-x", &v1alpha1.ModelPricing{Input: "3", Output: "12", CachedInput: "1"}, v1alpha1.ModelPricing{Input: "3", Output: "12", CachedInput: "1"}},
		{"a model the list does not name", "other", nil, v1alpha1.ModelPricing{Input: "1", Output: "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(func(s *v1alpha1.AgentRunSpec) { s.Model.Name, s.Model.Pricing = tc.model, tc.own })
			got, _, err := Apply(r, []v1alpha1.AgentRunPolicy{p})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, *got.Spec.Model.Pricing); diff != "" {
				t.Fatalf("pricing (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApply_fallbacksPricesRiseAsTheModels(t *testing.T) {
	p := policy("prices", func(s *v1alpha1.AgentRunPolicySpec) {
		s.Pricing = []v1alpha1.ModelPrice{
			{Model: "*", ModelPricing: v1alpha1.ModelPricing{Input: "1", Output: "1"}},
			{Model: "gpt-x", ModelPricing: v1alpha1.ModelPricing{Input: "2.50", Output: "10"}},
		}
	})
	r := run(func(s *v1alpha1.AgentRunSpec) {
		s.Model.Fallbacks = []v1alpha1.ModelEndpoint{
			{Provider: v1alpha1.ProviderOpenAI, Name: "gpt-x", Pricing: &v1alpha1.ModelPricing{Input: "3", Output: "0.5"}},
			{Provider: v1alpha1.ProviderOpenAI, Name: "other"},
		}
	})
	got, changes, err := Apply(r, []v1alpha1.AgentRunPolicy{p})
	if err != nil {
		t.Fatal(err)
	}
	var prices []v1alpha1.ModelPricing
	for _, f := range got.Spec.Model.Fallbacks {
		prices = append(prices, *f.Pricing)
	}
	want := []v1alpha1.ModelPricing{{Input: "3", Output: "10"}, {Input: "1", Output: "1"}}
	if diff := cmp.Diff(want, prices); diff != "" {
		t.Fatalf("fallbacks' pricing (-want +got):\n%s", diff)
	}
	if !slices.Contains(changes, "model.fallbacks[0].pricing.output raised from 0.5 to 10 by AgentRunPolicy prices") ||
		!slices.Contains(changes, "model.fallbacks[1].pricing.input set to 1 by AgentRunPolicy prices (the run left it unset)") {
		t.Fatalf("changes = %q", changes)
	}
}

func TestApply_refusesWhatCannotBeLowered(t *testing.T) {
	p := policy("keys", func(s *v1alpha1.AgentRunPolicySpec) {
		s.ServiceAccountNames = []string{"agent"}
		s.Models = []v1alpha1.ModelAllowance{{APIKeySecret: "shared-openai", Providers: []v1alpha1.ModelProvider{v1alpha1.ProviderOpenAI, v1alpha1.ProviderAzure},
			BaseURLs: []string{"https://gateway.example.com/v1/"}}}
	})
	key := &v1alpha1.SecretKeySelector{Name: "shared-openai", Key: "key"}
	for _, tc := range []struct {
		name string
		f    func(*v1alpha1.AgentRunSpec)
		why  string
	}{
		{"the default ServiceAccount", func(*v1alpha1.AgentRunSpec) {}, "not default"},
		{"the shared key at another endpoint", func(s *v1alpha1.AgentRunSpec) {
			s.ServiceAccountName, s.Model.APIKeySecretRef, s.Model.BaseURL = "agent", key, "https://attacker.example.net/v1"
		}, "not to https://attacker.example.net/v1"},
		{"the shared key to an Azure resource it lists", func(s *v1alpha1.AgentRunSpec) {
			s.ServiceAccountName, s.Model.APIKeySecretRef, s.Model.Provider = "agent", key, v1alpha1.ProviderAzure
			s.Model.Azure = &v1alpha1.AzureModel{Endpoint: "https://gateway.example.com/v1", APIVersion: "2024-10-21"}
		}, ""},
		{"the shared key with another provider", func(s *v1alpha1.AgentRunSpec) {
			s.ServiceAccountName, s.Model.APIKeySecretRef, s.Model.Provider = "agent", key, v1alpha1.ProviderAnthropic
		}, "not anthropic"},
		{"allowed", func(s *v1alpha1.AgentRunSpec) {
			s.ServiceAccountName, s.Model.APIKeySecretRef, s.Model.BaseURL = "agent", key, "https://gateway.example.com/v1"
		}, ""},
		{"the provider's own endpoint", func(s *v1alpha1.AgentRunSpec) { s.ServiceAccountName, s.Model.APIKeySecretRef = "agent", key }, ""},
		{"the shared key to an Azure resource it does not list", func(s *v1alpha1.AgentRunSpec) {
			s.ServiceAccountName, s.Model.APIKeySecretRef, s.Model.Provider = "agent", key, v1alpha1.ProviderAzure
			s.Model.Azure = &v1alpha1.AzureModel{Endpoint: "https://attacker.openai.azure.com", APIVersion: "2024-10-21"}
		}, "not to https://attacker.openai.azure.com"},
		{"the shared key at another endpoint, in a fallback", func(s *v1alpha1.AgentRunSpec) {
			s.ServiceAccountName, s.Model.APIKeySecretRef, s.Model.BaseURL = "agent", key, "https://gateway.example.com/v1"
			s.Model.Fallbacks = []v1alpha1.ModelEndpoint{{Provider: v1alpha1.ProviderOpenAI, Name: "b", APIKeySecretRef: key, BaseURL: "https://attacker.example.net/v1"}}
		}, "the API key in Secret shared-openai (spec.model.fallbacks[0]) may be sent to the provider's own endpoint or to https://gateway.example.com/v1/, not to https://attacker.example.net/v1"},
		{"the shared key with another provider, in a fallback", func(s *v1alpha1.AgentRunSpec) {
			s.ServiceAccountName = "agent"
			s.Model.Fallbacks = []v1alpha1.ModelEndpoint{{Provider: v1alpha1.ProviderAnthropic, Name: "c", APIKeySecretRef: key}}
		}, "(spec.model.fallbacks[0]) may be used with the providers openai, azure, not anthropic"},
		{"the shared key, allowed in a fallback", func(s *v1alpha1.AgentRunSpec) {
			s.ServiceAccountName = "agent"
			s.Model.Fallbacks = []v1alpha1.ModelEndpoint{{Provider: v1alpha1.ProviderOpenAI, Name: "b", APIKeySecretRef: key}}
		}, ""},
		{"a key the policy does not list", func(s *v1alpha1.AgentRunSpec) {
			s.ServiceAccountName, s.Model.BaseURL = "agent", "https://elsewhere.example.org"
			s.Model.APIKeySecretRef = &v1alpha1.SecretKeySelector{Name: "own-key", Key: "key"}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Apply(run(tc.f), []v1alpha1.AgentRunPolicy{p})
			var ref *Refusal
			switch {
			case tc.why == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.why != "" && (!errors.As(err, &ref) || ref.Policy != "keys" || !strings.Contains(err.Error(), tc.why)):
				t.Fatalf("error %v; want a refusal by keys naming %q", err, tc.why)
			}
		})
	}
}

func TestApply_requiredRulesComeFirstAndKeepTheirNames(t *testing.T) {
	r := run(func(s *v1alpha1.AgentRunSpec) {
		s.Policy = &v1alpha1.PolicySpec{Default: v1alpha1.PolicyAllow, Rules: []v1alpha1.PolicyRule{
			{Tools: []string{"*"}, Decision: v1alpha1.PolicyAllow}, {Tools: []string{"x"}, Decision: v1alpha1.PolicyDeny, Name: "mine"}}}
	})
	pols := []v1alpha1.AgentRunPolicy{
		policy("a", func(s *v1alpha1.AgentRunPolicySpec) {
			s.Rules = []v1alpha1.PlatformRule{{PolicyRule: v1alpha1.PolicyRule{Tools: []string{"*"}, Mutating: true, Decision: v1alpha1.PolicyAsk}}}
		}),
		policy("b", func(s *v1alpha1.AgentRunPolicySpec) {
			s.Rules = []v1alpha1.PlatformRule{{PolicyRule: v1alpha1.PolicyRule{Tools: []string{"drop"}, Decision: v1alpha1.PolicyDeny, Name: "no-drops"}}}
		}),
	}
	got, _, err := Apply(r, pols)
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, rule := range got.Spec.Policy.Rules {
		labels = append(labels, rule.Name)
	}
	want := []string{"AgentRunPolicy/a.rules[0]", "AgentRunPolicy/b: no-drops", "policy.rules[0]", "mine"}
	if diff := cmp.Diff(want, labels); diff != "" {
		t.Fatalf("rules (-want +got):\n%s", diff)
	}
	if !got.Spec.Policy.Rules[0].Mutating || r.Spec.Policy.Rules[0].Name != "" {
		t.Fatal("the required rule lost its mutating matcher, or the run given was changed")
	}
}

func TestApproversFor(t *testing.T) {
	r := run(nil)
	r.Annotations = map[string]string{v1alpha1.CreatedByAnnotation: "alice"}
	bot := ServiceAccountUser("ops", "bot")
	a := ApproversFor(r, []v1alpha1.AgentRunPolicy{
		policy("lists-bot", func(s *v1alpha1.AgentRunPolicySpec) {
			s.Approval = &v1alpha1.PlatformApproval{ServiceAccounts: []v1alpha1.ServiceAccountRef{{Namespace: "ops", Name: "bot"}}}
		}),
		policy("strict", func(s *v1alpha1.AgentRunPolicySpec) {
			s.Approval = &v1alpha1.PlatformApproval{SelfApproval: v1alpha1.SelfApprovalDeny}
		}),
	})
	if why := a.Refuses(bot); !strings.Contains(why, "AgentRunPolicy strict does not list") {
		t.Fatalf("a bot only one of two policies lists: %q", why)
	}
	if why := a.Refuses("alice"); !strings.Contains(why, "AgentRunPolicy strict refuses self-approval") {
		t.Fatalf("the author: %q", why)
	}
	if why := a.Refuses("bob"); why != "" {
		t.Fatalf("another person: %q", why)
	}
}

// Tools of each kind, for the tests of what the platform decides about
// them.
func httpTool(name string, method v1alpha1.HTTPMethod, url string) v1alpha1.ToolSpec {
	return v1alpha1.ToolSpec{Name: name, HTTP: &v1alpha1.HTTPTool{URL: url, Method: method}}
}

func jobTool(name, image string) v1alpha1.ToolSpec {
	return v1alpha1.ToolSpec{Name: name, Job: &v1alpha1.JobTool{Image: image, Command: []string{name}}}
}

func mcpTool(name, url string) v1alpha1.ToolSpec {
	return v1alpha1.ToolSpec{Name: name, MCP: &v1alpha1.MCPTool{URL: url, Tool: name}}
}

func declared(t v1alpha1.ToolSpec, mutates bool) v1alpha1.ToolSpec {
	t.Mutates = &mutates
	return t
}

// Issue 42, finding 2: the platform, not the run's author, decides what
// counts as read-only. A tool its readOnlyTools do not match is mutating
// whatever the run declares (mutates defaults to false, so leaving it out
// once skipped every "mutating tools ask" rule); a tool they match keeps
// the author's word, which may only tighten; an MCP tool that is read-only
// on its server's word is left for the operator to ask the server.
func TestApply_readOnlyToolsAreThePlatformsWord(t *testing.T) {
	p := policy("tenants", func(s *v1alpha1.AgentRunPolicySpec) {
		s.ReadOnlyTools = []v1alpha1.ReadOnlyTool{
			{ToolSelector: v1alpha1.ToolSelector{Kinds: []v1alpha1.ToolKind{v1alpha1.ToolKindBuiltin}}},
			{ToolSelector: v1alpha1.ToolSelector{Methods: []v1alpha1.HTTPMethod{v1alpha1.HTTPGet}, URLs: []string{"https://billing.example.com/v1/*"}}},
			{ToolSelector: v1alpha1.ToolSelector{Kinds: []v1alpha1.ToolKind{v1alpha1.ToolKindJob}, Images: []string{"registry.example.com/readers/*"}}},
			{ToolSelector: v1alpha1.ToolSelector{URLs: []string{"https://mcp.example.com/mcp"}}, ReadOnlyHint: true},
		}
	})
	r := run(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = []v1alpha1.ToolSpec{
			{Name: "lookup", Builtin: v1alpha1.BuiltinKubernetesGet},
			httpTool("account", v1alpha1.HTTPGet, "https://billing.example.com/v1/accounts?email={{.email}}"),
			httpTool("account-default-method", "", "https://billing.example.com/v1/accounts"),
			httpTool("refund", v1alpha1.HTTPPost, "https://billing.example.com/v1/refunds"),
			declared(httpTool("refund-declared-read", v1alpha1.HTTPPost, "https://billing.example.com/v1/refunds"), false),
			httpTool("lookalike-host", v1alpha1.HTTPGet, "https://billing.example.com.attacker.example/v1/accounts"),
			declared(httpTool("author-tightens", v1alpha1.HTTPGet, "https://billing.example.com/v1/accounts"), true),
			jobTool("reader", "registry.example.com/readers/report:1"),
			jobTool("writer", "registry.example.com/writers/restock:1"),
			mcpTool("search", "https://mcp.example.com/mcp"),
			mcpTool("other-server", "https://mcp.other.example/mcp"),
		}
	})
	got, changes, err := Apply(r, []v1alpha1.AgentRunPolicy{p})
	if err != nil {
		t.Fatal(err)
	}
	type class struct{ Mutates, AskServer bool }
	gotClass := map[string]class{}
	for _, tool := range got.Spec.Tools {
		gotClass[tool.Name] = class{Mutates: tool.Mutates != nil && *tool.Mutates, AskServer: tool.MCP != nil && tool.MCP.RequireReadOnlyHint}
	}
	want := map[string]class{
		"lookup":                 {},
		"account":                {},
		"account-default-method": {},
		"refund":                 {Mutates: true},
		"refund-declared-read":   {Mutates: true},
		"lookalike-host":         {Mutates: true},
		"author-tightens":        {Mutates: true},
		"reader":                 {},
		"writer":                 {Mutates: true},
		"search":                 {AskServer: true},
		"other-server":           {Mutates: true},
	}
	if diff := cmp.Diff(want, gotClass); diff != "" {
		t.Errorf("classification (-want +got):\n%s", diff)
	}
	if !slices.Contains(changes, "tools[3] (refund) is mutating by AgentRunPolicy tenants (its readOnlyTools do not match it)") {
		t.Errorf("changes %q do not say that refund became mutating", changes)
	}
	if r.Spec.Tools[3].Mutates != nil || r.Spec.Tools[9].MCP.RequireReadOnlyHint {
		t.Error("Apply changed the run it was given")
	}

	// Without readOnlyTools, the author's word stands.
	got, _, err = Apply(r, []v1alpha1.AgentRunPolicy{policy("silent", func(*v1alpha1.AgentRunPolicySpec) {})})
	if err != nil || got.Spec.Tools[3].Mutates != nil {
		t.Fatalf("a policy without readOnlyTools classified a tool: %v, %+v", err, got.Spec.Tools[3])
	}
}

// A required rule can pick tools by what they are, not what the run calls
// them: here every POST asks, and a rule that picks none of the run's
// tools is left out without renaming the others.
func TestApply_requiredRulesMatchToolsByWhatTheyAre(t *testing.T) {
	p := policy("a", func(s *v1alpha1.AgentRunPolicySpec) {
		s.Rules = []v1alpha1.PlatformRule{
			{PolicyRule: v1alpha1.PolicyRule{Tools: []string{"*"}, Decision: v1alpha1.PolicyAsk},
				Match: []v1alpha1.ToolSelector{{Kinds: []v1alpha1.ToolKind{v1alpha1.ToolKindHTTP}, Methods: []v1alpha1.HTTPMethod{v1alpha1.HTTPPost, v1alpha1.HTTPDelete}}}},
			{PolicyRule: v1alpha1.PolicyRule{Tools: []string{"*"}, Decision: v1alpha1.PolicyDeny},
				Match: []v1alpha1.ToolSelector{{Images: []string{"registry.example.com/admin/*"}}}},
			{PolicyRule: v1alpha1.PolicyRule{Tools: []string{"pay", "read"}, Decision: v1alpha1.PolicyDeny},
				Match: []v1alpha1.ToolSelector{{Kinds: []v1alpha1.ToolKind{v1alpha1.ToolKindHTTP}}}},
		}
	})
	r := run(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = []v1alpha1.ToolSpec{
			httpTool("read", v1alpha1.HTTPGet, "https://api.example.com/x"),
			httpTool("pay", v1alpha1.HTTPPost, "https://api.example.com/pay"),
			httpTool("innocuous-name", v1alpha1.HTTPDelete, "https://api.example.com/accounts/{{.id}}"),
			jobTool("report", "registry.example.com/readers/report:1"),
		}
	})
	got, _, err := Apply(r, []v1alpha1.AgentRunPolicy{p})
	if err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.PolicyRule{
		{Tools: []string{"pay", "innocuous-name"}, Decision: v1alpha1.PolicyAsk, Name: "AgentRunPolicy/a.rules[0]"},
		{Tools: []string{"read", "pay"}, Decision: v1alpha1.PolicyDeny, Name: "AgentRunPolicy/a.rules[2]"},
	}
	if diff := cmp.Diff(want, got.Spec.Policy.Rules); diff != "" {
		t.Fatalf("rules (-want +got):\n%s", diff)
	}
}

// Issue 42, finding 7: a Secret the policy pins to the model's key is
// refused anywhere else in the run, where a tool would send it to a URL
// of the author's choosing; the refusal names the field.
func TestApply_pinnedKeysStayPinned(t *testing.T) {
	p := policy("keys", func(s *v1alpha1.AgentRunPolicySpec) {
		s.Models = []v1alpha1.ModelAllowance{{APIKeySecret: "shared-openai", Providers: []v1alpha1.ModelProvider{v1alpha1.ProviderOpenAI}}}
	})
	pinned := v1alpha1.SecretKeySelector{Name: "shared-openai", Key: "key"}
	own := v1alpha1.SecretKeySelector{Name: "own-token", Key: "token"}
	header := func(ref v1alpha1.SecretKeySelector) []v1alpha1.HTTPHeader {
		return []v1alpha1.HTTPHeader{{Name: "X-Trace", Value: "1"}, {Name: "Authorization", ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: ref}}}
	}
	for _, tc := range []struct {
		name string
		f    func(*v1alpha1.AgentRunSpec)
		path string
	}{
		{"the model's key, on its provider", func(s *v1alpha1.AgentRunSpec) { s.Model.APIKeySecretRef = &pinned }, ""},
		{"another Secret in a tool's header", func(s *v1alpha1.AgentRunSpec) {
			tool := httpTool("fetch", v1alpha1.HTTPGet, "https://example.com/")
			tool.HTTP.Headers = header(own)
			s.Tools = []v1alpha1.ToolSpec{tool}
		}, ""},
		{"an http tool's header", func(s *v1alpha1.AgentRunSpec) {
			tool := httpTool("fetch", v1alpha1.HTTPGet, "https://attacker.example.net/")
			tool.HTTP.Headers = header(pinned)
			s.Tools = []v1alpha1.ToolSpec{{Name: "lookup", Builtin: v1alpha1.BuiltinKubernetesGet}, tool}
		}, "spec.tools[1].http.headers[1].valueFrom.secretKeyRef"},
		{"an mcp tool's header", func(s *v1alpha1.AgentRunSpec) {
			tool := mcpTool("search", "https://attacker.example.net/mcp")
			tool.MCP.Headers = header(pinned)
			s.Tools = []v1alpha1.ToolSpec{tool}
		}, "spec.tools[0].mcp.headers[1].valueFrom.secretKeyRef"},
		{"an mcp tool's OAuth client", func(s *v1alpha1.AgentRunSpec) {
			tool := mcpTool("search", "https://attacker.example.net/mcp")
			tool.MCP.OAuth = &v1alpha1.OAuthClientCredentials{ClientSecretRef: v1alpha1.OAuthSecretRef{Name: pinned.Name}, TokenURL: "https://attacker.example.net/token"}
			s.Tools = []v1alpha1.ToolSpec{tool}
		}, "spec.tools[0].mcp.oauth.clientSecretRef"},
		{"a job tool's env", func(s *v1alpha1.AgentRunSpec) {
			tool := jobTool("exfiltrate", "attacker.example.net/curl:1")
			tool.Job.Env = []v1alpha1.EnvVar{{Name: "A", Value: "1"}, {Name: "KEY", ValueFrom: &v1alpha1.EnvVarSource{SecretKeyRef: pinned}}}
			s.Tools = []v1alpha1.ToolSpec{tool}
		}, "spec.tools[0].job.env[1].valueFrom.secretKeyRef"},
		{"a tool's CA bundle", func(s *v1alpha1.AgentRunSpec) {
			tool := httpTool("fetch", v1alpha1.HTTPGet, "https://example.com/")
			tool.HTTP.CABundleRef = &v1alpha1.CABundleRef{SecretKeyRef: &pinned}
			s.Tools = []v1alpha1.ToolSpec{tool}
		}, "spec.tools[0].http.caBundleRef.secretKeyRef"},
		{"the model's CA bundle", func(s *v1alpha1.AgentRunSpec) {
			s.Model.CABundleRef = &v1alpha1.CABundleRef{SecretKeyRef: &pinned}
		}, "spec.model.caBundleRef.secretKeyRef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Apply(run(tc.f), []v1alpha1.AgentRunPolicy{p})
			var ref *Refusal
			switch {
			case tc.path == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.path != "" && (!errors.As(err, &ref) || ref.Policy != "keys" ||
				!strings.Contains(err.Error(), "the API key in Secret shared-openai may be named only as a model's apiKeySecretRef (spec.model or spec.model.fallbacks[]), not in "+tc.path)):
				t.Fatalf("error %v; want a refusal by keys naming %s", err, tc.path)
			}
		})
	}
}

// Issue 43, item 2: requireToolCosts refuses a run whose tools leave
// maxCostUSD out, naming them; "0" declares a free tool, and a builtin
// tool (the operator's own read of the API server) costs nothing.
func TestApply_requireToolCosts(t *testing.T) {
	costed := func(tool v1alpha1.ToolSpec, usd v1alpha1.USD) v1alpha1.ToolSpec { tool.MaxCostUSD = usd; return tool }
	tools := []v1alpha1.ToolSpec{
		costed(httpTool("free", v1alpha1.HTTPGet, "https://example.com/"), "0"),
		httpTool("search", v1alpha1.HTTPGet, "https://example.com/search"),
		costed(jobTool("render", "example.com/render:1"), "0.02"),
		{Name: "lookup", Builtin: v1alpha1.BuiltinKubernetesGet},
		// An agent tool costs what its child may spend, always bounded.
		{Name: "investigate", Agent: &v1alpha1.AgentTool{TemplateRef: v1alpha1.TemplateRef{Name: "investigator"}}},
	}
	for _, tc := range []struct {
		name    string
		require bool
		tools   []v1alpha1.ToolSpec
		why     string
	}{
		{"required, two undeclared", true, tools, "every tool must declare maxCostUSD (requireToolCosts; \"0\" declares a free tool), and the tools search do not"},
		{"required, all declared", true, []v1alpha1.ToolSpec{tools[0], tools[2], tools[4]}, ""},
		{"required, no tools", true, nil, ""},
		{"not required", false, tools, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := policy("costs", func(s *v1alpha1.AgentRunPolicySpec) { s.RequireToolCosts = tc.require })
			_, _, err := Apply(run(func(s *v1alpha1.AgentRunSpec) { s.Tools = tc.tools }), []v1alpha1.AgentRunPolicy{p})
			var ref *Refusal
			switch {
			case tc.why == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.why != "" && (!errors.As(err, &ref) || ref.Policy != "costs" || !strings.Contains(err.Error(), tc.why)):
				t.Fatalf("error %v; want a refusal by costs saying %q", err, tc.why)
			}
		})
	}
}

// Issue 45: an AgentRunPolicy's maxAgentDepth lowers every agent tool's
// maxDepth (default 3), never raises one, and says what it lowered.
func TestApply_maxAgentDepthLowersAgentTools(t *testing.T) {
	agentTool := func(name string, depth *int32) v1alpha1.ToolSpec {
		return v1alpha1.ToolSpec{Name: name, Agent: &v1alpha1.AgentTool{TemplateRef: v1alpha1.TemplateRef{Name: "investigator"}, MaxDepth: depth}}
	}
	for _, tc := range []struct {
		name    string
		policy  *int32
		tool    *int32
		want    *int32
		changes int
	}{
		{"the default lowered", ptr[int32](2), nil, ptr[int32](2), 1},
		{"a deeper tool lowered", ptr[int32](2), ptr[int32](5), ptr[int32](2), 1},
		{"a shallower tool kept", ptr[int32](2), ptr[int32](1), ptr[int32](1), 0},
		{"no limit", nil, ptr[int32](5), ptr[int32](5), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := policy("depth", func(s *v1alpha1.AgentRunPolicySpec) { s.MaxAgentDepth = tc.policy })
			got, changes, err := Apply(run(func(s *v1alpha1.AgentRunSpec) {
				s.Tools = []v1alpha1.ToolSpec{agentTool("investigate", tc.tool), httpTool("search", v1alpha1.HTTPGet, "https://example.com/")}
			}), []v1alpha1.AgentRunPolicy{p})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Spec.Tools[0].Agent.MaxDepth); diff != "" {
				t.Errorf("maxDepth (-want +got):\n%s", diff)
			}
			n := 0
			for _, c := range changes {
				if strings.Contains(c, "agent.maxDepth") {
					n++
					if !strings.Contains(c, "AgentRunPolicy depth") {
						t.Errorf("change %q does not name the policy", c)
					}
				}
			}
			if n != tc.changes {
				t.Errorf("%d changes about maxDepth (%q), want %d", n, changes, tc.changes)
			}
		})
	}
}

// Issue 45: an AgentRunPolicy lowers the fan-out of agent tools
// (maxAgentInFlight), as maxAgentDepth lowers their depth.
func TestApply_maxAgentInFlightLowersAgentTools(t *testing.T) {
	for _, tc := range []struct {
		name         string
		policy, tool *int32
		want         *int32
		changes      int
	}{
		{"the default lowered", ptr[int32](2), nil, ptr[int32](2), 1},
		{"a wider tool lowered", ptr[int32](2), ptr[int32](8), ptr[int32](2), 1},
		{"a narrower tool kept", ptr[int32](2), ptr[int32](1), ptr[int32](1), 0},
		{"no limit", nil, ptr[int32](8), ptr[int32](8), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := policy("fan-out", func(s *v1alpha1.AgentRunPolicySpec) { s.MaxAgentInFlight = tc.policy })
			got, changes, err := Apply(run(func(s *v1alpha1.AgentRunSpec) {
				s.Tools = []v1alpha1.ToolSpec{{Name: "investigate", Agent: &v1alpha1.AgentTool{TemplateRef: v1alpha1.TemplateRef{Name: "investigator"}, MaxInFlight: tc.tool}}}
			}), []v1alpha1.AgentRunPolicy{p})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Spec.Tools[0].Agent.MaxInFlight); diff != "" {
				t.Errorf("maxInFlight (-want +got):\n%s", diff)
			}
			n := 0
			for _, c := range changes {
				if strings.Contains(c, "agent.maxInFlight") && strings.Contains(c, "AgentRunPolicy fan-out") {
					n++
				}
			}
			if n != tc.changes {
				t.Errorf("%d changes about maxInFlight naming the policy (%q), want %d", n, changes, tc.changes)
			}
		})
	}
}

// Issue 46, item 5: a run that names no escalation owner gets the first
// governing policy's escalationOwner (by name); its own owner stays.
func TestApply_fillsTheEscalationOwner(t *testing.T) {
	owned := func(o string) v1alpha1.AgentRunPolicy {
		return policy("b-owner", func(s *v1alpha1.AgentRunPolicySpec) { s.EscalationOwner = o })
	}
	for _, tc := range []struct {
		name string
		run  *v1alpha1.EscalationSpec
		pols []v1alpha1.AgentRunPolicy
		want string
	}{
		{"the policy's, for a run without one", nil, []v1alpha1.AgentRunPolicy{owned("payments-oncall")}, "payments-oncall"},
		{"the first policy by name that sets one",
			nil, []v1alpha1.AgentRunPolicy{policy("a-none", func(*v1alpha1.AgentRunPolicySpec) {}), owned("payments-oncall"),
				policy("c-owner", func(s *v1alpha1.AgentRunPolicySpec) { s.EscalationOwner = "platform" })}, "payments-oncall"},
		{"the run's own stays", &v1alpha1.EscalationSpec{Owner: "refunds-team"}, []v1alpha1.AgentRunPolicy{owned("payments-oncall")}, "refunds-team"},
		{"none where no policy sets one", nil, []v1alpha1.AgentRunPolicy{policy("a-none", func(*v1alpha1.AgentRunPolicySpec) {})}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changes, err := Apply(run(func(s *v1alpha1.AgentRunSpec) { s.Escalation = tc.run }), tc.pols)
			if err != nil {
				t.Fatal(err)
			}
			owner := ""
			if got.Spec.Escalation != nil {
				owner = got.Spec.Escalation.Owner
			}
			if owner != tc.want {
				t.Errorf("owner = %q, want %q", owner, tc.want)
			}
			if len(changes) != 0 {
				t.Errorf("changes %q: an owner is no lowered ceiling", changes)
			}
		})
	}
}
