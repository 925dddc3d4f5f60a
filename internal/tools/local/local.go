// Package local runs a job tool as a child process of the operator, under
// the tool process contract of the AgentRun API: the call's arguments are
// one JSON object on standard input and in AGENTRUN_TOOL_ARGS, the call's
// idempotency key is in AGENTRUN_IDEMPOTENCY_KEY, standard output is the
// result, and a non-zero exit is a failed call that carries the exit code
// and the tail of standard error.
//
// The deadline is enforced from here, outside the tool: the tool runs in
// its own process group, which is sent SIGTERM when the deadline passes and
// SIGKILL a grace period later. Whatever the tool leaves behind in its group
// when it exits is killed too.
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
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/loop"
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

// stopCause says why the executor ended the process group.
type stopCause int

const (
	notStopped stopCause = iota
	stoppedAtDeadline
	stoppedByContext
)

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

	// The child's three standard streams are plain pipes owned here, not
	// exec's copying goroutines, so that waiting for the process and
	// draining its output are separate steps that can each be bounded.
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	defer closeAll()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	stdinR, stdinW, err := pipe()
	if err != nil {
		return loop.Failed(loop.FailUnavailable, 0, "cannot create pipes: "+err.Error())
	}
	stdoutR, stdoutW, err := pipe()
	if err != nil {
		return loop.Failed(loop.FailUnavailable, 0, "cannot create pipes: "+err.Error())
	}
	stderrR, stderrW, err := pipe()
	if err != nil {
		return loop.Failed(loop.FailUnavailable, 0, "cannot create pipes: "+err.Error())
	}

	cmd := exec.Command(e.command, e.args...)
	cmd.Dir = e.dir
	cmd.Env = e.environ(args, inv.IdempotencyKey)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return loop.Failed(loop.FailUnavailable, 0, "cannot start "+e.command+": "+startError(err))
	}
	pgid := cmd.Process.Pid // Setpgid with Pgid 0: the group is named after the leader.
	// The child holds its own copies now; closing ours lets EOF arrive when
	// the child's side is gone.
	_ = stdinR.Close()
	_ = stdoutW.Close()
	_ = stderrW.Close()

	go func() {
		// A tool that does not read its input, or exits early, makes this
		// write fail; that is the tool's business.
		_, _ = stdinW.Write(args)
		_ = stdinW.Close()
	}()

	out := &clip.HeadWriter{Limit: limit + 1}
	errTail := &clip.TailWriter{Limit: loop.MaxDetailBytes}
	var readers sync.WaitGroup
	readers.Go(func() { _, _ = io.Copy(out, stdoutR) })
	readers.Go(func() { _, _ = io.Copy(errTail, stderrR) })

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// The caller's deadline is the end of the call's wall-clock reservation
	// (timeout + kill grace): should it come earlier, SIGTERM comes earlier
	// too, so that SIGKILL still falls inside it.
	termIn := timeout
	if dl, ok := ctx.Deadline(); ok {
		termIn = min(termIn, time.Until(dl)-grace)
	}
	deadline := time.NewTimer(max(termIn, 0))
	defer deadline.Stop()
	var (
		waitErr error
		cause   = notStopped
		killed  bool
	)
	select {
	case waitErr = <-exited:
	case <-deadline.C:
		cause = stoppedAtDeadline
		waitErr, killed = terminate(pgid, exited, graceWithin(ctx, grace))
	case <-ctx.Done():
		cause = stoppedByContext
		waitErr, killed = terminate(pgid, exited, graceWithin(ctx, grace))
	}
	// Whatever the tool left running in its group goes with it. The group
	// cannot have been reused yet: an ID stays taken while any member lives.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = stdinW.Close()

	// Output is drained until every holder of the pipes is gone. A process
	// that left the group (setsid) and kept the pipes open is not waited for
	// longer than the grace period.
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	drainTimer := time.NewTimer(graceWithin(ctx, max(grace, 100*time.Millisecond)))
	defer drainTimer.Stop()
	select {
	case <-drained:
	case <-drainTimer.C:
		_ = stdoutR.Close()
		_ = stderrR.Close()
		<-drained
	}

	res := loop.Result{Output: out.Bytes(), Size: out.Size(), Truncated: out.Size() > int64(len(out.Bytes()))}
	switch cause {
	case stoppedAtDeadline:
		how := "SIGTERM"
		if killed {
			how = fmt.Sprintf("SIGTERM, then SIGKILL after %s", grace)
		}
		res.Failure = &loop.Failure{Kind: loop.FailTimeout, Detail: withStderr(
			fmt.Sprintf("no result within %s; the process group was sent %s", timeout, how), errTail.Bytes())}
		return res
	case stoppedByContext:
		// The tool was running and may have acted: its outcome is unknown.
		res.Failure = &loop.Failure{Kind: loop.FailUnknown, Detail: withStderr(
			"stopped before it finished: "+context.Cause(ctx).Error(), errTail.Bytes())}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			res.Failure.Kind = loop.FailTimeout
		}
		return res
	}
	if waitErr == nil {
		return res
	}
	var exitErr *exec.ExitError
	if !errors.As(waitErr, &exitErr) {
		res.Failure = &loop.Failure{Kind: loop.FailUnknown, Detail: loop.ClipDetail("waiting for the process: " + waitErr.Error())}
		return res
	}
	code := exitErr.ExitCode()
	summary := fmt.Sprintf("exited with code %d", code)
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		// The shell's convention, so the code alone still says "signal".
		code = 128 + int(ws.Signal())
		summary = "killed by signal " + ws.Signal().String()
	}
	detail := summary
	if t := errTail.Bytes(); len(bytes.TrimSpace(t)) > 0 {
		// The exit code travels in Failure.Code; the detail is the tail of
		// standard error, as the contract says.
		detail = tailString(t, loop.MaxDetailBytes, errTail.Dropped())
	}
	res.Failure = &loop.Failure{Kind: loop.FailExit, Code: code, Detail: detail}
	return res
}

// terminate ends the process group led by pgid: SIGTERM, then SIGKILL if
// the leader has not exited within the grace period. It returns the
// leader's wait error and whether SIGKILL was needed.
func terminate(pgid int, exited <-chan error, grace time.Duration) (error, bool) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-exited:
		return err, false
	case <-t.C:
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return <-exited, true
}

// graceWithin shortens a wait so that it ends by ctx's deadline, if any.
func graceWithin(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(d, 0)
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
func withStderr(summary string, stderr []byte) string {
	if len(bytes.TrimSpace(stderr)) == 0 {
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
func tailString(b []byte, n int, cut bool) string {
	s := string(bytes.TrimSpace(b))
	if cut {
		return "..." + clip.Tail(s, n-3)
	}
	return clip.CutTail(s, n, "...")
}
