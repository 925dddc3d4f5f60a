package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentrun/agentrun/internal/clip"
)

// Outcome is the single named reason a run ended. The set is closed: a
// finished run carries exactly one of these, with a human-readable reason.
type Outcome string

// The eight terminal outcomes, in the spelling of the AgentRun API.
const (
	// Completed: the model gave a final, non-truncated answer (and, with a
	// verifier, the verifier verified it).
	Completed Outcome = "Completed"
	// BudgetExhausted: admitting the next step would pass a hard ceiling.
	BudgetExhausted Outcome = "BudgetExhausted"
	// GuardrailStop: a guardrail with severity halt fired, or the model refused.
	GuardrailStop Outcome = "GuardrailStop"
	// LoopDetected: the same canonical call signature, or a short cycle of
	// them, repeated past the configured threshold.
	LoopDetected Outcome = "LoopDetected"
	// ApprovalDenied: a person ended the run (cancel, or an approval answered stop).
	ApprovalDenied Outcome = "ApprovalDenied"
	// Escalated: an ASK waited past the approval timeout, the model handed
	// the task to a person, or the verifier verified no answer in the
	// trials allowed (or its score stalled).
	Escalated Outcome = "Escalated"
	// ToolFailure: the model provider stayed unavailable after its retries.
	ToolFailure Outcome = "ToolFailure"
	// Error: a defect in the harness itself, or a model provider that
	// reported usage far above what its call reserved (see
	// InputToleranceFactor).
	Error Outcome = "Error"
)

// Outcomes lists every outcome, in the order of the API's table.
var Outcomes = []Outcome{Completed, BudgetExhausted, GuardrailStop, LoopDetected, ApprovalDenied, Escalated, ToolFailure, Error}

// Decision is a policy verdict for one proposed call.
type Decision string

// Policy decisions.
const (
	Allow Decision = "allow"
	Deny  Decision = "deny"
	Ask   Decision = "ask"
	// Blocked is no policy decision: it is the verdict recorded on a
	// call a guardrail blocked (a guardrail with severity block).
	Blocked Decision = "block"
)

// Answer is a person's reply to an ASK.
type Answer string

// The answers a person can give to a pending call.
const (
	Approve    Answer = "approve"
	DenyAnswer Answer = "deny"
	Stop       Answer = "stop"
)

// Severity of a guardrail.
type Severity string

// Guardrail severities.
const (
	// Block refuses this call only; the model sees why.
	Block Severity = "block"
	// Halt ends the run before any call of the batch runs.
	Halt Severity = "halt"
)

// Dimension names one budget ceiling, as used in the API's budget.soft list.
type Dimension string

// The budget dimensions, in the order admission checks them.
const (
	DimTurns     Dimension = "turns"
	DimTokens    Dimension = "tokens"
	DimWallClock Dimension = "wallClock"
	DimCost      Dimension = "cost"
	DimToolCalls Dimension = "toolCalls"
	// DimPerTool is the per-tool call limit (perTool and defaultToolLimit).
	DimPerTool Dimension = "perTool"
)

// Config is everything the engine needs to know about one run. It is built
// once from the AgentRun's spec (or a manifest for agentrun local) and does
// not change while the run lives.
type Config struct {
	// RunID identifies the run in the idempotency keys of its tool calls
	// (see IdempotencyKey): the operator passes the AgentRun's UID. When it
	// is empty, the engine gives the run a random id on its first step.
	// Either way the id is kept in the State, so a resumed run keeps it.
	RunID        string
	Goal         string
	Instructions string
	Model        ModelConfig
	Budget       Budget
	Loop         LoopDetection
	Tools        []ToolSpec
	Policy       Policy
	Guardrails   []Guardrail
	// ApprovalTimeout ends the run Escalated when an ASK waits longer.
	ApprovalTimeout time.Duration
	// VetTimeout bounds the vetting of one step (a reply's batch, a plan,
	// a wave of plan steps): a policy condition not yet evaluated when it
	// passes sends its call to a person, as a condition that cannot be
	// evaluated does. Zero means DefaultVetTimeout.
	VetTimeout time.Duration
	// ToolAllowance is reserved for tools before the model call of every
	// turn, and replaced by the approved batch's declared maxima after
	// vetting. Zero by default.
	ToolAllowance Allowance
	// Verify, when set, makes a verifier judge every final answer (see
	// Verify); nil means the model's final answer completes the run.
	Verify *Verify
	// Strategy is ReAct (the default, also when empty) or PlanExecute;
	// Plan bounds the plans of a PlanExecute run.
	Strategy Strategy
	Plan     PlanConfig
	// Context bounds what one request may hold (see ContextPolicy).
	Context ContextPolicy
}

// ModelConfig describes the model calls of a run.
type ModelConfig struct {
	Provider        string
	Name            string
	MaxOutputTokens int64
	// Timeout bounds one model call; it is also the wall-clock reservation
	// for that call.
	Timeout time.Duration
	Pricing Pricing
	// Retry bounds the retries of a model call that failed transiently
	// (the provider unreachable, overloaded or rate limited).
	Retry RetryPolicy
}

// RetryPolicy says how a call that failed transiently is tried again: at
// most MaxAttempts attempts in all (the first included), waiting an
// exponentially growing, jittered backoff between them that starts at
// InitialBackoff and is capped at MaxBackoff, or longer when the
// dependency asked for a longer wait (Retry-After). Every attempt is work
// like any other: it is reserved against the ceilings before it is made.
type RetryPolicy struct {
	MaxAttempts    int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// MutatingSafe lets a mutating tool's calls be retried: the tool
	// declares that it deduplicates by the idempotency key every attempt
	// carries. Without it a mutating call is tried once. (Tools only.)
	MutatingSafe bool
}

// Pricing is in US dollars per million tokens.
type Pricing struct {
	Input       Money
	Output      Money
	CachedInput Money
	// CacheWrite prices input tokens written to the provider's cache; zero
	// means the input rate, unless the provider's adapter prices them
	// (anthropic.Model.Pricing: 1.25 times input).
	CacheWrite Money
}

// Budget is the vector of ceilings. MaxTurns must be at least 1. MaxTokens
// and MaxWallClock cannot be zero (no run could do anything): zero means
// unset, and Normalize puts the documented default. The ceilings where zero
// is a real limit are pointers: nil is unset (the default applies), and a
// zero means zero (no money may be spent; no tool, or no tool outside
// PerTool, may be called). A ceiling never fails open.
type Budget struct {
	MaxTurns         int
	MaxTokens        int64
	MaxWallClock     time.Duration
	MaxCost          *Money
	MaxToolCalls     *int
	PerTool          map[string]int
	DefaultToolLimit *int
	// Soft names ceilings that only warn (at 80% and at 100%), never stop.
	Soft []Dimension
}

// Allowance is a tool reservation: calls, money and time.
type Allowance struct {
	Calls     int
	Cost      Money
	WallClock time.Duration
}

// LoopDetection configures the repeat and cycle detector.
type LoopDetection struct {
	// Threshold: the same signature this many times within Window stops
	// the run (an exact repeat, or a cycle whose calls came round this often).
	Threshold int
	// Window is counted in proposed calls. It must be at least
	// Threshold*MaxPeriod, which is its default.
	Window int
	// MaxPeriod is the longest cycle the window is sized for: a cycle of
	// up to MaxPeriod calls stops at the same depth as an exact repeat.
	MaxPeriod int
	// IgnoreArguments are volatile argument names left out of signatures.
	IgnoreArguments []string
}

// ToolSpec is what the engine knows of a tool: its schema for the model and
// the metadata that vetting, budgeting and acting rely on. How the tool is
// executed is the Toolbox's business.
type ToolSpec struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments object.
	Parameters json.RawMessage
	Mutates    bool
	Reversible bool
	MaxCost    Money
	Timeout    time.Duration
	// MaxResultBytes cuts longer results; the cut is marked.
	MaxResultBytes int
	// Repeatable says a dispatched call whose result was lost (a crash) may
	// be dispatched again: true for read-only tools and for executors that
	// adopt the earlier attempt (a Job named after the call).
	Repeatable bool
	// StartupGrace is time an executor may need before the tool's own
	// deadline starts (scheduling a pod, pulling an image).
	StartupGrace time.Duration
	// KillGrace is the time between the SIGTERM a process tool gets at its
	// deadline and the SIGKILL that follows; zero for tools that are not
	// a process (HTTP, MCP, builtin).
	KillGrace time.Duration
	// Retry bounds the retries of a call that failed transiently (see
	// Failure.Transient). A mutating tool's calls are retried only when
	// Retry.MutatingSafe is set.
	Retry RetryPolicy
}

// MaxDuration is the most one call of the tool may take from dispatch to
// result: startup grace, timeout and kill grace. It is what the wall clock
// reserves for the call, so a call that ignores SIGTERM still ends inside
// the reservation.
func (t *ToolSpec) MaxDuration() time.Duration { return t.StartupGrace + t.Timeout + t.KillGrace }

// Policy decides ALLOW, DENY or ASK per call.
type Policy struct {
	Default Decision
	Rules   []Rule
	// Grants waive the irreversible-mutation ASK for these tools.
	Grants []string
}

// Rule is one policy rule; the first rule that matches decides.
type Rule struct {
	// Tools the rule applies to; "*" matches every tool.
	Tools []string
	// When is an optional CEL expression over `args` (the call's arguments).
	When     string
	Decision Decision
	Reason   string
	// Mutating limits the rule to tools that mutate.
	Mutating bool
	// Label names the rule in verdicts, approvals and errors; empty means
	// its place, policy.rules[i].
	Label string
}

// label is how verdicts and errors name the rule at index i.
func (r *Rule) label(i int) string {
	if r.Label != "" {
		return r.Label
	}
	return fmt.Sprintf("policy.rules[%d]", i)
}

// Guardrail is an RE2 pattern over a call's arguments: it fires when it
// matches any string value (decoded text) or the compact JSON of all the
// arguments (sorted keys, normalised numbers, no HTML escaping), ignored
// argument names included.
type Guardrail struct {
	Name     string
	Tools    []string
	Pattern  string
	Severity Severity
	Reason   string
	// On is what the guardrail looks at; empty means the arguments only.
	On []GuardrailTarget
}

// GuardrailTarget is what a guardrail looks at.
type GuardrailTarget string

// The guardrail targets.
const (
	OnArguments GuardrailTarget = "arguments"
	OnResults   GuardrailTarget = "results"
	OnAnswer    GuardrailTarget = "answer"
)

// watches reports whether the guardrail looks at t.
func (g *Guardrail) watches(t GuardrailTarget) bool {
	if len(g.On) == 0 {
		return t == OnArguments
	}
	return slices.Contains(g.On, t)
}

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
	// Reasoning is the thinking a reasoning model returned with an
	// assistant message, kept so that it can be passed back with it on
	// later turns, as the provider requires.
	Reasoning []Reasoning `json:"reasoning,omitempty"`
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

// Invocation asks a Toolbox to run one approved call.
type Invocation struct {
	CallID string
	Tool   string
	// Arguments is the JSON object the model proposed.
	Arguments json.RawMessage
	// IdempotencyKey is unique to the run and the call, and the same for
	// every attempt of the call, retries and restarts included (see
	// loop.IdempotencyKey).
	IdempotencyKey string
	// Attempt is 1 for a call's first attempt, 2 for its first retry ...
	Attempt int
	// Timeout is the tool's own deadline, counted from its start.
	Timeout time.Duration
	// StartupGrace bounds the time before the tool starts (a pod being
	// scheduled); KillGrace is the time between SIGTERM and SIGKILL at the
	// deadline. The three together are the call's reservation on the wall
	// clock (MaxDuration); ExecuteBatch's context ends then.
	StartupGrace   time.Duration
	KillGrace      time.Duration
	MaxResultBytes int
	// Resumed marks a call dispatched again because the result of an
	// earlier dispatch was lost (a restart): the earlier attempt may have
	// started. An executor that may repeat a call only by adopting that
	// attempt (a mutating Job) must never start it anew.
	Resumed bool
}

// MaxDuration is the most the call may take from dispatch to result.
func (inv Invocation) MaxDuration() time.Duration {
	return inv.StartupGrace + inv.Timeout + inv.KillGrace
}

// Toolbox runs approved calls. It must return a Result for every
// invocation; failures are Results, not panics.
type Toolbox interface {
	Execute(ctx context.Context, inv Invocation) Result
}

// ToolboxFunc adapts a function to the Toolbox interface.
type ToolboxFunc func(ctx context.Context, inv Invocation) Result

// Execute calls f.
func (f ToolboxFunc) Execute(ctx context.Context, inv Invocation) Result { return f(ctx, inv) }

// FailureKind classifies a failed tool call so the observation can say what
// happened and whether an unchanged retry can help.
type FailureKind string

// Failure kinds.
const (
	// FailTimeout: the deadline enforced outside the tool was hit.
	FailTimeout FailureKind = "Timeout"
	// FailExit: the tool's process exited non-zero.
	FailExit FailureKind = "ExitCode"
	// FailHTTP: an HTTP tool answered with a non-2xx status.
	FailHTTP FailureKind = "HTTPStatus"
	// FailUnavailable: the tool could not be reached or started.
	FailUnavailable FailureKind = "Unavailable"
	// FailInvalid: the call was malformed (bad arguments, template error).
	FailInvalid FailureKind = "InvalidCall"
	// FailUnknown: the outcome of a dispatched call is unknown (a crash).
	FailUnknown FailureKind = "OutcomeUnknown"
	// FailTool: the tool ran and reported an error of its own (an MCP
	// result with isError set).
	FailTool FailureKind = "ToolError"
)

// Result is what a tool returned.
type Result struct {
	CallID string `json:"callID"`
	// Output is the tool's result text (stdout, response body ...).
	Output []byte `json:"output,omitempty"`
	// ContentType is the media type when known (HTTP tools).
	ContentType string `json:"contentType,omitempty"`
	// Failure is nil for a successful call.
	Failure *Failure `json:"failure,omitempty"`
	// Truncated is set when the executor stopped reading output early
	// (it keeps at most MaxResultBytes+1 bytes); Size is the whole output's
	// length when the executor knows it.
	Truncated bool  `json:"truncated,omitempty"`
	Size      int64 `json:"size,omitempty"`
	// Duration the call took.
	Duration time.Duration `json:"duration,omitempty"`
}

// Preflighter may be implemented by a Toolbox (or one tool's executor) to
// check, once at the start of a run, that every tool it was given exists
// (an MCP server that does not list a declared tool, for instance). A run
// never proceeds silently without a tool it was given.
type Preflighter interface {
	Preflight(ctx context.Context) error
}

// Failure describes why a tool call failed.
type Failure struct {
	Kind FailureKind `json:"kind"`
	// Code is the exit code or HTTP status.
	Code int `json:"code,omitempty"`
	// Detail is a short description (the tail of stderr, the error text).
	Detail string `json:"detail,omitempty"`
	// RetryAfter is how long the dependency asked to wait before another
	// attempt (an HTTP Retry-After); zero when it did not say.
	RetryAfter time.Duration `json:"retryAfter,omitempty"`
}

// Transient reports whether an unchanged retry of the call may succeed:
// the dependency could not be reached or started (Unavailable), did not
// answer in time (Timeout), or answered HTTP 408, 429 or 5xx (except 501
// and 505, which say the request itself cannot be served). Invalid calls,
// exit codes, tool errors and unknown outcomes are not transient.
func (f *Failure) Transient() bool {
	if f == nil {
		return false
	}
	switch f.Kind {
	case FailUnavailable, FailTimeout:
		return true
	case FailHTTP:
		c := f.Code
		return c == 408 || c == 429 || (c >= 500 && c <= 599 && c != 501 && c != 505)
	}
	return false
}

// ExitTempFail is the exit status by which a process tool says that a
// dependency it needs is down and the call may succeed later (EX_TEMPFAIL
// in sysexits.h). It is an Unavailable failure, retried as one: a tool
// whose dependency stays down ends its run ToolFailure, where any other
// non-zero exit is an observation the model reads.
const ExitTempFail = 75

// TempFail is the failure of a process tool that exited ExitTempFail,
// with the tail of its standard error (or a note that it wrote none).
func TempFail(stderrTail string) *Failure {
	d := strings.TrimSpace(stderrTail)
	if d == "" {
		d = "no standard error"
	}
	return &Failure{Kind: FailUnavailable, Code: ExitTempFail,
		Detail: ClipDetail("the tool exited 75 (EX_TEMPFAIL: a dependency it needs is unavailable): " + d)}
}

// MaxDetailBytes bounds Failure.Detail: a detail is a short account, never
// a whole output.
const MaxDetailBytes = 512

// ClipDetail bounds a failure's detail to MaxDetailBytes, keeping its
// beginning and marking the cut with "...".
func ClipDetail(s string) string { return clip.Cut(s, MaxDetailBytes, "...") }

// Failed is the Result of a failed call, its detail bounded.
func Failed(kind FailureKind, code int, detail string) Result {
	return Result{Failure: &Failure{Kind: kind, Code: code, Detail: ClipDetail(detail)}}
}
