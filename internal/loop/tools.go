package loop

// What the engine asks of a toolbox and what comes back: invocations,
// results and failures.

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/agentrun/agentrun/internal/clip"
)

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
	// Child is the ceilings of the child run of a call of an agent tool
	// (Call.Child): what the run reserved for it.
	Child *ChildBudget
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
	// Child is what the call's child run used (an agent tool): it is
	// charged to the run instead of the call's reservation. Nil charges
	// the reservation in full (the child's use is unknown).
	Child *Usage `json:"child,omitempty"`
	// ChildRun and ChildOutcome name the child run the call made and how
	// it ended ("Unfinished": not in time); empty when it made none.
	ChildRun     string `json:"childRun,omitempty"`
	ChildOutcome string `json:"childOutcome,omitempty"`
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

// lookupTool is the declared tool name, or an undeclared one's bare spec.
func lookupTool(tools map[string]*ToolSpec, name string) *ToolSpec {
	if t := tools[name]; t != nil {
		return t
	}
	return &ToolSpec{Name: name}
}
