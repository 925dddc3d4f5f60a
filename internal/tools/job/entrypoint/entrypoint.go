// Package entrypoint is the wrapper that runs a job tool inside its pod.
//
// The operator's image carries the agentrun-entrypoint binary. An init
// container copies it into an emptyDir shared with the tool's container,
// whose command becomes
//
//	/agentrun/bin/agentrun-entrypoint --timeout=30s -- <the tool's command> <the tool's args>
//
// The wrapper then keeps the tool process contract on the tool's behalf:
//
//   - the arguments JSON, read from AGENTRUN_TOOL_ARGS, is written to the
//     tool's standard input (the environment, AGENTRUN_IDEMPOTENCY_KEY
//     included, is passed through unchanged);
//   - the tool's standard output is copied to the container's standard
//     output, so the pod log is exactly the result, whole;
//   - the tool's standard error is kept (its tail only) for the summary and
//     is not copied to the container's log, which would otherwise mix it
//     into the result read back from the log;
//   - the tool runs in its own process group (internal/procrun runs it);
//   - the tool's deadline (--timeout) counts from the tool's start, not
//     from the pod's creation, so scheduling and image pulls do not eat
//     into it; at the deadline the tool gets SIGTERM, then SIGKILL, and the
//     summary says TimedOut;
//   - SIGTERM and SIGINT are forwarded to the tool (its process group), so
//     the Job's own deadline and a deleted pod reach the tool's process;
//   - a compact JSON Summary is written to the termination message file,
//     which the kubelet copies into the pod's status (at most 4096 bytes).
//     When the whole standard output fits in it, the summary carries it and
//     the executor reads nothing else; otherwise the summary says so
//     (OutInLog) and the executor reads the result from the pod's log;
//   - the wrapper exits with the tool's exit code.
package entrypoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/procrun"
)

// Names of the environment variables of the tool process contract.
const (
	// EnvToolArgs holds the call's arguments, one JSON object.
	EnvToolArgs = "AGENTRUN_TOOL_ARGS"
	// EnvIdempotencyKey holds a key unique to the call and stable across
	// retries and across a second start of the same pod.
	EnvIdempotencyKey = "AGENTRUN_IDEMPOTENCY_KEY"
)

const (
	// DefaultTerminationPath is where the kubelet expects the termination
	// message unless a container says otherwise.
	DefaultTerminationPath = "/dev/termination-log"
	// MaxMessageBytes is the most the kubelet keeps of a termination message.
	MaxMessageBytes = 4096
	// StderrTailBytes is how much of the end of standard error the summary keeps.
	StderrTailBytes = 512
	// DefaultKillGrace is how long a tool stopped at its deadline has
	// between SIGTERM and SIGKILL.
	DefaultKillGrace = 5 * time.Second

	// exitStartFailure is the exit code when the tool could not be started,
	// as a shell reports a command it cannot run.
	exitStartFailure = 127
)

// Summary is the termination message: what the executor learns about the
// tool's process without reading its log.
type Summary struct {
	// Exit is the tool's exit code; 128+N when it was killed by signal N.
	Exit int `json:"exit"`
	// Out is the tool's whole standard output when it fits in the message.
	Out string `json:"out,omitempty"`
	// OutInLog is set when the standard output did not fit (or was not
	// UTF-8): read it from the container's log.
	OutInLog bool `json:"outInLog,omitempty"`
	// Size is the length of the whole standard output in bytes.
	Size int64 `json:"size"`
	// StderrTail is the end of the tool's standard error.
	StderrTail string `json:"stderrTail,omitempty"`
	// TimedOut is set when the wrapper stopped the tool at its deadline.
	TimedOut bool `json:"timedOut,omitempty"`
	// Error says why the wrapper could not run the tool at all.
	Error string `json:"error,omitempty"`
}

// ParseSummary reads a termination message written by Run.
func ParseSummary(msg string) (Summary, error) {
	var s Summary
	if strings.TrimSpace(msg) == "" {
		return s, errors.New("the termination message is empty")
	}
	if err := json.Unmarshal([]byte(msg), &s); err != nil {
		return s, fmt.Errorf("the termination message is not a summary: %w", err)
	}
	return s, nil
}

// Config is one run of the wrapper.
type Config struct {
	// Argv is the tool's command and arguments.
	Argv []string
	// Env is the tool's environment (the wrapper's own, in the binary).
	Env []string
	// Stdout receives the tool's standard output as it is written.
	Stdout io.Writer
	// Diagnostics receives the wrapper's own complaints when it cannot
	// write the termination message. Nil discards them.
	Diagnostics io.Writer
	// TerminationPath is where the summary is written; empty means
	// DefaultTerminationPath.
	TerminationPath string
	// MessageLimit bounds the summary; zero means MaxMessageBytes.
	MessageLimit int
	// Signals are forwarded to the tool's process while it runs.
	Signals <-chan os.Signal
	// Timeout is the tool's deadline, counted from its start; zero means
	// none. At the deadline the tool gets SIGTERM, and SIGKILL KillGrace
	// later if it is still running.
	Timeout time.Duration
	// KillGrace defaults to DefaultKillGrace.
	KillGrace time.Duration
}

// Run starts the tool, waits for it and writes the summary. It returns the
// exit code the wrapper should exit with.
func Run(ctx context.Context, cfg Config) int {
	sum := run(ctx, cfg)
	limit := cfg.MessageLimit
	if limit <= 0 {
		limit = MaxMessageBytes
	}
	path := cfg.TerminationPath
	if path == "" {
		path = DefaultTerminationPath
	}
	if err := os.WriteFile(path, Encode(sum.Summary, sum.out, limit), 0o644); err != nil && cfg.Diagnostics != nil {
		fmt.Fprintf(cfg.Diagnostics, "agentrun-entrypoint: cannot write the termination message: %v\n", err)
	}
	return sum.Exit
}

type outcome struct {
	Summary
	out []byte // the head of standard output, at most the message limit
}

func run(ctx context.Context, cfg Config) outcome {
	if len(cfg.Argv) == 0 {
		return outcome{Summary: Summary{Exit: exitStartFailure, Error: "no command to run: expected -- COMMAND [ARGS...]"}}
	}
	args := lookup(cfg.Env, EnvToolArgs)
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	limit := cfg.MessageLimit
	if limit <= 0 {
		limit = MaxMessageBytes
	}
	grace := cfg.KillGrace
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	// The tool is stopped by signals, as the kubelet stops a container, with
	// time to finish its work; its own process group lets them reach what
	// it started too.
	p := procrun.Run(ctx, procrun.Spec{
		Argv:        cfg.Argv,
		Env:         cfg.Env,
		Stdin:       []byte(args),
		Stdout:      cfg.Stdout,
		StdoutLimit: limit,
		StderrLimit: StderrTailBytes,
		Timeout:     cfg.Timeout,
		Grace:       grace,
		Signals:     cfg.Signals,
		// A process that left the tool's group may hold its standard output
		// open; once the tool itself has exited, wait only briefly for it.
		DrainWait: 2 * time.Second,
	})
	if p.StartErr != nil {
		return outcome{Summary: Summary{Exit: exitStartFailure, Error: "cannot start the tool: " + p.StartErr.Error()}}
	}
	s := Summary{Exit: p.Exit, Size: p.StdoutSize, StderrTail: p.Stderr, TimedOut: p.Stopped == procrun.AtDeadline}
	if p.WaitErr != nil {
		s.Exit, s.Error = exitStartFailure, "waiting for the tool: "+p.WaitErr.Error()
	}
	return outcome{Summary: s, out: p.Stdout}
}

// Encode renders the summary within limit bytes, with out (the head of
// standard output) inlined when the whole output is there and fits.
func Encode(s Summary, out []byte, limit int) []byte {
	s.Out, s.OutInLog = "", false
	if int64(len(out)) == s.Size && utf8.Valid(out) {
		s.Out = string(out)
		if b := marshal(s); len(b) <= limit {
			return b
		}
		s.Out = ""
	}
	s.OutInLog = s.Size > 0
	// Shrink the stderr tail and the error until the message fits; with
	// the default limit the first attempt always does.
	for {
		b := marshal(s)
		if len(b) <= limit || (s.StderrTail == "" && s.Error == "") {
			return b
		}
		s.StderrTail = clip.Tail(s.StderrTail, len(s.StderrTail)/2)
		s.Error = clip.Head(s.Error, len(s.Error)/2)
	}
}

func marshal(s Summary) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a struct of strings and numbers always encodes
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func lookup(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val // the last one wins, as in the process's environment
		}
	}
	return v
}
