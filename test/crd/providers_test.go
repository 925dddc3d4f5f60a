package crd_test

import (
	"testing"
)

// providerRun is a run whose model is the one given, with a budget.
const providerRun = namedRun + `  goal: Explain the two August charges.
  budget: {maxTurns: 6, maxCostUSD: "1.00"}
  model:
%s`

func TestCreate_cloudProvidersReasoningAndKeylessServers(t *testing.T) {
	cases := []specCase{
		{name: "bedrock with the operator's AWS identity", spec: `
    provider: bedrock
    name: us.anthropic.claude-sonnet-4-5-20250929-v1:0
    bedrock: {region: us-east-1}
`},
		{name: "bedrock with an API key and a VPC endpoint", spec: `
    provider: bedrock
    name: anthropic.claude-sonnet-4-5-20250929-v1:0
    bedrock: {region: eu-central-1}
    apiKeySecretRef: {name: bedrock, key: api-key}
    baseURL: https://bedrock.internal.example.com
`},
		{name: "bedrock signed for a VPC endpoint", spec: `
    provider: bedrock
    name: anthropic.claude-sonnet-4-5-20250929-v1:0
    bedrock: {region: us-east-1}
    baseURL: https://vpce-0a1b2c3d.bedrock-runtime.us-east-1.vpce.amazonaws.com
`},
		{name: "bedrock signed for an endpoint outside AWS", spec: `
    provider: bedrock
    name: anthropic.claude-sonnet-4-5-20250929-v1:0
    bedrock: {region: us-east-1}
    baseURL: https://collector.example.com
`, wantErr: []string{"spec.model.baseURL", "model.baseURL must be an https:// endpoint under amazonaws.com"}},
		{name: "bedrock without its region", spec: `
    provider: bedrock
    name: anthropic.claude-sonnet-4-5-20250929-v1:0
`, wantErr: []string{"spec.model.bedrock", "provider bedrock needs model.bedrock.region"}},
		{name: "a region that is not one", spec: `
    provider: bedrock
    name: anthropic.claude-sonnet-4-5-20250929-v1:0
    bedrock: {region: "us-east-1/../x"}
`, wantErr: []string{"spec.model.bedrock.region"}},
		{name: "a bedrock block with provider openai", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    bedrock: {region: us-east-1}
`, wantErr: []string{"spec.model.bedrock", "model.bedrock is only read by provider bedrock, not openai"}},
		{name: "vertex", spec: `
    provider: vertex
    name: claude-sonnet-4-5@20250929
    vertex: {projectID: northwind-agents, region: us-east5}
`},
		{name: "vertex with an API key", spec: `
    provider: vertex
    name: claude-sonnet-4-5@20250929
    vertex: {projectID: northwind-agents, region: us-east5}
    apiKeySecretRef: {name: g, key: k}
`, wantErr: []string{"spec.model.apiKeySecretRef", "provider vertex authenticates as the operator's Google identity"}},
		{name: "vertex with a baseURL", spec: `
    provider: vertex
    name: claude-sonnet-4-5@20250929
    vertex: {projectID: northwind-agents, region: us-east5}
    baseURL: https://collector.example.com
`, wantErr: []string{"spec.model.baseURL", "model.baseURL is not read by providers vertex and azure"}},
		{name: "vertex without a project", spec: `
    provider: vertex
    name: claude-sonnet-4-5@20250929
    vertex: {region: us-east5}
`, wantErr: []string{"spec.model.vertex.projectID", "Required value"}},
		{name: "vertex without its block", spec: `
    provider: vertex
    name: claude-sonnet-4-5@20250929
`, wantErr: []string{"spec.model.vertex", "provider vertex needs model.vertex: the Google Cloud projectID and the region"}},
		{name: "a vertex block with provider anthropic", spec: `
    provider: anthropic
    name: claude-sonnet-4-5
    apiKeySecretRef: {name: a, key: k}
    vertex: {projectID: northwind-agents, region: us-east5}
`, wantErr: []string{"spec.model.vertex", "model.vertex is only read by providers vertex and gemini, not anthropic"}},
		{name: "azure with Entra ID", spec: `
    provider: azure
    name: gpt-5-mini
    azure: {endpoint: "https://northwind.openai.azure.com", apiVersion: "2024-10-21"}
`},
		{name: "azure with Entra ID to an endpoint outside Azure", spec: `
    provider: azure
    name: gpt-5-mini
    azure: {endpoint: "https://northwind.openai.azure.com.example.net", apiVersion: "2024-10-21"}
`, wantErr: []string{"spec.model.azure.endpoint", "must be an https:// Azure OpenAI endpoint"}},
		{name: "azure with an API key to a gateway", spec: `
    provider: azure
    name: gpt-5-mini
    azure: {endpoint: "https://llm-gateway.internal.example.com", apiVersion: "2025-04-01-preview"}
    apiKeySecretRef: {name: azure, key: api-key}
`},
		{name: "azure without an api version", spec: `
    provider: azure
    name: gpt-5-mini
    azure: {endpoint: "https://northwind.openai.azure.com"}
`, wantErr: []string{"spec.model.azure.apiVersion", "Required value"}},
		{name: "azure without its block", spec: `
    provider: azure
    name: gpt-5-mini
`, wantErr: []string{"spec.model.azure", "provider azure needs model.azure"}},
		{name: "an azure block with provider openai", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    azure: {endpoint: "https://northwind.openai.azure.com", apiVersion: "2024-10-21"}
`, wantErr: []string{"spec.model.azure", "model.azure is only read by provider azure, not openai"}},
		{name: "an azure endpoint that is not a URL", spec: `
    provider: azure
    name: gpt-5-mini
    apiKeySecretRef: {name: azure, key: api-key}
    azure: {endpoint: "northwind.openai.azure.com", apiVersion: "2024-10-21"}
`, wantErr: []string{"spec.model.azure.endpoint", "model.azure.endpoint must be an http:// or https:// URL"}},
		{name: "azure with a baseURL", spec: `
    provider: azure
    name: gpt-5-mini
    apiKeySecretRef: {name: azure, key: api-key}
    azure: {endpoint: "https://northwind.openai.azure.com", apiVersion: "2024-10-21"}
    baseURL: https://collector.example.com
`, wantErr: []string{"spec.model.baseURL", "model.baseURL is not read by providers vertex and azure"}},
		{name: "openai with a keyless server", spec: `
    provider: openai
    name: llama3.1:8b
    baseURL: http://ollama.ollama.svc:11434/v1
`},
		{name: "anthropic without a key", spec: `
    provider: anthropic
    name: claude-sonnet-4-5
`, wantErr: []string{"spec.model.apiKeySecretRef", "model.apiKeySecretRef is required with provider anthropic"}},
		{name: "reasoning effort for openai", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    reasoning: {effort: high}
`},
		{name: "a thinking budget for Claude on bedrock", spec: `
    provider: bedrock
    name: us.anthropic.claude-sonnet-4-5-20250929-v1:0
    bedrock: {region: us-east-1}
    maxOutputTokens: 16000
    reasoning: {budgetTokens: 10000}
`},
		{name: "a thinking budget not below the output limit", spec: `
    provider: anthropic
    name: claude-sonnet-4-5
    apiKeySecretRef: {name: a, key: k}
    reasoning: {budgetTokens: 4096}
`, wantErr: []string{"spec.model.reasoning.budgetTokens", "must be below model.maxOutputTokens"}},
		{name: "a thinking budget below Anthropic's minimum", spec: `
    provider: anthropic
    name: claude-sonnet-4-5
    apiKeySecretRef: {name: a, key: k}
    maxOutputTokens: 8000
    reasoning: {budgetTokens: 512}
`, wantErr: []string{"spec.model.reasoning.budgetTokens", "should be greater than or equal to 1024"}},
		{name: "effort for Claude", spec: `
    provider: anthropic
    name: claude-sonnet-4-5
    apiKeySecretRef: {name: a, key: k}
    reasoning: {effort: high}
`, wantErr: []string{"spec.model.reasoning.effort", "Claude (anthropic, bedrock, vertex) takes model.reasoning.budgetTokens"}},
		{name: "a thinking budget for openai", spec: `
    provider: azure
    name: o4-mini
    azure: {endpoint: "https://northwind.openai.azure.com", apiVersion: "2024-10-21"}
    reasoning: {budgetTokens: 2048}
`, wantErr: []string{"spec.model.reasoning.budgetTokens", "OpenAI reasoning models take model.reasoning.effort"}},
		{name: "an effort that is not one", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    reasoning: {effort: extreme}
`, wantErr: []string{"spec.model.reasoning.effort", `supported values: "low", "medium", "high"`}},
		{name: "fallbacks of other providers", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    fallbacks:
    - provider: anthropic
      name: claude-sonnet-4-5
      apiKeySecretRef: {name: anthropic, key: api-key}
      pricing: {input: "3", output: "15"}
    - provider: openai
      name: llama3.1:8b
      baseURL: http://ollama.ollama.svc:11434/v1
`},
		{name: "four fallbacks", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    fallbacks:
    - {provider: openai, name: a, baseURL: "http://a.example.com"}
    - {provider: openai, name: b, baseURL: "http://b.example.com"}
    - {provider: openai, name: c, baseURL: "http://c.example.com"}
    - {provider: openai, name: d, baseURL: "http://d.example.com"}
`, wantErr: []string{"spec.model.fallbacks", "must have at most 3 items"}},
		{name: "a fallback held to the model's rules", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    fallbacks:
    - {provider: anthropic, name: claude-sonnet-4-5}
`, wantErr: []string{"spec.model.fallbacks[0].apiKeySecretRef", "model.apiKeySecretRef is required with provider anthropic"}},
		{name: "Gemini on the Gemini API", spec: `
    provider: gemini
    name: gemini-2.5-pro
    apiKeySecretRef: {name: gemini, key: api-key}
    maxOutputTokens: 8192
    reasoning: {budgetTokens: 2048}
`},
		{name: "Gemini on Vertex AI", spec: `
    provider: gemini
    name: gemini-2.5-pro
    vertex: {projectID: northwind-agents, region: us-central1}
`},
		{name: "Gemini on Vertex AI through another host", spec: `
    provider: gemini
    name: gemini-2.5-pro
    baseURL: https://collector.example.com/
    vertex: {projectID: northwind-agents, region: us-central1}
`, wantErr: []string{"spec.model.baseURL", "with the operator's Google identity (model.vertex), model.baseURL must be an https:// endpoint under googleapis.com"}},
		{name: "Gemini with neither a key nor Vertex AI", spec: `
    provider: gemini
    name: gemini-2.5-pro
`, wantErr: []string{"spec.model.apiKeySecretRef", "provider gemini calls the Gemini API with model.apiKeySecretRef, or Vertex AI as the operator's Google identity with model.vertex: set exactly one of them"}},
		{name: "Gemini with both", spec: `
    provider: gemini
    name: gemini-2.5-pro
    apiKeySecretRef: {name: gemini, key: api-key}
    vertex: {projectID: northwind-agents, region: us-central1}
`, wantErr: []string{"spec.model.apiKeySecretRef", "set exactly one of them"}},
		{name: "a Vertex AI block with OpenAI", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    vertex: {projectID: northwind-agents, region: us-central1}
`, wantErr: []string{"spec.model.vertex", "model.vertex is only read by providers vertex and gemini, not openai: remove it"}},
		{name: "the Responses API", spec: `
    provider: openai
    name: gpt-5.1
    api: responses
    apiKeySecretRef: {name: openai, key: api-key}
    fallbacks:
    - {provider: openai, name: gpt-5-mini, api: chatCompletions, apiKeySecretRef: {name: openai, key: api-key}}
`},
		{name: "the Responses API of another provider", spec: `
    provider: anthropic
    name: claude-sonnet-4-5
    api: responses
    apiKeySecretRef: {name: anthropic, key: api-key}
`, wantErr: []string{"spec.model.api", "model.api responses is an API of provider openai, not anthropic: remove api"}},
		{name: "an API that is not one", spec: `
    provider: openai
    name: gpt-5.1
    api: assistants
    apiKeySecretRef: {name: openai, key: api-key}
`, wantErr: []string{"spec.model.api", `supported values: "chatCompletions", "responses"`}},
		{name: "routing on budget to a fallback", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    routeOnBudget: true
    fallbacks:
    - {provider: openai, name: gpt-5-mini, apiKeySecretRef: {name: openai, key: api-key}}
`},
		{name: "routing on budget with no fallback", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    routeOnBudget: true
`, wantErr: []string{"spec.model.routeOnBudget", "model.routeOnBudget routes a turn that does not fit to a cheaper one of model.fallbacks: list at least one fallback"}},
		{name: "a scripted fallback", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    fallbacks:
    - {provider: scripted}
`, wantErr: []string{"spec.model.fallbacks", "provider scripted replays model.script and cannot be a fallback"}},
		{name: "a fallback that cannot take the model's reasoning", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    reasoning: {effort: high}
    fallbacks:
    - {provider: anthropic, name: claude-sonnet-4-5, apiKeySecretRef: {name: a, key: k}}
`, wantErr: []string{"spec.model.fallbacks", "every fallback takes model.reasoning: effort needs providers openai or azure"}},
		{name: "reasoning that asks for both", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    maxOutputTokens: 8000
    reasoning: {effort: low, budgetTokens: 2048}
`, wantErr: []string{"spec.model.reasoning", "model.reasoning takes one of effort (OpenAI reasoning models) or budgetTokens (Claude)"}},
		{name: "reasoning that asks for nothing", spec: `
    provider: openai
    name: gpt-5.1
    apiKeySecretRef: {name: openai, key: api-key}
    reasoning: {}
`, wantErr: []string{"spec.model.reasoning", "model.reasoning takes one of effort"}},
	}
	expectCreates(t, providerRun, "provider", cases)
}

func TestCreate_cloudProvidersNeedABudget(t *testing.T) {
	expectCreate(testContext(t), t, `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  name: bedrock-without-budget
spec:
  goal: Say hello.
  model:
    provider: bedrock
    name: anthropic.claude-sonnet-4-5-20250929-v1:0
    bedrock: {region: us-east-1}
  budget: {maxTurns: 1}
`, []string{"spec.budget.maxCostUSD", "budget.maxCostUSD is required with provider bedrock"})
}
