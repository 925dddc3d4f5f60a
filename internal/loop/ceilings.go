package loop

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// The budget vector in one place: the ceilings' names (Dimension), what a
// run may use (Budget, its defaults and normalisation), what it used or
// reserved (Usage), and the table that ties each ceiling's parts together
// (Ceilings) with the admission that reads it (Admit).

// Ceiling is one row of the table of a run's budget ceilings: what it is
// called, where a manifest sets it, how a step consumes and reserves it,
// and how admission states it. Admission (Admit), the soft warnings, the
// headroom in status.convergence, status.reserved, the console's bars, the
// operator's metrics and the platform's limits (internal/platform) all
// read this table. A new ceiling is these hand-written files:
//
//   - internal/loop/ceilings.go (this file): its Dimension, its Budget
//     field with its default (an accessor, and a line in normalize), its
//     Usage field (and its term in then), and its row here;
//   - api/v1alpha1/budget_types.go: its BudgetSpec field (and BudgetSpec's
//     comment), its BudgetDimension (the enum, a constant, soft's
//     MaxItems), its PlatformLimits field and its UsageStatus field;
//   - internal/limits/limits.go: its conversions (Budget, Status,
//     UsageStatus, Usage);
//   - internal/kit/config.go: checkLimits refuses what the CRD refuses
//     (a negative value, and zero where zero is not a limit), for
//     agentrun local;
//   - config/admission/platform-policy.yaml: the validation that holds it
//     to an AgentRunPolicy's limit;
//   - docs/api.md and README.md: the manifests and lists that name the
//     ceilings.
//
// make manifests generate writes the rest (the CRDs, the chart's copies,
// the deep copies). Until every layer has the row these fail, each naming
// what lacks it: in internal/kit, TestCeilings_everyLayerHasEveryRow (the
// CRD, the conversion, the zero and negative rules, docs/api.md's
// manifest) and TestCeilings_everyListNamesEveryRow (the API's constants
// and comment, docs/api.md's other lists, README.md); in internal/platform,
// TestLimits_areTheTableOfCeilings (PlatformLimits, the admission policy,
// Apply, docs/api.md's AgentRunPolicy); in internal/limits,
// TestLimits_readBackAdmitByTheSameCeilings and
// TestUsage_statusHoldsEveryRow (status.limits, status.usage); here,
// TestCeilings_eachRowIsAdmittedWarnedAndReported. What consumes the
// ceiling (a reservation, the engine's accounting) is its behaviour, not
// its plumbing.
type Ceiling struct {
	// Dim names the ceiling everywhere: in budget.soft, as the key of
	// status.convergence.headroom, in a refusal's reason and as the
	// ceiling label of agentrun_reservation_refusals_total.
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

// Dimension names one budget ceiling, as used in the API's budget.soft list.
type Dimension string

// The budget dimensions, in the order admission checks them.
const (
	DimTurns     Dimension = "turns"
	DimTokens    Dimension = "tokens"
	DimWallClock Dimension = "wallClock"
	DimCost      Dimension = "cost"
	DimToolCalls Dimension = "toolCalls"
	// DimPerTool is the per-tool call limit (perTool and defaultToolLimit).
	DimPerTool Dimension = "perTool"
)

// Budget is the vector of ceilings. MaxTurns must be at least 1. MaxTokens
// and MaxWallClock cannot be zero (no run could do anything): zero means
// unset, and Normalize puts the documented default. The ceilings where zero
// is a real limit are pointers: nil is unset (the default applies), and a
// zero means zero (no money may be spent; no tool, or no tool outside
// PerTool, may be called). A ceiling never fails open.
type Budget struct {
	MaxTurns         int
	MaxTokens        int64
	MaxWallClock     time.Duration
	MaxCost          *Money
	MaxToolCalls     *int
	PerTool          map[string]int
	DefaultToolLimit *int
	// Soft names ceilings that only warn (at 80% and at 100%), never stop.
	Soft []Dimension
}

// Defaults for ceilings left unset. They are part of the API contract
// (documented on the AgentRun's budget fields).
const (
	DefaultMaxTokens    = 100_000
	DefaultMaxWallClock = 15 * time.Minute
	DefaultMaxToolCalls = 50
	DefaultToolLimit    = 10
)

// DefaultMaxCost is the cost ceiling when none is set: one dollar.
var DefaultMaxCost = MustMoney("1")

// costCeiling is MaxCost, or the default when it is unset (nil).
func (b *Budget) costCeiling() Money {
	if b.MaxCost == nil || *b.MaxCost < 0 {
		return DefaultMaxCost
	}
	return *b.MaxCost
}

// toolCallsCeiling is MaxToolCalls, or the default when it is unset.
func (b *Budget) toolCallsCeiling() int {
	if b.MaxToolCalls == nil || *b.MaxToolCalls < 0 {
		return DefaultMaxToolCalls
	}
	return *b.MaxToolCalls
}

// defaultToolLimit is DefaultToolLimit, or the default when it is unset.
func (b *Budget) defaultToolLimit() int {
	if b.DefaultToolLimit == nil || *b.DefaultToolLimit < 0 {
		return DefaultToolLimit
	}
	return *b.DefaultToolLimit
}

// toolLimit is the per-tool call limit for a tool.
func (b *Budget) toolLimit(tool string) int {
	if n, ok := b.PerTool[tool]; ok {
		return n
	}
	return b.defaultToolLimit()
}

func (b *Budget) soft(d Dimension) bool { return slices.Contains(b.Soft, d) }

// normalize fills the ceilings left unset with their defaults.
func (b Budget) normalize() Budget {
	if b.MaxTokens <= 0 {
		b.MaxTokens = DefaultMaxTokens
	}
	if b.MaxWallClock <= 0 {
		b.MaxWallClock = DefaultMaxWallClock
	}
	// Zero is a real ceiling here: only an unset one takes the default.
	b.MaxCost = new(b.costCeiling())
	b.MaxToolCalls = new(b.toolCallsCeiling())
	b.DefaultToolLimit = new(b.defaultToolLimit())
	return b
}

// Usage is a vector of consumed (or reserved) resources.
type Usage struct {
	Turns             int            `json:"turns"`
	InputTokens       int64          `json:"inputTokens"`
	OutputTokens      int64          `json:"outputTokens"`
	CachedInputTokens int64          `json:"cachedInputTokens"`
	Cost              Money          `json:"costUSD"`
	ToolCalls         int            `json:"toolCalls"`
	PerTool           map[string]int `json:"perTool,omitempty"`
	// WallClock is the time the run has been working (waiting for a person
	// does not count; approvalTimeout bounds that).
	WallClock time.Duration `json:"wallClock"`
}

// Tokens is the tokens dimension: input plus output.
func (u Usage) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// then is the exposure of u followed by v, one after the other: every
// dimension summed, the wall clock included. Per-tool counts are not
// carried: neither reservation it joins holds any.
func (u Usage) then(v Usage) Usage {
	return Usage{Turns: u.Turns + v.Turns, InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens,
		CachedInputTokens: u.CachedInputTokens + v.CachedInputTokens, Cost: u.Cost + v.Cost, ToolCalls: u.ToolCalls + v.ToolCalls,
		WallClock: u.WallClock + v.WallClock}
}

// release is u less v on the four dimensions a child reserves (turns,
// input tokens, tool calls, cost), none below zero: a reservation given
// back.
func (u Usage) release(v Usage) Usage {
	u.Turns, u.InputTokens = max(0, u.Turns-v.Turns), max(0, u.InputTokens-v.InputTokens)
	u.ToolCalls, u.Cost = max(0, u.ToolCalls-v.ToolCalls), max(0, u.Cost-v.Cost)
	return u
}

// withPerTool is u with its per-tool counts set to p.
func (u Usage) withPerTool(p map[string]int) Usage {
	u.PerTool = p
	return u
}

// orZero is *u, or a zero Usage for nil.
func (u *Usage) orZero() Usage {
	if u == nil {
		return Usage{}
	}
	return *u
}

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

// Rejection says which hard ceiling a projected step would pass.
type Rejection struct {
	Dimension Dimension
	// Tool is set for the per-tool dimension.
	Tool   string
	Reason string
}

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
