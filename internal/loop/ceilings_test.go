package loop

import (
	"strings"
	"testing"
	"time"
)

// more is a usage past every ceiling of generous().
var more = Usage{Turns: 1 << 20, InputTokens: 1 << 40, OutputTokens: 1 << 40, WallClock: 1 << 20 * time.Hour,
	Cost: MustMoney("1000000"), ToolCalls: 1 << 20}

func generous() Budget {
	return Budget{MaxTurns: 100, MaxTokens: 1000, MaxWallClock: time.Hour, MaxCost: new(MustMoney("5")), MaxToolCalls: new(20)}
}

// Each row of the table is checked by admission, warns when soft, has its
// headroom and is summed by then: a row added to the table is covered by
// all four at once.
func TestCeilings_eachRowIsAdmittedWarnedAndReported(t *testing.T) {
	rows := Ceilings()
	if len(rows) != 5 {
		t.Fatalf("%d ceilings, want the five of the API (turns, tokens, wallClock, cost, toolCalls)", len(rows))
	}
	for _, row := range rows {
		t.Run(string(row.Dim), func(t *testing.T) {
			// Every other ceiling soft: only this row can refuse.
			b := generous()
			for _, other := range rows {
				if other.Dim != row.Dim {
					b.Soft = append(b.Soft, other.Dim)
				}
			}
			rej := Admit(&b, Usage{}, more)
			if rej == nil || rej.Dimension != row.Dim || !strings.Contains(rej.Reason, "the "+string(row.Dim)+" ceiling") {
				t.Fatalf("admitting past %s alone = %+v, want a refusal naming it", row.Dim, rej)
			}
			if rej := Admit(&b, Usage{}, Usage{}); rej != nil {
				t.Errorf("an empty step was refused: %v", rej)
			}
			b.Soft = append(b.Soft, row.Dim)
			if rej := Admit(&b, Usage{}, more); rej != nil {
				t.Errorf("a soft %s refused a step: %v", row.Dim, rej)
			}

			e := &Engine{cfg: Config{Budget: b}}
			s := &State{Usage: more}
			notes := e.softWarnings(s)
			found := false
			for _, n := range notes {
				found = found || strings.Contains(n.Message, "Soft ceiling "+string(row.Dim)+" reached 100%")
			}
			if !found {
				t.Errorf("a soft %s past its limit gave no 100%% warning: %v", row.Dim, notes)
			}

			h := e.Convergence(&State{}).Headroom
			if h[row.Dim] != "1.00" {
				t.Errorf("headroom of an unused %s = %q, want 1.00", row.Dim, h[row.Dim])
			}
			if got := e.Convergence(s).Headroom[row.Dim]; got != "0.00" {
				t.Errorf("headroom of an exhausted %s = %q, want 0.00", row.Dim, got)
			}
			if c, ok := CeilingOf(row.Dim); !ok || c.Field != row.Field {
				t.Errorf("CeilingOf(%s) = %+v, %v", row.Dim, c, ok)
			}
			// A reservation followed by another holds both.
			if row.Used(more) == 0 {
				t.Errorf("the fixture more uses none of %s: give it some", row.Dim)
			}
			if g, w := row.Used(more.then(more)), 2*row.Used(more); g != w {
				t.Errorf("%s of a usage then itself = %d, want twice it (%d)", row.Dim, g, w)
			}
		})
	}
	if h := (&Engine{cfg: Config{Budget: generous()}}).Convergence(&State{}).Headroom; len(h) != len(rows) {
		t.Errorf("headroom has %d keys, want one per ceiling (%d): %v", len(h), len(rows), h)
	}
	if _, ok := CeilingOf(DimPerTool); ok {
		t.Error("perTool is one limit per tool, not a row of the table")
	}
}

// Admission rounds a wall-clock reservation up to whole seconds and the
// ceiling down, as the refusal states them.
func TestCeilings_wallClockIsAdmittedInWholeSeconds(t *testing.T) {
	b := generous()
	b.MaxWallClock = 10*time.Second + 500*time.Millisecond
	if rej := Admit(&b, Usage{WallClock: 4 * time.Second}, Usage{WallClock: 6 * time.Second}); rej != nil {
		t.Fatalf("4s + 6s under a 10.5s ceiling refused: %v", rej)
	}
	rej := Admit(&b, Usage{WallClock: 4*time.Second + time.Millisecond}, Usage{WallClock: 6 * time.Second})
	if rej == nil || !strings.Contains(rej.Reason, "5s consumed + 6s reserved = 11s > 10s") {
		t.Fatalf("4.001s + 6s under a 10.5s ceiling = %+v, want a refusal in whole seconds", rej)
	}
}
