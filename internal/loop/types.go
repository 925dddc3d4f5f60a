package loop

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
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
	// AnswerReply answers a question the agent asked (a tool that AsksPerson):
	// the reason given with it is the text, and the call's result.
	AnswerReply Answer = "answer"
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

// Config is everything the engine needs to know about one run. It is built
// once from the AgentRun's spec (or a manifest for agentrun local) and does
// not change while the run lives.
type Config struct {
	// RunID identifies the run in the idempotency keys of its tool calls
	// (see IdempotencyKey): the operator passes the AgentRun's UID. When it
	// is empty, the engine gives the run a random id on its first step.
	// Either way the id is kept in the State, so a resumed run keeps it.
	RunID string
	Goal  string
	// FollowUp makes the run a follow-up of an earlier run: its first user
	// message says so instead of being Goal, and the conversation it
	// starts from (State.Transcript, seeded by Continue) ends with Goal.
	// The verifier judges answers against Goal either way.
	FollowUp     bool
	Instructions string
	Model        ModelConfig
	// Fallbacks are the models a turn goes to, in order, when the
	// current model stays unavailable after its retries (see
	// Engine.onModelError); empty means the run has one model. A fallback's
	// unset MaxOutputTokens, Timeout and Retry are Model's.
	Fallbacks []ModelConfig
	// RouteOnBudget lets a turn whose request does not fit the cost or
	// token ceiling go to the next of Fallbacks whose request fits,
	// before the run is refused (BudgetExhausted naming every model
	// tried). A routed run stays on its new model, as a fallen-back one
	// does.
	RouteOnBudget bool
	Budget        Budget
	Loop          LoopDetection
	Tools         []ToolSpec
	Policy        Policy
	Guardrails    []Guardrail
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
	// Output, when set, makes the final answer JSON that validates
	// against its schema (see output.go); nil means any text.
	Output *OutputSpec
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
	// Similarity, when above zero, turns on the near-repeat detector
	// (nearrepeat.go): calls of one tool whose arguments are at least this
	// alike (0 to 1) count as repeats of one intent.
	Similarity float64
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
	// MaxCost is the most one call may cost; it is reserved against the
	// cost ceiling before the call is dispatched. CostDeclared says the
	// manifest gave it (zero included: a tool that is free); a tool that
	// did not is counted as $0, and the run says so when its cost ceiling
	// is hard (NoteToolCostsUndeclared).
	MaxCost      Money
	CostDeclared bool
	Timeout      time.Duration
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
	// AsksPerson makes the tool a question to a person (ask.go): a call
	// that vetting does not deny or block waits as an ASK, and a person's
	// AnswerReply is its result. No executor runs it.
	AsksPerson bool
	// Child is set for a tool whose call runs a child run (an agent tool):
	// the child's ceilings as declared. A call reserves them out of what
	// the run has left (ChildBudget), and is charged what the child used
	// (Result.Child). MaxCost and Timeout are then Child's cost and wall
	// clock.
	Child *ChildBudget
}

// ChildBudget is the five ceilings of a child run (see Budget).
type ChildBudget struct {
	Turns     int           `json:"turns"`
	Tokens    int64         `json:"tokens"`
	WallClock time.Duration `json:"wallClock"`
	Cost      Money         `json:"costUSD"`
	ToolCalls int           `json:"toolCalls"`
}

// usage is what the child's ceilings reserve, as usage: its turns, its
// tokens (counted as input), its tool calls and its cost.
func (c *ChildBudget) usage() Usage {
	return Usage{Turns: c.Turns, InputTokens: c.Tokens, ToolCalls: c.ToolCalls, Cost: c.Cost}
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
	// Approvals is how many distinct people must approve a call the rule
	// asks about; 0 or 1 means one.
	Approvals int
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

// Verify configures the verifier of a run's final answers.
type Verify struct {
	// Tool names the declared tool that judges an answer. It is called
	// with {"answer", "trial", "goal"} under the tool process contract.
	Tool string
	// MaxTrials is the most trials (final answers judged); the run ends
	// Escalated when the last is not verified.
	MaxTrials int
	// Memory is how many reflections the next trial reads (the newest).
	Memory int
	// StallTrials ends the run Escalated when the verifier's score has not
	// improved for this many trials.
	StallTrials int
}

// ContextStrategy is how older turns are compacted.
type ContextStrategy string

// The compaction strategies.
const (
	// ContextClear replaces the results of older tool calls with a short
	// marker that names the call, its size and that calling the tool again
	// returns it. It costs nothing.
	ContextClear ContextStrategy = "clear"
	// ContextSummarize has the model condense the older turns into one
	// message: one model call, reserved and priced like a turn's, never
	// counted as a turn.
	ContextSummarize ContextStrategy = "summarize"
)

// ContextPolicy bounds what one request may hold.
type ContextPolicy struct {
	// MaxInputTokens is the largest request the run may send, by the
	// engine's estimate of its input tokens (see Engine.Request).
	MaxInputTokens int64
	// Source says where MaxInputTokens came from: ContextFromSpec,
	// ContextFromModel (the provider's table of known models) or
	// ContextFromDefault.
	Source string
	// KeepRecentTurns is how many of the newest turns always go verbatim.
	KeepRecentTurns int
	Strategy        ContextStrategy
	// SummaryMaxOutputTokens bounds a summary call's output.
	SummaryMaxOutputTokens int64
}

// Strategy is how a run reaches its goal.
type Strategy string

// Strategies.
const (
	// ReAct interleaves model calls and tool calls (the default).
	ReAct Strategy = "react"
	// PlanExecute plans, runs the plan, then answers from its evidence.
	PlanExecute Strategy = "planExecute"
)

// PlanConfig bounds the plans of a planExecute run.
type PlanConfig struct {
	// MaxSteps is the most steps one plan may hold.
	MaxSteps int
	// MaxReplans is how many new plans may be asked for after a plan was
	// refused, a step failed, or the solver found the evidence lacking.
	// Nil is unset (the default applies); zero means none.
	MaxReplans *int
}

// OutputSpec asks for a typed final answer.
type OutputSpec struct {
	// Schema is the JSON Schema the final answer must validate against:
	// an object schema (type "object").
	Schema json.RawMessage
}
