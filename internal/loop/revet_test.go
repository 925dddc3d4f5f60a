package loop

import (
	"context"
	"strings"
	"testing"
	"time"
)

// waitingBatch is a run whose first turn proposed a read (allowed) and an
// irreversible refund (asked about), waiting for a person.
func waitingBatch(t *testing.T) (*run, *State) {
	t.Helper()
	r := makeRun(t).readTool("lookup").tool("refund", true, false)
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", `{"q":"a"}`), call("refund", `{"amount":5}`)}}})
	if s.Phase != PhaseApproval || s.Calls[0].Verdict != Allow || s.Calls[1].Verdict != Ask {
		t.Fatalf("phase %s, verdicts %s %s", s.Phase, s.Calls[0].Verdict, s.Calls[1].Verdict)
	}
	return r, s
}

// Issue 27, item 1: on resume, verdicts are vetted again. Under the same
// configuration nothing changes; under a stricter one (a platform rule
// added while the run waited) the stricter verdict wins.
func TestRevet_theStricterVerdictWins(t *testing.T) {
	r, s := waitingBatch(t)
	now := time.Now()
	if notes := r.engine().Revet(context.Background(), s, now); len(notes) != 0 {
		t.Fatalf("the same configuration changed verdicts: %+v", notes)
	}
	r.cfg.Policy.Rules = []Rule{
		{Tools: []string{"lookup"}, Decision: Ask, Reason: "reads are reviewed now", Label: "AgentRunPolicy/p.rules[0]"},
		{Tools: []string{"refund"}, Decision: Deny, Reason: "no refunds", Label: "AgentRunPolicy/p.rules[1]"},
	}
	notes := r.engine().Revet(context.Background(), s, now)
	if len(notes) != 2 || notes[0].Kind != NoteRevetted || !notes[0].Warning {
		t.Fatalf("notes %+v; want two VerdictTightened warnings", notes)
	}
	if c := s.Calls[0]; c.Verdict != Ask || c.Rule != "AgentRunPolicy/p.rules[0]" || c.RequestedAt == nil || c.State != CallProposed {
		t.Fatalf("the read: %+v; want it to wait for a person", c)
	}
	if c := s.Calls[1]; c.Verdict != Deny || c.State != CallDone || !strings.Contains(c.Observation, "Denied by policy") {
		t.Fatalf("the refund: %+v; want it denied", c)
	}
	if !strings.Contains(notes[1].Message, "t1-c2 (refund) is now deny (AgentRunPolicy/p.rules[1]): no refunds; it was ask (tool.irreversible)") {
		t.Fatalf("note %q", notes[1].Message)
	}
	// The refund will never run: only the read waits, and an answer to
	// the refund is stale.
	if p := s.PendingCalls(); len(p) != 1 || p[0].Name != "lookup" {
		t.Fatalf("pending %+v", p)
	}
}

// A looser configuration never loosens a saved verdict: the refund still
// waits for a person.
func TestRevet_neverLoosens(t *testing.T) {
	r, s := waitingBatch(t)
	r.cfg.Policy.Grants = []string{"refund"}
	if notes := r.engine().Revet(context.Background(), s, time.Now()); len(notes) != 0 || s.Calls[1].Verdict != Ask {
		t.Fatalf("notes %+v, refund %s", notes, s.Calls[1].Verdict)
	}
}

// A guardrail that halts now ends the run before any call of the batch runs.
func TestRevet_aHaltingGuardrailEndsTheRun(t *testing.T) {
	r, s := waitingBatch(t)
	r.cfg.Guardrails = []Guardrail{{Name: "no-refunds", Tools: []string{"refund"}, Pattern: "amount", Severity: Halt}}
	r.engine().Revet(context.Background(), s, time.Now())
	if s.Outcome != GuardrailStop || !strings.Contains(s.Reason, "when the run was resumed") {
		t.Fatalf("outcome %s (%s)", s.Outcome, s.Reason)
	}
}

// Outside PhaseApproval a batch may have started running: Revet leaves it.
func TestRevet_onlyAWaitingBatch(t *testing.T) {
	r := makeRun(t).readTool("lookup")
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", `{"q":"a"}`)}}})
	r.cfg.Policy.Rules = []Rule{{Tools: []string{"lookup"}, Decision: Deny}}
	if notes := r.engine().Revet(context.Background(), s, time.Now()); notes != nil || s.Calls[0].Verdict != Allow {
		t.Fatalf("phase %s: notes %+v, verdict %s", s.Phase, notes, s.Calls[0].Verdict)
	}
}
