package procrun

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestRun_exitOutputAndBounds(t *testing.T) {
	res := Run(context.Background(), Spec{
		Argv:        sh(`cat; printf abcdefghij; printf 'one\ntwo\nthree' >&2; exit 3`),
		Stdin:       []byte("in:"),
		StdoutLimit: 7,
		StderrLimit: 5,
		Timeout:     time.Minute,
	})
	if res.StartErr != nil || res.WaitErr != nil {
		t.Fatalf("start %v, wait %v", res.StartErr, res.WaitErr)
	}
	if res.Exit != 3 || res.Signal != 0 || res.Stopped != NotStopped || res.Killed {
		t.Fatalf("exit %d signal %v stopped %v killed %v, want exit 3 by itself", res.Exit, res.Signal, res.Stopped, res.Killed)
	}
	if string(res.Stdout) != "in:abcd" || res.StdoutSize != 13 {
		t.Fatalf("stdout %q of %d bytes, want the head \"in:abcd\" of 13", res.Stdout, res.StdoutSize)
	}
	if res.Stderr != "three" || !res.StderrDropped {
		t.Fatalf("stderr %q (dropped %v), want the tail \"three\" with the rest dropped", res.Stderr, res.StderrDropped)
	}
}

func TestRun_stderrTailStartsOnARune(t *testing.T) {
	// "é" is two bytes; the last 3 bytes start inside it.
	res := Run(context.Background(), Spec{Argv: sh(`printf 'xxé!!' >&2`), StderrLimit: 3, StdoutLimit: 1})
	if res.Stderr != "!!" || !res.StderrDropped {
		t.Fatalf("stderr %q (dropped %v), want the tail \"!!\" that starts on a rune", res.Stderr, res.StderrDropped)
	}
}

func TestRun_aCommandThatIgnoresSIGTERMIsKilledAfterTheGrace(t *testing.T) {
	start := time.Now()
	res := Run(context.Background(), Spec{
		Argv:    sh(`trap '' TERM; while :; do sleep 0.05; done`),
		Timeout: 200 * time.Millisecond,
		Grace:   200 * time.Millisecond,
	})
	if res.Stopped != AtDeadline || !res.Killed || res.Signal != syscall.SIGKILL || res.Exit != 128+int(syscall.SIGKILL) {
		t.Fatalf("stopped %v killed %v signal %v exit %d, want killed at the deadline (exit 137)", res.Stopped, res.Killed, res.Signal, res.Exit)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("took %v", took)
	}
}

func TestRun_theContextStopsTheGroupWithSIGTERM(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	out := &signalWriter{ready: make(chan struct{})}
	go func() { <-out.ready; cancel() }()
	res := Run(ctx, Spec{Argv: sh(`echo ready; exec sleep 60`), Stdout: out, StdoutLimit: 64, Grace: 10 * time.Second})
	if res.Stopped != ByContext || res.Killed || res.Signal != syscall.SIGTERM || res.Exit != 128+int(syscall.SIGTERM) {
		t.Fatalf("stopped %v killed %v signal %v exit %d, want stopped by the context with SIGTERM", res.Stopped, res.Killed, res.Signal, res.Exit)
	}
}

func TestRun_whatTheCommandLeavesInItsGroupIsKilled(t *testing.T) {
	res := Run(context.Background(), Spec{Argv: sh(`sleep 60 & echo $!`), StdoutLimit: 64, Timeout: time.Minute})
	if res.Exit != 0 || res.Stopped != NotStopped {
		t.Fatalf("exit %d stopped %v", res.Exit, res.Stopped)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("stdout %q: %v", res.Stdout, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the leader's child %d is still running after the leader exited", pid)
		}
		time.Sleep(10 * time.Millisecond) // polling a process table, bounded above
	}
}

func TestRun_aCommandThatCannotStart(t *testing.T) {
	res := Run(context.Background(), Spec{Argv: []string{"/nonexistent/tool"}})
	if res.StartErr == nil {
		t.Fatal("want a start error")
	}
}

// alive reports whether pid runs (a zombie waiting for its parent to reap
// it has ended).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false // reaped
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

type signalWriter struct {
	ready chan struct{}
	done  bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if !w.done && strings.Contains(string(p), "ready") {
		w.done = true
		close(w.ready)
	}
	return len(p), nil
}
