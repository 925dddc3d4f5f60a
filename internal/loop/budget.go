package loop

import (
	"fmt"
	"strings"
	"time"
)

// Defaults for what a configuration leaves unset (the budget's are in
// ceilings.go). They are part of the API contract (documented on the
// AgentRun's fields).
const (
	DefaultMaxOutputTokens = 4096
	DefaultModelTimeout    = 60 * time.Second
	DefaultToolTimeout     = 30 * time.Second
	DefaultMaxResultBytes  = 16384
	DefaultApprovalTimeout = time.Hour
	// DefaultVetTimeout bounds the vetting of one step. Conditions are
	// cost-bounded each (maxRuleCost), but a step may carry 64 calls and a
	// policy 64 rules: together they must not hold a reconcile worker that
	// other tenants' runs need.
	DefaultVetTimeout    = 5 * time.Second
	DefaultLoopThreshold = 3
	DefaultLoopMaxPeriod = 3
	maxConcurrentReads   = 8
)

// MaxCallsPerReply bounds the tool calls read from one model answer. An
// answer with more is not vetted at all: the model is told the bound and
// the turn ends. Vetting costs the operator work for every call (decoding,
// the schema, CEL conditions, guardrails), so a hostile model server must
// not choose how much.
const MaxCallsPerReply = 64

// admitProposals refuses a batch of n proposed calls that could never be
// admitted, whatever their verdicts: more calls than the run's hard
// maxToolCalls has left. It runs before the calls are vetted; the batch's
// full reservation is admitted after vetting (startActing).
func admitProposals(b *Budget, consumed Usage, n int) *Rejection {
	limit := b.toolCallsCeiling()
	if b.soft(DimToolCalls) || consumed.ToolCalls+n <= limit {
		return nil
	}
	return &Rejection{Dimension: DimToolCalls, Reason: fmt.Sprintf(
		"admitting the next step would pass the %s ceiling: %d consumed + %d reserved = %d > %d (the model proposed %d tool calls; none was vetted or run)",
		DimToolCalls, consumed.ToolCalls, n, consumed.ToolCalls+n, limit, n)}
}

// modelReservation is the exposure of one model call: its estimated input
// at the highest rate an input token may bill at (Pricing.inputRate), the
// maximum output at the output rate, the model deadline on the clock, plus
// the configured per-turn tool allowance.
func (c *Config) modelReservation(inputTokens int64) Usage {
	p := c.Model.Pricing
	out := c.Model.MaxOutputTokens
	r := Usage{
		Turns:        1,
		InputTokens:  inputTokens,
		OutputTokens: out,
		Cost:         p.Most(inputTokens, out) + c.ToolAllowance.Cost,
		ToolCalls:    c.ToolAllowance.Calls,
		WallClock:    c.Model.Timeout + c.ToolAllowance.WallClock,
	}
	return r
}

// inputRate is the highest rate one input token of a request may bill
// at. Whether the provider reads a token from its cache (CachedInput),
// writes it there (CacheWrite: Anthropic bills 1.25 times the input rate)
// or neither is decided after the request is sent: a prefix cached before
// a long approval wait has expired by the next call and is written again.
// A reservation prices every input token at the highest of the three, so
// that what a call bills never passes what admission reserved for it.
func (p Pricing) inputRate() Money { return max(p.Input, p.CachedInput, p.CacheWrite) }

// Most is the most a call of inputTokens (estimated) and at most
// outputTokens may cost: every input token at the highest rate one may
// bill at, every output token at the output rate.
func (p Pricing) Most(inputTokens, outputTokens int64) Money {
	return TokenCost(inputTokens, p.inputRate()) + TokenCost(outputTokens, p.Output)
}

// modelCost prices what a provider reported, at the run's model's prices
// (Pricing.Cost).
func (c *Config) modelCost(u TokenUsage) Money { return c.Model.Pricing.Cost(u) }

// Cost prices what a provider reported: cached input at the cached rate
// (or the input rate when none is set), input written to the cache at the
// cache-write rate (or the input rate), the rest at the input rate.
func (p Pricing) Cost(u TokenUsage) Money {
	cachedRate := p.CachedInput
	if cachedRate == 0 {
		cachedRate = p.Input
	}
	writeRate := p.CacheWrite
	if writeRate == 0 {
		writeRate = p.Input
	}
	cached := min(u.CachedInputTokens, u.InputTokens)
	written := min(u.CacheWriteTokens, u.InputTokens-cached)
	return TokenCost(u.InputTokens-cached-written, p.Input) + TokenCost(cached, cachedRate) +
		TokenCost(written, writeRate) + TokenCost(u.OutputTokens, p.Output)
}

// undeclaredToolCosts is the note a run starts with when its cost ceiling
// is hard and some of its tools declare no maxCostUSD: the ceiling counts
// their calls as $0, so it bounds only what the model and the priced tools
// spend. Nil when every tool is priced or the cost ceiling is soft.
func (c *Config) undeclaredToolCosts() *Note {
	b := &c.Budget
	if b.soft(DimCost) {
		return nil
	}
	var names []string
	for i := range c.Tools {
		if t := &c.Tools[i]; !t.CostDeclared && t.MaxCost == 0 {
			names = append(names, t.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	who := "Tool " + names[0] + " declares"
	if len(names) > 1 {
		who = "Tools " + listNames(names, 8) + " declare"
	}
	return &Note{Kind: NoteToolCostsUndeclared, Warning: true, Message: fmt.Sprintf(
		"%s no maxCostUSD: the cost ceiling of $%s counts their calls as $0 and bounds only what the model "+
			"and priced tools spend (set tools[].maxCostUSD, \"0\" for a free tool)", who, b.costCeiling())}
}

// listNames names up to n items, "a, b and 2 more".
func listNames(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// batchReservation is the approved batch's declared maxima: costs and call
// counts summed; on the wall clock, each call's whole MaxDuration (startup
// grace, timeout and kill grace, so that a tool ignoring SIGTERM still ends
// inside the reservation): the longest read once per wave of concurrent
// reads, plus every serial write. A call that runs a child run reserves
// the child's ceilings, each capped by what the run has left once the
// calls before it are reserved (childBudget); the cap is kept on a
// proposed call (Call.Child), for the child and its settlement.
func (e *Engine) batchReservation(calls []Call, consumed Usage) Usage {
	r := Usage{PerTool: map[string]int{}}
	var reads readWave
	left, children := 0, 0 // the calls, and the calls with a child, still to be reserved
	for i := range calls {
		if c := &calls[i]; c.Approved() && c.State != CallDone {
			left++
			if e.tool(c.Name).Child != nil && c.State == CallProposed {
				children++
			}
		}
	}
	for i := range calls {
		c := &calls[i]
		if !c.Approved() || c.State == CallDone {
			continue
		}
		left--
		t := e.tool(c.Name)
		if t.Child != nil && c.State == CallProposed {
			c.Child = e.cfg.Budget.childBudget(t, consumed, r, left, children)
			children--
		}
		child := reservedChild(t, c)
		if r.addCall(t, child) {
			reads.add(t.callDuration(child))
		}
	}
	r.WallClock += reads.duration()
	return r
}

// childBudget is what a call of t reserves for its child: the tool's
// ceilings, each capped by what the run has left once consumed and r are
// counted (a soft ceiling of the run caps nothing), and shared evenly
// among the children of the batch still to be reserved (share, this one
// included; on the wall clock only among writes, which run one after the
// other). consumed holds what the run keeps for itself (nextTurn). On the
// wall clock the call's startup and kill graces are left out of the
// child's share; of the tool calls, the call itself and the later calls
// of its batch.
func (b *Budget) childBudget(t *ToolSpec, consumed, r Usage, later, share int) *ChildBudget {
	c := *t.Child
	room := func(d Dimension, less int64, declared int64, share int) int64 {
		row, _ := CeilingOf(d)
		if b.soft(d) {
			return declared
		}
		up := func(n int64) int64 { return (n + row.step - 1) / row.step }
		left := row.limit(b)/row.step - up(row.used(consumed)) - up(row.used(r)) - up(less)
		return max(0, min(declared, left/int64(max(share, 1))*row.step))
	}
	clockShare := 1
	if t.Mutates {
		clockShare = share
	}
	c.Turns = int(room(DimTurns, 0, int64(c.Turns), share))
	c.Tokens = room(DimTokens, 0, c.Tokens, share)
	c.WallClock = time.Duration(room(DimWallClock, int64(t.StartupGrace+t.KillGrace), int64(c.WallClock), clockShare))
	declared := c.Cost
	c.Cost = Money(room(DimCost, 0, int64(c.Cost), share))
	c.ToolCalls = int(room(DimToolCalls, int64(1+later), int64(c.ToolCalls), share))
	if declared > 0 && c.Cost == 0 {
		// A child whose tool declares a cost but that has no money left
		// would end BudgetExhausted before its first turn: it gets no
		// turn, and the call makes no child. (A tool that declares $0 has
		// a free child, which may run with none.)
		c.Turns = 0
	}
	return &c
}

// nextTurn is what a run keeps for itself when it reserves for children:
// its next model call, its input estimated as the last request's and, as
// the byte estimator counts them, the batch's calls and results (each at
// most its tool's maxResultBytes).
func nextTurn(c *Config, s *State, tool func(string) *ToolSpec) Usage {
	var in int64
	if s.Context != nil {
		in = s.Context.last()
	}
	for i := range s.Calls {
		if cl := &s.Calls[i]; cl.Approved() && cl.State != CallDone {
			in += int64(tool(cl.Name).MaxResultBytes+len(cl.Arguments)) + 2*(estimatePerMessage+estimatePerToolCall)
		}
	}
	return c.modelReservation(in)
}

// reservedChild is what call c of t reserved for its child: Call.Child, or
// the tool's declared ceilings (a plan's step, reserved whole); nil for a
// tool without a child.
func reservedChild(t *ToolSpec, c *Call) *ChildBudget {
	if c != nil && c.Child != nil {
		return c.Child
	}
	return t.Child
}

// callDuration is the most one call of t may take: its MaxDuration, or
// for a child run, the child's wall clock within the call's graces.
func (t *ToolSpec) callDuration(child *ChildBudget) time.Duration {
	if child != nil {
		return t.StartupGrace + child.WallClock + t.KillGrace
	}
	return t.MaxDuration()
}

// addCall adds one call of t to r: a tool call, its tool's declared cost
// and, for a write, which runs alone, its whole MaxDuration; a call that
// runs a child adds the child's ceilings instead of the tool's cost. It
// reports whether the call is a read, whose time counts in its wave
// instead.
func (r *Usage) addCall(t *ToolSpec, child *ChildBudget) (read bool) {
	r.ToolCalls++
	r.PerTool[t.Name]++
	if child != nil {
		*r = r.then(child.usage()).withPerTool(r.PerTool)
	} else {
		r.Cost += t.MaxCost
	}
	if t.Mutates {
		r.WallClock += t.callDuration(child)
		return false
	}
	return true
}

// readWave is reads that may run together: they take, on the wall clock,
// the longest of them once per maxConcurrentReads.
type readWave struct {
	reads   int
	longest time.Duration
}

func (w *readWave) add(d time.Duration) {
	w.reads++
	w.longest = max(w.longest, d)
}

func (w *readWave) duration() time.Duration {
	return time.Duration((w.reads+maxConcurrentReads-1)/maxConcurrentReads) * w.longest
}

// ContextFigures is the context policy that applied and what it did, for
// status.context and the terminal.
type ContextFigures struct {
	MaxInputTokens     int64
	Source             string
	Strategy           ContextStrategy
	Compactions        int
	LastCompactionTurn int
	LastInputTokens    int64
}

// contextFigures are the figures of policy p and the state's compactions.
func contextFigures(p *ContextPolicy, s *State) ContextFigures {
	f := ContextFigures{MaxInputTokens: p.MaxInputTokens, Source: p.Source, Strategy: p.Strategy}
	if c := s.Context; c != nil {
		f.Compactions, f.LastCompactionTurn, f.LastInputTokens = c.Compactions, c.LastCompactionTurn, c.LastInputTokens
	}
	return f
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

// routable reports whether another model can change a refusal on the
// dimension: a model's prices and reply cap change its cost and tokens;
// every model reserves one turn and the same wall clock.
func routable(d Dimension) bool { return d == DimCost || d == DimTokens }

// unrouted is the refusal of a turn no model was admitted for: rej is
// model's, the last one tried; tried names each model whose request was
// refused, with its reason; untried are the run's later models. Without
// routing they are named, since one of them might have fitted.
func unrouted(rej *Rejection, model string, tried []string, untried []ModelConfig, routing bool) *Rejection {
	if len(tried) == 1 && (routing || len(untried) == 0 || !routable(rej.Dimension)) {
		return rej
	}
	c := *rej
	if len(tried) > 1 {
		c.Reason = "no model of the run fits the next request: " + strings.Join(tried, "; ")
		return &c
	}
	names := make([]string, len(untried))
	for i, m := range untried {
		names[i] = m.Name
	}
	c.Reason = fmt.Sprintf("%s; model %s's fallbacks (%s) are tried on an outage only: set model.routeOnBudget to try them when a request does not fit",
		rej.Reason, model, strings.Join(names, ", "))
	return &c
}
