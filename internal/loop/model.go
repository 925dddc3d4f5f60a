package loop

// What the engine asks of a model and what comes back: the Model
// interface, requests, messages, tool calls, replies and their usage.

import (
	"context"
	"encoding/json"
	"time"
)

// Model is one model provider. Complete makes exactly one call; retrying
// it is the engine's business (ModelConfig.Retry). An error that
// implements TransientError and says so is retried with backoff; any other
// error, or one that stays after the retries, ends the run as ToolFailure.
type Model interface {
	Complete(ctx context.Context, req *Request) (*Reply, error)
}

// TransientError is implemented by model errors that can say whether an
// unchanged retry may succeed (a connection refused, a timeout, HTTP 408,
// 429 or 5xx) and how long the provider asked to wait first (its
// Retry-After; zero when it did not say).
type TransientError interface {
	error
	Transient() bool
	RetryAfter() time.Duration
}

// TokenEstimator may be implemented by a Model to estimate a request's
// input tokens for admission. The estimate must not be lower than what
// the provider will report.
type TokenEstimator interface {
	EstimateInputTokens(req *Request) int64
}

// MessageEstimator is a TokenEstimator whose estimate is a sum over the
// request's messages: EstimateInputTokens(req) equals the estimate of req
// with the goal as its only message plus EstimateMessageTokens of every
// other message. The engine then keeps a running total as the transcript
// grows instead of estimating the whole transcript every turn, and builds
// the estimate of a request that extends the one before on the provider's
// count of that one (see PromptCount): EstimateMessageTokens must then
// not be below what a message adds to the provider's count.
type MessageEstimator interface {
	TokenEstimator
	EstimateMessageTokens(m *Message) int64
}

// Request is what the engine sends to the model. System and Tools form a
// byte-stable prefix across turns so provider prompt caches hit; Messages
// start with the goal and then replay the transcript.
type Request struct {
	Model           string
	System          string
	Tools           []ToolSchema
	Messages        []Message
	MaxOutputTokens int64
	// EarlierAnswers counts the model's answers in earlier trials, which
	// Messages no longer replay. Providers ignore it; a scripted model
	// counts it to keep its place in the script.
	EarlierAnswers int
	// Summary marks a summary call (strategy summarize): the model is
	// asked to condense the messages before the last one. Providers
	// ignore it; a scripted model answers it without using its script.
	Summary bool
	// Output is the JSON Schema the final answer must validate against
	// (Config.Output), compact; nil when any text will do. A provider
	// with structured output constrains the answer to it; the system
	// prompt asks for it either way.
	Output json.RawMessage
	// Fallback says which of the run's models the request is for: 0 is
	// Config.Model, i the i-th of Config.Fallbacks. Attempt is the
	// attempt of the turn's call on that model, from 1. The caller calls
	// the model Fallback names; providers ignore both.
	Fallback int
	Attempt  int
}

// ToolSchema is how a tool is offered to the model.
type ToolSchema struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// Role of a transcript message.
type Role string

// Message roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of the conversation the model sees.
type Message struct {
	Role    Role   `json:"role"`
	Turn    int    `json:"turn,omitempty"`
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message proposed.
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// CallID links a tool message to the call it answers.
	CallID string `json:"callID,omitempty"`
	// Tool is the name of the tool a tool message answers.
	Tool string `json:"tool,omitempty"`
	// Status of a tool message: how its call ended.
	Status ObsStatus `json:"status,omitempty"`
	// Arguments, on a tool message, are the arguments its call ran with
	// (or was refused with) when a person approved it with changes:
	// the assistant message before holds what the model proposed.
	// EditedBy is who changed them. Both are empty otherwise.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	EditedBy  string          `json:"editedBy,omitempty"`
	// Record, on a tool message of a call that was vetted, is what the
	// engine knows of the call: its verdict, the rule that decided it,
	// how long it ran and how large its result was. A reader of the
	// transcript (the console's timeline) sees every call's with no
	// event per call.
	Record *CallRecord `json:"record,omitempty"`
	// Reasoning is the thinking a reasoning model returned with an
	// assistant message, kept so that it can be passed back with it on
	// later turns, as the provider requires.
	Reasoning []Reasoning `json:"reasoning,omitempty"`
}

// CallRecord is a bounded record of one call: four short fields, so that
// it stays within a transcript chunk's budget however many calls a run
// makes.
type CallRecord struct {
	// Verdict is the vetting decision (allow, deny, ask, block).
	Verdict Decision `json:"verdict,omitempty"`
	// Rule names what decided, as Call.Rule.
	Rule string `json:"rule,omitempty"`
	// DurationMs is how long its last attempt ran, in milliseconds,
	// rounded up; 0 for a call that did not run.
	DurationMs int64 `json:"durationMs,omitempty"`
	// ResultBytes is the size of its whole result, before truncation; 0
	// for a call that did not run.
	ResultBytes int64 `json:"resultBytes,omitempty"`
}

// Reasoning is one block of a reasoning model's thinking, as the provider
// returned it. It is passed back unchanged: Claude checks the signature
// of each thinking block sent back with its tool calls, and refuses a
// block whose text or signature changed.
type Reasoning struct {
	// Text is the model's thinking (Claude's summary of it).
	Text string `json:"text,omitempty"`
	// Signature is the provider's seal on Text.
	Signature string `json:"signature,omitempty"`
	// Redacted is the encrypted content of thinking the provider
	// withheld (Claude's redacted_thinking), passed back as is.
	Redacted string `json:"redacted,omitempty"`
}

// ToolCall is one call proposed by the model. ID is the harness-made id
// (t<turn>-c<index>), never the provider's.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Reply is the model's answer to one Request.
type Reply struct {
	// Content is the text of the answer.
	Content string
	// ToolCalls are the proposed calls; their ID fields are ignored.
	ToolCalls []ToolCall
	// Refusal is set when the model declined to answer.
	Refusal string
	// Truncated is set when the answer hit the output-token limit.
	Truncated bool
	// Reasoning is the thinking that came with the answer, which the
	// engine keeps on the answer's assistant message. Its tokens are
	// part of Usage.OutputTokens, as the providers bill them.
	Reasoning []Reasoning
	Usage     TokenUsage
}

// TokenUsage is what the provider reported for one call.
type TokenUsage struct {
	InputTokens int64
	// CachedInputTokens is the part of InputTokens read from the cache.
	CachedInputTokens int64
	// CacheWriteTokens is the part of InputTokens written to the cache.
	CacheWriteTokens int64
	OutputTokens     int64
}
