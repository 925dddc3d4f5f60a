// Package crd_test checks the AgentRun CustomResourceDefinition against a
// real API server (envtest): the manifests people write are accepted, the
// mistakes they make are rejected with a message they understand, and
// defaults are applied.
package crd_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	agentsv1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/localrun"
	"github.com/agentrun/agentrun/internal/testenv"
)

// repoRoot is where this package sits relative to the module root.
const repoRoot = "../.."

// probeNamespace is where the suite checks, before the tests, that the
// run-spec admission policy is enforced. Each test creates its objects in
// a namespace of its own (testContext), so that the tests run again under
// go test -count.
const probeNamespace = "default"

var (
	k8sClient client.Client
	restCfg   *rest.Config
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(_ *envtest.Environment, cfg *rest.Config) (func() error, error) {
		restCfg = cfg
		var err error
		k8sClient, err = client.New(cfg, client.Options{Scheme: testenv.Scheme})
		if err != nil {
			return nil, err
		}
		// The chart installs the policy that keeps a run's spec: the
		// tests of what may change after creation run against it.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return nil, testenv.EnforceRunSpec(ctx, k8sClient, probeNamespace)
	}))
}

// create submits a manifest as written, so that fields the Go types would
// drop or fill in reach the API server exactly as a person typed them.
func create(ctx context.Context, manifest string) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &obj.Object); err != nil {
		return nil, fmt.Errorf("the test's manifest is not YAML: %w", err)
	}
	obj.SetNamespace(namespaceOf(ctx))
	return obj, k8sClient.Create(ctx, obj)
}

// replace submits an edited manifest over an existing object, as
// `kubectl replace` does.
func replace(ctx context.Context, manifest string) error {
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &obj.Object); err != nil {
		return fmt.Errorf("the test's manifest is not YAML: %w", err)
	}
	obj.SetNamespace(namespaceOf(ctx))
	current := &unstructured.Unstructured{}
	current.SetGroupVersionKind(obj.GroupVersionKind())
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), current); err != nil {
		return err
	}
	obj.SetResourceVersion(current.GetResourceVersion())
	return k8sClient.Update(ctx, obj)
}

// testContext is a test's context: bounded, and naming a namespace of the
// test's own, where create, replace and columns act.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return context.WithValue(ctx, namespaceKey{}, testenv.Namespace(t, k8sClient))
}

type namespaceKey struct{}

// namespaceOf is the namespace of a test's context.
func namespaceOf(ctx context.Context) string { return ctx.Value(namespaceKey{}).(string) }

// newLocalChecker is agentrun local's check of a run, built once for a
// test's cases (it compiles the CRD).
func newLocalChecker(t *testing.T) *localrun.Checker {
	t.Helper()
	c, err := localrun.NewChecker()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCreate_acceptsValidManifests(t *testing.T) {
	local := newLocalChecker(t)
	cases := []struct {
		name     string
		manifest string
	}{
		{
			name: "CA bundles for the model, an HTTP tool and an MCP tool",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: ca-bundles
spec:
  goal: Refund the duplicate charge.
  model:
    provider: openai
    name: gpt-5.1
    baseURL: https://llm.internal.example/v1
    apiKeySecretRef: {name: openai, key: api-key}
    caBundleRef: {configMapKeyRef: {name: company-ca, key: ca.crt}}
  budget: {maxTurns: 3, maxCostUSD: "1.00"}
  tools:
  - name: find_invoices
    http:
      url: https://billing.internal.example/invoices
      caBundleRef: {secretKeyRef: {name: billing-ca, key: ca.crt}}
  - name: refund
    mcp:
      url: https://mcp.internal.example/mcp
      tool: refund
      caBundleRef: {configMapKeyRef: {name: company-ca, key: ca.crt}}
`,
		},
		{
			name: "retry policies for the model and the tools",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: retries
spec:
  goal: Refund the duplicate charge.
  model:
    provider: scripted
    retry: {maxAttempts: 8, initialBackoff: 500ms, maxBackoff: 2m}
    script:
    - error: "upstream 503"
      transient: true
    - content: Done.
  budget: {maxTurns: 3}
  tools:
  - name: find_invoices
    retry: {maxAttempts: 1}
    http: {url: "http://billing.default.svc/invoices"}
  - name: issue_refund
    mutates: true
    retry: {maxAttempts: 4, initialBackoff: 1s, maxBackoff: 1s, mutatingSafe: true}
    http: {url: "http://billing.default.svc/refunds", method: POST}
`,
		},
		{
			name: "an agent tool",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: agent-tool
spec:
  goal: Triage the ticket.
  model: {provider: scripted, script: [{content: Done.}]}
  budget: {maxTurns: 3}
  tools:
  - name: investigate
    agent:
      templateRef: {name: refund-investigator}
      parameters: [{name: ticket, value: "T-$(args.ticket)"}]
      budget: {maxTurns: 5, maxTokens: 20000, maxWallClock: 5m, maxCostUSD: "0.50", maxToolCalls: 10}
      maxDepth: 2
`,
		},
		{
			name: "the smallest scripted run",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: hello
spec:
  goal: Say hello.
  model:
    provider: scripted
    script:
    - content: Hello.
  budget:
    maxTurns: 1
`,
		},
		{
			name: "loop windows that fit threshold x maxPeriod, or are left to default to it",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: loop-windows
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 1}
  loopDetection: {threshold: 5, window: 10, maxPeriod: 2}
`,
		},
		{
			name: "a threshold with the window left to its default",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: loop-window-default
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 1}
  loopDetection: {threshold: 5}
`,
		},
		{
			name: "the billing example of the API contract",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: explain-double-charge
spec:
  goal: "The customer says they were charged twice in August. Find out what happened."
  instructions: "You are a billing assistant."
  model:
    provider: openai
    name: gpt-5.1
    baseURL: http://vllm.ai:8000/v1
    apiKeySecretRef: {name: openai, key: api-key}
    maxOutputTokens: 4096
    timeout: 60s
    pricing: {input: "3", output: "15", cachedInput: "0.3"}
  budget:
    maxTurns: 12
    maxTokens: 60000
    maxWallClock: 90s
    maxCostUSD: "1.00"
    maxToolCalls: 50
    perTool: {identify_account: 6, issue_refund: 1}
    defaultToolLimit: 3
    soft: [tokens]
  loopDetection:
    threshold: 3
    window: 9
    maxPeriod: 3
    ignoreArguments: [request_id]
  tools:
  - name: identify_account
    description: "Look up an account id by e-mail."
    parameters: {type: object, properties: {email: {type: string}}, required: [email]}
    mutates: false
    reversible: true
    maxCostUSD: "0.01"
    timeout: 30s
    maxResultBytes: 16384
    http: {url: "http://billing.default.svc/accounts?email={{.email}}", method: GET}
  - name: issue_refund
    description: "Refund an invoice."
    mutates: true
    reversible: false
    job: {image: "ghcr.io/acme/billing-tools:1.4", command: [refund], args: [], env: [], resources: {}}
  - name: lookup_account
    mcp: {url: "http://mcp-billing:8080/mcp", tool: lookup_account}
  - name: pod_events
    builtin: kubernetes.events
  policy:
    default: allow
    rules:
    - tools: [issue_refund]
      when: "args.amount_minor > 5000"
      decision: ask
      reason: "Refunds above 50.00 need a person."
    grants: [issue_refund]
  guardrails:
  - name: no-card-numbers
    tools: ["*"]
    pattern: "\\b\\d{13,19}\\b"
    severity: block
    reason: "Card numbers must not leave the cluster."
  approvalTimeout: 1h
  serviceAccountName: billing-agent
  cancel: false
`,
		},
		{
			name: "an anthropic run with a header read from a Secret",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: triage
spec:
  goal: Triage the open incidents.
  model:
    provider: anthropic
    name: claude-sonnet-4-5
    apiKeySecretRef: {name: anthropic, key: api-key}
  budget:
    maxTurns: 8
    maxCostUSD: "0.25"
  tools:
  - name: list_incidents
    http:
      url: https://incidents.example/api/open
      headers:
      - name: Authorization
        valueFrom:
          secretKeyRef: {name: incidents, key: token}
      - name: Accept
        value: application/json
  policy:
    default: ask
    rules:
    - tools: ["*"]
      decision: allow
`,
		},
		{
			name: "a job tool with a Secret in its env and a placed pod",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: job-pod
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    job:
      image: busybox
      command: [lookup]
      env:
      - name: TOKEN
        valueFrom: {secretKeyRef: {name: lookup, key: token}}
      - name: MODE
        value: fast
      pod:
        nodeSelector: {pool: tools}
        tolerations: [{key: dedicated, operator: Equal, value: tools, effect: NoSchedule}]
        labels: {team: billing, app.kubernetes.io/name: lookup}
        annotations: {owner: billing@example.com}
        resources: {limits: {memory: 256Mi}}
        runtimeClassName: gvisor
`,
		},
		{
			name: "a script that exercises every reply form",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: every-reply-form
spec:
  goal: Exercise the scripted model.
  model:
    provider: scripted
    script:
    - toolCalls:
      - name: search_docs
        arguments: {query: refunds, page: 1, filters: {lang: [en, fr]}}
      usage: {inputTokens: 1600, outputTokens: 40, cachedInputTokens: 1000}
      delay: 500ms
    - error: "upstream 503"
    - refusal: "I cannot help with that."
    - content: "A partial answ"
      truncated: true
  budget:
    maxTurns: 4
  tools:
  - name: search_docs
    builtin: kubernetes.list
`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := create(testContext(t), tc.manifest); err != nil {
				t.Fatalf("The API server rejected a valid manifest: %v", err)
			}
			if _, err := local.CheckRun([]byte(tc.manifest)); err != nil {
				t.Errorf("agentrun local refuses a manifest the API server accepts: %v", err)
			}
		})
	}
}

func TestCreate_rejectsInvalidManifests(t *testing.T) {
	local := newLocalChecker(t)
	cases := []struct {
		name     string
		manifest string
		// wantErr are parts of the error message a person should see.
		wantErr []string
	}{
		{
			name: "a follow-up of a name no run can have",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: follow-up-bad-name
spec:
  goal: And now?
  continueFrom: {name: Earlier_Run}
  model:
    provider: scripted
    script: [{content: Hi.}]
  budget: {maxTurns: 1}
`,
			wantErr: []string{"spec.continueFrom.name", "continueFrom.name must be the name of an AgentRun"},
		},
		{
			name: "a tool retry of zero attempts",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: retry-zero-attempts
spec:
  goal: Look it up.
  model:
    provider: scripted
    script: [{content: Hi.}]
  budget: {maxTurns: 1}
  tools:
  - name: lookup
    retry: {maxAttempts: 0}
    http: {url: "http://billing.default.svc/"}
`,
			wantErr: []string{"spec.tools[0].retry.maxAttempts", "should be greater than or equal to 1"},
		},
		{
			name: "a tool retry of too many attempts",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: retry-many-attempts
spec:
  goal: Look it up.
  model:
    provider: scripted
    script: [{content: Hi.}]
  budget: {maxTurns: 1}
  tools:
  - name: lookup
    retry: {maxAttempts: 11}
    http: {url: "http://billing.default.svc/"}
`,
			wantErr: []string{"spec.tools[0].retry.maxAttempts", "should be less than or equal to 10"},
		},
		{
			name: "a tool retry backoff that is not a duration",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: retry-bad-backoff
spec:
  goal: Look it up.
  model:
    provider: scripted
    script: [{content: Hi.}]
  budget: {maxTurns: 1}
  tools:
  - name: lookup
    retry: {initialBackoff: soon}
    http: {url: "http://billing.default.svc/"}
`,
			wantErr: []string{"retry.initialBackoff must be a positive duration of at most 10m"},
		},
		{
			name: "a tool retry whose cap is below its start",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: retry-cap-below-start
spec:
  goal: Look it up.
  model:
    provider: scripted
    script: [{content: Hi.}]
  budget: {maxTurns: 1}
  tools:
  - name: lookup
    retry: {initialBackoff: 10s, maxBackoff: 2s}
    http: {url: "http://billing.default.svc/"}
`,
			wantErr: []string{"retry.maxBackoff must not be shorter than retry.initialBackoff"},
		},
		{
			name: "a model retry of zero attempts",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: model-retry-zero
spec:
  goal: Look it up.
  model:
    provider: scripted
    retry: {maxAttempts: 0}
    script: [{content: Hi.}]
  budget: {maxTurns: 1}
  tools:
  - name: lookup
    http: {url: "http://billing.default.svc/"}
`,
			wantErr: []string{"spec.model.retry.maxAttempts", "should be greater than or equal to 1"},
		},
		{
			name: "a model retry backoff over an hour",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: model-retry-long
spec:
  goal: Look it up.
  model:
    provider: scripted
    retry: {maxBackoff: 2h}
    script: [{content: Hi.}]
  budget: {maxTurns: 1}
  tools:
  - name: lookup
    http: {url: "http://billing.default.svc/"}
`,
			wantErr: []string{"model.retry.maxBackoff must be a positive duration of at most 1h"},
		},
		{
			name: "transient without an error",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: transient-without-error
spec:
  goal: Look it up.
  model:
    provider: scripted
    script: [{content: Hi., transient: true}]
  budget: {maxTurns: 1}
`,
			wantErr: []string{"transient only qualifies an error: set error too, or remove transient"},
		},
		{
			name: "an empty goal",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: empty-goal
spec:
  goal: ""
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 1}
`,
			wantErr: []string{"spec.goal", "goal must not be empty: say what the agent should achieve"},
		},
		{
			name: "a goal of blanks",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: blank-goal
spec:
  goal: "   "
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 1}
`,
			wantErr: []string{"goal must not be empty"},
		},
		{
			name: "zero turns",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: zero-turns
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 0}
`,
			wantErr: []string{"spec.budget.maxTurns", "budget.maxTurns must be at least 1"},
		},
		{
			name: "no budget at all",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: no-budget
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}]}
`,
			wantErr: []string{"spec.budget: Required value"},
		},
		{
			name: "a tool with no executor",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: tool-without-executor
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    description: Looks things up, somehow.
`,
			wantErr: []string{"tool lookup has no executor: set exactly one of http, job, mcp, builtin or agent"},
		},
		{
			name: "a tool with two executors",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: tool-with-two-executors
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    http: {url: "http://lookup.default.svc/"}
    builtin: kubernetes.get
`,
			wantErr: []string{"tool lookup sets more than one executor: set only one of http, job, mcp, builtin or agent"},
		},
		{
			name: "an agent tool with a second executor",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: agent-tool-with-two-executors
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    agent: {templateRef: {name: investigator}}
    builtin: kubernetes.get
`,
			wantErr: []string{"tool lookup sets more than one executor: set only one of http, job, mcp, builtin or agent"},
		},
		{
			name: "an agent tool's bad budget and depth",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: agent-tool-bad-budget
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    agent: {templateRef: {name: investigator}, budget: {maxWallClock: "-1s", maxTurns: 0}, maxDepth: 11}
`,
			wantErr: []string{"agent.budget.maxWallClock must be a positive duration such as 90s or 15m", "maxTurns", "maxDepth"},
		},
		{
			name: "two tools with the same name",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: duplicate-tools
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    builtin: kubernetes.get
  - name: lookup
    builtin: kubernetes.list
`,
			wantErr: []string{"tool names must be unique: lookup is declared more than once"},
		},
		{
			name: "a tool name a model provider would refuse",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: bad-tool-name
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: look up
    builtin: kubernetes.get
`,
			wantErr: []string{"tool names use only letters, digits, _ and -, 1 to 64 characters"},
		},
		{
			name: "a per-tool limit for an undeclared tool",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: pertool-undeclared
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget:
    maxTurns: 3
    perTool: {lookup: 2, issue_refund: 1}
  tools:
  - name: lookup
    builtin: kubernetes.get
`,
			wantErr: []string{"budget.perTool names a tool that is not declared in spec.tools: issue_refund"},
		},
		{
			name: "a policy rule for an undeclared tool",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: rule-undeclared
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    builtin: kubernetes.get
  policy:
    rules:
    - tools: [lookup, issue_refund]
      decision: ask
`,
			wantErr: []string{"spec.policy.rules", `policy.rules name a tool that is not declared in spec.tools ("*" means every tool)`},
		},
		{
			name: "approvals on a rule that does not ask",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: rule-approvals
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    builtin: kubernetes.get
  policy:
    rules:
    - tools: [lookup]
      decision: allow
      approvals: 2
`,
			wantErr: []string{"approvals counts the people who must approve a call the rule asks about: set it only with decision ask"},
		},
		{
			name: "more approvers than a rule may ask for",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: rule-approvals-many
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    builtin: kubernetes.get
  policy:
    rules:
    - tools: [lookup]
      decision: ask
      approvals: 11
`,
			wantErr: []string{"spec.policy.rules[0].approvals", "should be less than or equal to 10"},
		},
		{
			name: "a grant for an undeclared tool",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: grant-undeclared
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    builtin: kubernetes.get
  policy:
    grants: [delete_everything]
`,
			wantErr: []string{"policy.grants names a tool not declared in spec.tools (no wildcards here): delete_everything"},
		},
		{
			name: "a wildcard grant",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: grant-wildcard
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    builtin: kubernetes.get
  policy:
    grants: ["*"]
`,
			wantErr: []string{"(no wildcards here): *"},
		},
		{
			name: "a guardrail for an undeclared tool",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: guardrail-undeclared
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    builtin: kubernetes.get
  guardrails:
  - name: no-card-numbers
    tools: [send_email]
    pattern: "\\d{13,19}"
`,
			wantErr: []string{"spec.guardrails", `guardrails name a tool that is not declared in spec.tools ("*" means every tool)`},
		},
		{
			name: "a scripted model without a script",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: scripted-without-script
spec:
  goal: Say hello.
  model: {provider: scripted}
  budget: {maxTurns: 1}
`,
			wantErr: []string{"provider scripted needs model.script: one entry per model call, in order"},
		},
		{
			name: "a script for a real model",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: script-for-openai
spec:
  goal: Say hello.
  model:
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    script: [{content: Hi.}]
  budget: {maxTurns: 1, maxCostUSD: "0.10"}
`,
			wantErr: []string{"model.script is only read by provider scripted"},
		},
		{
			name: "a CA bundle in both a ConfigMap and a Secret",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: ca-bundle-both
spec:
  goal: Say hello.
  model:
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    caBundleRef:
      configMapKeyRef: {name: company-ca, key: ca.crt}
      secretKeyRef: {name: company-ca, key: ca.crt}
  budget: {maxTurns: 1, maxCostUSD: "0.10"}
`,
			wantErr: []string{"caBundleRef names exactly one of configMapKeyRef or secretKeyRef"},
		},
		{
			name: "an MCP tool's CA bundle that names nothing",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: ca-bundle-none
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 1, maxCostUSD: "0.10"}
  tools:
  - name: billing
    mcp: {url: "https://mcp.example:8443/mcp", tool: billing, caBundleRef: {}}
`,
			wantErr: []string{"caBundleRef names exactly one of configMapKeyRef or secretKeyRef"},
		},
		{
			name: "a CA bundle for the scripted model",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: ca-bundle-scripted
spec:
  goal: Say hello.
  model:
    provider: scripted
    script: [{content: Hi.}]
    caBundleRef: {configMapKeyRef: {name: company-ca, key: ca.crt}}
  budget: {maxTurns: 1, maxCostUSD: "0.10"}
`,
			wantErr: []string{"model.caBundleRef is only read by a real model provider"},
		},
		{
			name: "openai without an API key",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: openai-without-key
spec:
  goal: Say hello.
  model: {provider: openai, name: gpt-5.1}
  budget: {maxTurns: 1, maxCostUSD: "0.10"}
`,
			wantErr: []string{"model.apiKeySecretRef is required with provider openai unless model.baseURL names a server that needs no key"},
		},
		{
			name: "anthropic without a model name",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: anthropic-without-name
spec:
  goal: Say hello.
  model:
    provider: anthropic
    apiKeySecretRef: {name: anthropic, key: api-key}
  budget: {maxTurns: 1, maxCostUSD: "0.10"}
`,
			wantErr: []string{"model.name is required with provider anthropic"},
		},
		{
			name: "a real model without a cost ceiling",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: openai-without-cost-ceiling
spec:
  goal: Say hello.
  model:
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
  budget: {maxTurns: 1}
`,
			wantErr: []string{`budget.maxCostUSD is required with provider openai: set the most this run may spend, for example "1.00"`},
		},
		{
			name: "an unknown provider",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: unknown-provider
spec:
  goal: Say hello.
  model: {provider: mistral, name: mistral-large, apiKeySecretRef: {name: g, key: k}}
  budget: {maxTurns: 1, maxCostUSD: "1"}
`,
			wantErr: []string{"spec.model.provider", `Unsupported value: "mistral"`},
		},
		{
			name: "money written as a float with an exponent",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: money-exponent
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 1, maxCostUSD: "1e3"}
`,
			wantErr: []string{"spec.budget.maxCostUSD", "must be an amount of US dollars written as a decimal string"},
		},
		{
			name: "a negative price",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: negative-price
spec:
  goal: Say hello.
  model:
    provider: scripted
    script: [{content: Hi.}]
    pricing: {input: "-3", output: "15"}
  budget: {maxTurns: 1}
`,
			wantErr: []string{"spec.model.pricing.input", "must be an amount of US dollars"},
		},
		{
			name: "a tool cost with a currency sign and too many decimals",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: tool-cost-malformed
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    maxCostUSD: "$0.0000000000001"
    builtin: kubernetes.get
`,
			wantErr: []string{"spec.tools[0].maxCostUSD", "must be an amount of US dollars"},
		},
		{
			name: "a tool timeout without a unit",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: timeout-without-unit
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    timeout: "30"
    builtin: kubernetes.get
`,
			wantErr: []string{"tool timeout must be a positive duration such as 30s or 5m"},
		},
		{
			name: "a zero model timeout",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: zero-model-timeout
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}], timeout: 0s}
  budget: {maxTurns: 1}
`,
			wantErr: []string{"model.timeout must be a positive duration"},
		},
		{
			name: "a wall clock in days",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: wallclock-in-days
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 1, maxWallClock: 1d}
`,
			wantErr: []string{"budget.maxWallClock must be a positive duration such as 90s or 15m"},
		},
		{
			name: "a loop window smaller than its threshold",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: window-below-threshold
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 1}
  loopDetection: {threshold: 5, window: 4}
`,
			wantErr: []string{"loopDetection.window must be at least threshold x maxPeriod"},
		},
		{
			// Issue 9, item 6: this window never saw an A,B cycle reach
			// depth 3, and the run ended BudgetExhausted.
			name: "a loop window too small for a cycle to repeat threshold times",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: window-below-cycle
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 1}
  loopDetection: {threshold: 3, window: 3}
`,
			wantErr: []string{"loopDetection.window must be at least threshold x maxPeriod, as this manifest sets them (each is 3 when unset), so that a cycle of maxPeriod calls can repeat threshold times inside it"},
		},
		{
			name: "a loop window too small for a period-two cycle",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: window-below-period-two
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 1}
  loopDetection: {threshold: 5, window: 9, maxPeriod: 2}
`,
			wantErr: []string{"loopDetection.window must be at least threshold x maxPeriod"},
		},
		{
			name: "a header with both a value and a Secret",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: header-value-and-secret
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    http:
      url: https://lookup.example/
      headers:
      - name: Authorization
        value: Bearer abc
        valueFrom: {secretKeyRef: {name: lookup, key: token}}
`,
			wantErr: []string{"a header sets value or valueFrom, not both"},
		},
		{
			name: "an http tool with a URL that is not http",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: http-not-http
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    http: {url: "file:///etc/passwd"}
`,
			wantErr: []string{"http.url must start with http:// or https://"},
		},
		{
			name: "an HTTP method tools cannot use",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: http-head
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    http: {url: "http://lookup.default.svc/", method: HEAD}
`,
			wantErr: []string{"spec.tools[0].http.method", `Unsupported value: "HEAD"`},
		},
		{
			name: "a job tool that overrides the tool process contract",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: job-reserved-env
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    job:
      image: busybox
      command: [lookup]
      env: [{name: AGENTRUN_TOOL_ARGS, value: "{}"}]
`,
			wantErr: []string{"env names starting with AGENTRUN_ are reserved"},
		},
		{
			name: "a job env var with both a value and a Secret",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: job-env-both
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    job:
      image: busybox
      command: [lookup]
      env: [{name: TOKEN, value: x, valueFrom: {secretKeyRef: {name: lookup, key: token}}}]
`,
			wantErr: []string{"an env var sets value or valueFrom, not both"},
		},
		{
			name: "a job pod label the operator owns",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: job-pod-label
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    job:
      image: busybox
      command: [lookup]
      pod: {labels: {agents.agentrun.dev/run-uid: someone-else}}
`,
			wantErr: []string{"pod.labels may not use the agentrun.dev prefixes"},
		},
		{
			name: "a job pod AppArmor annotation",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: job-pod-apparmor
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    job:
      image: busybox
      command: [lookup]
      pod: {annotations: {container.apparmor.security.beta.kubernetes.io/tool: unconfined}}
`,
			wantErr: []string{"nor the AppArmor and seccomp annotations"},
		},
		{
			name: "job resources set twice",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: job-resources-twice
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    job:
      image: busybox
      command: [lookup]
      resources: {limits: {cpu: "1"}}
      pod: {resources: {limits: {cpu: "2"}}}
`,
			wantErr: []string{"set job.resources or job.pod.resources, not both"},
		},
		{
			name: "a job tool without a command",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: job-no-command
spec:
  goal: Look something up.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    job: {image: busybox}
`,
			wantErr: []string{"spec.tools[0].job.command: Required value"},
		},
		{
			name: "a script entry that both answers and fails",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: script-answer-and-error
spec:
  goal: Say hello.
  model:
    provider: scripted
    script:
    - content: Hi.
      error: "upstream 503"
  budget: {maxTurns: 1}
`,
			wantErr: []string{"a script entry is one reply: content and/or toolCalls, or refusal, or error"},
		},
		{
			name: "a base URL that is not a URL",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: baseurl-not-url
spec:
  goal: Say hello.
  model:
    provider: openai
    name: llama3
    baseURL: "vllm.ai:8000"
    apiKeySecretRef: {name: vllm, key: api-key}
  budget: {maxTurns: 1, maxCostUSD: "0"}
`,
			wantErr: []string{"model.baseURL must be an http:// or https:// URL"},
		},
		{
			name: "an unknown soft ceiling",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: unknown-soft-ceiling
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 1, soft: [money]}
`,
			wantErr: []string{"spec.budget.soft[0]", `Unsupported value: "money"`},
		},
		{
			name: "an empty escalation owner",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: escalation-owner-empty
spec:
  goal: Say hello.
  model: {provider: scripted, script: [{content: Hi.}]}
  budget: {maxTurns: 1}
  escalation: {owner: ""}
`,
			wantErr: []string{"spec.escalation.owner", "should be at least 1 chars long"},
		},
		{
			name: "a run made from a template naming its escalation owner",
			manifest: `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: escalation-owner-templated
spec:
  templateRef: {name: refund-investigator}
  escalation: {owner: payments-oncall}
`,
			wantErr: []string{"spec.escalation", "takes escalation from the template"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := create(testContext(t), tc.manifest)
			if err == nil {
				t.Fatalf("The API server accepted an invalid manifest; want an error containing %q", tc.wantErr)
			}
			t.Logf("Rejected as expected: %v", err)
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("The error does not say %q:\n%v", want, err)
				}
			}
			// agentrun local checks with the same CRD, so it refuses the
			// same manifest with the same words.
			if _, err := local.CheckRun([]byte(tc.manifest)); err == nil {
				t.Errorf("agentrun local accepts a manifest the API server refuses")
			} else {
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("agentrun local's error does not say %q:\n%v", want, err)
					}
				}
			}
		})
	}
}

// runToEdit is the manifest the update cases start from; %s is its name.
const runToEdit = namedRun + `  goal: Find the failing pod.
  model:
    provider: scripted
    script:
    - toolCalls:
      - name: pod_events
        arguments: {pod: web-0, limit: 20}
    - content: It is web-0.
  budget:
    maxTurns: 3
  tools:
  - name: pod_events
    parameters: {type: object, properties: {pod: {type: string}, limit: {type: integer}}}
    builtin: kubernetes.events
`

func TestUpdate_onlyCancelMayChange(t *testing.T) {
	cases := []struct {
		name string
		// patches are JSON merge patches (kubectl patch --type=merge)
		// applied one after the other; wantErr is for the last one.
		patches []string
		wantErr string
	}{
		{
			name:    "setting cancel to true is allowed",
			patches: []string{`{"spec": {"cancel": true}}`},
		},
		{
			name:    "annotating an approval is allowed",
			patches: []string{`{"metadata": {"annotations": {"approval.agents.agentrun.dev/t1-c1": "approve"}}}`},
		},
		{
			name:    "changing the goal is rejected",
			patches: []string{`{"spec": {"goal": "Find the failing node."}}`},
			wantErr: "the spec of an AgentRun cannot change once created, but for spec.cancel (to true) and spec.ttlSecondsAfterFinished",
		},
		{
			name:    "adding instructions is rejected",
			patches: []string{`{"spec": {"instructions": "Be brief."}}`},
			wantErr: "the spec of an AgentRun cannot change once created",
		},
		{
			name:    "removing the tools is rejected",
			patches: []string{`{"spec": {"tools": null}}`},
			wantErr: "the spec of an AgentRun cannot change once created",
		},
		{
			name:    "raising a ceiling is rejected",
			patches: []string{`{"spec": {"budget": {"maxTurns": 30}}}`},
			wantErr: "the spec of an AgentRun cannot change once created",
		},
		{
			name:    "setting a ceiling that was left to its default is rejected",
			patches: []string{`{"spec": {"budget": {"maxCostUSD": "5"}}}`},
			wantErr: "the spec of an AgentRun cannot change once created",
		},
		{
			name:    "changing a tool's timeout is rejected",
			patches: []string{`{"spec": {"tools": [{"name": "pod_events", "builtin": "kubernetes.events", "timeout": "5m"}]}}`},
			wantErr: "the spec of an AgentRun cannot change once created",
		},
		{
			name: "changing a tool's parameters is rejected",
			patches: []string{`{"spec": {"tools": [{"name": "pod_events", "builtin": "kubernetes.events",
				"parameters": {"type": "object", "properties": {"pod": {"type": "string"}, "limit": {"type": "string"}}}}]}}`},
			wantErr: "the spec of an AgentRun cannot change once created",
		},
		{
			name: "changing a scripted call's arguments is rejected",
			patches: []string{`{"spec": {"model": {"script": [
				{"toolCalls": [{"name": "pod_events", "arguments": {"pod": "web-1", "limit": 20}}]},
				{"content": "It is web-0."}]}}}`},
			wantErr: "the spec of an AgentRun cannot change once created",
		},
		{
			name:    "setting and changing ttlSecondsAfterFinished is allowed",
			patches: []string{`{"spec": {"ttlSecondsAfterFinished": 600}}`, `{"spec": {"ttlSecondsAfterFinished": 0}}`},
		},
		{
			name:    "changing the policy is rejected",
			patches: []string{`{"spec": {"policy": {"default": "deny"}}}`},
			wantErr: "(changed: spec.policy)",
		},
		{
			name:    "changing loopDetection is rejected",
			patches: []string{`{"spec": {"loopDetection": {"threshold": 5}}}`},
			wantErr: "(changed: spec.loopDetection)",
		},
		{
			name:    "setting approvalTimeout is rejected",
			patches: []string{`{"spec": {"approvalTimeout": "5m"}}`},
			wantErr: "(changed: spec.approvalTimeout)",
		},
		{
			name:    "setting a serviceAccountName is rejected",
			patches: []string{`{"spec": {"serviceAccountName": "admin"}}`},
			wantErr: "(changed: spec.serviceAccountName)",
		},
		{
			name:    "setting an escalation owner is rejected",
			patches: []string{`{"spec": {"escalation": {"owner": "someone-else"}}}`},
			wantErr: "(changed: spec.escalation)",
		},
		{
			name:    "making the run a follow-up is rejected",
			patches: []string{`{"spec": {"continueFrom": {"name": "earlier"}}}`},
			wantErr: "(changed: spec.continueFrom)",
		},
		{
			name:    "setting cancel back to false is rejected",
			patches: []string{`{"spec": {"cancel": true}}`, `{"spec": {"cancel": false}}`},
			wantErr: "spec.cancel cannot go back to false: a cancelled run stays cancelled",
		},
		{
			name:    "removing cancel after it was true is rejected",
			patches: []string{`{"spec": {"cancel": true}}`, `{"spec": {"cancel": null}}`},
			wantErr: "spec.cancel cannot go back to false",
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			obj, err := create(ctx, fmt.Sprintf(runToEdit, fmt.Sprintf("edited-%d", i)))
			if err != nil {
				t.Fatalf("Cannot create the run to edit: %v", err)
			}
			for n, patch := range tc.patches {
				err = k8sClient.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)))
				if n < len(tc.patches)-1 && err != nil {
					t.Fatalf("Patch %d was rejected: %v", n+1, err)
				}
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("The API server rejected an allowed update: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("The API server accepted the update; want an error containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("The error does not say %q:\n%v", tc.wantErr, err)
			}
		})
	}
}

// TestUpdate_acceptsTheSameManifestAgain replaces a run with the manifest it
// was created from, as kubectl replace does: the defaults the API server
// fills in again must not count as a change.
func TestUpdate_acceptsTheSameManifestAgain(t *testing.T) {
	ctx := testContext(t)
	manifest := fmt.Sprintf(runToEdit, "replaced")
	if _, err := create(ctx, manifest); err != nil {
		t.Fatalf("Cannot create the run: %v", err)
	}
	if err := replace(ctx, manifest); err != nil {
		t.Fatalf("The API server rejected the unchanged manifest: %v", err)
	}
}

func TestUpdate_statusDoesNotTouchTheSpec(t *testing.T) {
	ctx := testContext(t)
	if _, err := create(ctx, fmt.Sprintf(runToEdit, "with-status")); err != nil {
		t.Fatalf("Cannot create the run: %v", err)
	}
	run := &agentsv1alpha1.AgentRun{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: namespaceOf(ctx), Name: "with-status"}, run); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	run.Status = agentsv1alpha1.AgentRunStatus{
		Phase:  agentsv1alpha1.PhaseAwaitingApproval,
		Reason: "pod_events waits for a person",
		Turn:   1,
		Usage:  &agentsv1alpha1.UsageStatus{Turns: 1, InputTokens: 1200, CostUSD: "0.0036", PerTool: map[string]int32{"pod_events": 1}},
		PendingApprovals: []agentsv1alpha1.PendingApproval{{
			CallID: "t1-c1", Tool: "pod_events", Arguments: `{"pod":"web-0"}`, Rule: "policy.default", RequestedAt: &now,
		}},
		Approvals:   []agentsv1alpha1.ApprovalRecord{{CallID: "t0-c9", Decision: agentsv1alpha1.ApprovalApprove, At: &now, Stale: true}},
		Convergence: &agentsv1alpha1.ConvergenceStatus{RepeatedIntentDepth: 1, Headroom: map[string]string{"turns": "0.67"}},
		Transcript:  &agentsv1alpha1.TranscriptStatus{Chunks: 1, Messages: 3},
		Checkpoint:  &runtime.RawExtension{Raw: []byte(`{"calls":[{"id":"t1-c1"}],"phase":"AwaitingApproval"}`)},
		Conditions: []metav1.Condition{{
			Type: agentsv1alpha1.ConditionSucceeded, Status: metav1.ConditionUnknown,
			Reason: agentsv1alpha1.ReasonAwaitingApproval, LastTransitionTime: now,
		}},
		ObservedGeneration: run.Generation,
		StartTime:          &now,
	}
	if err := k8sClient.Status().Update(ctx, run); err != nil {
		t.Fatalf("The API server rejected a status update: %v", err)
	}
	got := &agentsv1alpha1.AgentRun{}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(run), got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(run.Status, got.Status); diff != "" {
		t.Errorf("The status did not round-trip (-want +got):\n%s", diff)
	}
}

func TestCreate_appliesDefaults(t *testing.T) {
	got := created(testContext(t), t, `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: defaulted
spec:
  goal: Find the failing pod.
  model:
    provider: scripted
    script:
    - content: It is web-0.
  budget:
    maxTurns: 3
  tools:
  - name: pod_events
    http: {url: "http://events.default.svc/?pod={{.pod}}"}
  - name: restart_pod
    job: {image: "ghcr.io/acme/restart:1", command: [restart]}
  guardrails:
  - name: no-secrets
    pattern: "password"
`, &agentsv1alpha1.AgentRun{})

	seconds := func(n int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(n) * time.Second} }
	want := agentsv1alpha1.AgentRunSpec{
		AgentSpec: agentsv1alpha1.AgentSpec{
			Goal: "Find the failing pod.",
			Model: agentsv1alpha1.ModelSpec{
				ModelEndpoint:   agentsv1alpha1.ModelEndpoint{Provider: agentsv1alpha1.ProviderScripted},
				MaxOutputTokens: ptr.To[int32](4096),
				Timeout:         seconds(60),
				Retry:           &agentsv1alpha1.ModelRetry{MaxAttempts: ptr.To[int32](5), InitialBackoff: seconds(2), MaxBackoff: seconds(60)},
				Script:          []agentsv1alpha1.ScriptStep{{Content: "It is web-0."}},
			},
			Budget: agentsv1alpha1.BudgetSpec{
				MaxTurns: 3,
				// maxCostUSD is defaulted by the operator, never in the object:
				// its absence is what the real-provider rule checks. So are
				// maxTokens, maxWallClock, maxToolCalls, approvalTimeout and a
				// tool's timeout, which an AgentRunPolicy caps: stored, they
				// would reach its admission policy as values the author wrote.
				DefaultToolLimit: ptr.To[int32](10),
			},
			LoopDetection: &agentsv1alpha1.LoopDetectionSpec{
				// window has no default of its own: the engine derives
				// threshold x maxPeriod.
				Threshold: ptr.To[int32](3),
				MaxPeriod: ptr.To[int32](3),
			},
			// tools[].maxCostUSD has no default: unset is told apart from a
			// declared "0" (AgentRunPolicy requireToolCosts). Neither has
			// mutates: false for most kinds, true for an agent tool.
			Tools: []agentsv1alpha1.ToolSpec{{
				Name:           "pod_events",
				Reversible:     ptr.To(true),
				MaxResultBytes: ptr.To[int32](16384),
				Retry:          &agentsv1alpha1.ToolRetry{MaxAttempts: ptr.To[int32](3), InitialBackoff: seconds(1), MaxBackoff: seconds(30)},
				HTTP:           &agentsv1alpha1.HTTPTool{URL: "http://events.default.svc/?pod={{.pod}}", Method: agentsv1alpha1.HTTPGet},
			}, {
				Name:           "restart_pod",
				Reversible:     ptr.To(true),
				MaxResultBytes: ptr.To[int32](16384),
				Retry:          &agentsv1alpha1.ToolRetry{MaxAttempts: ptr.To[int32](3), InitialBackoff: seconds(1), MaxBackoff: seconds(30)},
				Job:            &agentsv1alpha1.JobTool{Image: "ghcr.io/acme/restart:1", Command: []string{"restart"}, AutomountServiceAccountToken: ptr.To(false)},
			}},
			Policy: &agentsv1alpha1.PolicySpec{Default: agentsv1alpha1.PolicyAllow},
			Guardrails: []agentsv1alpha1.GuardrailSpec{{
				Name:     "no-secrets",
				Tools:    []string{"*"},
				Pattern:  "password",
				Severity: agentsv1alpha1.GuardrailBlock,
			}},
		},
	}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("The defaulted spec differs (-want +got):\n%s", diff)
	}
}

// TestCRD_isTheChartCopy guards against the chart's CRD drifting from the
// generated one (make manifests copies it).
func TestCRD_isTheChartCopy(t *testing.T) {
	const name = "agents.agentrun.dev_agentruns.yaml"
	generated, err := os.ReadFile(filepath.Join(repoRoot, "config", "crd", "bases", name))
	if err != nil {
		t.Fatal(err)
	}
	chart, err := os.ReadFile(filepath.Join(repoRoot, "charts", "agentrun", "crds", name))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(generated, chart) {
		t.Errorf("charts/agentrun/crds/%s differs from config/crd/bases; run make manifests", name)
	}
}
