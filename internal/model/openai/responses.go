package openai

// The Responses API (POST /responses), which OpenAI recommends for new
// work, as a second way to call the same models (spec.model.api:
// responses).
//
// A request is stateless, as a chat completion is: store is false and
// every call sends the whole conversation as input items, so that a run
// resumed by another operator replica, or after the provider's retention
// ran out, sends what the transcript holds and nothing the provider must
// remember. A reasoning model's reasoning items come back with their
// encrypted content (include reasoning.encrypted_content) and are passed
// back with the function calls they preceded, as the API asks, in the
// transcript's Reasoning: the item id as Signature, the encrypted content
// as Redacted, its summary as Text.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
)

// NewResponses returns a provider that calls the Responses API of cfg's
// endpoint instead of Chat Completions.
func NewResponses(cfg model.Config) (*Model, error) {
	m, err := New(cfg)
	if err != nil {
		return nil, err
	}
	m.responses = true
	return m, nil
}

// respond makes one Responses API call.
func (m *Model) respond(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	params, err := buildResponseParams(req, m.caller.ModelName(req.Model), m.caller.Config().ReasoningEffort)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.name, err)
	}
	return model.Answer(ctx, m.caller, m.credential, func(ctx context.Context, key string, record model.Middleware) (*responses.Response, error) {
		return m.client.Responses.New(ctx, params, append(m.auth(key), option.WithMiddleware(record))...)
	}, responseReply)
}

func buildResponseParams(req *loop.Request, modelName, effort string) (responses.ResponseNewParams, error) {
	p := responses.ResponseNewParams{Model: shared.ResponsesModel(modelName), Store: sdk.Bool(false)}
	if req.MaxOutputTokens > 0 {
		p.MaxOutputTokens = sdk.Int(req.MaxOutputTokens)
	}
	if req.System != "" {
		p.Instructions = sdk.String(req.System)
	}
	if effort != "" {
		// Reasoning tokens are output tokens (usage.output_tokens holds
		// them), within max_output_tokens.
		p.Reasoning = shared.ReasoningParam{Effort: shared.ReasoningEffort(effort)}
		p.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
	}
	for _, t := range req.Tools {
		schema, err := model.Schema(t.Parameters)
		if err != nil {
			return p, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		// Not strict, for the reason the output format is not (below).
		tool := responses.ToolParamOfFunction(t.Name, anyMap(schema), false)
		if t.Description != "" {
			tool.OfFunction.Description = sdk.String(t.Description)
		}
		p.Tools = append(p.Tools, tool)
	}
	if len(req.Output) > 0 && !req.Summary {
		schema, err := model.Schema(req.Output)
		if err != nil {
			return p, fmt.Errorf("the output schema: %w", err)
		}
		// Structured Outputs, not strict: strict mode accepts only a
		// subset of JSON Schema, and the engine validates every answer.
		p.Text = responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
			OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: outputFormatName, Schema: anyMap(schema), Strict: sdk.Bool(false)}}}
	}
	var input responses.ResponseInputParam
	for _, msg := range model.OrderToolResults(req.Messages) {
		switch msg.Role {
		case loop.RoleUser:
			input = append(input, responses.ResponseInputItemParamOfMessage(msg.Content, responses.EasyInputMessageRoleUser))
		case loop.RoleAssistant:
			for _, r := range msg.Reasoning {
				if r.Signature == "" {
					continue // not a Responses reasoning item
				}
				var summary []responses.ResponseReasoningItemSummaryParam
				if r.Text != "" {
					summary = []responses.ResponseReasoningItemSummaryParam{{Text: r.Text}}
				}
				item := responses.ResponseInputItemParamOfReasoning(r.Signature, summary)
				if item.OfReasoning.Summary == nil {
					item.OfReasoning.Summary = []responses.ResponseReasoningItemSummaryParam{}
				}
				if r.Redacted != "" {
					item.OfReasoning.EncryptedContent = sdk.String(r.Redacted)
				}
				input = append(input, item)
			}
			if msg.Content != "" || len(msg.ToolCalls) == 0 {
				input = append(input, responses.ResponseInputItemParamOfMessage(msg.Content, responses.EasyInputMessageRoleAssistant))
			}
			for _, c := range msg.ToolCalls {
				input = append(input, responses.ResponseInputItemParamOfFunctionCall(string(model.Arguments(c.Arguments)), c.ID, c.Name))
			}
		case loop.RoleTool:
			out := responses.ResponseInputItemParamOfFunctionCallOutput(msg.Content)
			out.OfFunctionCallOutput.CallID = sdk.String(msg.CallID)
			input = append(input, out)
		default:
			return p, fmt.Errorf("message with unknown role %q", msg.Role)
		}
	}
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	return p, nil
}

// RefusedByFilterResponses is the refusal text when the Responses API's
// content filter stopped the answer without a refusal of the model's own.
const RefusedByFilterResponses = "the provider's content filter stopped the answer (incomplete: content_filter)"

func responseReply(out *responses.Response) (*loop.Reply, error) {
	if out == nil {
		return nil, fmt.Errorf("the response is empty")
	}
	u := out.Usage
	reply := &loop.Reply{
		Truncated: out.IncompleteDetails.Reason == "max_output_tokens",
		Usage: loop.TokenUsage{
			InputTokens:       model.Tokens(u.InputTokens),
			CachedInputTokens: model.Tokens(u.InputTokensDetails.CachedTokens),
			CacheWriteTokens:  model.Tokens(u.InputTokensDetails.CacheWriteTokens),
			OutputTokens:      model.Tokens(u.OutputTokens),
		},
	}
	var text, refusal strings.Builder
	for _, item := range out.Output {
		switch item.Type {
		case "message":
			for _, c := range item.AsMessage().Content {
				switch c.Type {
				case "output_text":
					text.WriteString(c.Text)
				case "refusal":
					refusal.WriteString(c.Refusal)
				}
			}
		case "function_call":
			fc := item.AsFunctionCall()
			reply.ToolCalls = append(reply.ToolCalls, loop.ToolCall{Name: fc.Name, Arguments: model.Arguments([]byte(fc.Arguments))})
		case "reasoning":
			r := item.AsReasoning()
			var summary []string
			for _, s := range r.Summary {
				summary = append(summary, s.Text)
			}
			reply.Reasoning = append(reply.Reasoning, loop.Reasoning{Signature: r.ID, Redacted: r.EncryptedContent, Text: strings.Join(summary, "\n\n")})
		default:
			return nil, fmt.Errorf("the model returned a %q item, but only function tools are offered", item.Type)
		}
	}
	reply.Content, reply.Refusal = text.String(), refusal.String()
	if out.IncompleteDetails.Reason == "content_filter" && reply.Refusal == "" {
		reply.Refusal = RefusedByFilterResponses
	}
	return reply, nil
}

// anyMap is a schema's members as the SDK's Responses params take them;
// each value keeps its bytes, so the request's tools are the same bytes
// on every turn.
func anyMap(m map[string]json.RawMessage) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
