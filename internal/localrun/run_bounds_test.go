package localrun

import (
	"io"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// testdata/refused-run.yaml proposes a call to a tool that does not exist
// and one that breaks the tool's schema. (Arguments that are not a JSON
// object cannot be scripted: the CRD refuses them, here as in a cluster;
// the engine's tests cover them.)
func TestRun_everyRefusedCallPrintsALine(t *testing.T) {
	r := runPath(t, testdataPath("refused-run.yaml"), Options{})
	if r.code != 0 {
		t.Fatalf("exit status = %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "stdout", r.stdout,
		`t1-c1 shout {"text":"hello"} -> deny (unknown-tool): no tool is named "shout"`,
		`t1-c2 echo {"text":7} -> deny (invalid-arguments): the arguments do not match its parameters: at /text:`)
}

// A terminal nobody answers must not hold the run for ever: at
// approvalTimeout the run ends Escalated, as the operator ends it.
func TestRun_unansweredAskOnTheTerminalEscalatesAtApprovalTimeout(t *testing.T) {
	pr, pw := io.Pipe() // a terminal nobody types on
	defer pw.Close()
	// ask-run.yaml, waiting at most 300ms for the person.
	askTimeoutRun := readTestdata(t, "ask-run.yaml") + "  approvalTimeout: 300ms\n"
	r := run(t, askTimeoutRun, Options{JSON: true, Interactive: true, Stdin: pr})
	if r.code != ExitCode("Escalated") {
		t.Fatalf("exit status = %d, want %d (Escalated)\nstdout:\n%s\nstderr:\n%s", r.code, ExitCode("Escalated"), r.stdout, r.stderr)
	}
	st := decodeStatus(t, r.stdout)
	if st.Outcome != v1alpha1.OutcomeEscalated || !strings.Contains(st.Reason, "t1-c1 (refund) waited more than approvalTimeout (300ms)") {
		t.Errorf("outcome %s, reason %q; want Escalated after the approval timeout", st.Outcome, st.Reason)
	}
	if st.Usage.PerTool["refund"] != 0 {
		t.Errorf("the unanswered refund ran")
	}
	mustContain(t, "stderr", r.stderr, "no answer within approvalTimeout: the run escalates")
}

// testdata/stubborn-run.yaml is the run: a 2s wall-clock ceiling
// and a tool that ignores SIGTERM. The tool's 1s timeout and the local kill
// grace (2s) do not fit in what is left after the first model call, so the
// batch is refused before the tool starts, instead of the run working 3.4s.
func TestRun_wallClockCeilingHoldsWithAToolThatIgnoresSIGTERM(t *testing.T) {
	r := runPath(t, testdataPath("stubborn-run.yaml"), Options{JSON: true})
	st := decodeStatus(t, r.stdout)
	t.Logf("outcome %s, worked %ds: %s", st.Outcome, st.Usage.WallClockSeconds, st.Reason)
	if st.Outcome != v1alpha1.OutcomeBudgetExhausted || !strings.Contains(st.Reason, "wallClock ceiling") {
		t.Fatalf("outcome %s (%s), want BudgetExhausted on the wall clock", st.Outcome, st.Reason)
	}
	if st.Usage.WallClockSeconds > 2 || st.Usage.PerTool["stubborn"] != 0 {
		t.Fatalf("worked %ds with %d stubborn calls: the ceiling of 2s was not held", st.Usage.WallClockSeconds, st.Usage.PerTool["stubborn"])
	}
}
