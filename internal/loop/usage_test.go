package loop

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// Issue 27: a model server (a tenant's own baseURL) that reported 10,000
// input tokens for a prompt of a few hundred bytes was charged without a
// word, and the run went on, every call passing what it had reserved: 30
// such runs settled $0.63 against a shared AgentBudget of $0.50, each
// having leased only its reservations. Such a reply is still charged in
// full, but it is noted and the run ends Error before any of it is read.

// usageRun runs r and returns the final state, every note, and the
// reservation of the last model call made.
func usageRun(r *run) (*State, []Note, Usage) {
	r.t.Helper()
	var notes []Note
	var reserved Usage
	s := &State{}
	(&Runner{Engine: r.engine(), Model: &Scripted{Entries: r.script}, Tools: r.tools,
		OnStep: func(s *State, eff Effect) {
			notes = append(notes, eff.Notes...)
			if eff.Kind == EffectCallModel {
				reserved = s.Reserved
			}
		}}).Run(context.Background(), s)
	return s, notes, reserved
}

func noteKinds(notes []Note) []NoteKind {
	var kinds []NoteKind
	for _, n := range notes {
		kinds = append(kinds, n.Kind)
	}
	return kinds
}

var usagePricing = Pricing{Input: MustMoney("3"), Output: MustMoney("15")}

func TestUsage_farAboveTheReservationIsChargedInFullAndEndsTheRun(t *testing.T) {
	excess := usage(10_000, 20)
	cases := []struct {
		name string
		run  func(t *testing.T) *run
		// before is what the run spent before the excessive reply.
		before TokenUsage
		// ran is the tool calls that ran before it.
		ran int
	}{
		{name: "tool calls", run: func(t *testing.T) *run {
			return makeRun(t).readTool("lookup").then(ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"q":1}`)}, Usage: excess}, answer("never read"))
		}},
		{name: "a final answer", run: func(t *testing.T) *run {
			return makeRun(t).readTool("lookup").then(ScriptEntry{Content: "done", Usage: excess})
		}},
		{name: "a refusal", run: func(t *testing.T) *run {
			return makeRun(t).then(ScriptEntry{Refusal: "no", Usage: excess})
		}},
		{name: "a later turn", before: usage(900, 30), ran: 1, run: func(t *testing.T) *run {
			return makeRun(t).readTool("lookup").then(
				ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"q":1}`)}, Usage: usage(900, 30)},
				ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{"q":2}`)}, Usage: excess}, answer("never read"))
		}},
		{name: "a plan", run: func(t *testing.T) *run {
			return planRun(t).then(ScriptEntry{ToolCalls: []ToolCall{call(PlanTool, doubleChargePlan)}, Usage: excess}, answer("never read"))
		}},
		{name: "the solver", before: usage(1500, 60), ran: 3, run: func(t *testing.T) *run {
			return planRun(t).then(ScriptEntry{ToolCalls: []ToolCall{call(PlanTool, doubleChargePlan)}, Usage: usage(1500, 60)},
				ScriptEntry{Content: "Two separate charges.", Usage: excess})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.run(t)
			r.cfg.Model.Pricing = usagePricing
			s, notes, res := usageRun(r)
			expectOutcome(t, s, Error)
			e := r.engine()

			// Charged in full: the usage says what the provider said.
			want := TokenUsage{InputTokens: tc.before.InputTokens + excess.InputTokens, OutputTokens: tc.before.OutputTokens + excess.OutputTokens}
			if s.Usage.InputTokens != want.InputTokens || s.Usage.OutputTokens != want.OutputTokens {
				t.Fatalf("usage = %d input, %d output; want %d, %d (all that was reported)", s.Usage.InputTokens, s.Usage.OutputTokens, want.InputTokens, want.OutputTokens)
			}
			if wantCost := e.cfg.modelCost(tc.before) + e.cfg.modelCost(excess); s.Usage.Cost != wantCost {
				t.Fatalf("cost = $%s, want $%s", s.Usage.Cost, wantCost)
			}
			if s.Reserved.Tokens() != 0 || s.Reserved.Cost != 0 {
				t.Fatalf("a finished run still reserves %+v", s.Reserved)
			}

			// Nothing of the reply was read.
			if got := r.tools.Ran(); len(got) != tc.ran {
				t.Fatalf("tool calls ran after the reply: %v", got)
			}
			if s.Answer != "" {
				t.Fatalf("the reply's answer was accepted: %q", s.Answer)
			}

			// Never silent: a warning naming reported and reserved tokens
			// and costs, and a reason a person can act on.
			var warning *Note
			for i := range notes {
				if notes[i].Kind == NoteUsageAboveReservation {
					warning = &notes[i]
				}
			}
			if warning == nil || !warning.Warning {
				t.Fatalf("no %s warning among %v", NoteUsageAboveReservation, noteKinds(notes))
			}
			resCost := res.Cost - r.cfg.ToolAllowance.Cost
			for _, part := range []string{"10000 input and 20 output tokens ($" + e.cfg.modelCost(excess).String() + ")",
				fmt.Sprintf("%d input and %d output tokens ($%s)", res.InputTokens, res.OutputTokens, resCost)} {
				if !strings.Contains(warning.Message, part) {
					t.Errorf("the warning %q does not say %q", warning.Message, part)
				}
			}
			wantReason := fmt.Sprintf("the provider reported 10000 input and 20 output tokens ($%s) for a model call on turn %d reserved at %d and %d ($%s): "+
				"the run stops rather than spend past what it reserves (check the model's baseURL)", e.cfg.modelCost(excess), s.Turn, res.InputTokens, res.OutputTokens, resCost)
			if s.Reason != wantReason {
				t.Fatalf("reason = %q\nwant     %q", s.Reason, wantReason)
			}
			kinds := noteKinds(notes)
			if got := kinds[len(kinds)-3:]; fmt.Sprint(got) != fmt.Sprint([]NoteKind{NoteModelAnswered, NoteUsageAboveReservation, NoteFinished}) {
				t.Fatalf("the last notes are %v, want the answer, the warning and the end", got)
			}
		})
	}
}

// The bound itself is within tolerance: the reply is charged and the run
// goes on. One token past it, on input or output, stops the run.
func TestUsage_justWithinToleranceIsChargedAndGoesOn(t *testing.T) {
	cases := []struct {
		name string
		over func(res Usage) TokenUsage
		stop bool
	}{
		{"input at the bound, output at the max", func(res Usage) TokenUsage {
			return usage(InputToleranceFactor*res.InputTokens+InputToleranceTokens, res.OutputTokens)
		}, false},
		{"input one past the bound", func(res Usage) TokenUsage {
			return usage(InputToleranceFactor*res.InputTokens+InputToleranceTokens+1, 1)
		}, true},
		{"output one past the max", func(res Usage) TokenUsage { return usage(1, res.OutputTokens+1) }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := makeRun(t).readTool("lookup")
			r.cfg.Model.MaxOutputTokens = 1000
			r.cfg.Model.Pricing = usagePricing
			e := r.engine()
			s := &State{}
			if eff := e.Step(s, Input{}); eff.Kind != EffectCallModel {
				t.Fatalf("effect %s: %s", eff.Kind, s.Reason)
			}
			res := s.Reserved
			if res.OutputTokens != 1000 {
				t.Fatalf("reserved output = %d, want the request's max of 1000", res.OutputTokens)
			}
			u := tc.over(res)
			eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", `{}`)}, Usage: u}})
			if s.Usage.InputTokens != u.InputTokens || s.Usage.OutputTokens != u.OutputTokens || s.Usage.Cost != e.cfg.modelCost(u) {
				t.Fatalf("usage = %+v, want all of %+v charged", s.Usage, u)
			}
			warned := false
			for _, n := range eff.Notes {
				warned = warned || n.Kind == NoteUsageAboveReservation
			}
			if !tc.stop {
				if eff.Kind != EffectRunTools || s.Done() || warned {
					t.Fatalf("a reply within tolerance did not go on: effect %s, outcome %s (%s), notes %v", eff.Kind, s.Outcome, s.Reason, noteKinds(eff.Notes))
				}
				return
			}
			expectOutcome(t, s, Error)
			if eff.Kind != EffectFinish || !warned {
				t.Fatalf("effect %s, notes %v: want the run finished with a warning", eff.Kind, noteKinds(eff.Notes))
			}
		})
	}
}

// A run cancelled while its reply came back still charges the reply in
// full and says when it was far above the reservation; it ends as the
// person asked.
func TestUsage_aCancelledRunNotesUsageFarAboveItsReservation(t *testing.T) {
	r := makeRun(t)
	r.cfg.Model.Pricing = usagePricing
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	u := usage(10_000, 20)
	eff := e.Step(s, Input{Cancel: true, Reply: &Reply{Content: "done", Usage: u}})
	expectOutcome(t, s, ApprovalDenied)
	if s.Usage.InputTokens != u.InputTokens || s.Usage.Cost != e.cfg.modelCost(u) {
		t.Fatalf("usage = %+v, want all of %+v charged", s.Usage, u)
	}
	if kinds := fmt.Sprint(noteKinds(eff.Notes)); kinds != fmt.Sprint([]NoteKind{NoteUsageAboveReservation, NoteFinished}) {
		t.Fatalf("notes = %s, want the warning and the end", kinds)
	}
}
