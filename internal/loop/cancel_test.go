package loop

import (
	"strings"
	"testing"
)

// abandoned returns the CallAbandoned notes of an effect.
func abandoned(eff Effect) []Note {
	return keep(eff.Notes, func(n Note) bool { return n.Kind == NoteCallAbandoned })
}

// A run cancelled while a tool call is dispatched and its result was lost
// to a restart is charged that call as a restart charges a call it does
// not repeat: one tool call at the tool's declared maxCostUSD, outcome
// unknown. A read is charged once, not twice, and nothing is run again.
func TestStep_cancelChargesACallStillDispatched(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutates bool
		cost    string
	}{
		{"a write", true, "0.05"},
		{"a read", false, "0.01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := makeRun(t).tool("pay", tc.mutates, true)
			r.cfg.Tools[0].MaxCost = MustMoney(tc.cost)
			r.cfg.Model.Pricing = Pricing{Input: MustMoney("10"), Output: MustMoney("10")}
			e := r.engine()
			s := &State{}
			e.Step(s, Input{})
			eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("pay", `{"amount":1}`)}, Usage: usage(100, 10)}})
			if eff.Kind != EffectRunTools || len(eff.Calls) != 1 {
				t.Fatalf("effect = %+v", eff)
			}
			modelCost := s.Usage.Cost
			// The operator stops with the call in flight; the run is
			// cancelled; a new operator resumes from the saved state, with
			// no result.
			s = s.Clone()
			eff = e.Step(s, Input{Cancel: true})
			expectOutcome(t, s, ApprovalDenied)
			if eff.Kind != EffectFinish || len(eff.Calls) != 0 {
				t.Fatalf("effect = %+v, want Finish with nothing run again", eff)
			}
			if want := modelCost + MustMoney(tc.cost); s.Usage.Cost != want {
				t.Errorf("cost = $%s, want $%s (the model call and the lost call's maxCostUSD)", s.Usage.Cost, want)
			}
			if s.Usage.ToolCalls != 1 || s.Usage.PerTool["pay"] != 1 {
				t.Errorf("tool calls = %d, per tool %v; want the lost call counted once", s.Usage.ToolCalls, s.Usage.PerTool)
			}
			if s.Reserved.Cost != 0 || s.Reserved.ToolCalls != 0 {
				t.Errorf("still reserved: %+v", s.Reserved)
			}
			if c := s.Calls[0]; c.State != CallDone || c.ObsStatus != ObsFailed || !strings.Contains(c.Observation, "unknown") {
				t.Errorf("call = %s %s %q; want done, outcome unknown", c.State, c.ObsStatus, c.Observation)
			}
			notes := abandoned(eff)
			if len(notes) != 1 || !notes[0].Warning || notes[0].CallID != "t1-c1" || !strings.Contains(notes[0].Message, "$"+tc.cost) {
				t.Fatalf("CallAbandoned notes = %+v", notes)
			}
			// Stepping the ended run again charges nothing more.
			before := s.Usage
			e.Step(s, Input{Cancel: true})
			if s.Usage.Cost != before.Cost || s.Usage.ToolCalls != before.ToolCalls {
				t.Fatalf("a second step charged again: %+v after %+v", s.Usage, before)
			}
		})
	}
}

// A call whose result arrives with the cancel is settled from its result,
// not abandoned.
func TestStep_cancelWithTheResultSettlesItOnce(t *testing.T) {
	r := makeRun(t).tool("pay", true, true)
	r.cfg.Tools[0].MaxCost = MustMoney("0.05")
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("pay", `{}`)}}})
	eff := e.Step(s, Input{Cancel: true, Results: []Result{{CallID: "t1-c1", Output: []byte("paid")}}})
	expectOutcome(t, s, ApprovalDenied)
	if s.Usage.Cost != MustMoney("0.05") || s.Usage.ToolCalls != 1 || len(abandoned(eff)) != 0 {
		t.Fatalf("usage %+v, notes %+v", s.Usage, eff.Notes)
	}
}

// A run cancelled while its model call is in flight (lost to a restart,
// or cut off) is charged the whole call: the tokens and the cost it
// reserved, as a call lost to a restart is charged; a warning says so.
func TestStep_cancelMidModelCallChargesTheWholeCall(t *testing.T) {
	r := makeRun(t).then(answer("done"))
	r.cfg.Model.Pricing = Pricing{Input: MustMoney("3"), Output: MustMoney("15")}
	e := r.engine()
	s := &State{}
	if eff := e.Step(s, Input{}); eff.Kind != EffectCallModel {
		t.Fatalf("effect = %s", eff.Kind)
	}
	reserved := s.Reserved
	s = s.Clone()
	eff := e.Step(s, Input{Cancel: true})
	expectOutcome(t, s, ApprovalDenied)
	if s.Usage.Cost != reserved.Cost || s.Usage.Tokens() != reserved.Tokens() || s.Usage.Turns != 1 {
		t.Fatalf("charged $%s, %d tokens, %d turns; want the reservation: $%s, %d tokens, 1 turn",
			s.Usage.Cost, s.Usage.Tokens(), s.Usage.Turns, reserved.Cost, reserved.Tokens())
	}
	notes := abandoned(eff)
	if len(notes) != 1 || !notes[0].Warning || !strings.Contains(notes[0].Message, "$"+reserved.Cost.String()) {
		t.Fatalf("CallAbandoned notes = %+v", notes)
	}
}
