package loop

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// routeRun is a run on model "dear" ($5/$10 a million tokens) with the
// fallback "cheap" ($1/$2) and a $0.05 cost ceiling: the first turn fits
// dear (4,096 output tokens reserved at $10 a million is $0.041), and
// after it has charged $0.015 the second does not.
func routeRun(t *testing.T, route bool) *run {
	r := makeRun(t).readTool("lookup")
	r.cfg.Budget.MaxCost = new(MustMoney("0.05"))
	r.cfg.Model = ModelConfig{Provider: "openai", Name: "dear", Pricing: Pricing{Input: MustMoney("5"), Output: MustMoney("10")}}
	r.cfg.Fallbacks = []ModelConfig{{Provider: "openai", Name: "cheap", Pricing: Pricing{Input: MustMoney("1"), Output: MustMoney("2")}}}
	r.cfg.RouteOnBudget = route
	return r
}

var firstTurn = ScriptEntry{ToolCalls: []ToolCall{call("lookup", `{}`)}, Usage: TokenUsage{InputTokens: 2000, OutputTokens: 500}}

func TestRouteOnBudget_aTurnThatDoesNotFitGoesToACheaperModel(t *testing.T) {
	r := routeRun(t, true)
	dear := &recording{Model: &Scripted{Entries: []ScriptEntry{firstTurn}}}
	// A scripted model replies with the entry of the run's call number:
	// cheap's first is never asked for.
	cheap := &recording{Model: &Scripted{Entries: []ScriptEntry{firstTurn, {Content: "done", Usage: TokenUsage{InputTokens: 3000, OutputTokens: 100}}}}}
	s := &State{}
	notes := runModels(r, s, NoteModelRouted, dear, cheap)
	expectOutcome(t, s, Completed)
	if diff := cmp.Diff([]string{"dear/0/1", "cheap/1/1"}, append(dear.sent(), cheap.sent()...)); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if len(notes) != 1 || !notes[0].Warning || notes[0].Turn != 2 ||
		!strings.Contains(notes[0].Message, "Model dear's next request does not fit the cost ceiling") ||
		!strings.Contains(notes[0].Message, "turn 2 goes to fallback 1 of 1, model cheap") {
		t.Fatalf("routing notes = %+v", notes)
	}
	if s.Model != 1 || s.Usage.Turns != 2 {
		t.Fatalf("model %d, turns %d; want 1, 2", s.Model, s.Usage.Turns)
	}
	// Each turn is charged at its own model's prices: 2,000 and 500
	// tokens at dear's, then 3,000 and 100 at cheap's.
	if want := MustMoney("0.0182"); s.Usage.Cost != want {
		t.Fatalf("cost = %s, want %s", s.Usage.Cost, want)
	}
}

func TestRouteOnBudget_offTheRefusalNamesTheFallbackItDidNotTry(t *testing.T) {
	r := routeRun(t, false)
	dear := &recording{Model: &Scripted{Entries: []ScriptEntry{firstTurn}}}
	cheap := &recording{Model: &Scripted{}}
	s := &State{}
	if notes := runModels(r, s, NoteModelRouted, dear, cheap); len(notes) != 0 {
		t.Fatalf("routing notes without routeOnBudget: %+v", notes)
	}
	expectOutcome(t, s, BudgetExhausted)
	if len(cheap.reqs) != 0 {
		t.Fatalf("the fallback was called %d times", len(cheap.reqs))
	}
	for _, want := range []string{"admitting the next step would pass the cost ceiling", "model dear's fallbacks (cheap) are tried on an outage only", "set model.routeOnBudget"} {
		if !strings.Contains(s.Reason, want) {
			t.Errorf("reason %q does not say %q", s.Reason, want)
		}
	}
}

func TestRouteOnBudget_whenNoModelFitsTheRefusalNamesEveryModelTried(t *testing.T) {
	r := routeRun(t, true)
	r.cfg.Fallbacks = append(r.cfg.Fallbacks, ModelConfig{Provider: "openai", Name: "cheaper", Pricing: Pricing{Input: MustMoney("4"), Output: MustMoney("8.5")}})
	r.cfg.Fallbacks[0].Pricing = Pricing{Input: MustMoney("4"), Output: MustMoney("9")}
	dear := &recording{Model: &Scripted{Entries: []ScriptEntry{firstTurn}}}
	s := &State{}
	notes := runModels(r, s, NoteModelRouted, dear, &recording{Model: &Scripted{}}, &recording{Model: &Scripted{}})
	expectOutcome(t, s, BudgetExhausted)
	if !strings.HasPrefix(s.Reason, "no model of the run fits the next request: dear (admitting") {
		t.Fatalf("reason = %q", s.Reason)
	}
	for _, m := range []string{"dear (", "cheap (", "cheaper ("} {
		if strings.Count(s.Reason, "; "+m)+strings.Count(s.Reason, ": "+m) != 1 {
			t.Errorf("reason %q does not name %s once", s.Reason, strings.TrimSuffix(m, " ("))
		}
	}
	// Routing moved the run as it went: it stays on the last model tried.
	if s.Model != 2 || len(notes) != 2 {
		t.Fatalf("model %d after %d routing notes; want 2 and 2", s.Model, len(notes))
	}
}

func TestRouteOnBudget_aTurnsCeilingIsNotRouted(t *testing.T) {
	r := routeRun(t, true).maxTurns(1)
	dear := &recording{Model: &Scripted{Entries: []ScriptEntry{firstTurn}}}
	cheap := &recording{Model: &Scripted{}}
	s := &State{}
	if notes := runModels(r, s, NoteModelRouted, dear, cheap); len(notes) != 0 {
		t.Fatalf("routing notes on the turns ceiling: %+v", notes)
	}
	expectOutcome(t, s, BudgetExhausted)
	if len(cheap.reqs) != 0 || strings.Contains(s.Reason, "cheap") || !strings.Contains(s.Reason, "turns ceiling") {
		t.Fatalf("fallback calls %d, reason %q", len(cheap.reqs), s.Reason)
	}
}
