package modeltest

import (
	"context"

	"github.com/agentrun/agentrun/internal/loop"
)

// Framing a chat template adds around the text, in tokens, as InputTokens
// counts it. ToolPreambleTokens is Anthropic's documented tool use system
// prompt (346 tokens with tool_choice auto).
const (
	RequestTokens      = 3
	ToolPreambleTokens = 346
	ToolTokens         = 5
	MessageTokens      = 4
	CallTokens         = 6
)

// InputTokens stands in for a provider's count of a request's input
// tokens, for tests that want the usage a real tokenizer would report
// without one: a token per four bytes of text (rounded up, piece by
// piece), plus the framing of the request, each tool, message and tool
// call, and a tool use preamble when tools are offered. Like a real
// count it is a sum over the request's parts: a request that extends
// another counts what the other counted plus its new messages'.
func InputTokens(req *loop.Request) int64 {
	n := RequestTokens + quarter(len(req.System))
	if len(req.Tools) > 0 {
		n += ToolPreambleTokens
	}
	for _, t := range req.Tools {
		n += ToolTokens + quarter(len(t.Name)+len(t.Description)+len(t.Parameters))
	}
	for i := range req.Messages {
		n += MessageInputTokens(&req.Messages[i])
	}
	return n
}

// MessageInputTokens is one message's share of InputTokens.
func MessageInputTokens(m *loop.Message) int64 {
	n := MessageTokens + quarter(len(m.Content)) + quarter(len(m.CallID)+len(m.Tool))
	for _, c := range m.ToolCalls {
		n += CallTokens + quarter(len(c.ID)+len(c.Name)+len(c.Arguments))
	}
	return n
}

func quarter(bytes int) int64 { return int64(bytes+3) / 4 }

// Counting answers as Model does, but reports InputTokens of each request
// as its input (none of it cached): a scripted model with the input
// counts a provider would report.
type Counting struct {
	Model loop.Model
}

// Complete asks Model and replaces the reply's input count.
func (c Counting) Complete(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	r, err := c.Model.Complete(ctx, req)
	if err != nil {
		return nil, err
	}
	r.Usage.InputTokens, r.Usage.CachedInputTokens, r.Usage.CacheWriteTokens = InputTokens(req), 0, 0
	return r, nil
}
