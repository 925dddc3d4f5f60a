package limits

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun/agentrun/internal/loop"
)

// status.limits says what admission uses: read back as a budget, it
// admits by the same ceilings, row by row of the table, as the engine it
// was written from, defaults included.
func TestLimits_readBackAdmitByTheSameCeilings(t *testing.T) {
	set := loop.Config{Goal: "g", ApprovalTimeout: 20 * time.Minute, Budget: loop.Budget{
		MaxTurns: 7, MaxTokens: 1234, MaxWallClock: 90 * time.Second, MaxCost: new(loop.MustMoney("0.125")),
		MaxToolCalls: new(0), DefaultToolLimit: new(3), PerTool: map[string]int{"refund": 1},
		Soft: []loop.Dimension{loop.DimTokens}}}
	unset := loop.Config{Goal: "g", Budget: loop.Budget{MaxTurns: 2}}
	// A ceiling the fixture leaves at its default would read back as the
	// default whether Status wrote it or not.
	defaults, every := unset.Normalize(), set.Normalize()
	for _, row := range loop.Ceilings() {
		if row.Limit(&every.Budget) == row.Limit(&defaults.Budget) {
			t.Errorf("the fixture sets %s to its default: give it another value, so that its round trip is checked", row.Dim)
		}
	}
	for name, cfg := range map[string]loop.Config{"every ceiling set": set, "defaults": unset} {
		t.Run(name, func(t *testing.T) {
			want := cfg.Normalize()
			l := Status(&cfg)
			var written map[string]any
			if err := roundTrip(&l.Budget, &written); err != nil {
				t.Fatal(err)
			}
			for _, row := range loop.Ceilings() {
				if _, ok := written[row.Field]; !ok {
					t.Errorf("status.limits.budget has no %s: every ceiling is filled", row.Field)
				}
			}
			b, err := Budget(&l.Budget)
			if err != nil {
				t.Fatalf("status.limits.budget does not read back: %v", err)
			}
			got := loop.Config{Budget: b}.Normalize()
			for _, row := range loop.Ceilings() {
				if g, w := row.Limit(&got.Budget), row.Limit(&want.Budget); g != w {
					t.Errorf("%s: %d read back, %d admitted", row.Dim, g, w)
				}
			}
			if diff := cmp.Diff(want.Budget.PerTool, got.Budget.PerTool); diff != "" {
				t.Errorf("perTool (-admitted +read back):\n%s", diff)
			}
			if diff := cmp.Diff(want.Budget.Soft, got.Budget.Soft); diff != "" {
				t.Errorf("soft (-admitted +read back):\n%s", diff)
			}
			if *got.Budget.DefaultToolLimit != *want.Budget.DefaultToolLimit {
				t.Errorf("defaultToolLimit %d read back, %d admitted", *got.Budget.DefaultToolLimit, *want.Budget.DefaultToolLimit)
			}
			if l.ApprovalTimeout.Duration != want.ApprovalTimeout {
				t.Errorf("approvalTimeout %s, want %s", l.ApprovalTimeout.Duration, want.ApprovalTimeout)
			}
		})
	}
}

// status.usage and status.reserved carry every ceiling's measure: written
// and read back, a usage vector is what it was on every row of the table
// (the wall clock in whole seconds), so a new ceiling whose measure
// UsageStatus forgets fails here.
func TestUsage_statusHoldsEveryRow(t *testing.T) {
	u := loop.Usage{Turns: 3, InputTokens: 1200, OutputTokens: 340, CachedInputTokens: 800, Cost: loop.MustMoney("0.0421"),
		ToolCalls: 5, WallClock: 42 * time.Second, PerTool: map[string]int{"lookup": 4, "refund": 1, "unused": 0}}
	back := Usage(UsageStatus(u))
	for _, row := range loop.Ceilings() {
		if row.Used(u) == 0 {
			t.Errorf("the fixture uses none of %s: give it some, so that its round trip is checked", row.Dim)
		}
		if g, w := row.Used(back), row.Used(u); g != w {
			t.Errorf("%s: %d read back from status, %d written", row.Dim, g, w)
		}
	}
	if diff := cmp.Diff(map[string]int{"lookup": 4, "refund": 1}, back.PerTool); diff != "" {
		t.Errorf("perTool (-want +got):\n%s", diff)
	}
	if back.CachedInputTokens != u.CachedInputTokens {
		t.Errorf("cachedInputTokens %d, want %d", back.CachedInputTokens, u.CachedInputTokens)
	}
	if got := UsageStatus(loop.Usage{WallClock: time.Millisecond}).WallClockSeconds; got != 1 {
		t.Errorf("a millisecond of work shows %d seconds, want 1", got)
	}
}

func roundTrip(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
}
