package loop

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Issue 49, item 4: every tool message of the transcript records its
// call's verdict, the rule that decided it, how long it ran and how large
// its whole result was, so that a reader sees every call's without an
// event per call: a call that ran, one that a rule denied (it did not run:
// no duration, no size), one whose result was cut to the tool's
// maxResultBytes (its whole size is recorded), and one that took less than
// a millisecond (it ran: 1, rounded up, not nothing).
func TestTranscript_toolMessagesRecordVerdictRuleDurationAndResultSize(t *testing.T) {
	r := makeRun(t).readTool("lookup").readTool("export").tool("drop_table", true, true).readTool("ping").
		then(calls(call("lookup", `{"q":"in_9f21"}`), call("drop_table", `{}`), call("export", `{}`), call("ping", `{}`)), answer("done"))
	r.cfg.Tools[1].MaxResultBytes = 16
	r.cfg.Policy = Policy{Default: Allow, Rules: []Rule{{Tools: []string{"drop_table"}, Decision: Deny, Reason: "Never."}}}
	r.output("lookup", func(Invocation) Result {
		return Result{Output: []byte(`{"invoice":"in_9f21"}`), Duration: 250 * time.Millisecond}
	})
	r.output("export", func(Invocation) Result {
		return Result{Output: []byte(strings.Repeat("x", 17)), Truncated: true, Size: 4096, Duration: 1500 * time.Millisecond}
	})
	r.output("ping", func(Invocation) Result { return Result{Output: []byte("pong"), Duration: 300 * time.Microsecond} })
	s := r.go_()
	expectOutcome(t, s, Completed)
	got := map[string]*CallRecord{}
	for _, m := range toolMessages(s) {
		got[m.Tool] = m.Record
	}
	want := map[string]*CallRecord{
		"lookup":     {Verdict: Allow, Rule: "policy.default", DurationMs: 250, ResultBytes: int64(len(`{"invoice":"in_9f21"}`))},
		"drop_table": {Verdict: Deny, Rule: "policy.rules[0]"},
		"export":     {Verdict: Allow, Rule: "policy.default", DurationMs: 1500, ResultBytes: 4096},
		"ping":       {Verdict: Allow, Rule: "policy.default", DurationMs: 1, ResultBytes: 4},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the tool messages' records (-want +got):\n%s", diff)
	}
	// Bounded: the record of a call adds a few dozen bytes to its message.
	raw, err := json.Marshal(got["export"])
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 128 {
		t.Errorf("a call's record is %d bytes (%s), want it small and fixed", len(raw), raw)
	}
}
