package entrypoint

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The tests run real child processes: this test binary itself, told by
// an environment variable which tool to play.
const childEnv = "AGENTRUN_ENTRYPOINT_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

func child(mode string) int {
	switch mode {
	case "echo": // the arguments from stdin, then the idempotency key
		in, _ := io.ReadAll(os.Stdin)
		fmt.Printf("%s %s", in, os.Getenv(EnvIdempotencyKey))
		return 0
	case "fail":
		fmt.Print("partial")
		fmt.Fprint(os.Stderr, strings.Repeat("noise ", 200)+"refund rejected: account closed\n")
		return 3
	case "big":
		fmt.Print(strings.Repeat("x", 10000))
		return 0
	case "hang": // until a signal's default action ends it
		time.Sleep(time.Hour) // not a wait in the test: the tool hangs
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		fmt.Print("stubborn")
		time.Sleep(time.Hour) // not a wait in the test: the tool hangs
	case "wait-term":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("ready")
		<-ch
		fmt.Fprint(os.Stderr, "stopped by SIGTERM")
		return 143
	}
	return 99
}

// runChild runs the wrapper around this binary in the given mode.
func runChild(t *testing.T, mode string, stdout io.Writer, sigs <-chan os.Signal, extraEnv ...string) (int, Summary, string) {
	return runChildWith(t, mode, Config{Stdout: stdout, Signals: sigs}, extraEnv...)
}

func runChildWith(t *testing.T, mode string, cfg Config, extraEnv ...string) (int, Summary, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "termination-log")
	env := append(os.Environ(), childEnv+"="+mode)
	env = append(env, extraEnv...)
	cfg.Argv = []string{self, "-test.run=^$"}
	cfg.Env = env
	cfg.TerminationPath = path
	code := Run(context.Background(), cfg)
	msg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg) > MaxMessageBytes {
		t.Errorf("termination message is %d bytes, more than %d", len(msg), MaxMessageBytes)
	}
	sum, err := ParseSummary(string(msg))
	if err != nil {
		t.Fatal(err)
	}
	return code, sum, string(msg)
}

func TestRun_feedsArgumentsOnStdinAndInlinesResult(t *testing.T) {
	var out strings.Builder
	code, got, _ := runChild(t, "echo", &out, nil,
		EnvToolArgs+`={"email":"r.okafor@northwind.example"}`, EnvIdempotencyKey+"=run-t1-c1")
	const result = `{"email":"r.okafor@northwind.example"} run-t1-c1`
	want := Summary{Exit: 0, Out: result, Size: int64(len(result))}
	if code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	if out.String() != want.Out {
		t.Errorf("streamed stdout = %q, want %q", out.String(), want.Out)
	}
}

func TestRun_emptyArgumentsBecomeEmptyObject(t *testing.T) {
	_, got, _ := runChild(t, "echo", io.Discard, nil, EnvToolArgs+"=", EnvIdempotencyKey+"=k")
	if got.Out != "{} k" {
		t.Errorf("out = %q, want %q", got.Out, "{} k")
	}
}

func TestRun_nonZeroExitCarriesCodeAndStderrTail(t *testing.T) {
	code, got, _ := runChild(t, "fail", io.Discard, nil)
	if code != 3 || got.Exit != 3 {
		t.Errorf("exit code = %d, summary exit = %d, want 3", code, got.Exit)
	}
	if got.Out != "partial" {
		t.Errorf("out = %q, want the partial stdout", got.Out)
	}
	if !strings.HasSuffix(got.StderrTail, "refund rejected: account closed\n") || len(got.StderrTail) > StderrTailBytes {
		t.Errorf("stderr tail = %q (%d bytes), want the last %d bytes", got.StderrTail, len(got.StderrTail), StderrTailBytes)
	}
}

func TestRun_bigOutputIsMarkedForTheLog(t *testing.T) {
	var out strings.Builder
	code, got, _ := runChild(t, "big", &out, nil)
	want := Summary{Exit: 0, OutInLog: true, Size: 10000}
	if code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	if out.Len() != 10000 {
		t.Errorf("streamed %d bytes of stdout, want all 10000", out.Len())
	}
}

func TestRun_forwardsSIGTERM(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	ready := &lineWatcher{line: "ready", seen: make(chan struct{})}
	go func() {
		select {
		case <-ready.seen:
			sigs <- syscall.SIGTERM
		case <-time.After(30 * time.Second):
		}
	}()
	code, got, _ := runChild(t, "wait-term", ready, sigs)
	if code != 143 || got.StderrTail != "stopped by SIGTERM" {
		t.Errorf("exit %d, stderr tail %q; want 143 and the tool's own words", code, got.StderrTail)
	}
}

func TestRun_deadlineStopsTheTool(t *testing.T) {
	tests := []struct {
		mode    string
		timeout time.Duration
		exit    int
	}{
		{"hang", 200 * time.Millisecond, 128 + int(syscall.SIGTERM)}, // SIGTERM ends it
		// SIGKILL after the grace; the longer deadline leaves the child
		// time to ignore SIGTERM first.
		{"ignore-term", 1500 * time.Millisecond, 128 + int(syscall.SIGKILL)},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			code, got, _ := runChildWith(t, tt.mode, Config{Timeout: tt.timeout, KillGrace: 200 * time.Millisecond})
			if code != tt.exit || got.Exit != tt.exit || !got.TimedOut {
				t.Errorf("exit %d, summary %+v; want exit %d and timedOut", code, got, tt.exit)
			}
		})
	}
}

func TestRun_unstartableCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "termination-log")
	code := Run(context.Background(), Config{Argv: []string{"/nonexistent/tool"}, TerminationPath: path})
	msg, _ := os.ReadFile(path)
	got, err := ParseSummary(string(msg))
	if err != nil {
		t.Fatal(err)
	}
	if code != 127 || got.Exit != 127 || !strings.Contains(got.Error, "cannot start the tool") {
		t.Errorf("exit %d, summary %+v; want 127 and a start error", code, got)
	}
}

func TestEncode_staysWithinLimit(t *testing.T) {
	tests := []struct {
		name    string
		s       Summary
		out     string
		inlined bool
	}{
		{"fits", Summary{Size: 5}, "hello", true},
		{"escaping makes it too big", Summary{Size: 3000}, strings.Repeat("\x01", 3000), false},
		{"not utf-8", Summary{Size: 2}, "\xff\xfe", false},
		{"head only", Summary{Size: 9000}, strings.Repeat("a", 4096), false},
		{"huge stderr", Summary{Size: 1, StderrTail: strings.Repeat("\x02", 4000)}, "a", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Encode(tt.s, []byte(tt.out), MaxMessageBytes)
			if len(b) > MaxMessageBytes {
				t.Fatalf("%d bytes, want at most %d", len(b), MaxMessageBytes)
			}
			got, err := ParseSummary(string(b))
			if err != nil {
				t.Fatal(err)
			}
			if inlined := got.Out == tt.out; inlined != tt.inlined || got.OutInLog == tt.inlined {
				t.Errorf("inlined = %v, outInLog = %v; want inlined %v", inlined, got.OutInLog, tt.inlined)
			}
		})
	}
}

func TestInstall_copiesExecutable(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "bin", "agentrun-entrypoint")
	if err := copyFile(self, dst); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	src, _ := os.Stat(self)
	if fi.Mode().Perm() != 0o755 || fi.Size() != src.Size() {
		t.Errorf("installed %v, %d bytes; want 0755, %d bytes", fi.Mode(), fi.Size(), src.Size())
	}
}

// lineWatcher closes seen once a whole line equal to line was written.
type lineWatcher struct {
	line string
	seen chan struct{}
	buf  []byte
	done bool
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	sc := bufio.NewScanner(strings.NewReader(string(w.buf)))
	for sc.Scan() {
		if sc.Text() == w.line && !w.done {
			w.done = true
			close(w.seen)
		}
	}
	return len(p), nil
}
