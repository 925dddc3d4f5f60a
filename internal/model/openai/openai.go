// Package openai is the model provider for the OpenAI Chat Completions API
// and every server that speaks it (vLLM, Ollama, LiteLLM, Azure OpenAI ...),
// built on the official SDK, github.com/openai/openai-go.
//
// A request becomes one chat completion with function tools: the system
// prompt as a system message, the goal and other user text as user
// messages, each assistant turn with its tool_calls (ids are the harness's
// call ids, arguments the JSON text), and one tool message per result,
// in the order of the calls. NewResponses calls OpenAI's Responses API
// instead (responses.go).
package openai

import (
	"context"
	"fmt"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
)

// Name is the provider's name, as in spec.model.provider and in errors.
const Name = "openai"

// DefaultBaseURL is used when the configuration names none. It is set
// explicitly so that an OPENAI_BASE_URL in the operator's environment
// cannot redirect a run's requests.
const DefaultBaseURL = "https://api.openai.com/v1/"

// RefusedByFilter is the refusal text when the server's content filter
// stopped the answer without a refusal message of the model's own.
const RefusedByFilter = "the provider's content filter stopped the answer (finish_reason content_filter)"

// Model calls one OpenAI-compatible endpoint. It is safe for concurrent use.
type Model struct {
	name   string
	caller *model.Caller
	client *sdk.Client
	// auth is how each call authenticates: with the API key in the
	// Authorization header, unless an Azure deployment says otherwise.
	auth func(key string) []option.RequestOption
	// credential, when set, fetches each call's credential instead of
	// the configured KeySource (Azure's Entra ID token).
	credential model.KeySource
	// responses calls the Responses API instead of Chat Completions
	// (NewResponses).
	responses bool
}

var _ loop.Model = (*Model)(nil)

// New returns a provider for cfg. The key is not read here but at every
// call.
func New(cfg model.Config) (*Model, error) {
	caller, err := model.NewCaller(Name, cfg)
	if err != nil {
		return nil, err
	}
	cfg = caller.Config()
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithMaxRetries(cfg.MaxRetries),
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	key := model.ClientKey{Provider: Name, BaseURL: base, MaxRetries: cfg.MaxRetries, HTTPClient: cfg.HTTPClient}
	client := model.SharedClient(cfg.Clients, key, func() *sdk.Client { c := sdk.NewClient(opts...); return &c })
	return &Model{name: Name, caller: caller, client: client, auth: bearerKey}, nil
}

// bearerKey sends the key as "Authorization: Bearer", or no
// Authorization at all when there is none (a server that needs no key).
// It is set either way, so that an OPENAI_API_KEY in the operator's
// environment is never sent instead.
func bearerKey(key string) []option.RequestOption {
	return []option.RequestOption{option.WithAPIKey(key)}
}

// Complete makes one chat completion, or one Responses API call. Transport failures are retried by
// the SDK; what still fails is a *model.ProviderError.
func (m *Model) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	if m.responses {
		return m.respond(ctx, req)
	}
	params, err := buildParams(req, m.caller.ModelName(req.Model))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.name, err)
	}
	if e := m.caller.Config().ReasoningEffort; e != "" {
		// A reasoning model's thinking is billed as completion tokens
		// (usage.completion_tokens includes its reasoning_tokens), within
		// max_completion_tokens. Chat Completions returns none of it to
		// pass back: the model keeps no reasoning between calls there.
		params.ReasoningEffort = shared.ReasoningEffort(e)
	}
	return model.Answer(ctx, m.caller, m.credential, func(ctx context.Context, key string, record model.Middleware) (*sdk.ChatCompletion, error) {
		return m.client.Chat.Completions.New(ctx, params, append(m.auth(key), option.WithMiddleware(record))...)
	}, toReply)
}

// outputFormatName names the response format of a run with a typed
// output (spec.output).
const outputFormatName = "final_answer"

func buildParams(req *loop.Request, modelName string) (sdk.ChatCompletionNewParams, error) {
	p := sdk.ChatCompletionNewParams{Model: shared.ChatModel(modelName)}
	if req.MaxOutputTokens > 0 { // the engine always sets one
		// max_completion_tokens, not the deprecated max_tokens, which
		// reasoning models reject.
		p.MaxCompletionTokens = sdk.Int(req.MaxOutputTokens)
	}
	for _, t := range req.Tools {
		schema, err := model.Schema(t.Parameters)
		if err != nil {
			return p, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		params := make(shared.FunctionParameters, len(schema))
		for k, v := range schema {
			params[k] = v
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: params}
		if t.Description != "" {
			fn.Description = sdk.String(t.Description)
		}
		p.Tools = append(p.Tools, sdk.ChatCompletionFunctionTool(fn))
	}
	if len(req.Output) > 0 && !req.Summary {
		// Structured Outputs: the final answer follows the run's output
		// schema. Not strict: strict mode accepts only a subset of JSON
		// Schema (every property required, additionalProperties false),
		// and the engine validates every answer whatever the mode.
		p.ResponseFormat = sdk.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: outputFormatName, Schema: req.Output, Strict: sdk.Bool(false)}}}
	}
	if req.System != "" {
		p.Messages = append(p.Messages, sdk.SystemMessage(req.System))
	}
	for _, msg := range model.OrderToolResults(req.Messages) {
		switch msg.Role {
		case loop.RoleUser:
			p.Messages = append(p.Messages, sdk.UserMessage(msg.Content))
		case loop.RoleAssistant:
			p.Messages = append(p.Messages, assistantMessage(msg))
		case loop.RoleTool:
			p.Messages = append(p.Messages, sdk.ToolMessage(msg.Content, msg.CallID))
		default:
			return p, fmt.Errorf("message with unknown role %q", msg.Role)
		}
	}
	return p, nil
}

func assistantMessage(msg loop.Message) sdk.ChatCompletionMessageParamUnion {
	a := sdk.ChatCompletionAssistantMessageParam{}
	if msg.Content != "" || len(msg.ToolCalls) == 0 {
		a.Content.OfString = sdk.String(msg.Content)
	}
	for _, c := range msg.ToolCalls {
		a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
			OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
				ID: c.ID,
				Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{
					Name:      c.Name,
					Arguments: string(model.Arguments(c.Arguments)),
				},
			},
		})
	}
	return sdk.ChatCompletionMessageParamUnion{OfAssistant: &a}
}

func toReply(out *sdk.ChatCompletion) (*loop.Reply, error) {
	if out == nil || len(out.Choices) == 0 {
		return nil, fmt.Errorf("the response has no choices")
	}
	choice := out.Choices[0]
	msg := choice.Message
	reply := &loop.Reply{
		Content:   msg.Content,
		Refusal:   msg.Refusal,
		Truncated: choice.FinishReason == "length",
		Usage: loop.TokenUsage{
			InputTokens:       model.Tokens(out.Usage.PromptTokens),
			CachedInputTokens: model.Tokens(out.Usage.PromptTokensDetails.CachedTokens),
			CacheWriteTokens:  model.Tokens(out.Usage.PromptTokensDetails.CacheWriteTokens),
			OutputTokens:      model.Tokens(out.Usage.CompletionTokens),
		},
	}
	if choice.FinishReason == "content_filter" && reply.Refusal == "" {
		reply.Refusal = RefusedByFilter
	}
	for _, tc := range msg.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			return nil, fmt.Errorf("the model called a %q tool, but only function tools are offered", tc.Type)
		}
		reply.ToolCalls = append(reply.ToolCalls, loop.ToolCall{
			Name:      tc.Function.Name,
			Arguments: model.Arguments([]byte(tc.Function.Arguments)),
		})
	}
	return reply, nil
}
