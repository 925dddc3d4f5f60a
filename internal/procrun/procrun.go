// Package procrun runs one command as the leader of its own process group
// and waits for it within bounds: the process runner of both job tool
// executors, internal/tools/local (a tool run on this machine) and
// internal/tools/job/entrypoint (a tool run in its Job's pod).
//
// The command's deadline and its caller's context are enforced from here,
// outside the command: its group is sent SIGTERM, and SIGKILL a grace
// period later if the leader is still running. Whatever the command leaves
// behind in its group when it exits is killed too. Standard output is kept
// up to a bound (its head) and counted; standard error keeps its tail.
//
// Process groups make it Linux and macOS only.
package procrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/internal/clip"
)

// minDrain is the shortest wait for output after the group is gone.
const minDrain = 100 * time.Millisecond

// Spec is one command to run.
type Spec struct {
	// Argv is the command and its arguments. A command without a slash is
	// looked up in this process's PATH.
	Argv []string
	// Env is the command's environment; nil means this process's.
	Env []string
	// Dir is the working directory; empty means this process's.
	Dir string
	// Stdin is written to the command's standard input, which is then
	// closed. A command that does not read it is not waited for.
	Stdin []byte
	// Stdout, if set, receives the whole standard output as it is
	// written. Should it fail, the output is still kept and counted.
	Stdout io.Writer
	// StdoutLimit is how many bytes of the head of standard output
	// Result.Stdout keeps.
	StdoutLimit int
	// StderrLimit is how many bytes of the tail of standard error
	// Result.Stderr keeps.
	StderrLimit int
	// Timeout is the deadline, counted from the start; zero means none.
	// Should the context's deadline come earlier, SIGTERM comes Grace
	// before it, so that SIGKILL still falls inside it.
	Timeout time.Duration
	// Grace is the time between SIGTERM and SIGKILL; zero or negative
	// means SIGKILL right after SIGTERM. It is shortened to end by the
	// context's deadline.
	Grace time.Duration
	// Signals are forwarded to the group while the leader runs.
	Signals <-chan os.Signal
	// DrainWait is how long output is still read once the group is gone,
	// from a process that left the group (setsid) and kept the streams
	// open. Zero means Grace, at least 100ms.
	DrainWait time.Duration
}

// Stop says why the runner ended the process group.
type Stop int

const (
	// NotStopped: the leader exited by itself (or by a forwarded signal).
	NotStopped Stop = iota
	// AtDeadline: the timeout passed.
	AtDeadline
	// ByContext: the caller's context ended first.
	ByContext
)

// Result is what became of the command.
type Result struct {
	// StartErr says why the command did not start; the rest is then zero.
	StartErr error
	// WaitErr says why waiting for the leader failed, which leaves its exit
	// status unknown.
	WaitErr error
	// Exit is the leader's exit code; 128+N when signal N ended it (the
	// shell's convention, so the code alone still says "signal").
	Exit int
	// Signal is the signal that ended the leader; zero when it exited.
	Signal syscall.Signal
	// Stopped says whether, and why, the runner stopped the group.
	Stopped Stop
	// Killed is set when the leader was still running a grace period
	// after SIGTERM and the group was sent SIGKILL.
	Killed bool
	// Stdout is the head of standard output, at most StdoutLimit bytes,
	// as written (it may end inside a rune).
	Stdout []byte
	// StdoutSize is the length of the whole standard output.
	StdoutSize int64
	// Stderr is the tail of standard error, at most StderrLimit bytes,
	// starting on a rune boundary.
	Stderr string
	// StderrDropped is set when earlier standard error was let go.
	StderrDropped bool
}

// Run starts spec's command in its own process group, feeds it its input,
// and waits for it and its output within the bounds of spec and ctx. The
// command is not bound to ctx as exec.CommandContext would: when ctx ends,
// the group is stopped as at the deadline, with its grace period.
func Run(ctx context.Context, spec Spec) Result {
	if len(spec.Argv) == 0 {
		return Result{StartErr: errors.New("no command")}
	}
	grace := max(spec.Grace, 0)

	// The three standard streams are plain pipes owned here, not exec's
	// copying goroutines, so that waiting for the leader and draining its
	// output are separate steps that can each be bounded.
	var files []*os.File
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	var ends [3][2]*os.File // stdin, stdout, stderr: read and write ends
	for i := range ends {
		r, w, err := os.Pipe()
		if err != nil {
			return Result{StartErr: fmt.Errorf("cannot create pipes: %w", err)}
		}
		files = append(files, r, w)
		ends[i] = [2]*os.File{r, w}
	}
	stdinR, stdinW := ends[0][0], ends[0][1]
	stdoutR, stdoutW := ends[1][0], ends[1][1]
	stderrR, stderrW := ends[2][0], ends[2][1]

	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Env, cmd.Dir = spec.Env, spec.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return Result{StartErr: err}
	}
	pgid := cmd.Process.Pid // Setpgid with Pgid 0: the group is named after the leader.
	// The child holds its own copies now; closing ours lets EOF arrive
	// when the child's side is gone.
	_ = stdinR.Close()
	_ = stdoutW.Close()
	_ = stderrW.Close()

	go func() {
		// A command that does not read its input, or exits early, makes
		// this write fail; that is the command's business.
		_, _ = stdinW.Write(spec.Stdin)
		_ = stdinW.Close()
	}()

	out := &clip.HeadWriter{Limit: spec.StdoutLimit}
	errTail := &clip.TailWriter{Limit: spec.StderrLimit}
	var readers sync.WaitGroup
	readers.Go(func() { _, _ = io.Copy(&tee{head: out, also: spec.Stdout}, stdoutR) })
	readers.Go(func() { _, _ = io.Copy(errTail, stderrR) })

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	res := Result{}
	waitErr := watch(ctx, spec, pgid, cmd.Process, exited, &res)
	// Whatever the command left running in its group goes with it. The
	// group cannot have been reused yet: an ID stays taken while any
	// member lives.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = stdinW.Close()

	drainFor := spec.DrainWait
	if drainFor <= 0 {
		drainFor = max(grace, minDrain)
	}
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	drainTimer := time.NewTimer(within(ctx, drainFor))
	defer drainTimer.Stop()
	select {
	case <-drained:
	case <-drainTimer.C:
		_ = stdoutR.Close()
		_ = stderrR.Close()
		<-drained
	}

	res.Stdout, res.StdoutSize = out.Bytes(), out.Size()
	res.Stderr, res.StderrDropped = errTail.String(), errTail.Dropped()
	ps := cmd.ProcessState
	if ps == nil {
		res.WaitErr = waitErr
		return res
	}
	res.Exit = ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Signal = ws.Signal()
		res.Exit = 128 + int(ws.Signal())
	}
	return res
}

// watch waits for the leader to exit, forwarding signals to its group and
// stopping the group at the deadline or when ctx ends. It records why the
// group was stopped in res and returns the leader's wait error.
func watch(ctx context.Context, spec Spec, pgid int, leader *os.Process, exited <-chan error, res *Result) error {
	grace := max(spec.Grace, 0)
	termIn, hasDeadline := spec.Timeout, spec.Timeout > 0
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl) - grace; !hasDeadline || d < termIn {
			termIn, hasDeadline = d, true
		}
	}
	var deadline, kill <-chan time.Time
	if hasDeadline {
		t := time.NewTimer(max(termIn, 0))
		defer t.Stop()
		deadline = t.C
	}
	signal := func(sig os.Signal) {
		if s, ok := sig.(syscall.Signal); ok && syscall.Kill(-pgid, s) == nil {
			return
		}
		_ = leader.Signal(sig)
	}
	stop := func(why Stop) {
		if res.Stopped != NotStopped {
			return
		}
		res.Stopped = why
		signal(syscall.SIGTERM)
		t := time.NewTimer(within(ctx, grace))
		kill = t.C
	}
	sigs, done := spec.Signals, ctx.Done()
	for {
		select {
		case err := <-exited:
			return err
		case sig, ok := <-sigs:
			if !ok {
				sigs = nil
				continue
			}
			signal(sig)
		case <-done:
			done = nil
			stop(ByContext)
		case <-deadline:
			deadline = nil
			stop(AtDeadline)
		case <-kill:
			kill = nil
			res.Killed = true
			signal(syscall.SIGKILL)
		}
	}
}

// within shortens a wait so that it ends by ctx's deadline, if any.
func within(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(d, 0)
}

// tee keeps the head of standard output and passes it all on to also,
// until also fails: the output is read to its end either way, so the
// command never blocks on a full pipe.
type tee struct {
	head *clip.HeadWriter
	also io.Writer
}

func (t *tee) Write(p []byte) (int, error) {
	_, _ = t.head.Write(p)
	if t.also != nil {
		if _, err := t.also.Write(p); err != nil {
			t.also = nil
		}
	}
	return len(p), nil
}
