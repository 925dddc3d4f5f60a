package loop

import (
	"strings"
	"testing"
)

// Issue 43, item 2: money is reserved at the rate it is billed.

// anthropicPricing is what the anthropic adapter makes of a manifest that
// prices input at $3 and output at $15: cache writes at 1.25 times input.
var anthropicPricing = Pricing{Input: MustMoney("3"), Output: MustMoney("15"), CachedInput: MustMoney("0.30"), CacheWrite: MustMoney("3.75")}

// admitted steps a fresh engine once and returns the state with the first
// turn's model call reserved.
func admitted(t *testing.T, r *run) (*Engine, *State) {
	t.Helper()
	e := r.engine()
	s := &State{}
	if eff := e.Step(s, Input{}); eff.Kind != EffectCallModel {
		t.Fatalf("first step: %s (%s), want a model call", eff.Kind, s.Reason)
	}
	return e, s
}

// A prompt rewritten to an expired cache is billed as a cache write on
// every input token (1.25 times the input rate on Claude): the call's
// reservation covers it, so no dollar of it passes what was admitted.
func TestReservation_coversACallWhoseWholePromptIsWrittenToTheCache(t *testing.T) {
	r := makeRun(t).readTool("lookup")
	r.cfg.Model.Pricing = anthropicPricing
	e, s := admitted(t, r)
	res := s.Reserved
	u := TokenUsage{InputTokens: res.InputTokens, CacheWriteTokens: res.InputTokens, OutputTokens: res.OutputTokens}
	eff := e.Step(s, Input{Reply: &Reply{Content: "done", Usage: u}})
	billed := e.cfg.modelCost(u)
	if billed > res.Cost {
		t.Fatalf("the call billed $%s against a reservation of $%s", billed, res.Cost)
	}
	for _, n := range eff.Notes {
		if n.Kind == NoteCostAboveReservation || n.Kind == NoteUsageAboveReservation {
			t.Fatalf("an honest cache write was noted above its reservation: %s", n.Message)
		}
	}
	if s.Usage.Cost != billed {
		t.Fatalf("usage cost $%s, want what was billed, $%s", s.Usage.Cost, billed)
	}
}

// Each rate is reserved at the highest an input token may bill at,
// whichever of the three prices is the largest.
func TestReservation_inputIsReservedAtTheHighestInputRate(t *testing.T) {
	cases := []struct {
		name string
		p    Pricing
		rate Money
	}{
		{"input only", Pricing{Input: MustMoney("2"), Output: MustMoney("8")}, MustMoney("2")},
		{"cache writes above input", anthropicPricing, MustMoney("3.75")},
		{"a cached rate set above input", Pricing{Input: MustMoney("1"), CachedInput: MustMoney("1.5")}, MustMoney("1.5")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := makeRun(t)
			r.cfg.Model.Pricing = c.p
			_, s := admitted(t, r)
			want := TokenCost(s.Reserved.InputTokens, c.rate) + TokenCost(s.Reserved.OutputTokens, c.p.Output)
			if s.Reserved.Cost != want {
				t.Fatalf("reserved $%s for %d input and %d output tokens, want $%s", s.Reserved.Cost, s.Reserved.InputTokens, s.Reserved.OutputTokens, want)
			}
		})
	}
}

// A provider may count more input than the engine's estimate, within the
// tolerance the token check allows: the dollars past the reservation are
// charged and said (a warning note carrying the amount, which the
// operator turns into an event and a metric), and the run goes on.
func TestReservation_dollarsAboveTheReservationAreChargedAndSaid(t *testing.T) {
	r := makeRun(t).readTool("lookup")
	r.cfg.Model.Pricing = Pricing{Input: MustMoney("3"), Output: MustMoney("15")}
	// A small output cap, all of it used: the input's excess is what
	// passes the reservation.
	r.cfg.Model.MaxOutputTokens = 16
	e, s := admitted(t, r)
	res := s.Reserved
	u := TokenUsage{InputTokens: res.InputTokens + res.InputTokens/2, OutputTokens: 16}
	eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", `{}`)}, Usage: u}})
	var over *Note
	for i := range eff.Notes {
		if eff.Notes[i].Kind == NoteCostAboveReservation {
			over = &eff.Notes[i]
		}
	}
	billed := e.cfg.modelCost(u)
	if over == nil {
		t.Fatalf("no %s note for $%s billed against $%s reserved: %v", NoteCostAboveReservation, billed, res.Cost, noteKinds(eff.Notes))
	}
	if want := billed - res.Cost; over.Amount != want || !over.Warning {
		t.Fatalf("note amount $%s (warning %v), want $%s as a warning", over.Amount, over.Warning, want)
	}
	if s.Usage.Cost != billed || s.Done() {
		t.Fatalf("usage $%s (done %v, %s), want $%s charged and the run going on", s.Usage.Cost, s.Done(), s.Reason, billed)
	}
}

// A summary's reservation holds no tool allowance: a summary lost to a
// restart is charged its whole reservation, not the reservation less an
// allowance it never held (which lowered the run's cost when the
// allowance was the larger).
func TestReservation_aLostSummaryIsChargedItsWholeReservation(t *testing.T) {
	r := makeRun(t)
	r.cfg.ToolAllowance = Allowance{Cost: MustMoney("5")}
	e := r.engine()
	s := &State{Phase: PhaseCompact, Turn: 2, Reserved: e.context.summaryReservation(1000),
		Context: &ContextState{Pending: &PendingSummary{Through: 0}}}
	s.Usage.Cost = MustMoney("0.5")
	reserved := s.Reserved.Cost
	e.chargeLostModelCall(s)
	if want := MustMoney("0.5") + reserved; s.Usage.Cost != want {
		t.Fatalf("cost after the lost summary $%s, want $%s", s.Usage.Cost, want)
	}
}

// A hard cost ceiling over tools that declare no maxCostUSD counts their
// calls as $0: the run says so once, as it starts, naming them. A tool
// priced at "0" is declared free; a soft cost ceiling says nothing.
func TestReservation_aCostCeilingOverUnpricedToolsSaysSo(t *testing.T) {
	start := func(r *run) []Note {
		t.Helper()
		e := r.engine()
		s := &State{}
		notes := e.Step(s, Input{}).Notes
		// Resuming the run does not say it again.
		notes2 := e.Step(s, Input{Reply: &Reply{Content: "done"}}).Notes
		for _, n := range notes2 {
			if n.Kind == NoteToolCostsUndeclared {
				t.Fatalf("said twice: %s", n.Message)
			}
		}
		return keep(notes, func(n Note) bool { return n.Kind == NoteToolCostsUndeclared })
	}
	r := makeRun(t).readTool("lookup").tool("refund", true, false).readTool("free")
	r.cfg.Tools[1].MaxCost, r.cfg.Tools[1].CostDeclared = MustMoney("0.02"), true
	r.cfg.Tools[2].CostDeclared = true
	got := start(r)
	if len(got) != 1 || !got[0].Warning || !strings.HasPrefix(got[0].Message, "Tool lookup declares no maxCostUSD:") ||
		strings.Contains(got[0].Message, "refund") || strings.Contains(got[0].Message, "free,") {
		t.Fatalf("notes %+v, want one warning naming lookup only", got)
	}
	r.cfg.Tools[0].CostDeclared = true
	if got := start(r); len(got) != 0 {
		t.Fatalf("every tool priced, yet %+v", got)
	}
	r.cfg.Tools[0].CostDeclared = false
	r.cfg.Budget.Soft = []Dimension{DimCost}
	if got := start(r); len(got) != 0 {
		t.Fatalf("a soft cost ceiling, yet %+v", got)
	}
}
