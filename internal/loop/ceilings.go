package loop

import (
	"fmt"
	"sort"
	"time"
)

// Ceiling is one row of the table of a run's budget ceilings: what it is
// called, where a manifest sets it, how a step consumes and reserves it,
// and how admission states it. Admission (Admit), the soft warnings, the
// headroom in status.convergence, the operator's metrics and the API's
// tests all read this table, so a new ceiling is one row here plus its
// field in the API (and its conversion in internal/kit).
type Ceiling struct {
	// Dim names the ceiling everywhere: in budget.soft, as the key of
	// status.convergence.headroom, in a refusal's reason and as the
	// ceiling label of agentrun_admission_refusals_total.
	Dim Dimension
	// Field is the AgentRun's budget field that sets it.
	Field string
	// Unit is how the field is written: UnitCount, UnitDuration or UnitUSD.
	Unit Unit
	// ZeroIsALimit says a ceiling set to zero is a real limit (the first
	// step that needs any ends the run). Otherwise zero is refused as a
	// manifest error, since it could only stop every run at once.
	ZeroIsALimit bool

	// used is how much of the ceiling a Usage holds, in the measure's own
	// unit (nanoseconds for the wall clock, micro-micro-dollars for cost).
	// It measures consumption and a step's reservation alike.
	used func(Usage) int64
	// limit is the ceiling in the same unit, defaults applied.
	limit func(*Budget) int64
	// step is the unit admission compares in: consumption and reservation
	// are each rounded up to it, the ceiling down (a second for the wall
	// clock, so a run is never let past it by a fraction).
	step int64
	// show writes an amount of steps for a refusal's reason.
	show func(int64) string
}

// Unit is how a ceiling's field is written in a manifest.
type Unit string

// The units of the ceilings.
const (
	UnitCount    Unit = "count"
	UnitDuration Unit = "duration"
	UnitUSD      Unit = "USD"
)

func count(n int64) string   { return fmt.Sprint(n) }
func seconds(n int64) string { return fmt.Sprintf("%ds", n) }
func dollars(n int64) string { return "$" + Money(n).String() }

// ceilings is the table, in the order admission checks it. The per-tool
// limits (DimPerTool) are not a row: they are one ceiling per tool, named
// by the manifest, and checked after these.
var ceilings = [...]Ceiling{
	{Dim: DimTurns, Field: "maxTurns", Unit: UnitCount,
		used:  func(u Usage) int64 { return int64(u.Turns) },
		limit: func(b *Budget) int64 { return int64(b.MaxTurns) }, step: 1, show: count},
	{Dim: DimTokens, Field: "maxTokens", Unit: UnitCount,
		used:  func(u Usage) int64 { return u.Tokens() },
		limit: func(b *Budget) int64 { return b.MaxTokens }, step: 1, show: count},
	{Dim: DimWallClock, Field: "maxWallClock", Unit: UnitDuration,
		used:  func(u Usage) int64 { return int64(u.WallClock) },
		limit: func(b *Budget) int64 { return int64(b.MaxWallClock) }, step: int64(time.Second), show: seconds},
	{Dim: DimCost, Field: "maxCostUSD", Unit: UnitUSD, ZeroIsALimit: true,
		used:  func(u Usage) int64 { return int64(u.Cost) },
		limit: func(b *Budget) int64 { return int64(b.costCeiling()) }, step: 1, show: dollars},
	{Dim: DimToolCalls, Field: "maxToolCalls", Unit: UnitCount, ZeroIsALimit: true,
		used:  func(u Usage) int64 { return int64(u.ToolCalls) },
		limit: func(b *Budget) int64 { return int64(b.toolCallsCeiling()) }, step: 1, show: count},
}

// Ceilings returns the table of ceilings, in the order admission checks
// them.
func Ceilings() []Ceiling { return append([]Ceiling(nil), ceilings[:]...) }

// CeilingOf returns the row of a ceiling's name, and whether there is one.
func CeilingOf(d Dimension) (Ceiling, bool) {
	for _, c := range ceilings {
		if c.Dim == d {
			return c, true
		}
	}
	return Ceiling{}, false
}

// Used is how much of the ceiling u holds, in the measure's own unit.
func (c Ceiling) Used(u Usage) int64 { return c.used(u) }

// Limit is the ceiling b sets (its default where b leaves it unset), in
// the measure's own unit.
func (c Ceiling) Limit(b *Budget) int64 { return c.limit(b) }

// admit refuses a step whose reservation would take consumption past the
// ceiling, unless the ceiling is soft.
func (c Ceiling) admit(b *Budget, consumed, reserved Usage) *Rejection {
	if b.soft(c.Dim) {
		return nil
	}
	up := func(n int64) int64 { return (n + c.step - 1) / c.step }
	used, res, ceil := up(c.used(consumed)), up(c.used(reserved)), c.limit(b)/c.step
	if used+res <= ceil {
		return nil
	}
	return &Rejection{Dimension: c.Dim, Reason: fmt.Sprintf("admitting the next step would pass the %s ceiling: %s consumed + %s reserved = %s > %s",
		c.Dim, c.show(used), c.show(res), c.show(used+res), c.show(ceil))}
}

// headroom is (ceiling - consumed) / ceiling, two decimals ("0.00" for a
// zero ceiling).
func (c Ceiling) headroom(b *Budget, u Usage) string {
	return ratio(c.limit(b)-c.used(u), c.limit(b))
}

// ceilSeconds rounds a duration up to whole seconds (never under-count).
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// Admit checks consumed + reserved <= ceiling for every hard ceiling, in
// the order of the table (turns, tokens, wall clock, cost, tool calls),
// then the per-tool limits (by tool name). It returns the first rejection,
// or nil. Soft ceilings never reject.
func Admit(b *Budget, consumed, reserved Usage) *Rejection {
	for _, c := range ceilings {
		if r := c.admit(b, consumed, reserved); r != nil {
			return r
		}
	}
	if len(reserved.PerTool) > 0 {
		names := make([]string, 0, len(reserved.PerTool))
		for n := range reserved.PerTool {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			used, res, limit := consumed.PerTool[n], reserved.PerTool[n], b.toolLimit(n)
			if used+res > limit {
				return &Rejection{Dimension: DimPerTool, Tool: n, Reason: fmt.Sprintf(
					"admitting the next step would pass the per-tool limit of %s: %d calls made + %d in this batch = %d > %d",
					n, used, res, used+res, limit)}
			}
		}
	}
	return nil
}

// softWarnings returns a note for each soft ceiling that consumption has
// newly crossed 80% or 100% of; each level warns once per run.
func (e *Engine) softWarnings(s *State) []Note {
	b := &e.cfg.Budget
	if len(b.Soft) == 0 {
		return nil
	}
	var notes []Note
	for _, d := range b.Soft {
		c, ok := CeilingOf(d)
		if !ok {
			continue
		}
		used, ceil := c.used(s.Usage), c.limit(b)
		if ceil <= 0 && used <= 0 {
			continue // a zero soft ceiling warns once something is spent
		}
		level := 0
		switch {
		case used >= ceil:
			level = 100
		case used*10 >= ceil*8:
			level = 80
		}
		if level == 0 || s.Warned[d] >= level {
			continue
		}
		if s.Warned == nil {
			s.Warned = map[Dimension]int{}
		}
		s.Warned[d] = level
		notes = append(notes, Note{Kind: NoteBudgetWarning, Warning: true,
			Message: fmt.Sprintf("Soft ceiling %s reached %d%% (the run goes on: soft ceilings only warn)", d, level)})
	}
	return notes
}

// Convergence measures how a run converged.
type Convergence struct {
	// TurnsToCompletion is the model turns of a Completed run (0 otherwise).
	TurnsToCompletion int
	// RepeatedIntentDepth is the most times one call signature was proposed.
	RepeatedIntentDepth int
	// Headroom is (ceiling - consumed) / ceiling per dimension, two decimals.
	Headroom map[Dimension]string
	// Context is what the context policy did.
	Context ContextFigures
}

// Convergence computes the run's convergence measures from its state.
func (e *Engine) Convergence(s *State) Convergence {
	b := &e.cfg.Budget
	u := s.Usage
	c := Convergence{RepeatedIntentDepth: s.MaxDepth, Headroom: map[Dimension]string{}}
	for _, row := range ceilings {
		c.Headroom[row.Dim] = row.headroom(b, u)
	}
	if s.Outcome == Completed {
		c.TurnsToCompletion = u.Turns
	}
	c.Context = contextFigures(&e.cfg.Context, s)
	return c
}
