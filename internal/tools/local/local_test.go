package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun/agentrun/internal/loop"
)

// The test binary doubles as the tools under test: started with
// helperEnv set, it behaves as the named helper instead of running tests.
// The executor passes configured env on, so the variable reaches it.
const helperEnv = "AGENTRUN_LOCAL_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	os.Exit(m.Run())
}

// helperReport is what the "echo" helper prints.
type helperReport struct {
	Stdin          string   `json:"stdin"`
	EnvArgs        string   `json:"envArgs"`
	IdempotencyKey string   `json:"idempotencyKey"`
	EnvNames       []string `json:"envNames"`
	Extra          string   `json:"extra"`
	Pgid           int      `json:"pgid"`
	Pid            int      `json:"pid"`
}

// startStubbornChild starts, in the helper's process group and on its
// stdout, a child that ignores SIGTERM.
func startStubbornChild() (*exec.Cmd, error) {
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), helperEnv+"=stubborn-child")
	child.Stdout = os.Stdout
	return child, child.Start()
}

func runHelper(mode string) int {
	switch mode {
	case "echo":
		in, _ := io.ReadAll(os.Stdin)
		var names []string
		for _, kv := range os.Environ() {
			name, _, _ := strings.Cut(kv, "=")
			names = append(names, name)
		}
		pgid, _ := syscall.Getpgid(0)
		_ = json.NewEncoder(os.Stdout).Encode(helperReport{
			Stdin: string(in), EnvArgs: os.Getenv(EnvToolArgs), IdempotencyKey: os.Getenv(EnvIdempotencyKey),
			EnvNames: names, Extra: os.Getenv("EXTRA"), Pgid: pgid, Pid: os.Getpid(),
		})
		return 0
	case "fail":
		fmt.Fprintln(os.Stdout, `{"partial":true}`)
		fmt.Fprint(os.Stderr, strings.Repeat("noise ", 400))
		fmt.Fprint(os.Stderr, "\nerror: account 42 is locked\n")
		return 3
	case "tempfail":
		fmt.Fprint(os.Stderr, "billing API: connection refused\n")
		return 75
	case "big":
		w := bufio.NewWriterSize(os.Stdout, 64<<10)
		line := strings.Repeat("x", 1023) + "\n"
		for range 10 << 10 { // 10 MiB
			_, _ = w.WriteString(line)
		}
		_ = w.Flush()
		return 0
	case "stubborn":
		// Ignores SIGTERM, and so does a child it starts in the same
		// process group; both print their pid once they ignore it.
		signal.Ignore(syscall.SIGTERM)
		if _, err := startStubbornChild(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("leader %d\n", os.Getpid())
		time.Sleep(time.Hour)
		return 0
	case "stubborn-child":
		signal.Ignore(syscall.SIGTERM)
		fmt.Printf("child %d\n", os.Getpid())
		_ = os.WriteFile(filepath.Join(os.TempDir(), fmt.Sprintf("agentrun-local-test-%d", os.Getpid())), nil, 0o600)
		time.Sleep(time.Hour)
		return 0
	case "orphan":
		// Leaves a child behind, holding stdout, and exits at once.
		child, err := startStubbornChild()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// Exit only once the child has said it is running.
		for !childReported(child.Process.Pid) {
			time.Sleep(5 * time.Millisecond)
		}
		fmt.Printf("leader %d\n", os.Getpid())
		return 0
	case "polite":
		// Exits on SIGTERM after writing a last line to stderr.
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("ready")
		<-c
		fmt.Fprintln(os.Stderr, "got SIGTERM, cleaning up")
		return 143
	}
	fmt.Fprintf(os.Stderr, "unknown helper %q\n", mode)
	return 2
}

// childReported says whether the stubborn child with pid has printed its
// line (it leaves a marker file right after).
func childReported(pid int) bool {
	marker := filepath.Join(os.TempDir(), fmt.Sprintf("agentrun-local-test-%d", pid))
	if _, err := os.Stat(marker); err != nil {
		return false
	}
	_ = os.Remove(marker)
	return true
}

// helper returns an executor that runs the test binary as the named helper.
func helper(t *testing.T, mode string, opts ...Option) *Executor {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(self, nil, append([]string{helperEnv + "=" + mode, "EXTRA=configured"}, coverEnv(t)...), "", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// coverEnv is what a coverage-instrumented test binary (go test -cover)
// needs to run as a tool: a GOCOVERDIR for its counters, without which it
// warns on stderr, which the tests read. Nothing in a plain test run.
func coverEnv(t *testing.T) []string {
	if testing.CoverMode() == "" {
		return nil
	}
	return []string{"GOCOVERDIR=" + t.TempDir()}
}

func invocation(args string) loop.Invocation {
	return loop.Invocation{
		CallID: "t1-c1", Tool: "t", Arguments: json.RawMessage(args),
		IdempotencyKey: "run-uid/t1-c1", Timeout: 20 * time.Second, MaxResultBytes: 4096,
	}
}

func TestExecute_passesArgumentsOnStdinAndInEnvAndPrintsResult(t *testing.T) {
	t.Setenv("AGENTRUN_TEST_SECRET", "operator-only")
	res := helper(t, "echo").Execute(context.Background(), invocation(`{"email":"r.okafor@northwind.example"}`))
	if res.Failure != nil {
		t.Fatalf("Failure = %+v, want none", res.Failure)
	}
	var got helperReport
	if err := json.Unmarshal(res.Output, &got); err != nil {
		t.Fatalf("output %q: %v", res.Output, err)
	}
	want := helperReport{
		Stdin:          `{"email":"r.okafor@northwind.example"}`,
		EnvArgs:        `{"email":"r.okafor@northwind.example"}`,
		IdempotencyKey: "run-uid/t1-c1",
		Extra:          "configured",
	}
	names := got.EnvNames
	pid, pgid := got.Pid, got.Pgid
	got.EnvNames, got.Pid, got.Pgid = nil, 0, 0
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tool saw (-want +got):\n%s", diff)
	}
	if pgid != pid {
		t.Errorf("tool runs in process group %d, want its own (%d)", pgid, pid)
	}
	allowed := map[string]bool{"PATH": true, "HOME": true, "EXTRA": true, helperEnv: true,
		EnvToolArgs: true, EnvIdempotencyKey: true, "GOCOVERDIR": testing.CoverMode() != ""}
	for _, n := range names {
		if !allowed[n] {
			t.Errorf("tool environment has %s; want only PATH, HOME, configured and contract variables", n)
		}
	}
	if res.Size != int64(len(res.Output)) || res.Truncated {
		t.Errorf("Size, Truncated = %d, %v; want %d, false", res.Size, res.Truncated, len(res.Output))
	}
}

func TestExecute_emptyArgumentsAreAnEmptyObject(t *testing.T) {
	res := helper(t, "echo").Execute(context.Background(), invocation(""))
	var got helperReport
	if err := json.Unmarshal(res.Output, &got); err != nil {
		t.Fatalf("output %q: %v", res.Output, err)
	}
	if got.Stdin != "{}" || got.EnvArgs != "{}" {
		t.Errorf("stdin, env = %q, %q; want {} for both", got.Stdin, got.EnvArgs)
	}
}

func TestExecute_nonZeroExitCarriesCodeAndStderrTail(t *testing.T) {
	res := helper(t, "fail").Execute(context.Background(), invocation(`{}`))
	if res.Failure == nil {
		t.Fatal("Failure = nil, want an exit failure")
	}
	if res.Failure.Kind != loop.FailExit || res.Failure.Code != 3 {
		t.Errorf("Failure = %s/%d, want %s/3", res.Failure.Kind, res.Failure.Code, loop.FailExit)
	}
	if !strings.HasSuffix(res.Failure.Detail, "error: account 42 is locked") {
		t.Errorf("Detail = %q, want the end of stderr", res.Failure.Detail)
	}
	if !strings.HasPrefix(res.Failure.Detail, "...") || len(res.Failure.Detail) > loop.MaxDetailBytes {
		t.Errorf("Detail is %d bytes starting %q; want a marked cut within %d bytes",
			len(res.Failure.Detail), res.Failure.Detail[:10], loop.MaxDetailBytes)
	}
	if got := string(res.Output); got != "{\"partial\":true}\n" {
		t.Errorf("Output = %q, want what the tool printed on stdout", got)
	}
}

// Issue 33.1: exit 75 (EX_TEMPFAIL) is an Unavailable failure, retried
// as one, naming the tool's last words.
func TestExecute_exitTempFailIsUnavailable(t *testing.T) {
	res := helper(t, "tempfail").Execute(context.Background(), invocation(`{}`))
	if f := res.Failure; f == nil || f.Kind != loop.FailUnavailable || f.Code != 75 || !f.Transient() ||
		!strings.HasSuffix(f.Detail, "EX_TEMPFAIL: a dependency it needs is unavailable): billing API: connection refused") {
		t.Fatalf("Failure = %+v, want a transient Unavailable failure with code 75 and the tool's stderr", f)
	}
}

func TestExecute_commandThatCannotStartIsUnavailable(t *testing.T) {
	for name, command := range map[string]string{
		"missing":        filepath.Join(t.TempDir(), "no-such-tool"),
		"not executable": writeFile(t, "tool.txt", "plain text", 0o644),
		"not in PATH":    "agentrun-no-such-tool-in-path",
	} {
		t.Run(name, func(t *testing.T) {
			e, err := New(command, nil, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			res := e.Execute(context.Background(), invocation(`{}`))
			if res.Failure == nil || res.Failure.Kind != loop.FailUnavailable {
				t.Fatalf("Failure = %+v, want %s", res.Failure, loop.FailUnavailable)
			}
			if !strings.Contains(res.Failure.Detail, "cannot start") {
				t.Errorf("Detail = %q, want it to say the command cannot start", res.Failure.Detail)
			}
		})
	}
}

func writeFile(t *testing.T, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecute_killsProcessGroupThatIgnoresSIGTERMAtDeadline(t *testing.T) {
	const timeout, grace = time.Second, 500 * time.Millisecond
	e := helper(t, "stubborn", WithGracePeriod(grace))
	inv := invocation(`{}`)
	inv.Timeout = timeout
	start := time.Now()
	res := e.Execute(context.Background(), inv)
	took := time.Since(start)
	t.Logf("timeout %s, grace %s: Execute returned after %s", timeout, grace, took)

	if res.Failure == nil || res.Failure.Kind != loop.FailTimeout {
		t.Fatalf("Failure = %+v, want %s", res.Failure, loop.FailTimeout)
	}
	if !strings.Contains(res.Failure.Detail, "SIGKILL") {
		t.Errorf("Detail = %q, want it to say SIGKILL was needed", res.Failure.Detail)
	}
	if took < timeout+grace || took > timeout+grace+2*time.Second {
		t.Errorf("Execute took %s, want between %s and %s", took, timeout+grace, timeout+grace+2*time.Second)
	}
	pids := leaderAndChild(t, res)
	waitGroupGone(t, pids["leader"], []int{pids["leader"], pids["child"]})
}

// leaderAndChild reads the pids a group helper printed, one "role pid"
// line each, and fails the test unless both the leader and its child are
// there.
func leaderAndChild(t *testing.T, res loop.Result) map[string]int {
	t.Helper()
	pids := map[string]int{}
	for line := range strings.Lines(string(res.Output)) {
		role, pid, _ := strings.Cut(strings.TrimSpace(line), " ")
		pids[role], _ = strconv.Atoi(pid)
	}
	if pids["leader"] == 0 || pids["child"] == 0 {
		t.Fatalf("Output = %q, want the pids of the leader and its child", res.Output)
	}
	return pids
}

func TestExecute_killsWhatTheToolLeftInItsGroup(t *testing.T) {
	start := time.Now()
	res := helper(t, "orphan").Execute(context.Background(), invocation(`{}`))
	took := time.Since(start)
	if res.Failure != nil {
		t.Fatalf("Failure = %+v, want none", res.Failure)
	}
	pids := leaderAndChild(t, res)
	if took > 5*time.Second {
		t.Errorf("Execute took %s; it should not wait for the left-behind child", took)
	}
	waitGroupGone(t, pids["leader"], []int{pids["child"]})
}

func TestExecute_politeToolGetsSIGTERMAndNoSIGKILL(t *testing.T) {
	e := helper(t, "polite", WithGracePeriod(10*time.Second))
	inv := invocation(`{}`)
	inv.Timeout = 500 * time.Millisecond
	start := time.Now()
	res := e.Execute(context.Background(), inv)
	took := time.Since(start)
	if res.Failure == nil || res.Failure.Kind != loop.FailTimeout {
		t.Fatalf("Failure = %+v, want %s", res.Failure, loop.FailTimeout)
	}
	if strings.Contains(res.Failure.Detail, "SIGKILL") || !strings.Contains(res.Failure.Detail, "cleaning up") {
		t.Errorf("Detail = %q, want SIGTERM only and the tool's last words", res.Failure.Detail)
	}
	if took > 5*time.Second {
		t.Errorf("Execute took %s; the tool exits on SIGTERM, so it should not wait for the grace period", took)
	}
}

func TestExecute_endedContextStartsNothing(t *testing.T) {
	e := helper(t, "stubborn", WithGracePeriod(100*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := e.Execute(ctx, invocation(`{}`))
	if res.Failure == nil || res.Failure.Kind != loop.FailUnavailable {
		t.Fatalf("Failure = %+v, want %s for a call whose context ended before it started", res.Failure, loop.FailUnavailable)
	}
}

func TestExecute_cancelledCallStopsTheToolAndLeavesOutcomeUnknown(t *testing.T) {
	e := helper(t, "stubborn", WithGracePeriod(100*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(300*time.Millisecond, cancel)
	defer stop.Stop()
	start := time.Now()
	res := e.Execute(ctx, invocation(`{}`))
	if res.Failure == nil || res.Failure.Kind != loop.FailUnknown {
		t.Fatalf("Failure = %+v, want %s", res.Failure, loop.FailUnknown)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Execute took %s after its context was cancelled", took)
	}
}

// waitGroupGone waits, within a bound, until no live process is in group
// pgid and none of pids is alive. Zombies count as gone: whether they are
// reaped promptly is up to the machine's init, not the executor.
func waitGroupGone(t *testing.T, pgid int, pids []int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		alive := liveMembers(pgid, pids)
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of group %d still alive", alive, pgid)
		}
		time.Sleep(20 * time.Millisecond) // polling a bounded condition, not waiting for state blindly
	}
}

func liveMembers(pgid int, pids []int) []int {
	var alive []int
	for _, pid := range pids {
		if live(pid) {
			alive = append(alive, pid)
		}
	}
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return alive
	}
	// The group may still hold zombies; look for live members in /proc.
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid && live(pid) {
			alive = append(alive, pid)
		}
	}
	return alive
}

// live reports whether pid exists and is not a zombie.
func live(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses: "pid (comm) S ...".
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

func TestExecute_capsOutputAndCountsItsSize(t *testing.T) {
	inv := invocation(`{}`)
	inv.MaxResultBytes = 1000
	res := helper(t, "big").Execute(context.Background(), inv)
	if res.Failure != nil {
		t.Fatalf("Failure = %+v, want none", res.Failure)
	}
	if len(res.Output) != 1001 || !res.Truncated || res.Size != 10<<20 {
		t.Errorf("len(Output), Truncated, Size = %d, %v, %d; want 1001, true, %d",
			len(res.Output), res.Truncated, res.Size, 10<<20)
	}
}

func TestNew_rejectsBadConfiguration(t *testing.T) {
	for name, tc := range map[string]struct {
		command string
		env     []string
	}{
		"empty command":  {command: " "},
		"env not k=v":    {command: "true", env: []string{"TOKEN"}},
		"env empty name": {command: "true", env: []string{"=x"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(tc.command, nil, tc.env, ""); err == nil {
				t.Error("New succeeded, want an error")
			}
		})
	}
}

func TestNew_errorDoesNotEchoEnvValue(t *testing.T) {
	_, err := New("true", nil, []string{"TOKEN"}, "")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("err = %v", err)
	}
	_, err = New("true", nil, []string{"\x00TOKEN=s3cret"}, "")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("err = %v, want an error without the value", err)
	}
}

func TestTailString(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		cut  bool
		want string
	}{
		{in: "end of it\n", n: 20, cut: true, want: "...end of it"},
		{in: "  short \n", n: 10, want: "short"},
		{in: "0123456789abcdef", n: 8, want: "...bcdef"},
		// The cut would fall inside "é"; it moves to the next rune.
		{in: "aaaaé123", n: 7, want: "...123"},
	} {
		if got := tailString(tc.in, tc.n, tc.cut); got != tc.want {
			t.Errorf("tailString(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
