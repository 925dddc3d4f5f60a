package loop

import (
	"testing"
)

// A turn the engine admitted but a shared budget refused ends the run
// BudgetExhausted with the budget's reason, charging nothing and not
// counting the turn.
func TestRefuse_endsTheRunBeforeTheAdmittedTurnSpends(t *testing.T) {
	e, err := New(Config{Goal: "g", Model: ModelConfig{Name: "m", MaxOutputTokens: 100}, Budget: Budget{MaxTurns: 3}})
	if err != nil {
		t.Fatal(err)
	}
	s := &State{}
	eff := e.Step(s, Input{})
	if eff.Kind != EffectCallModel || s.Turn != 1 {
		t.Fatalf("first step: %v, turn %d", eff.Kind, s.Turn)
	}
	out := e.Refuse(s, eff, "AgentBudget team-daily: $1 consumed + $0 reserved + $0.5 requested > $1 (maxCostUSD)")
	if out.Kind != EffectFinish || s.Outcome != BudgetExhausted || s.Turn != 0 || s.Reserved.Cost != 0 || s.Usage.Turns != 0 {
		t.Fatalf("after the refusal: effect %v, state %+v", out.Kind, s)
	}
	if len(out.Notes) != 1 || out.Notes[0].Kind != NoteFinished || s.Reason == "" {
		t.Fatalf("notes %+v, reason %q", out.Notes, s.Reason)
	}
}
