// Package anthropic is the model provider for the Anthropic Messages API,
// built on the official SDK, github.com/anthropics/anthropic-sdk-go.
//
// A request becomes one message with client tools: the goal and other user
// text as user turns, each assistant turn as its text and tool_use blocks
// (ids are the harness's call ids), and the results of a turn's calls as
// tool_result blocks in ONE following user turn, in the order of the calls
// and before any text, as the API requires. One ephemeral cache breakpoint
// marks the end of the part of the request that is the same on every turn.
package anthropic

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
)

// Name is the provider's name, as in spec.model.provider and in errors.
const Name = "anthropic"

// Model calls the Anthropic Messages API. It is safe for concurrent use.
type Model struct {
	name   string
	caller *model.Caller
	client *sdk.Client
	// auth returns the options that authenticate one call with key, the
	// credential Caller fetched for it; ctx is the call's.
	auth func(ctx context.Context, key string) []option.RequestOption
	// credential, when set, fetches each call's credential instead of
	// the configured KeySource (a cloud platform's token or secret).
	credential model.KeySource
}

var _ loop.Model = (*Model)(nil)

// New returns a provider for cfg. The key is not read here but at every
// call. The SDK's environment defaults (ANTHROPIC_API_KEY, profiles on
// disk, ANTHROPIC_BASE_URL ...) are switched off: a run uses exactly the
// key and endpoint it was configured with.
func New(cfg model.Config) (*Model, error) {
	caller, err := model.NewCaller(Name, cfg)
	if err != nil {
		return nil, err
	}
	cfg = caller.Config()
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithMaxRetries(cfg.MaxRetries),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	key := model.ClientKey{Provider: Name, BaseURL: cfg.BaseURL, MaxRetries: cfg.MaxRetries, HTTPClient: cfg.HTTPClient}
	client := model.SharedClient(cfg.Clients, key, func() *sdk.Client { c := sdk.NewClient(opts...); return &c })
	return &Model{name: Name, caller: caller, client: client, auth: apiKey}, nil
}

// apiKey sends the key in the header the Messages API documents for API
// keys, or no key at all for a gateway that needs none.
func apiKey(_ context.Context, key string) []option.RequestOption {
	if key == "" {
		return nil
	}
	return []option.RequestOption{option.WithHeader("X-Api-Key", key)}
}

// Pricing completes the run's prices with what Anthropic bills that the
// manifest may leave unpriced: cache writes, at 1.25 times the input rate.
func (m *Model) Pricing(p loop.Pricing) loop.Pricing {
	if p.CacheWrite == 0 {
		p.CacheWrite = p.Input + (p.Input+3)/4
	}
	return p
}

// Complete creates one message. Transport failures are retried by the
// SDK; what still fails is a *model.ProviderError.
func (m *Model) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	params, err := buildParams(req, m.caller.ModelName(req.Model))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.name, err)
	}
	if err := thinking(&params, m.caller.Config().ThinkingBudget); err != nil {
		return nil, fmt.Errorf("%s: %w", m.name, err)
	}
	send := func(ctx context.Context, key string, record model.Middleware) (*sdk.Message, error) {
		// The platform's options come first: their middleware (which
		// moves the model into the path and signs the request) runs
		// before record, which sees each attempt as it is sent.
		opts := append(m.auth(ctx, key), option.WithMiddleware(record))
		if d, ok := ctx.Deadline(); ok {
			// The engine's deadline bounds the call; telling the SDK
			// also stops it refusing large max_tokens without streaming.
			opts = append(opts, option.WithRequestTimeout(time.Until(d)))
		}
		return m.client.Messages.New(ctx, params, opts...)
	}
	if m.credential != nil {
		// A place for a credential that is more than the secret the
		// caller scrubs (Bedrock's signing key id and session token).
		ctx = context.WithValue(ctx, fetchedKey{}, &aws.Credentials{})
	}
	return model.Answer(ctx, m.caller, m.credential, send, toReply)
}

func buildParams(req *loop.Request, modelName string) (sdk.MessageNewParams, error) {
	if req.MaxOutputTokens <= 0 {
		// The API requires a limit; the engine always sets one.
		return sdk.MessageNewParams{}, fmt.Errorf("the request sets no maxOutputTokens")
	}
	p := sdk.MessageNewParams{
		Model:     sdk.Model(modelName),
		MaxTokens: req.MaxOutputTokens,
	}
	for _, t := range req.Tools {
		tool, err := toolParam(t)
		if err != nil {
			return p, err
		}
		p.Tools = append(p.Tools, sdk.ToolUnionParam{OfTool: tool})
	}
	// req.Output (a typed output) is not sent as output_config.format:
	// Claude's structured outputs accept only a subset of JSON Schema
	// (no numeric or length bounds) and not every Claude model, nor every
	// cloud that serves Claude, has them. The system prompt asks for the
	// schema, and the engine validates every answer.
	if req.System != "" {
		p.System = []sdk.TextBlockParam{{Text: req.System}}
	}
	// The API reads a request as tools, then system, then messages, and
	// caches the prefix up to a breakpoint. Tools and system are the same
	// on every turn of a run, so one breakpoint at the end of the later of
	// the two caches both.
	switch {
	case len(p.System) > 0:
		p.System[0].CacheControl = sdk.NewCacheControlEphemeralParam()
	case len(p.Tools) > 0:
		p.Tools[len(p.Tools)-1].OfTool.CacheControl = sdk.NewCacheControlEphemeralParam()
	}
	msgs, err := messages(req.Messages)
	if err != nil {
		return p, err
	}
	p.Messages = msgs
	return p, nil
}

// thinking turns on extended thinking with budget tokens, which count
// against max_tokens (and are billed as output tokens): a budget that
// leaves no room for the answer is refused here rather than by the API.
func thinking(p *sdk.MessageNewParams, budget int64) error {
	if budget <= 0 {
		return nil
	}
	if budget >= p.MaxTokens {
		return fmt.Errorf("the thinking budget of %d tokens is not below the output limit of %d tokens", budget, p.MaxTokens)
	}
	p.Thinking = sdk.ThinkingConfigParamOfEnabled(budget)
	return nil
}

func toolParam(t loop.ToolSchema) (*sdk.ToolParam, error) {
	members, err := model.Schema(t.Parameters)
	if err != nil {
		return nil, fmt.Errorf("tool %q: %w", t.Name, err)
	}
	if string(members["type"]) != `"object"` {
		return nil, fmt.Errorf("tool %q: the parameters schema must have type object", t.Name)
	}
	// The schema goes out as one JSON value whose top-level members are in
	// sorted order and whose nested values are as written, so it is the
	// same bytes on every turn. (The SDK's ToolInputSchemaParam.ExtraFields
	// would serialize in map order, which changes from call to call and
	// would defeat the prompt cache.)
	raw, err := json.Marshal(members)
	if err != nil {
		return nil, fmt.Errorf("tool %q: %w", t.Name, err)
	}
	schema := param.Override[sdk.ToolInputSchemaParam](json.RawMessage(raw))
	tool := &sdk.ToolParam{Name: t.Name, InputSchema: schema}
	if t.Description != "" {
		tool.Description = sdk.String(t.Description)
	}
	return tool, nil
}

// messages maps the transcript to alternating turns. Tool results and user
// text that follow each other go into one user turn, tool_result blocks
// first. An assistant message with neither text nor calls (an empty
// answer) is left out, as the API rejects empty turns.
func messages(transcript []loop.Message) ([]sdk.MessageParam, error) {
	var out []sdk.MessageParam
	var results, texts []sdk.ContentBlockParamUnion
	flushUser := func() {
		if len(results)+len(texts) > 0 {
			out = append(out, sdk.NewUserMessage(append(results, texts...)...))
		}
		results, texts = nil, nil
	}
	for _, msg := range model.OrderToolResults(transcript) {
		switch msg.Role {
		case loop.RoleUser:
			if msg.Content != "" {
				texts = append(texts, sdk.NewTextBlock(msg.Content))
			}
		case loop.RoleTool:
			results = append(results, toolResult(msg))
		case loop.RoleAssistant:
			var blocks []sdk.ContentBlockParamUnion
			if msg.Content != "" {
				blocks = append(blocks, sdk.NewTextBlock(msg.Content))
			}
			for _, c := range msg.ToolCalls {
				blocks = append(blocks, sdk.NewToolUseBlock(c.ID, objectInput(c.Arguments), c.Name))
			}
			if len(blocks) == 0 {
				continue
			}
			// The thinking comes first, unchanged, as it was returned:
			// with thinking on, the API requires the thinking blocks of
			// the turn whose tool calls are being answered, signatures
			// intact (those of earlier turns it ignores).
			if len(msg.Reasoning) > 0 {
				blocks = append(thinkingBlocks(msg.Reasoning), blocks...)
			}
			flushUser()
			out = append(out, sdk.NewAssistantMessage(blocks...))
		default:
			return nil, fmt.Errorf("message with unknown role %q", msg.Role)
		}
	}
	flushUser()
	return out, nil
}

func thinkingBlocks(rs []loop.Reasoning) []sdk.ContentBlockParamUnion {
	out := make([]sdk.ContentBlockParamUnion, 0, len(rs))
	for _, r := range rs {
		if r.Redacted != "" {
			out = append(out, sdk.NewRedactedThinkingBlock(r.Redacted))
		} else {
			out = append(out, sdk.NewThinkingBlock(r.Signature, r.Text))
		}
	}
	return out
}

func toolResult(msg loop.Message) sdk.ContentBlockParamUnion {
	block := sdk.ToolResultBlockParam{ToolUseID: msg.CallID}
	// An empty text block is rejected; an empty result is sent without
	// content.
	if msg.Content != "" {
		block.Content = []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: msg.Content}}}
	}
	if msg.Status.IsError() {
		block.IsError = sdk.Bool(true)
	}
	return sdk.ContentBlockParamUnion{OfToolResult: &block}
}

// objectInput is the tool_use input: the API requires a JSON object, so
// arguments that are not one (only possible if the transcript came from
// elsewhere) are sent as an empty object.
func objectInput(args json.RawMessage) json.RawMessage {
	a := model.Arguments(args)
	if len(a) == 0 || a[0] != '{' {
		return json.RawMessage("{}")
	}
	return a
}

func toReply(out *sdk.Message) (*loop.Reply, error) {
	if out == nil {
		return nil, fmt.Errorf("the response is empty")
	}
	u := out.Usage
	reply := &loop.Reply{
		Usage: loop.TokenUsage{
			// input_tokens counts only the tokens after the last cache
			// breakpoint; the total input adds what was read from and
			// written to the cache. Each count is clamped at 0 before the
			// sum (model.Tokens), so a negative one lowers nothing.
			InputTokens:       model.Tokens(u.InputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens),
			CachedInputTokens: model.Tokens(u.CacheReadInputTokens),
			CacheWriteTokens:  model.Tokens(u.CacheCreationInputTokens),
			OutputTokens:      model.Tokens(u.OutputTokens),
		},
	}
	for _, block := range out.Content {
		switch block.Type {
		case "text":
			reply.Content += block.Text
		case "tool_use":
			reply.ToolCalls = append(reply.ToolCalls, loop.ToolCall{
				Name:      block.Name,
				Arguments: model.Arguments(block.Input),
			})
		case "thinking":
			// Its tokens are in output_tokens already.
			reply.Reasoning = append(reply.Reasoning, loop.Reasoning{Text: block.Thinking, Signature: block.Signature})
		case "redacted_thinking":
			reply.Reasoning = append(reply.Reasoning, loop.Reasoning{Redacted: block.Data})
		}
	}
	switch out.StopReason {
	case sdk.StopReasonMaxTokens, sdk.StopReasonModelContextWindowExceeded:
		reply.Truncated = true
	case sdk.StopReasonRefusal:
		reply.Refusal = refusal(out, reply.Content)
	}
	return reply, nil
}

// refusal is the text that explains a refusal: the model's own words, the
// API's explanation, or a plain statement.
func refusal(out *sdk.Message, text string) string {
	switch {
	case text != "":
		return text
	case out.StopDetails.Explanation != "":
		return out.StopDetails.Explanation
	case out.StopDetails.Category != "":
		return fmt.Sprintf("the model declined to answer (%s)", out.StopDetails.Category)
	}
	return "the model declined to answer (stop_reason refusal)"
}
