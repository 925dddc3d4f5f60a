package loop

// Overheads of the estimate, in tokens, for what a provider adds around the
// text: role markers, separators, the framing of tool definitions and
// calls, and the instructions a provider prepends when tools are offered.
const (
	estimateBase         = 64
	estimatePerMessage   = 16
	estimatePerToolCall  = 16
	estimatePerTool      = 16
	estimateToolPreamble = 512
)

// ByteEstimator is the engine's token estimator, the one every provider
// shares (WithEstimator replaces it, for a test or a provider with a
// tokenizer of its own).
type ByteEstimator struct{}

var _ MessageEstimator = ByteEstimator{}

// EstimateInputTokens is a conservative estimate of the input tokens a
// provider will count for req: one token per byte of all the text sent
// (system prompt, tool names, descriptions and schemas, message contents,
// tool call names, ids and arguments), plus fixed overheads per request,
// message, tool and tool call.
//
// Why it is never below the real count for ordinary text: the tokenizers
// these providers use (byte-level BPE, or SentencePiece with byte
// fallback) map every token to at least one byte of UTF-8 text, so text
// of n bytes never becomes more than n tokens. What the provider adds
// around the text (role markers, tool framing; Anthropic documents a tool
// use system prompt of a few hundred tokens) is bounded by the overheads,
// which are several times the documented figures. The estimate is meant
// for admission, where overestimating only reserves budget early; it
// typically runs three to four times the real count for English text.
//
// It does not cover content that is not text (images, audio), which
// AgentRun does not send, nor a server whose chat template injects a long
// default system prompt of its own.
func (ByteEstimator) EstimateInputTokens(req *Request) int64 {
	if req == nil {
		return 0
	}
	n := int64(estimateBase + len(req.System))
	if len(req.Tools) > 0 {
		n += estimateToolPreamble
	}
	for _, t := range req.Tools {
		n += estimatePerTool + int64(len(t.Name)+len(t.Description)+len(t.Parameters))
	}
	for i := range req.Messages {
		n += ByteEstimator{}.EstimateMessageTokens(&req.Messages[i])
	}
	return n
}

// EstimateMessageTokens is one message's share of EstimateInputTokens, so
// that the engine keeps a running total as its transcript grows.
func (ByteEstimator) EstimateMessageTokens(m *Message) int64 {
	n := estimatePerMessage + int64(len(m.Content)+len(m.CallID)+len(m.Tool))
	for _, c := range m.ToolCalls {
		n += estimatePerToolCall + int64(len(c.ID)+len(c.Name)+len(c.Arguments))
	}
	return n
}
