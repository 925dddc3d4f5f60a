// Package local runs a job tool as a child process of the operator, under
// the tool process contract of the AgentRun API: the call's arguments are
// one JSON object on standard input and in AGENTRUN_TOOL_ARGS, the call's
// idempotency key is in AGENTRUN_IDEMPOTENCY_KEY, standard output is the
// result, and a non-zero exit is a failed call that carries the exit code
// and the tail of standard error.
//
// The deadline is enforced from outside the tool (internal/procrun): the
// tool runs in its own process group, which is sent SIGTERM when the
// deadline passes and SIGKILL a grace period later. Whatever the tool
// leaves behind in its group when it exits is killed too.
//
// This executor backs `make dev`, `make demo` and `agentrun local`, where a
// job tool's command and args run on the operator's machine instead of in a
// Job's pod. It is Linux and macOS only (process groups).
package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/procrun"
)

const (
	// DefaultGracePeriod is how long a tool has between SIGTERM and SIGKILL.
	DefaultGracePeriod = 2 * time.Second

	// fallbackPath is the child's PATH when the operator has none.
	fallbackPath = "/usr/local/bin:/usr/bin:/bin"
)

// Environment variables of the tool process contract.
const (
	EnvToolArgs       = "AGENTRUN_TOOL_ARGS"
	EnvIdempotencyKey = "AGENTRUN_IDEMPOTENCY_KEY"
)

// Executor runs one tool's command for every invocation. It is safe for
// concurrent use; each invocation is a separate process.
type Executor struct {
	command string
	args    []string
	env     []string
	dir     string
	grace   time.Duration
}

// Option configures an Executor.
type Option func(*Executor)

// WithGracePeriod sets the time between SIGTERM and SIGKILL at the
// deadline. Zero or negative means SIGKILL right after SIGTERM.
func WithGracePeriod(d time.Duration) Option {
	return func(e *Executor) { e.grace = max(d, 0) }
}

// New returns an executor for command with args. env holds KEY=VALUE
// entries added to the child's minimal environment (PATH and HOME, taken
// from the operator); the operator's other variables are not passed on, as
// they may hold secrets. A configured PATH or HOME replaces the operator's.
// The contract's two variables are always set last and cannot be
// overridden. dir is the working directory; empty means the operator's.
//
// A command without a slash is looked up in the operator's PATH; a relative
// command with a slash is taken relative to dir.
func New(command string, args, env []string, dir string, opts ...Option) (*Executor, error) {
	if strings.TrimSpace(command) == "" {
		return nil, errors.New("local tool: command is empty")
	}
	for _, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.ContainsAny(name, "\x00") {
			return nil, fmt.Errorf("local tool: env entry %q is not NAME=VALUE", redactEnv(kv))
		}
	}
	e := &Executor{
		command: command,
		args:    append([]string(nil), args...),
		env:     append([]string(nil), env...),
		dir:     dir,
		grace:   DefaultGracePeriod,
	}
	for _, o := range opts {
		o(e)
	}
	return e, nil
}

// redactEnv keeps the name of an env entry for an error message and drops
// its value.
func redactEnv(kv string) string {
	name, _, _ := strings.Cut(kv, "=")
	if len(name) > 64 {
		name = name[:64]
	}
	return name + "=..."
}

// Execute runs the command once for inv. It always returns a Result.
func (e *Executor) Execute(ctx context.Context, inv loop.Invocation) loop.Result {
	return e.run(ctx, inv) // the Router stamps the call id and the duration
}

func (e *Executor) run(ctx context.Context, inv loop.Invocation) loop.Result {
	args := bytes.TrimSpace(inv.Arguments)
	if len(args) == 0 {
		args = []byte("{}")
	}
	// The engine's Config.Normalize gave every invocation its timeout and
	// result limit.
	timeout, limit := inv.Timeout, inv.MaxResultBytes
	grace := e.grace
	if inv.KillGrace > 0 {
		grace = inv.KillGrace
	}
	if err := ctx.Err(); err != nil {
		return loop.Failed(loop.FailUnavailable, 0, "not started: "+err.Error())
	}
	// The caller's deadline is the end of the call's wall-clock reservation
	// (timeout + kill grace): procrun sends SIGTERM early enough for
	// SIGKILL to fall inside it.
	p := procrun.Run(ctx, procrun.Spec{
		Argv:        append([]string{e.command}, e.args...),
		Env:         e.environ(args, inv.IdempotencyKey),
		Dir:         e.dir,
		Stdin:       args,
		StdoutLimit: limit + 1,
		StderrLimit: loop.MaxDetailBytes,
		Timeout:     timeout,
		Grace:       grace,
	})
	if p.StartErr != nil {
		return loop.Failed(loop.FailUnavailable, 0, "cannot start "+e.command+": "+startError(p.StartErr))
	}

	res := loop.Result{Output: p.Stdout, Size: p.StdoutSize, Truncated: p.StdoutSize > int64(len(p.Stdout))}
	switch p.Stopped {
	case procrun.AtDeadline:
		how := "SIGTERM"
		if p.Killed {
			how = fmt.Sprintf("SIGTERM, then SIGKILL after %s", grace)
		}
		res.Failure = &loop.Failure{Kind: loop.FailTimeout, Detail: withStderr(
			fmt.Sprintf("no result within %s; the process group was sent %s", timeout, how), p.Stderr)}
		return res
	case procrun.ByContext:
		// The tool was running and may have acted: its outcome is unknown.
		res.Failure = &loop.Failure{Kind: loop.FailUnknown, Detail: withStderr(
			"stopped before it finished: "+context.Cause(ctx).Error(), p.Stderr)}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			res.Failure.Kind = loop.FailTimeout
		}
		return res
	}
	if p.WaitErr != nil {
		res.Failure = &loop.Failure{Kind: loop.FailUnknown, Detail: loop.ClipDetail("waiting for the process: " + p.WaitErr.Error())}
		return res
	}
	if p.Exit == 0 && p.Signal == 0 {
		return res
	}
	detail := fmt.Sprintf("exited with code %d", p.Exit)
	if p.Signal != 0 {
		detail = "killed by signal " + p.Signal.String()
	}
	if len(strings.TrimSpace(p.Stderr)) > 0 {
		// The exit code travels in Failure.Code; the detail is the tail of
		// standard error, as the contract says.
		detail = tailString(p.Stderr, loop.MaxDetailBytes, p.StderrDropped)
	}
	if p.Exit == loop.ExitTempFail && p.Signal == 0 {
		res.Failure = loop.TempFail(tailString(p.Stderr, loop.MaxDetailBytes, p.StderrDropped))
		return res
	}
	res.Failure = &loop.Failure{Kind: loop.FailExit, Code: p.Exit, Detail: detail}
	return res
}

// environ builds the child's environment: PATH and HOME, the configured
// entries, then the contract's variables. os/exec keeps the last of
// duplicate names.
func (e *Executor) environ(args []byte, key string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = fallbackPath
	}
	env := make([]string, 0, len(e.env)+4)
	env = append(env, "PATH="+path)
	if home := os.Getenv("HOME"); home != "" {
		env = append(env, "HOME="+home)
	}
	env = append(env, e.env...)
	return append(env, EnvToolArgs+"="+string(args), EnvIdempotencyKey+"="+key)
}

// startError shortens the error of a failed start. exec's errors name the
// command already, and the caller adds it, so only the cause is kept.
func startError(err error) string {
	var pathErr *os.PathError
	if errors.As(err, &pathErr) {
		return pathErr.Err.Error()
	}
	var execErr *exec.Error
	if errors.As(err, &execErr) {
		return execErr.Err.Error()
	}
	return err.Error()
}

// withStderr appends the tail of standard error to a summary, within the
// detail limit.
func withStderr(summary, stderr string) string {
	if len(strings.TrimSpace(stderr)) == 0 {
		return loop.ClipDetail(summary)
	}
	const sep = "; stderr: "
	room := loop.MaxDetailBytes - len(summary) - len(sep)
	if room < 32 {
		return loop.ClipDetail(summary)
	}
	return summary + sep + tailString(stderr, room, false)
}

// tailString returns the end of b in at most n bytes, trimmed of
// surrounding white space, starting on a UTF-8 boundary and marked with
// "..." when cut here or, as cut says, earlier.
func tailString(s string, n int, cut bool) string {
	s = strings.TrimSpace(s)
	if cut {
		return "..." + clip.Tail(s, n-3)
	}
	return clip.CutTail(s, n, "...")
}
