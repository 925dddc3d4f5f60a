package loop

import (
	"context"
	"encoding/json"
	"time"
)

// Phase is where a run stands between two steps. The caller may persist the
// State at any phase boundary and resume from it later with the same code
// path as a fresh start (a fresh start is the zero State).
type Phase string

// Phases of a turn.
const (
	// PhaseAdmit: the next turn has not been admitted yet. The zero State is
	// in this phase.
	PhaseAdmit Phase = ""
	// PhaseModel: the turn is admitted and its reservation recorded; the
	// model call is due (or in flight).
	PhaseModel Phase = "Model"
	// PhaseApproval: some calls of the batch wait for a person.
	PhaseApproval Phase = "AwaitingApproval"
	// PhaseAct: the batch is vetted and reserved; calls are being run.
	PhaseAct Phase = "Acting"
	// PhaseDone: the run has ended; Outcome is set.
	PhaseDone Phase = "Done"
)

// CallState is the life of one proposed call inside a turn.
type CallState string

// Call states.
const (
	// CallProposed: vetted, not yet dispatched (approved, or awaiting a person).
	CallProposed CallState = "Proposed"
	// CallDispatched: handed to the toolbox; the result is not yet recorded.
	CallDispatched CallState = "Dispatched"
	// CallDone: the observation is recorded.
	CallDone CallState = "Done"
	// CallRetrying: an attempt failed transiently and another one is due
	// at State.RetryAt.
	CallRetrying CallState = "Retrying"
)

// Call is one proposed call with its verdict, as recorded before anything runs.
type Call struct {
	ToolCall
	// Verdict is the vetting decision: allow, deny or ask (then the answer
	// decides), or Blocked for a guardrail block.
	Verdict Decision `json:"verdict"`
	// Rule names what decided: "policy.rules[0]", "policy.default",
	// "guardrail:<name>", "tool.irreversible", "grant".
	Rule   string `json:"rule,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Answer is a person's answer to an ASK.
	Answer Answer `json:"answer,omitempty"`
	// Mutates is copied from the tool so acting order survives a reload.
	Mutates bool      `json:"mutates,omitempty"`
	State   CallState `json:"state"`
	// Observation is what the model will see for this call, once known.
	Observation string `json:"observation,omitempty"`
	// ObsStatus says how the call ended, once it has.
	ObsStatus ObsStatus `json:"obsStatus,omitempty"`
	// RequestedAt is when an ASK started waiting.
	RequestedAt *time.Time `json:"requestedAt,omitempty"`
	// Attempts counts the attempts dispatched for this call (retries
	// included); LastFailure is how the last failed one failed.
	Attempts    int    `json:"attempts,omitempty"`
	LastFailure string `json:"lastFailure,omitempty"`
	// Proposed is what the model proposed when a person approved the call
	// with changes (Arguments then holds the edited arguments), and
	// EditedBy is who changed them; both empty otherwise.
	Proposed json.RawMessage `json:"proposed,omitempty"`
	EditedBy string          `json:"editedBy,omitempty"`
	// Needed is how many distinct people must approve an ASK when more
	// than one (the rule's Approvals); ApprovedBy are those who have so
	// far (approvers.go).
	Needed     int      `json:"needed,omitempty"`
	ApprovedBy []string `json:"approvedBy,omitempty"`
	// Duration and ResultBytes are how long the call's last attempt ran
	// and how large its whole result was (Result.Duration and
	// Result.Size, else the output's length), once it ran.
	Duration    time.Duration `json:"duration,omitempty"`
	ResultBytes int64         `json:"resultBytes,omitempty"`
	// Child is what the call reserved for its child run (a tool with a
	// ToolSpec.Child), once its batch was admitted: the tool's ceilings
	// capped by what the run had left. They are the child's ceilings.
	Child *ChildBudget `json:"child,omitempty"`
}

// message is the call's tool message in the transcript, with its record.
func (c *Call) message(turn int) Message {
	return Message{Role: RoleTool, Turn: turn, CallID: c.ID, Tool: c.Name, Content: c.Observation, Status: c.ObsStatus,
		Record: &CallRecord{Verdict: c.Verdict, Rule: c.Rule, DurationMs: ceilMillis(c.Duration), ResultBytes: c.ResultBytes}}
}

// ceilMillis is d in whole milliseconds, rounded up: a call that took
// 300µs (a loopback HTTP call) ran, and its record says 1, not nothing.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Approved reports whether the call may run.
func (c *Call) Approved() bool {
	return c.Verdict == Allow || (c.Verdict == Ask && c.Answer == Approve)
}

// MaxChildRuns bounds State.ChildRuns (the newest are kept); it is the
// MaxItems of the AgentRun CRD's status.children.
const MaxChildRuns = 32

// ChildRun is one child run a call made (an agent tool), as the run knew
// it when the call's result arrived.
type ChildRun struct {
	Name    string `json:"name"`
	CallID  string `json:"callID"`
	Outcome string `json:"outcome,omitempty"`
	// Turns and Cost are what the child used, as charged to the run.
	Turns int   `json:"turns,omitempty"`
	Cost  Money `json:"costUSD"`
}

// NearEntry is one recent call as the near-repeat detector keeps it
// (nearrepeat.go).
type NearEntry struct {
	Tool string `json:"tool"`
	// Text is the normalised canonical arguments, cut at maxNearText.
	Text string `json:"text"`
}

// SigEntry is one proposed call in the loop detector's window.
type SigEntry struct {
	Hash string `json:"h"`
	// Text is the signature, cut for display in reasons.
	Text string `json:"t"`
}

// State is the whole resumable state of one run: a plain value that
// marshals to JSON and back without loss.
type State struct {
	// RunID is the run's identity in idempotency keys: Config.RunID, or a
	// random id given on the first step when the configuration has none.
	RunID string `json:"runID,omitempty"`
	Phase Phase  `json:"phase,omitempty"`
	// Turn is the turn in progress or last finished (1-based).
	Turn int `json:"turn"`
	// Attempt counts model calls made for this turn (more than one after
	// a transient failure was retried, or a call was lost to a crash).
	Attempt int `json:"attempt,omitempty"`
	// Model is the model the run calls: 0 is Config.Model, i the i-th of
	// Config.Fallbacks. It only grows: a run that fell back stays on its
	// fallback, also when it is resumed.
	Model int `json:"model,omitempty"`
	// RetryAt is when the next attempt is due, while the run waits out a
	// retry's backoff (of the model call, or of the calls in state
	// Retrying); nil otherwise.
	RetryAt  *time.Time `json:"retryAt,omitempty"`
	Usage    Usage      `json:"usage"`
	Reserved Usage      `json:"reserved"`
	// Children is the part of Usage that child runs used, charged when
	// each ended (agent tools); nil while none has.
	Children *Usage `json:"children,omitempty"`
	// ChildRuns are the child runs whose calls have ended, oldest first:
	// the newest MaxChildRuns; ChildRunsOmitted counts the older ones left
	// out.
	ChildRuns        []ChildRun `json:"childRuns,omitempty"`
	ChildRunsOmitted int        `json:"childRunsOmitted,omitempty"`
	// Calls is the current turn's batch, in proposal order.
	Calls []Call `json:"calls,omitempty"`
	// Transcript is every message after the goal, in order.
	Transcript []Message `json:"transcript,omitempty"`
	// Window is the loop detector's window of proposed call signatures:
	// their hashes (SigHashLen characters each), oldest first, in one
	// string, so that a window of 1,000 calls takes 12 KB of status.
	Window string `json:"window,omitempty"`
	// Named are the last few signatures of the window (at most maxPeriod)
	// with their text, to name a cycle in a reason.
	Named []SigEntry `json:"named,omitempty"`
	// Recent is the window as operators before Window saved it (a full
	// entry per call); read from an old checkpoint, moved into Window and
	// Named on the next observed call, never written.
	Recent []SigEntry `json:"recent,omitempty"`
	// Near is the near-repeat detector's window (nearrepeat.go): the last
	// Window calls, normalised; empty unless the run sets a similarity.
	Near []NearEntry `json:"near,omitempty"`
	// Depth counts signatures seen more than once (bounded); MaxDepth is the
	// largest count seen in the run (the repeated-intent depth).
	Depth    map[string]int `json:"depth,omitempty"`
	MaxDepth int            `json:"maxDepth,omitempty"`
	// Warned records soft-ceiling warnings already given: dimension -> 80 or 100.
	Warned map[Dimension]int `json:"warned,omitempty"`
	// StartedAt is when the first turn was admitted; ActiveSince is when the
	// current stretch of work (not waiting for a person) began.
	StartedAt   *time.Time `json:"startedAt,omitempty"`
	ActiveSince time.Time  `json:"activeSince,omitzero"`
	// Verify is the trial loop's state, once a verifier has judged (or is
	// judging) an answer; nil without a verifier.
	Verify *Verification `json:"verify,omitempty"`
	// Plan is the plan-then-execute state of a planExecute run; nil
	// otherwise.
	Plan *Plan `json:"plan,omitempty"`
	// InFlight identifies the request of the model call admitted last,
	// until its reply is read; Counted is the last request whose reply
	// reported an input count, with that count. The next request's input
	// estimate is built on Counted when it extends that request (see
	// PromptCount). Both are nil in a State saved before the engine kept
	// them: the next request is then bounded whole.
	InFlight *PromptCount `json:"inFlight,omitempty"`
	Counted  *PromptCount `json:"counted,omitempty"`
	// WholeEstimates is set once the provider's counts proved unfit to
	// build estimates on (see State.countInput): from then on every
	// request of the run is bounded whole.
	WholeEstimates bool `json:"wholeEstimates,omitempty"`
	// Context is what the context policy compacted; nil until the first
	// request is held to the policy.
	Context *ContextState `json:"context,omitempty"`
	// Outcome, Reason and Answer are set once the run has ended.
	Outcome Outcome `json:"outcome,omitempty"`
	Reason  string  `json:"reason,omitempty"`
	Answer  string  `json:"answer,omitempty"`
	// Output is the last final answer that validated against
	// Config.Output's schema; OutputRejected the last one that did not.
	Output         *Output          `json:"output,omitempty"`
	OutputRejected *OutputRejection `json:"outputRejected,omitempty"`

	// prompt is the next request's messages and their estimate, kept as
	// the transcript grows (not saved; see promptCache).
	prompt promptCache
}

// Done reports whether the run has ended.
func (s *State) Done() bool { return s.Phase == PhaseDone }

// Clone returns a deep copy of the state through its JSON form.
func (s *State) Clone() *State {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	out := &State{}
	if err := json.Unmarshal(b, out); err != nil {
		panic(err)
	}
	return out
}

// Input is what the caller brings to a step. Exactly the fields that
// answer the previous effect are set; an empty Input means "nothing new"
// (after a restart, for instance).
type Input struct {
	// Reply answers EffectCallModel; ModelErr is set instead when the
	// provider failed after its retries.
	Reply    *Reply
	ModelErr error
	// Answers are the answers currently known for pending calls, by call id.
	// Answers for ids that are not pending are reported back as stale.
	Answers map[string]Answer
	// Reasons are the reasons people gave with their answers, by call id:
	// a declined call's observation quotes its reason, so that the model
	// can learn why.
	Reasons map[string]string
	// By is who gave each answer, by call id, as the caller authenticated
	// them: a call that needs several approvals counts each person once.
	By map[string]string
	// Edits are the arguments people approved in place of the proposed
	// ones, by call id (an approval with changes): the edited call is
	// vetted again from the start before it may run (edit.go).
	Edits map[string]Edit
	// Results answer EffectRunTools, by call id.
	Results []Result
	// Cancel asks the run to stop at this boundary (ApprovalDenied);
	// CancelReason says who asked (the default names spec.cancel).
	Cancel       bool
	CancelReason string
	// Context bounds the work the step does itself (evaluating policy
	// conditions): when it is done, a condition still running is cut off
	// and its call goes to a person. Nil means no bound beyond the
	// engine's own cost limits.
	Context context.Context
}

// Edit is an approval with changes, as the caller read it: the whole
// arguments the person approved (the proposal with their patch applied)
// and who they are.
type Edit struct {
	Arguments json.RawMessage
	By        string
}

func (in *Input) context() context.Context {
	if in.Context == nil {
		return context.Background()
	}
	return in.Context
}

// EffectKind says what the caller must do next.
type EffectKind string

// Effects.
const (
	// EffectCallModel: persist the state, then call the model with Request
	// and come back with the Reply.
	EffectCallModel EffectKind = "CallModel"
	// EffectAsk: persist the state and wait for answers to Calls.
	EffectAsk EffectKind = "AskPerson"
	// EffectRunTools: persist the state, then run Calls (concurrently when
	// Concurrent is set) and come back with their Results.
	EffectRunTools EffectKind = "RunTools"
	// EffectContinue: the state advanced without outside work; step again
	// (persisting first is allowed, not required).
	EffectContinue EffectKind = "Continue"
	// EffectWait: persist the state and step again, with an empty Input,
	// at Until (a retry's backoff). The wait is work: it counts on the
	// wall clock, and it was reserved before it began.
	EffectWait EffectKind = "Wait"
	// EffectFinish: the run has ended; persist the final state.
	EffectFinish EffectKind = "Finish"
)

// Effect is what a step asks of its caller, plus the notes that describe
// what the step did (for events, logs and the terminal).
type Effect struct {
	Kind       EffectKind
	Request    *Request
	Calls      []Invocation
	Concurrent bool
	// Pending are the calls that wait for a person (EffectAsk).
	Pending []Call
	// Until is when to step again (EffectWait).
	Until time.Time
	Notes []Note
}

// NoteKind classifies a note.
type NoteKind string

// Note kinds. They double as event reasons.
const (
	NoteTurnStarted   NoteKind = "TurnStarted"
	NoteModelAnswered NoteKind = "ModelAnswered"
	NoteCallVetted    NoteKind = "CallVetted"
	NoteCallFinished  NoteKind = "CallFinished"
	NoteApproval      NoteKind = "ApprovalRecorded"
	NoteStaleApproval NoteKind = "StaleApproval"
	NoteBudgetWarning NoteKind = "BudgetWarning"
	NoteModelLost     NoteKind = "ModelCallLost"
	// NoteModelFallback: the model stayed unavailable after its retries
	// and the turn goes to the next of Config.Fallbacks.
	NoteModelFallback NoteKind = "ModelFallback"
	// NoteModelRouted: the next request to the model did not fit a
	// ceiling, and with Config.RouteOnBudget the turn goes to a later
	// one of Config.Fallbacks that fits.
	NoteModelRouted NoteKind = "ModelRouted"
	// NoteCallAbandoned: the run was cancelled while a model call or a
	// tool call was in flight and nothing will collect its result (it
	// was lost to a restart, or cut off): what it may have spent is
	// charged, as for a call lost to a restart.
	NoteCallAbandoned NoteKind = "CallAbandoned"
	// NoteOutputScreened: a guardrail on results or on the answer matched
	// and its matches were redacted.
	NoteOutputScreened NoteKind = "OutputRedacted"
	// NoteBatchRefused: the model proposed more calls in one answer than
	// MaxCallsPerReply; none of them was vetted or run.
	NoteBatchRefused NoteKind = "BatchRefused"
	// NoteRevetted: on resume, vetting a waiting batch again under the
	// engine's configuration as it is now gave a call a stricter verdict
	// than the one saved (Engine.Revet).
	NoteRevetted NoteKind = "VerdictTightened"
	// NoteUsageAboveReservation: a model reply reported usage far above
	// what its call reserved (see InputToleranceFactor). It is charged in
	// full and the run ends Error before any of the reply is read (or
	// ApprovalDenied, when it was being cancelled).
	NoteUsageAboveReservation NoteKind = "UsageAboveReservation"
	// NoteCostAboveReservation: a model call billed more dollars than it
	// reserved, within the tolerance of its token counts; the excess is
	// charged (Note.Amount) and the run goes on.
	NoteCostAboveReservation NoteKind = "CostAboveReservation"
	// NoteToolCostsUndeclared: the run has a hard cost ceiling and tools
	// that declare no maxCostUSD, which the ceiling counts as $0.
	NoteToolCostsUndeclared NoteKind = "ToolCostsUndeclared"
	// NoteRetry: an attempt failed transiently and another is scheduled.
	NoteRetry    NoteKind = "RetryScheduled"
	NoteFinished NoteKind = "RunFinished"
	// NoteVerifying: a final answer goes to the verifier, or a new trial
	// starts; NoteVerdict: the verifier did not verify an answer.
	NoteVerifying NoteKind = "Verifying"
	NoteVerdict   NoteKind = "NotVerified"
	// Plan then execute: a plan was accepted or refused, a step started or
	// finished, every step has its result (the solver is asked), or a new
	// plan is asked for.
	NotePlanSubmitted NoteKind = "PlanSubmitted"
	NotePlanRefused   NoteKind = "PlanRefused"
	NoteStepStarted   NoteKind = "StepStarted"
	NoteStepFinished  NoteKind = "StepFinished"
	NoteSolving       NoteKind = "Solving"
	NoteReplanned     NoteKind = "Replanned"
	// NoteOutputRejected: a final answer did not validate against
	// Config.Output's schema; the model is asked again.
	NoteOutputRejected NoteKind = "OutputRejected"
	// NoteEdited: a person approved a call with changed arguments, and
	// the edited call passed vetting again; NoteEditRefused: vetting
	// refused the edited arguments (a policy rule, a guardrail, the
	// tool's schema), and the call ends as that rule decides.
	NoteEdited      NoteKind = "ApprovedWithChanges"
	NoteEditRefused NoteKind = "EditRefused"
	// NoteApprovalNotCounted: an approval of a call that needs several
	// distinct approvers did not count (its author approved before, or
	// is not known); the call waits on.
	NoteApprovalNotCounted NoteKind = "ApprovalNotCounted"
)

// Note is a human-readable record of something a step did. Notes never
// carry whole tool results or secrets.
type Note struct {
	Kind    NoteKind
	CallID  string
	Message string
	// Turn is the turn a note about a whole turn (TurnStarted,
	// ModelAnswered) is about; 0 on other notes.
	Turn int
	// Warning marks notes a person should look at (budget warnings, denials).
	Warning bool
	// Ceiling is set on the note of a run that ended because a
	// reservation did not fit: the dimension that refused it (turns,
	// tokens, wallClock, cost, toolCalls or perTool).
	Ceiling Dimension
	// Amount is set on a CostAboveReservation note: the dollars charged
	// beyond what the call reserved.
	Amount Money
}

// Verification is the trial loop's part of the State: small, and free of
// anything a tool or the model wrote (that is in the transcript).
type Verification struct {
	// Trial is the trial in progress, or the last one (1-based).
	Trial int `json:"trial"`
	// Start is the index in the transcript of the trial's first message
	// (0 for the first trial; later, the message with the reflections).
	Start int `json:"start,omitempty"`
	// Memory locates the reflections the next trial reads, oldest first,
	// at most Verify.Memory of them.
	Memory []Reflection `json:"memory,omitempty"`
	// Verdicts are the verifier's verdicts, one per judged trial, oldest
	// first (at most Verify.MaxTrials).
	Verdicts []Verdict `json:"verdicts,omitempty"`
}

// Reflection locates one failed trial's feedback: the verifier's message
// at transcript index At (the answer it judged is just before it).
type Reflection struct {
	Trial int `json:"trial"`
	At    int `json:"at"`
}

// Verdict is the verifier's judgement of one trial's answer.
type Verdict struct {
	Trial    int  `json:"trial"`
	Verified bool `json:"verified"`
	// Score is the verifier's score from 0 to 1, when it printed one.
	Score *float64 `json:"score,omitempty"`
}

// LastVerdict is the newest verdict, or nil before the first.
func (v *Verification) LastVerdict() *Verdict {
	if v == nil || len(v.Verdicts) == 0 {
		return nil
	}
	return &v.Verdicts[len(v.Verdicts)-1]
}

// TrialsToVerify is the trial whose answer was verified, or 0 when none was.
func (v *Verification) TrialsToVerify() int {
	if l := v.LastVerdict(); l != nil && l.Verified {
		return l.Trial
	}
	return 0
}

// ContextState is what the run has compacted, and the figures
// status.context shows.
type ContextState struct {
	// Compactions counts the compactions made; LastCompactionTurn is the
	// turn whose request the last one shrank.
	Compactions        int `json:"compactions,omitempty"`
	LastCompactionTurn int `json:"lastCompactionTurn,omitempty"`
	// LastInputTokens is the provider's count of the last request's input
	// (the engine's estimate until the reply reports one).
	LastInputTokens int64 `json:"lastInputTokens,omitempty"`
	// Start is the transcript index the compacted trial starts at: a new
	// trial of a verified run starts afresh.
	Start int `json:"start,omitempty"`
	// ClearedThrough: the results of tool messages before this transcript
	// index are sent as markers.
	ClearedThrough int `json:"clearedThrough,omitempty"`
	// Summary stands in for the messages before SummaryThrough;
	// SummaryAnswers counts the model's answers among them.
	Summary        string `json:"summary,omitempty"`
	SummaryThrough int    `json:"summaryThrough,omitempty"`
	SummaryAnswers int    `json:"summaryAnswers,omitempty"`
	// Pending is the summary call in flight (State.Phase is
	// PhaseCompact).
	Pending *PendingSummary `json:"pending,omitempty"`
	// CountedBound is the bound (ByteEstimator) of the last request the
	// provider counted, and CountedTokens its count: their ratio scales
	// the estimate of a request that does not extend it.
	CountedBound  int64 `json:"countedBound,omitempty"`
	CountedTokens int64 `json:"countedTokens,omitempty"`
}

// PendingSummary is a summary call in flight: what it condenses and the
// estimate of the request it was made for.
type PendingSummary struct {
	Through int   `json:"through"`
	Before  int64 `json:"before"`
}

// compacted reports whether the requests of the trial starting at start
// differ from the transcript.
func (c *ContextState) compacted(start int) bool {
	return c != nil && c.Compactions > 0 && c.Start == start && (c.ClearedThrough > start || c.SummaryThrough > start)
}

func (c *ContextState) last() int64 {
	if c == nil {
		return 0
	}
	return c.LastInputTokens
}

// PlanStage is where a plan stands.
type PlanStage string

// Plan stages.
const (
	// StagePlanning: the planner is asked for a plan (the zero stage).
	StagePlanning PlanStage = ""
	// StageExecuting: the plan was accepted and its steps are running.
	StageExecuting PlanStage = "Executing"
	// StageSolving: every step has its result; the solver is asked.
	StageSolving PlanStage = "Solving"
)

// Plan is the plan-then-execute part of the State.
type Plan struct {
	// Number is the plan in progress (1-based): each replan, and each new
	// trial under a verifier, starts the next.
	Number int `json:"number"`
	// Replans counts the replans made.
	Replans int       `json:"replans,omitempty"`
	Stage   PlanStage `json:"stage,omitempty"`
	// At is the transcript index of the planner's message that holds the
	// accepted plan, CallID the id of its submit_plan call.
	At     int    `json:"at,omitempty"`
	CallID string `json:"callID,omitempty"`
	// Steps are the accepted plan's steps, in the plan's order.
	Steps []PlanStep `json:"steps,omitempty"`
	// Failure says why the running steps stopped (a step that failed after
	// its retries), while the other steps in flight finish.
	Failure string `json:"failure,omitempty"`
}

// PlanStep is one step of an accepted plan.
type PlanStep struct {
	ID   string `json:"id"`
	Tool string `json:"tool"`
	// After are the steps whose results its arguments name.
	After []string `json:"after,omitempty"`
	// At is the transcript index of the step's result once it has one
	// (results are never at index 0, which holds the plan).
	At int `json:"at,omitempty"`
}

// next starts the next plan's planning.
func (p *Plan) next() {
	p.Number++
	p.Stage, p.At, p.CallID, p.Steps, p.Failure = StagePlanning, 0, "", nil, ""
}

func (p *Plan) step(id string) *PlanStep {
	for i := range p.Steps {
		if p.Steps[i].ID == id {
			return &p.Steps[i]
		}
	}
	return nil
}

// countInput keeps the provider's count of the request just answered,
// whose input reserved was reserved, as the base of the next request's
// estimate. It keeps none when the request is not known (a State saved
// before requests were identified) or the provider reported no count. A
// count that proves the provider's counts unfit to build on, one below
// the count the request's estimate was built on (the prompt grew, the
// count fell) or above that estimate, ends estimates built on counts for
// the rest of the run.
func (s *State) countInput(tokens, reserved int64) {
	sent := s.InFlight
	s.InFlight, s.Counted = nil, nil
	if sent != nil && sent.Base > 0 && (tokens < sent.Base || tokens > reserved) {
		s.WholeEstimates = true
	}
	if s.WholeEstimates || sent == nil || tokens <= 0 {
		return
	}
	s.Counted = &PromptCount{Messages: sent.Messages, Prefix: sent.Prefix, Tokens: tokens}
}

// inputBound is what a reply's input count is held to (see
// usageAboveReservation): the input reserved, or, when the reservation
// was built on the provider's count of an earlier request, the bound of
// the whole request it was cut from.
func (s *State) inputBound() int64 {
	b := s.Reserved.InputTokens
	if f := s.InFlight; f != nil && f.Base > 0 {
		b = max(b, f.Bound)
	}
	return b
}

// promptCache is the model's view of a State's transcript, built as the
// transcript grows. The loop only ever appends to the transcript, so
// messages once copied stay right while the transcript's backing array is
// the same; a new array (an append that grew it, a reloaded State)
// rebuilds the cache, which amortises to a constant per message. It is
// never serialised: a reloaded State starts without one.
type promptCache struct {
	// by is the *Engine that built it: another engine's prompt differs.
	by any
	// model is the engine's model it was built for (State.Model): a
	// fallback's requests start with its own prefix.
	model int
	start int
	first *Message
	msgs  []Message
	// tokens is the bound of the messages after the goal; bounds[i] is
	// that of the messages after the goal up to msgs[i], and fps[i]
	// fingerprints the request up to msgs[i] (both empty when the
	// estimator bounds whole requests only).
	tokens int64
	bounds []int64
	fps    []promptFP
	chain  fpChain
}

// maxAnswerBytes bounds the final answer kept in the state.
const maxAnswerBytes = 32 << 10

// PendingCalls returns the calls waiting for a person.
func (s *State) PendingCalls() []Call {
	var out []Call
	for _, c := range s.Calls {
		if c.Verdict == Ask && c.Answer == "" && c.State == CallProposed {
			out = append(out, c)
		}
	}
	return out
}

// Output is the validated final answer of a run with Config.Output.
type Output struct {
	// Value is the answer's JSON, compact; nil when it is larger than
	// MaxOutputBytes (the transcript keeps it).
	Value json.RawMessage `json:"value,omitempty"`
	// Digest is "sha256:" and the hex SHA-256 of the answer's text as the
	// transcript keeps it, without surrounding white space.
	Digest string `json:"digest"`
	// Bytes is the size of that text.
	Bytes int `json:"bytes"`
}

// OutputRejection is the last final answer that did not validate.
type OutputRejection struct {
	// Turn is the turn whose answer was not accepted.
	Turn int `json:"turn"`
	// Why is the validator's message, bounded.
	Why string `json:"why"`
}
