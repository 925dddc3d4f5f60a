package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ModelProvider names the kind of model endpoint.
// +kubebuilder:validation:Enum=scripted;openai;anthropic;bedrock;vertex;azure;gemini
type ModelProvider string

// The model providers.
const (
	// ProviderScripted replays model.script, one entry per model call. It
	// needs no network and no key: for tests, demos and dry runs.
	ProviderScripted ModelProvider = "scripted"
	// ProviderOpenAI is any OpenAI-compatible chat endpoint (OpenAI, vLLM,
	// Ollama, LiteLLM, Azure OpenAI ...).
	ProviderOpenAI ModelProvider = "openai"
	// ProviderAnthropic is the Anthropic Messages API.
	ProviderAnthropic ModelProvider = "anthropic"
	// ProviderBedrock is Claude on Amazon Bedrock (model.bedrock).
	ProviderBedrock ModelProvider = "bedrock"
	// ProviderVertex is Claude on Google Vertex AI (model.vertex).
	ProviderVertex ModelProvider = "vertex"
	// ProviderAzure is an Azure OpenAI deployment (model.azure).
	ProviderAzure ModelProvider = "azure"
	// ProviderGemini is Google's Gemini models: on the Gemini API with
	// model.apiKeySecretRef, or on Vertex AI (model.vertex) as the
	// operator's Google identity.
	ProviderGemini ModelProvider = "gemini"
)

// ModelAPI names the API a model is called through.
// +kubebuilder:validation:Enum=chatCompletions;responses
type ModelAPI string

// The model APIs of provider openai.
const (
	// APIChatCompletions is POST /chat/completions, which every
	// OpenAI-compatible server speaks.
	APIChatCompletions ModelAPI = "chatCompletions"
	// APIResponses is OpenAI's Responses API, POST /responses.
	APIResponses ModelAPI = "responses"
)

// ModelSpec selects the model and how each model call is made.
//
// +kubebuilder:validation:XValidation:rule=`self.provider != 'scripted' || (has(self.script) && size(self.script) > 0)`,message="provider scripted needs model.script: one entry per model call, in order",fieldPath=`.script`,reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule=`self.provider == 'scripted' || !has(self.script)`,message="model.script is only read by provider scripted: remove it, or set provider to scripted",fieldPath=`.script`,reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule=`!has(self.reasoning) || !has(self.reasoning.effort) || self.provider in ['openai', 'azure']`,message="model.reasoning.effort is for OpenAI reasoning models (providers openai, azure); Claude (anthropic, bedrock, vertex) takes model.reasoning.budgetTokens",fieldPath=`.reasoning.effort`
// +kubebuilder:validation:XValidation:rule=`!has(self.reasoning) || !has(self.reasoning.budgetTokens) || self.provider in ['anthropic', 'bedrock', 'vertex', 'gemini']`,message="model.reasoning.budgetTokens is the thinking budget of Claude (providers anthropic, bedrock, vertex) and Gemini (gemini); OpenAI reasoning models take model.reasoning.effort",fieldPath=`.reasoning.budgetTokens`
// +kubebuilder:validation:XValidation:rule=`!has(self.reasoning) || !has(self.reasoning.budgetTokens) || self.reasoning.budgetTokens < self.?maxOutputTokens.orValue(4096)`,message="model.reasoning.budgetTokens must be below model.maxOutputTokens: thinking is part of the reply's output limit, so the budget leaves room for the answer",fieldPath=`.reasoning.budgetTokens`
// +kubebuilder:validation:XValidation:rule=`!has(self.reasoning) || !has(self.fallbacks) || self.fallbacks.all(f, f.provider in (has(self.reasoning.effort) ? ['openai', 'azure'] : ['anthropic', 'bedrock', 'vertex', 'gemini']))`,message="every fallback takes model.reasoning: effort needs providers openai or azure, budgetTokens anthropic, bedrock, vertex or gemini",fieldPath=`.fallbacks`
// +kubebuilder:validation:XValidation:rule=`!has(self.routeOnBudget) || !self.routeOnBudget || (has(self.fallbacks) && size(self.fallbacks) > 0)`,message="model.routeOnBudget routes a turn that does not fit to a cheaper one of model.fallbacks: list at least one fallback, or remove routeOnBudget",fieldPath=`.routeOnBudget`
type ModelSpec struct {
	// The model called first: its provider, name, endpoint, key and
	// prices.
	ModelEndpoint `json:",inline"`

	// reasoning asks a reasoning model to think before it answers:
	// effort for OpenAI reasoning models (openai, azure), budgetTokens for
	// Claude's extended thinking (anthropic, bedrock, vertex) and Gemini's
	// thinking budget (gemini). Reasoning
	// tokens are output tokens: they count against maxOutputTokens, are
	// reserved with it and priced at pricing.output.
	// +optional
	Reasoning *ModelReasoning `json:"reasoning,omitempty"`

	// maxOutputTokens caps the tokens of one model reply. Defaults to 4096;
	// 0 is refused (a reply cannot be made of no tokens).
	// +optional
	// +kubebuilder:default=4096
	// +kubebuilder:validation:XValidation:rule=`self >= 1`,message="model.maxOutputTokens must be at least 1: a model call cannot answer in no tokens"
	// +kubebuilder:validation:Maximum=1000000
	MaxOutputTokens *int32 `json:"maxOutputTokens,omitempty"`

	// timeout bounds one model call: the deadline of the call's context,
	// at which the request to the provider is cancelled. It is also the
	// wall-clock time reserved for each call. Defaults to 60s.
	// +optional
	// +kubebuilder:default="1m0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="model.timeout must be a positive duration such as 60s or 2m"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// retry says how a model call that failed transiently (the provider
	// could not be reached, timed out, or answered HTTP 408, 429 or 5xx) is
	// tried again before the run ends ToolFailure. Defaults to 5 attempts,
	// 2s initial and 1m maximum backoff.
	// +optional
	// +kubebuilder:default={}
	Retry *ModelRetry `json:"retry,omitempty"`

	// script is what provider scripted replies, one entry per model call, in
	// order. A call after the last entry fails with "script exhausted".
	// Only read by provider scripted.
	// +optional
	// +kubebuilder:validation:MaxItems=512
	Script []ScriptStep `json:"script,omitempty"`

	// fallbacks are the models a turn goes to, in order, when the model
	// in use stays unavailable after model.retry's attempts: it could not
	// be reached, timed out, or answered HTTP 408, 429 or 5xx on every
	// attempt. A refusal, or an error the request caused (another 4xx),
	// never falls back. Each fallback is called with this model's
	// reasoning, maxOutputTokens, timeout and retry, and is held to the
	// platform policy's model rules as this model is. A run that fell
	// back stays on its fallback (status.model).
	// +optional
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:XValidation:rule=`self.all(f, f.provider != 'scripted')`,message="a model fallback calls a real model: provider scripted replays model.script and cannot be a fallback"
	Fallbacks []ModelEndpoint `json:"fallbacks,omitempty"`

	// routeOnBudget lets a turn whose next request does not fit the cost
	// or token ceiling go to the next of model.fallbacks whose request
	// fits (priced at its own rates, held to the platform policy's model
	// rules), before the run ends BudgetExhausted; the refusal then names
	// every model it tried. The switch is a ModelRouted event, and the
	// run stays on the new model (status.model). Off, fallbacks are
	// tried on an outage only, and a refusal names them. Needs
	// model.fallbacks.
	// +optional
	RouteOnBudget bool `json:"routeOnBudget,omitempty"`
}

// Endpoint is the model a run calls as its i-th: the model itself for 0,
// model.fallbacks[i-1] for i from 1 (status.model.fallbacks counts the
// same way). An i out of range is the model itself.
func (m *ModelSpec) Endpoint(i int) *ModelEndpoint {
	if i > 0 && i <= len(m.Fallbacks) {
		return &m.Fallbacks[i-1]
	}
	return &m.ModelEndpoint
}

// ModelEndpoint is a model and where it is called: the model of a run
// (model) and each of its fallbacks (model.fallbacks[]).
//
// +kubebuilder:validation:XValidation:rule=`self.provider == 'scripted' || (has(self.name) && self.name.size() > 0)`,message="model.name is required with a real model provider",messageExpression=`'model.name is required with provider ' + self.provider + ': name the model to call, for example gpt-5.1'`,fieldPath=`.name`,reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule=`self.provider != 'scripted' || !has(self.caBundleRef)`,message="model.caBundleRef is only read by a real model provider: provider scripted calls no endpoint",fieldPath=`.caBundleRef`,reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule=`self.provider != 'anthropic' || has(self.apiKeySecretRef)`,message="model.apiKeySecretRef is required with provider anthropic: name the Secret and key that hold the API key",fieldPath=`.apiKeySecretRef`,reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule=`self.provider != 'openai' || has(self.apiKeySecretRef) || has(self.baseURL)`,message="model.apiKeySecretRef is required with provider openai unless model.baseURL names a server that needs no key: name the Secret and key that hold the API key",fieldPath=`.apiKeySecretRef`,reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule=`(self.provider == 'bedrock') == has(self.bedrock)`,messageExpression=`has(self.bedrock) ? 'model.bedrock is only read by provider bedrock, not ' + self.provider + ': remove it' : 'provider bedrock needs model.bedrock.region: the AWS region of the Bedrock runtime endpoint, such as us-east-1'`,fieldPath=`.bedrock`
// +kubebuilder:validation:XValidation:rule=`has(self.vertex) ? self.provider in ['vertex', 'gemini'] : self.provider != 'vertex'`,messageExpression=`has(self.vertex) ? 'model.vertex is only read by providers vertex and gemini, not ' + self.provider + ': remove it' : 'provider vertex needs model.vertex: the Google Cloud projectID and the region, such as us-east5'`,fieldPath=`.vertex`
// +kubebuilder:validation:XValidation:rule=`self.provider != 'gemini' || !has(self.vertex) || !has(self.baseURL) || (url(self.baseURL).getScheme() == 'https' && url(self.baseURL).getHostname().endsWith('.googleapis.com'))`,message="with the operator's Google identity (model.vertex), model.baseURL must be an https:// endpoint under googleapis.com",fieldPath=`.baseURL`
// +kubebuilder:validation:XValidation:rule=`self.provider != 'gemini' || has(self.apiKeySecretRef) != has(self.vertex)`,message="provider gemini calls the Gemini API with model.apiKeySecretRef, or Vertex AI as the operator's Google identity with model.vertex: set exactly one of them",fieldPath=`.apiKeySecretRef`
// +kubebuilder:validation:XValidation:rule=`(self.provider == 'azure') == has(self.azure)`,messageExpression=`has(self.azure) ? 'model.azure is only read by provider azure, not ' + self.provider + ': remove it' : 'provider azure needs model.azure: the resource endpoint and the apiVersion'`,fieldPath=`.azure`
// +kubebuilder:validation:XValidation:rule=`self.provider != 'vertex' || !has(self.apiKeySecretRef)`,message="provider vertex authenticates as the operator's Google identity (Workload Identity), never with an API key: remove model.apiKeySecretRef",fieldPath=`.apiKeySecretRef`,reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule=`!(self.provider in ['vertex', 'azure']) || !has(self.baseURL)`,message="model.baseURL is not read by providers vertex and azure: the endpoint follows from model.vertex, or is model.azure.endpoint",fieldPath=`.baseURL`,reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule=`self.provider != 'bedrock' || has(self.apiKeySecretRef) || !has(self.baseURL) || (url(self.baseURL).getScheme() == 'https' && url(self.baseURL).getHostname().endsWith('.amazonaws.com'))`,message="with the operator's AWS identity, model.baseURL must be an https:// endpoint under amazonaws.com",fieldPath=`.baseURL`
// +kubebuilder:validation:XValidation:rule=`!has(self.azure) || has(self.apiKeySecretRef) || (url(self.azure.endpoint).getScheme() == 'https' && ['openai', 'cognitiveservices', 'services.ai'].exists(d, url(self.azure.endpoint).getHostname().endsWith('.' + d + '.azure.com')))`,message="without an API key, model.azure.endpoint must be an https:// Azure OpenAI endpoint",fieldPath=`.azure.endpoint`
// +kubebuilder:validation:XValidation:rule=`!has(self.api) || self.api == 'chatCompletions' || self.provider == 'openai'`,messageExpression=`'model.api ' + self.api + ' is an API of provider openai, not ' + self.provider + ': remove api'`,fieldPath=`.api`,reason=FieldValueForbidden
type ModelEndpoint struct {
	// provider is the kind of model endpoint: scripted (replays
	// model.script), openai (any OpenAI-compatible endpoint), anthropic,
	// bedrock (Claude on Amazon Bedrock), vertex (Claude on Google Vertex
	// AI), azure (Azure OpenAI) or gemini (Google's Gemini models, on the
	// Gemini API or on Vertex AI).
	// +required
	Provider ModelProvider `json:"provider"`

	// name is the model to call, as the provider spells it (gpt-5.1,
	// claude-sonnet-4-5 ...; for bedrock a model id or inference profile
	// such as us.anthropic.claude-sonnet-4-5-20250929-v1:0, for vertex
	// such as claude-sonnet-4-5@20250929, for azure the deployment's
	// name, for gemini such as gemini-2.5-pro). Required unless the
	// provider is scripted.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name,omitempty"`

	// baseURL overrides the provider's endpoint, for self-hosted or proxied
	// models (vLLM, Ollama, LiteLLM, Azure ...).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`isURL(self) && url(self).getScheme() in ['http', 'https']`,message="model.baseURL must be an http:// or https:// URL"
	BaseURL string `json:"baseURL,omitempty"`

	// api is the API provider openai calls: chatCompletions (the
	// default, which every OpenAI-compatible server speaks) or responses
	// (OpenAI's Responses API, POST /responses). Responses requests are
	// stateless as chat completions are (store: false, the whole
	// conversation each call); a reasoning model's reasoning items come
	// back encrypted, are kept in the transcript and are passed back
	// with the calls they preceded.
	// +optional
	API ModelAPI `json:"api,omitempty"`

	// apiKeySecretRef names the Secret key that holds the provider's API
	// key. Required for anthropic, and for openai at its public endpoint;
	// optional for openai with a baseURL (a server that needs no key), and
	// for bedrock and azure, which without it authenticate as the
	// operator's own cloud identity (IRSA or EKS Pod Identity; Entra ID
	// Workload Identity). Not read by vertex. The key is never echoed in
	// status, events or logs.
	// +optional
	APIKeySecretRef *SecretKeySelector `json:"apiKeySecretRef,omitempty"`

	// bedrock is where Claude on Amazon Bedrock is called. Required with
	// provider bedrock, and only read by it.
	// +optional
	Bedrock *BedrockModel `json:"bedrock,omitempty"`

	// vertex is the Google Cloud project and region of Vertex AI: where
	// Claude is called (provider vertex, which requires it) or Gemini
	// (provider gemini, which without it calls the Gemini API with
	// apiKeySecretRef). Only read by those two providers.
	// +optional
	Vertex *VertexModel `json:"vertex,omitempty"`

	// azure is the Azure OpenAI resource whose deployment model.name is.
	// Required with provider azure, and only read by it.
	// +optional
	Azure *AzureModel `json:"azure,omitempty"`

	// caBundleRef names PEM certificates of the certificate authorities
	// that may sign the model endpoint's certificate (a baseURL served
	// under a private CA), trusted besides the system's roots. It is read
	// when the run starts.
	// +optional
	CABundleRef *CABundleRef `json:"caBundleRef,omitempty"`

	// pricing is what the model costs, in US dollars per million tokens. It
	// turns token usage into spend for budget.maxCostUSD. Prices left unset
	// count as zero.
	// +optional
	Pricing *ModelPricing `json:"pricing,omitempty"`
}

// BedrockModel is where Claude on Amazon Bedrock is called.
type BedrockModel struct {
	// region is the AWS region of the Bedrock runtime endpoint
	// (https://bedrock-runtime.REGION.amazonaws.com), such as us-east-1.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z]{2}(-[a-z]+)+-[0-9]+$`
	Region string `json:"region"`
}

// VertexModel is where Claude on Google Vertex AI is called.
type VertexModel struct {
	// projectID is the Google Cloud project.
	// +required
	// +kubebuilder:validation:MinLength=6
	// +kubebuilder:validation:MaxLength=30
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9-]*[a-z0-9]$`
	ProjectID string `json:"projectID"`

	// region is the location of the model, such as us-east5, europe-west1
	// or global.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9-]*$`
	Region string `json:"region"`
}

// AzureModel is an Azure OpenAI resource.
type AzureModel struct {
	// endpoint is the resource's endpoint, such as
	// https://RESOURCE.openai.azure.com. With the operator's Entra ID (no
	// apiKeySecretRef) it must be https:// and under openai.azure.com,
	// cognitiveservices.azure.com or services.ai.azure.com: the operator's
	// tokens go nowhere else; an API key may go to any endpoint.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`isURL(self) && url(self).getScheme() in ['http', 'https']`,message="model.azure.endpoint must be an http:// or https:// URL, such as https://RESOURCE.openai.azure.com"
	Endpoint string `json:"endpoint"`

	// apiVersion is the Azure OpenAI API version sent with every call,
	// such as 2024-10-21.
	// +required
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]{4}-[0-9]{2}-[0-9]{2}(-preview)?$`
	APIVersion string `json:"apiVersion"`
}

// ReasoningEffort is how hard an OpenAI reasoning model thinks.
// +kubebuilder:validation:Enum=low;medium;high
type ReasoningEffort string

// ModelReasoning asks a reasoning model to think before it answers.
//
// +kubebuilder:validation:XValidation:rule=`has(self.effort) != has(self.budgetTokens)`,message="model.reasoning takes one of effort (OpenAI reasoning models) or budgetTokens (Claude)"
type ModelReasoning struct {
	// effort is reasoning_effort for OpenAI reasoning models: low, medium
	// or high.
	// +optional
	Effort ReasoningEffort `json:"effort,omitempty"`

	// budgetTokens is Claude's extended thinking budget: at least 1024
	// (Anthropic's minimum), and below model.maxOutputTokens, which bounds
	// thinking and answer together.
	// +optional
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=1000000
	BudgetTokens *int32 `json:"budgetTokens,omitempty"`
}

// ModelRetry bounds the retries of a model call that failed transiently.
// Attempts are spaced by an exponential backoff (doubling from
// initialBackoff, capped at maxBackoff, with jitter of ±50% that never
// passes the cap), or by the provider's Retry-After when that is longer.
// Each retry reserves its backoff and model.timeout on the wall clock
// before it waits; a retry is not a turn.
//
// +kubebuilder:validation:XValidation:rule=`!has(self.initialBackoff) || !has(self.maxBackoff) || duration(self.maxBackoff) >= duration(self.initialBackoff)`,message="model.retry.maxBackoff must not be shorter than model.retry.initialBackoff"
type ModelRetry struct {
	// maxAttempts is the number of attempts of one model call in all, the
	// first included: 1 never retries. Defaults to 5.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=20
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`

	// initialBackoff is the wait before the first retry. Defaults to 2s.
	// +optional
	// +kubebuilder:default="2s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s') && duration(self) <= duration('10m')`,message="model.retry.initialBackoff must be a positive duration of at most 10m, such as 2s"
	InitialBackoff *metav1.Duration `json:"initialBackoff,omitempty"`

	// maxBackoff caps the wait between two attempts (a longer Retry-After
	// is still honoured). Defaults to 1m.
	// +optional
	// +kubebuilder:default="1m0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s') && duration(self) <= duration('1h')`,message="model.retry.maxBackoff must be a positive duration of at most 1h, such as 1m"
	MaxBackoff *metav1.Duration `json:"maxBackoff,omitempty"`
}

// ModelPricing is in US dollars per million tokens, as decimal strings.
type ModelPricing struct {
	// input is the price of a million input (prompt) tokens that were not
	// served from the provider's cache.
	// +optional
	Input USD `json:"input,omitempty"`

	// output is the price of a million output (completion) tokens.
	// +optional
	Output USD `json:"output,omitempty"`

	// cachedInput is the price of a million input tokens served from the
	// provider's prompt cache. Defaults to the input price when unset.
	// +optional
	CachedInput USD `json:"cachedInput,omitempty"`
}

// ScriptStep is one scripted model reply. It takes one of these forms:
// content and/or toolCalls (an answer, tool calls, or both); refusal (the
// model refuses); error (the call fails). truncated marks a reply that hit
// the output limit.
//
// +kubebuilder:validation:XValidation:rule=`[has(self.content) || has(self.toolCalls), has(self.refusal), has(self.error)].filter(x, x).size() <= 1`,message="a script entry is one reply: content and/or toolCalls, or refusal, or error, not several of them"
// +kubebuilder:validation:XValidation:rule=`!has(self.transient) || !self.transient || has(self.error)`,message="transient only qualifies an error: set error too, or remove transient"
type ScriptStep struct {
	// content is the text of the reply. A reply with content and no tool
	// calls is the final answer.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Content string `json:"content,omitempty"`

	// toolCalls are the tool calls the model proposes in this reply.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	ToolCalls []ScriptToolCall `json:"toolCalls,omitempty"`

	// usage is the token usage reported for this call. Tokens count against
	// budget.maxTokens and, through model.pricing, budget.maxCostUSD.
	// +optional
	Usage *ScriptUsage `json:"usage,omitempty"`

	// refusal makes the model refuse with this text; the run ends as
	// GuardrailStop.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Refusal string `json:"refusal,omitempty"`

	// error makes the model call fail with this message, as a provider
	// that answered with an error would: the run ends ToolFailure, unless
	// transient is set.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Error string `json:"error,omitempty"`

	// transient makes error a transient outage (a provider that cannot be
	// reached or is overloaded): the call is retried under model.retry, and
	// this same entry answers every attempt.
	// +optional
	Transient bool `json:"transient,omitempty"`

	// truncated marks the reply as cut at the output limit; a truncated
	// answer is never taken as final.
	// +optional
	Truncated bool `json:"truncated,omitempty"`

	// delay is how long the scripted model waits before it replies, to
	// exercise timeouts and the wall-clock ceiling.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$')`,message="script delay must be a duration such as 500ms or 2s"
	Delay *metav1.Duration `json:"delay,omitempty"`
}

// ScriptToolCall is one tool call of a scripted reply.
type ScriptToolCall struct {
	// name is the tool to call. It is not checked against spec.tools, so
	// that a script can exercise calls to unknown tools.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// arguments is the JSON object of the call's arguments.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Arguments *runtime.RawExtension `json:"arguments,omitempty"`
}

// ScriptUsage is the token usage a scripted reply reports.
type ScriptUsage struct {
	// inputTokens are the prompt tokens of the call.
	// +optional
	// +kubebuilder:validation:Minimum=0
	InputTokens int64 `json:"inputTokens,omitempty"`

	// outputTokens are the completion tokens of the call.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OutputTokens int64 `json:"outputTokens,omitempty"`

	// cachedInputTokens are the part of inputTokens served from the
	// provider's prompt cache.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CachedInputTokens int64 `json:"cachedInputTokens,omitempty"`
}
