package kit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

func parse(t *testing.T, manifest string) *v1alpha1.AgentRun {
	t.Helper()
	run := &v1alpha1.AgentRun{}
	if err := yaml.UnmarshalStrict([]byte(manifest), run); err != nil {
		t.Fatal(err)
	}
	run.Namespace, run.UID = "default", "uid-1"
	return run
}

// runLocally builds run's kit with job tools as local processes, as
// agentrun local does, and runs it to its end.
func runLocally(t *testing.T, run *v1alpha1.AgentRun) *loop.State {
	t.Helper()
	k, err := (&Builder{LocalJobs: true}).Build(context.Background(), run, egress.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	s := &loop.State{}
	(&loop.Runner{Engine: k.Engine, Model: k.Model, Tools: k.Tools}).Run(context.Background(), s)
	return s
}

func TestConfig_convertsTheSpec(t *testing.T) {
	run := parse(t, `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: r}
spec:
  goal: Find out.
  instructions: Be brief.
  model:
    provider: scripted
    maxOutputTokens: 1000
    timeout: 20s
    retry: {maxAttempts: 7, initialBackoff: 3s, maxBackoff: 2m}
    pricing: {input: "3", output: "15", cachedInput: "0.3"}
    script: [{content: done, usage: {inputTokens: 10, outputTokens: 2}}]
  budget:
    maxTurns: 4
    maxTokens: 9000
    maxWallClock: 90s
    maxCostUSD: "0.50"
    maxToolCalls: 7
    perTool: {refund: 1}
    defaultToolLimit: 2
    soft: [wallClock]
  loopDetection: {threshold: 4, window: 8, maxPeriod: 2, ignoreArguments: [request_id]}
  tools:
  - name: refund
    mutates: true
    reversible: false
    maxCostUSD: "0.01"
    timeout: 5s
    maxResultBytes: 100
    retry: {maxAttempts: 4, initialBackoff: 500ms, maxBackoff: 5s, mutatingSafe: true}
    job: {image: x, command: [refund]}
  policy:
    default: deny
    rules: [{tools: [refund], when: "args.amount > 5", decision: ask, reason: big}]
    grants: [refund]
  guardrails: [{name: cards, tools: ["*"], pattern: "\\d{16}", severity: halt, reason: "no cards"}]
  approvalTimeout: 10m
  output: {schema: {type: object}}
`)
	cfg, err := Config(&run.Spec)
	if err != nil {
		t.Fatal(err)
	}
	want := loop.Config{
		Goal: "Find out.", Instructions: "Be brief.",
		Model: loop.ModelConfig{Provider: "scripted", MaxOutputTokens: 1000, Timeout: 20 * time.Second,
			Pricing: loop.Pricing{Input: loop.MustMoney("3"), Output: loop.MustMoney("15"), CachedInput: loop.MustMoney("0.3")},
			Retry:   loop.RetryPolicy{MaxAttempts: 7, InitialBackoff: 3 * time.Second, MaxBackoff: 2 * time.Minute}},
		Budget: loop.Budget{MaxTurns: 4, MaxTokens: 9000, MaxWallClock: 90 * time.Second, MaxCost: new(loop.MustMoney("0.5")),
			MaxToolCalls: new(7), PerTool: map[string]int{"refund": 1}, DefaultToolLimit: new(2), Soft: []loop.Dimension{loop.DimWallClock}},
		Loop: loop.LoopDetection{Threshold: 4, Window: 8, MaxPeriod: 2, IgnoreArguments: []string{"request_id"}},
		Tools: []loop.ToolSpec{{Name: "refund", Mutates: true, Reversible: false, MaxCost: loop.MustMoney("0.01"), CostDeclared: true,
			Timeout: 5 * time.Second, MaxResultBytes: 100, Repeatable: true, StartupGrace: 5 * time.Minute, KillGrace: 5 * time.Second,
			Retry: loop.RetryPolicy{MaxAttempts: 4, InitialBackoff: 500 * time.Millisecond, MaxBackoff: 5 * time.Second, MutatingSafe: true}}},
		Policy:          loop.Policy{Default: loop.Deny, Rules: []loop.Rule{{Tools: []string{"refund"}, When: "args.amount > 5", Decision: loop.Ask, Reason: "big"}}, Grants: []string{"refund"}},
		Guardrails:      []loop.Guardrail{{Name: "cards", Tools: []string{"*"}, Pattern: `\d{16}`, Severity: loop.Halt, Reason: "no cards"}},
		ApprovalTimeout: 10 * time.Minute,
		// A script has no window: the largest limit (context_test.go).
		Context: loop.ContextPolicy{MaxInputTokens: 10_000_000, Source: loop.ContextFromModel},
		Output:  &loop.OutputSpec{Schema: json.RawMessage(`{"type":"object"}`)},
	}
	got, _ := json.Marshal(cfg)
	exp, _ := json.Marshal(want)
	if string(got) != string(exp) {
		t.Fatalf("config\n got %s\nwant %s", got, exp)
	}
	if s := Script(run.Spec.Model.Script); len(s) != 1 || s[0].Content != "done" || s[0].Usage.InputTokens != 10 {
		t.Fatalf("script = %+v", s)
	}
}

func TestConfig_malformedMoneyNamesTheField(t *testing.T) {
	spec := &v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{Goal: "g", Budget: v1alpha1.BudgetSpec{MaxTurns: 1, MaxCostUSD: "1e3"}}}
	if _, err := Config(spec); err == nil || !strings.Contains(err.Error(), "budget.maxCostUSD") {
		t.Fatalf("err = %v", err)
	}
}

func TestBuild_localJobToolsRunAsProcesses(t *testing.T) {
	run := parse(t, `
metadata: {name: r}
spec:
  goal: Echo.
  model: {provider: scripted, script: [{toolCalls: [{name: echo, arguments: {x: 1}}]}, {content: done}]}
  budget: {maxTurns: 3}
  tools:
  - name: echo
    job: {image: unused, command: [sh, -c], args: ['cat; echo " $GREETING"'], env: [{name: GREETING, value: hi}]}
`)
	s := runLocally(t, run)
	if s.Outcome != loop.Completed {
		t.Fatalf("outcome %s: %s", s.Outcome, s.Reason)
	}
	if obs := s.Transcript[1].Content; strings.TrimSpace(obs) != `{"x":1} hi` {
		t.Fatalf("observation = %q", obs)
	}
}

func TestBuild_builtinToolsNeedACluster(t *testing.T) {
	run := parse(t, `
metadata: {name: r}
spec:
  goal: Read.
  model: {provider: scripted, script: [{content: x}]}
  budget: {maxTurns: 3}
  tools: [{name: get, builtin: kubernetes.get}]
`)
	_, err := (&Builder{LocalJobs: true}).Build(context.Background(), run, egress.Grant{})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "need a cluster") {
		t.Fatalf("err = %v", err)
	}
}

func TestBuild_mcpHintsOnlyTighten(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "billing", Version: "v1"}, nil)
	yes := true
	mcp.AddTool(s, &mcp.Tool{Name: "refund", Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
		})
	var sawHeader atomic.Bool
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer from-secret" {
			sawHeader.Store(true)
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	run := parse(t, `
metadata: {name: r}
spec:
  goal: Refund.
  model: {provider: scripted, script: [{content: x}]}
  budget: {maxTurns: 3}
  tools:
  - name: refund
    mutates: false
    mcp:
      url: `+srv.URL+`
      tool: refund
      headers: [{name: Authorization, valueFrom: {secretKeyRef: {name: mcp, key: token}}}]
`)
	secrets := func(_ context.Context, ns, name, key string) (string, error) {
		if ns == "default" && name == "mcp" && key == "token" {
			return "Bearer from-secret\n", nil
		}
		return "", errors.New("no such secret")
	}
	k, err := (&Builder{Secrets: secrets}).Build(context.Background(), run, egress.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	tool := k.Engine.Config().Tools[0]
	if !tool.Mutates || tool.Reversible || tool.Repeatable {
		t.Fatalf("the server's destructive hint did not tighten the declared read: %+v", tool)
	}
	if !sawHeader.Load() {
		t.Fatal("the header from the Secret was not sent")
	}

	// A declared tool the server does not offer fails the build as unavailable.
	run.Spec.Tools[0].MCP.Tool = "close_account"
	if _, err := (&Builder{Secrets: secrets}).Build(context.Background(), run, egress.Grant{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
}

// Issue 42, finding 2: an MCP tool that an AgentRunPolicy calls read-only
// only on its server's word (mcp.requireReadOnlyHint, which the platform
// sets) is mutating unless the server annotates it readOnlyHint: true when
// the run starts; the annotations exist only then.
func TestBuild_requireReadOnlyHintTrustsOnlyTheServersWord(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "search", Version: "v1"}, nil)
	handler := func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	}
	mcp.AddTool(s, &mcp.Tool{Name: "search", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, handler)
	mcp.AddTool(s, &mcp.Tool{Name: "unannotated"}, handler)
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	defer srv.Close()
	for _, tc := range []struct {
		tool    string
		require bool
		want    bool
	}{
		{"search", true, false},
		{"unannotated", true, true},
		{"unannotated", false, false},
		{"search", false, false},
	} {
		t.Run(fmt.Sprintf("%s, requireReadOnlyHint %v", tc.tool, tc.require), func(t *testing.T) {
			run := parse(t, fmt.Sprintf(`
metadata: {name: r}
spec:
  goal: Search.
  model: {provider: scripted, script: [{content: x}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    mutates: false
    mcp: {url: %s, tool: %s, requireReadOnlyHint: %v}
`, srv.URL, tc.tool, tc.require))
			k, err := (&Builder{}).Build(context.Background(), run, egress.Grant{})
			if err != nil {
				t.Fatal(err)
			}
			if got := k.Engine.Config().Tools[0].Mutates; got != tc.want {
				t.Fatalf("mutates = %v, want %v", got, tc.want)
			}
		})
	}
}

// The provider makes one attempt per call; the engine retries the 429
// after its backoff and reports the retry as a note (an event under the
// operator).
func TestBuild_openAIReadsItsKeyAtCallTimeAndTheEngineRetries(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk-test" {
			t.Errorf("authorization = %q", r.Header.Get("Authorization"))
		}
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hello"}}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`))
	}))
	defer srv.Close()
	run := openAIRun(srv.URL)
	var reads atomic.Int32
	var retries []string
	b := &Builder{
		Secrets: func(_ context.Context, ns, name, key string) (string, error) {
			reads.Add(1)
			if ns != "team-a" || name != "openai" || key != "api-key" {
				return "", errors.New("wrong secret")
			}
			return "sk-test", nil
		},
	}
	k, err := b.Build(context.Background(), run, egress.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	if reads.Load() != 0 {
		t.Fatal("the key was read before any call")
	}
	s := &loop.State{}
	(&loop.Runner{Engine: k.Engine, Model: k.Model, Tools: k.Tools, OnStep: func(_ *loop.State, eff loop.Effect) {
		for _, n := range eff.Notes {
			if n.Kind == loop.NoteRetry {
				retries = append(retries, n.Message)
			}
		}
	}}).Run(context.Background(), s)
	if s.Outcome != loop.Completed || s.Answer != "hello" {
		t.Fatalf("outcome %s (%s) answer %q", s.Outcome, s.Reason, s.Answer)
	}
	if len(retries) != 1 || !strings.Contains(retries[0], "openai: HTTP 429 after 1 attempt") || calls.Load() != 2 {
		t.Fatalf("retries seen = %v after %d requests", retries, calls.Load())
	}
	if reads.Load() == 0 {
		t.Fatal("the key was never read from the Secret")
	}
}

// The builder's reply limit reaches the provider: a reply past it ends
// the run ToolFailure with a reason that names the limit, after one
// request, since the engine does not retry it.
func TestBuild_aReplyPastTheLimitEndsTheRun(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"` +
			strings.Repeat("a", 2<<10) + `"}}]}`))
	}))
	defer srv.Close()
	run := openAIRun(srv.URL)
	b := &Builder{
		Secrets:       func(context.Context, string, string, string) (string, error) { return "sk-test", nil },
		MaxReplyBytes: 1 << 10,
	}
	k, err := b.Build(context.Background(), run, egress.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	s := &loop.State{}
	(&loop.Runner{Engine: k.Engine, Model: k.Model, Tools: k.Tools}).Run(context.Background(), s)
	want := "the model provider failed: openai: the reply is larger than 1 KiB, the operator's limit for a model reply (--model-max-reply-bytes); it was not read"
	if s.Outcome != loop.ToolFailure || s.Reason != want {
		t.Errorf("outcome %s, reason %q; want ToolFailure, %q", s.Outcome, s.Reason, want)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the server saw %d requests, want 1", n)
	}
}

func TestBuild_anthropicPricesCacheWritesAboveInput(t *testing.T) {
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "d"}, Spec: v1alpha1.AgentRunSpec{
		AgentSpec: v1alpha1.AgentSpec{
			Goal: "g", Budget: v1alpha1.BudgetSpec{MaxTurns: 2, MaxCostUSD: "1"},
			Model: v1alpha1.ModelSpec{
				ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderAnthropic, Name: "claude", APIKeySecretRef: &v1alpha1.SecretKeySelector{Name: "a", Key: "k"}, Pricing: &v1alpha1.ModelPricing{Input: "3", Output: "15"}},
			},
		},
	}}
	k, err := (&Builder{}).Build(context.Background(), run, egress.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Engine.Config().Model.Pricing.CacheWrite; got != loop.MustMoney("3.75") {
		t.Fatalf("cache write rate = %s, want 3.75", got)
	}
}

var _ = runtime.RawExtension{}

// An MCP server that redirects elsewhere does not get its tool's Secret
// header sent there; one that echoes the header back has it redacted from
// the tool's result.
func TestBuild_mcpSecretHeadersStayWithTheirServerAndEchoesAreRedacted(t *testing.T) {
	const token = "Bearer mcp-0123456789abcdef"
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			elsewhere.Add(1)
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	defer other.Close()
	s := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami"},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			auth := req.Extra.Header.Get("Authorization")
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "you sent " + auth}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, other.URL+"/mcp", http.StatusTemporaryRedirect)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	manifest := func(path string) *v1alpha1.AgentRun {
		return parse(t, `
metadata: {name: r}
spec:
  goal: Ask.
  model: {provider: scripted, script: [{content: x}]}
  budget: {maxTurns: 3}
  tools:
  - name: whoami
    mcp:
      url: `+srv.URL+path+`
      tool: whoami
      headers: [{name: Authorization, valueFrom: {secretKeyRef: {name: mcp, key: token}}}]
`)
	}
	secrets := func(context.Context, string, string, string) (string, error) { return token, nil }

	_, err := (&Builder{Secrets: secrets}).Build(context.Background(), manifest("/moved"), egress.Grant{})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "another origin") {
		t.Errorf("a cross-origin redirect: err = %v, want the tool unavailable, naming the redirect", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the header reached the other server %d times", n)
	}

	k, err := (&Builder{Secrets: secrets}).Build(context.Background(), manifest("/mcp"), egress.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	res := k.Tools.Execute(context.Background(), loop.Invocation{CallID: "t1-c1", Tool: "whoami", Arguments: json.RawMessage(`{}`),
		Timeout: 10 * time.Second, MaxResultBytes: 4096})
	if res.Failure != nil || string(res.Output) != "you sent [redacted]" {
		t.Errorf("result = %q (failure %+v), want the echoed token redacted", res.Output, res.Failure)
	}
}

func TestConfig_strategyAndPlan(t *testing.T) {
	manifest := `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: r}
spec:
  goal: Find out.
  model: {provider: scripted}
  budget: {maxTurns: 3}
%s`
	cfg, err := Config(&parse(t, fmt.Sprintf(manifest, "  strategy: planExecute\n  plan: {maxSteps: 4, maxReplans: 0}\n")).Spec)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Strategy != loop.PlanExecute || cfg.Plan.MaxSteps != 4 || cfg.Plan.MaxReplans == nil || *cfg.Plan.MaxReplans != 0 {
		t.Fatalf("strategy %q, plan %+v", cfg.Strategy, cfg.Plan)
	}
	// Left out, the plan takes the engine's defaults; react is the default strategy.
	cfg, err = Config(&parse(t, fmt.Sprintf(manifest, "")).Spec)
	if err != nil {
		t.Fatal(err)
	}
	if n := cfg.Normalize(); n.Plan.MaxSteps != loop.DefaultPlanMaxSteps || *n.Plan.MaxReplans != loop.DefaultMaxReplans {
		t.Fatalf("defaults: %+v", n.Plan)
	}
	if _, err := Config(&parse(t, fmt.Sprintf(manifest, "  plan: {maxSteps: 4}\n")).Spec); err == nil ||
		!strings.Contains(err.Error(), "spec.plan applies only to strategy planExecute") {
		t.Fatalf("a plan without planExecute: %v", err)
	}
}

// openAIRun is a two-turn run of the OpenAI provider against baseURL, its
// key in the Secret openai.
func openAIRun(baseURL string) *v1alpha1.AgentRun {
	return &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "team-a"}, Spec: v1alpha1.AgentRunSpec{
		AgentSpec: v1alpha1.AgentSpec{
			Goal: "Say hello.", Budget: v1alpha1.BudgetSpec{MaxTurns: 2, MaxCostUSD: "1"},
			Model: v1alpha1.ModelSpec{
				ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "m", BaseURL: baseURL, APIKeySecretRef: &v1alpha1.SecretKeySelector{Name: "openai", Key: "api-key"}},
				Retry:         &v1alpha1.ModelRetry{InitialBackoff: &metav1.Duration{Duration: 10 * time.Millisecond}},
			},
		},
	}}
}

// Issue 47 item 1: each of model.fallbacks is a model of its own (its
// provider, name, endpoint, key and prices, its adapter's billing) called
// with the model's call settings.
func TestBuild_fallbacksAreModelsOfTheirOwn(t *testing.T) {
	run := parse(t, `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: r}
spec:
  goal: g
  budget: {maxTurns: 2, maxCostUSD: "1"}
  model:
    provider: openai
    name: gpt-x
    baseURL: http://127.0.0.1:1/v1
    timeout: 30s
    retry: {maxAttempts: 2}
    pricing: {input: "1", output: "2"}
    fallbacks:
    - provider: anthropic
      name: claude
      apiKeySecretRef: {name: a, key: k}
      pricing: {input: "3", output: "15"}
    - provider: openai
      name: local
      baseURL: http://127.0.0.1:2/v1
`)
	k, err := (&Builder{}).Build(context.Background(), run, egress.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Fallbacks) != 2 || k.ModelAt(0) != k.Model || k.ModelAt(1) != k.Fallbacks[0] || k.ModelAt(2) != k.Fallbacks[1] {
		t.Fatalf("fallbacks %v", k.Fallbacks)
	}
	cfg := k.Engine.Config()
	type model struct {
		Provider, Name      string
		Input, Output, CW   string
		Timeout             time.Duration
		Attempts, MaxOutput int
	}
	var got []model
	for _, m := range cfg.Fallbacks {
		got = append(got, model{m.Provider, m.Name, m.Pricing.Input.String(), m.Pricing.Output.String(), m.Pricing.CacheWrite.String(),
			m.Timeout, m.Retry.MaxAttempts, int(m.MaxOutputTokens)})
	}
	want := []model{
		{"anthropic", "claude", "3.0000", "15.0000", "3.7500", 30 * time.Second, 2, 4096},
		{"openai", "local", "0.0000", "0.0000", "0.0000", 30 * time.Second, 2, 4096},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("fallbacks' configuration (-want +got):\n%s", diff)
	}
	run.Spec.Model.Fallbacks[1].Pricing = &v1alpha1.ModelPricing{Input: "1e3"}
	if _, err := Config(&run.Spec); err == nil || !strings.Contains(err.Error(), "model.fallbacks[1].pricing.input") {
		t.Fatalf("err = %v; want one naming model.fallbacks[1].pricing.input", err)
	}
}

// A run with spec.memory needs the archive's PostgreSQL: without it the
// build refuses, saying how to configure one; with it, memory.remember is
// mutating whatever the manifest declares, and both tools get their
// schemas.
func TestBuild_memoryToolsNeedAStoreAndRememberMutates(t *testing.T) {
	run := parse(t, `
metadata: {name: r}
spec:
  goal: Remember.
  model: {provider: scripted, script: [{content: x}]}
  budget: {maxTurns: 3}
  memory: {name: notes}
  tools:
  - {name: remember, builtin: memory.remember, mutates: false}
  - {name: recall, builtin: memory.recall}
`)
	_, err := (&Builder{}).Build(context.Background(), run, egress.Grant{})
	if err == nil || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "--archive-postgres-dsn") {
		t.Fatalf("err = %v; want a configuration error naming --archive-postgres-dsn", err)
	}
	k, err := (&Builder{Memory: nopMemory{}}).Build(context.Background(), run, egress.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	tools := k.Engine.Config().Tools
	if len(tools) != 2 || !tools[0].Mutates || tools[0].Repeatable || tools[1].Mutates {
		t.Errorf("tools %+v: want remember mutating (and not repeatable), recall read-only", tools)
	}
	for _, ts := range tools {
		if ts.Description == "" || len(ts.Parameters) == 0 {
			t.Errorf("tool %s has no default description or parameters", ts.Name)
		}
	}
}

// nopMemory is a memory store that keeps nothing.
type nopMemory struct{}

func (nopMemory) Remember(context.Context, archive.Entry, int) (bool, error) { return false, nil }
func (nopMemory) Recall(context.Context, string, string, string, time.Time, int) ([]archive.Entry, error) {
	return nil, nil
}
