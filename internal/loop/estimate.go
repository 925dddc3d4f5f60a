package loop

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

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
// typically runs three to four times the real count for English text,
// which is why the engine bounds a request whole only when it cannot
// build on the provider's count of the request before (see PromptCount).
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
	n += int64(len(req.Output))
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
	// Thinking passed back with a message is input again (Claude counts
	// that of the turn being answered; its signature is counted too, so
	// the estimate stays above either way).
	for _, r := range m.Reasoning {
		n += int64(len(r.Text) + len(r.Signature) + len(r.Redacted))
	}
	return n
}

// promptFP fingerprints a request: what precedes its messages, then its
// messages one at a time, each fingerprint hashing the one before it.
type promptFP [16]byte

func (f promptFP) String() string { return hex.EncodeToString(f[:]) }

// is reports whether s is f's String (without building it).
func (f promptFP) is(s string) bool {
	var b [2 * len(promptFP{})]byte
	hex.Encode(b[:], f[:])
	return string(b[:]) == s
}

// fpStart fingerprints what precedes a request's messages: who counts it
// (provider and model), the system prompt and the tools offered.
func fpStart(provider string, req *Request) promptFP {
	b := appendField(nil, "agentrun/prompt/v1")
	b = appendField(b, provider)
	b = appendField(b, req.Model)
	b = appendField(b, req.System)
	b = binary.AppendUvarint(b, uint64(len(req.Tools)))
	for _, t := range req.Tools {
		b = appendField(appendField(appendField(b, t.Name), t.Description), string(t.Parameters))
	}
	if len(req.Output) > 0 {
		b = appendField(appendField(b, "output"), string(req.Output))
	}
	sum := sha256.Sum256(b)
	return promptFP(sum[:16])
}

// fpChain extends fingerprints message by message, reusing its buffer.
type fpChain struct{ buf []byte }

// next fingerprints the messages fingerprinted by prev followed by m:
// everything of m that a provider is sent.
func (c *fpChain) next(prev promptFP, m *Message) promptFP {
	b := append(c.buf[:0], prev[:]...)
	b = appendField(b, string(m.Role))
	b = appendField(b, m.Content)
	b = appendField(b, m.CallID)
	b = appendField(b, m.Tool)
	b = appendField(b, string(m.Status))
	b = binary.AppendUvarint(b, uint64(len(m.ToolCalls)))
	for _, tc := range m.ToolCalls {
		b = appendField(appendField(appendField(b, tc.ID), tc.Name), string(tc.Arguments))
	}
	c.buf = b
	sum := sha256.Sum256(b)
	return promptFP(sum[:16])
}

// appendField appends s to b with its length before it, so that no two
// sequences of fields hash the same bytes.
func appendField(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// inputEstimate is the estimate of a request's input tokens, and the
// request's identity for the estimate of the next one (nil when the
// estimator bounds whole requests only).
type inputEstimate struct {
	tokens int64
	sent   *PromptCount
}

// builtOn is the estimate of a request whose whole bound is full, given
// the fingerprints of its first i+1 messages (fps[i]) and the bound of
// its messages after the goal up to message i (bounds[i], bounds[0] being
// zero): counted's tokens plus the bound of the messages after counted's
// when the request extends counted, never above full; full otherwise.
func builtOn(counted *PromptCount, full int64, fps []promptFP, bounds []int64) inputEstimate {
	n := len(fps)
	est := inputEstimate{tokens: full, sent: &PromptCount{Messages: n, Prefix: fps[n-1].String(), Bound: full}}
	c := counted
	if c == nil || c.Tokens <= 0 || c.Messages < 1 || c.Messages > n || !fps[c.Messages-1].is(c.Prefix) {
		return est
	}
	est.sent.Base = c.Tokens
	if c.Tokens < full { // (a larger count is never added to: full is the most reserved)
		est.tokens = min(full, c.Tokens+bounds[n-1]-bounds[c.Messages-1])
	}
	return est
}

// PromptCount identifies one model request of the run by its messages
// and, once the reply is read, keeps the provider's count of its input.
// It is part of the State, so a resumed run estimates as it would have.
//
// The input estimate of a request that extends the one before it is built
// on the provider's count of that one: the count it reported, plus the
// bound (EstimateMessageTokens) of only the messages added since, never
// more than the bound of the whole request. A request extends the one
// before when it is sent to the same provider and model with the same
// system prompt and tools, and its messages begin with all of that one's;
// the engine checks it by fingerprint (promptFP). Anything else is bounded
// whole: the first request, a new trial of a verified run (which no longer
// replays the trial before, unless the request before sent the goal
// alone), the planner after the solver or the solver
// after the planner, the call made again after a call was lost, and a
// request after a reply that reported no input count. With a provider
// that counts a prompt the same way each time it is sent, the estimate
// stays above the count, and its slack is what the bound adds to the new
// messages only, instead of three to four times the whole prompt.
//
// A provider whose counts contradict each other (a server that counts
// only the part of the prompt it did not have cached, and the whole
// prompt once its cache is gone) is trusted until they do: a count below
// the one its request's estimate was built on, or above that estimate,
// bounds every later request of the run whole (State.WholeEstimates).
type PromptCount struct {
	// Messages is how many messages the request had, the goal included.
	Messages int `json:"messages"`
	// Prefix fingerprints the request: the provider and model, the
	// system prompt, the tools offered and the Messages messages (the
	// first 16 bytes of a SHA-256 chain, in hex).
	Prefix string `json:"prefix"`
	// Tokens is the input tokens the provider reported for the request,
	// its cached part included (State.Counted only).
	Tokens int64 `json:"tokens,omitempty"`
	// Base is the count the request's estimate was built on, or zero when
	// its estimate was the bound of the whole request; Bound is the bound
	// of the whole request (State.InFlight only).
	Base  int64 `json:"base,omitempty"`
	Bound int64 `json:"bound,omitempty"`
}
