package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/version"
)

// echoRun is testdata/echo-run.yaml: the model calls echo once and then
// answers; echo is mutating and irreversible, so the call asks a person.
var echoRun = filepath.Join("testdata", "echo-run.yaml")

// readManifest returns the manifest at path, for a test that edits it.
func readManifest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func manifestFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func local(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = execute(append([]string{"local"}, args...), strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// terminal makes agentrun local treat stdin as a terminal for one test.
func terminal(t *testing.T) {
	old := stdinIsTerminal
	stdinIsTerminal = func(io.Reader) bool { return true }
	t.Cleanup(func() { stdinIsTerminal = old })
}

func TestLocal_usageErrorsExitOne(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-f", "run.yaml", "-o", "yaml"},
		{"-f", "run.yaml", "extra"},
		{"--nope"},
	} {
		code, stdout, stderr := local(t, "", args...)
		if code != 1 || stdout != "" || !strings.Contains(stderr, "Usage:\n  agentrun local -f run.yaml") {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s", args, code, stdout, stderr)
		}
	}
}

func TestLocal_helpDocumentsTheExitStatuses(t *testing.T) {
	code, stdout, _ := local(t, "", "-h")
	if code != 0 {
		t.Errorf("-h exits %d, want 0", code)
	}
	for _, want := range []string{"Completed        0", "usage, manifest  1", "BudgetExhausted  2", "GuardrailStop    3",
		"LoopDetected     4", "ApprovalDenied   5", "Escalated        6", "ToolFailure      7", "Error            8"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("help does not contain %q:\n%s", want, stdout)
		}
	}
}

func TestLocal_withNoTerminalTheAskIsDeclined(t *testing.T) {
	code, stdout, stderr := local(t, "approve\n", "-f", echoRun)
	if code != 0 {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "no terminal to ask on: declining t1-c1 (echo)") || strings.Contains(stdout, "echo: ok") {
		t.Errorf("the ASK was not declined\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
}

func TestLocal_onATerminalTheAskIsAskedAndJSONIsTheStatus(t *testing.T) {
	terminal(t)
	code, stdout, stderr := local(t, "approve\n", "-f", echoRun, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", code, stderr)
	}
	var st v1alpha1.AgentRunStatus
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("stdout is not a status: %v\n%s", err, stdout)
	}
	if st.Outcome != v1alpha1.OutcomeCompleted || st.Usage == nil || st.Usage.Turns != 2 || st.Usage.InputTokens != 2200 ||
		st.Usage.PerTool["echo"] != 1 {
		t.Errorf("status = %s, usage %+v; want Completed, 2 turns, 2200 input tokens, echo run once", st.Outcome, st.Usage)
	}
	if len(st.Approvals) != 1 || st.Approvals[0].Decision != v1alpha1.ApprovalApprove {
		t.Errorf("approvals = %+v, want one approve", st.Approvals)
	}
	if !strings.Contains(stderr, "approve / deny / stop? ") {
		t.Errorf("the prompt is not on stderr:\n%s", stderr)
	}
}

func TestLocal_exitStatusFollowsTheOutcome(t *testing.T) {
	builtin := strings.Replace(readManifest(t, echoRun), `job: {image: busybox, command: [sh, -c, "cat; echo"]}`, "builtin: kubernetes.list", 1)
	code, _, stderr := local(t, "", "-f", manifestFile(t, builtin))
	if code != 7 || !strings.Contains(stderr, "builtin kubernetes tools need a cluster") {
		t.Errorf("builtin tool: exit %d, want 7 (ToolFailure), stderr:\n%s", code, stderr)
	}

	malformed := readManifest(t, echoRun) + "---\napiVersion: v1\nkind: Service\nmetadata: {name: extra}\n"
	code, _, stderr = local(t, "", "-f", manifestFile(t, malformed))
	if code != 1 || !strings.Contains(stderr, `document 2 (Service "extra")`) {
		t.Errorf("malformed manifest: exit %d, want 1, stderr:\n%s", code, stderr)
	}

	terminal(t)
	code, stdout, _ := local(t, "stop\n", "-f", echoRun)
	if code != 5 || !strings.Contains(stdout, "outcome: ApprovalDenied") {
		t.Errorf("stop: exit %d, want 5, stdout:\n%s", code, stdout)
	}
}

func TestLocal_theExampleRuns(t *testing.T) {
	code, stdout, stderr := local(t, "", "-f", filepath.Join("..", "..", "examples", "local", "double-charge.yaml"))
	if code != 0 || !strings.Contains(stdout, "outcome: Completed") || !strings.Contains(stdout, "Turn 5 started") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// A model's answer and a tool's output reach the terminal without the
// escape sequences they carried (in testdata/escapes.yaml the tool clears
// the screen and rewrites its line; the model colours its answer and sets
// the window title).
func TestLocal_stripsTerminalEscapesFromModelsAndTools(t *testing.T) {
	code, stdout, stderr := local(t, "", "-f", filepath.Join("testdata", "escapes.yaml"))
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%q\nstderr:\n%q", code, stdout, stderr)
	}
	for _, out := range []string{stdout, stderr} {
		if strings.ContainsAny(out, "\x1b\r\a") {
			t.Errorf("terminal control reached the output: %q", out)
		}
	}
	if !strings.Contains(stdout, "all good") || !strings.Contains(stdout, "refund 99999999") || !strings.Contains(stdout, "refund 1") {
		t.Errorf("the text itself is missing:\n%q", stdout)
	}
}

// Issue 34.5: agentrun version says what the binary was built from.
func TestVersion_printsTheBuild(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := execute([]string{"version"}, strings.NewReader(""), &out, &errOut); code != 0 || errOut.Len() != 0 {
		t.Fatalf("agentrun version = %d, stderr %q", code, errOut.String())
	}
	if want := version.Get().String() + "\n"; out.String() != want {
		t.Errorf("agentrun version printed %q, want %q", out.String(), want)
	}
}

func TestLocal_aRunFromATemplate(t *testing.T) {
	manifest := `apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRunTemplate
metadata: {name: greeter}
spec:
  parameters: [{name: who, default: world}]
  run:
    goal: "Greet $(params.who)."
    model: {provider: scripted, script: [{content: "Hello, $(params.who)."}]}
    budget: {maxTurns: 2}
---
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: greet-ops}
spec:
  templateRef: {name: greeter}
  parameters: [{name: who, value: ops}]
`
	code, stdout, stderr := local(t, "", "-f", manifestFile(t, manifest))
	if code != 0 || !strings.Contains(stdout, "Hello, ops.") || !strings.Contains(stdout, "outcome: Completed") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
