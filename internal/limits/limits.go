// Package limits converts a run's ceilings between the API and the
// engine: spec.budget (or status.limits) into loop.Budget, and an engine's
// normalised configuration into status.limits. It imports only the API
// types and the pure loop, so that clients (the kubectl plugin, the
// console) read a run's ceilings without linking executors or providers.
package limits

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
)

// Budget converts a manifest's budget (spec.budget, or the status.limits
// the operator wrote) into the engine's ceilings; Config.Normalize fills
// what is unset.
func Budget(b *v1alpha1.BudgetSpec) (loop.Budget, error) {
	out := loop.Budget{MaxTurns: int(b.MaxTurns), MaxWallClock: Duration(b.MaxWallClock)}
	if b.MaxTokens != nil {
		out.MaxTokens = *b.MaxTokens
	}
	// Zero is a real ceiling for these three; only an unset one takes the
	// default (in loop.Config.Normalize).
	if b.MaxCostUSD != "" {
		c, err := Money("budget.maxCostUSD", b.MaxCostUSD)
		if err != nil {
			return out, err
		}
		out.MaxCost = &c
	}
	if b.MaxToolCalls != nil {
		out.MaxToolCalls = new(int(*b.MaxToolCalls))
	}
	if b.DefaultToolLimit != nil {
		out.DefaultToolLimit = new(int(*b.DefaultToolLimit))
	}
	if len(b.PerTool) > 0 {
		out.PerTool = map[string]int{}
		for k, v := range b.PerTool {
			out.PerTool[k] = int(v)
		}
	}
	for _, d := range b.Soft {
		out.Soft = append(out.Soft, loop.Dimension(d))
	}
	return out, nil
}

// Status writes the limits an engine admits a run's steps by (its
// normalised configuration) as status.limits: the inverse of Budget, every ceiling filled.
func Status(cfg *loop.Config) *v1alpha1.LimitsStatus {
	c := cfg.Normalize()
	b := &c.Budget
	l := &v1alpha1.LimitsStatus{ApprovalTimeout: metav1.Duration{Duration: c.ApprovalTimeout}}
	out := &l.Budget
	out.MaxTurns = int32(b.MaxTurns)
	out.MaxTokens = new(b.MaxTokens)
	out.MaxWallClock = &metav1.Duration{Duration: b.MaxWallClock}
	out.MaxCostUSD = v1alpha1.USD(b.MaxCost.String())
	out.MaxToolCalls = new(int32(*b.MaxToolCalls))
	out.DefaultToolLimit = new(int32(*b.DefaultToolLimit))
	if len(b.PerTool) > 0 {
		out.PerTool = make(map[string]int32, len(b.PerTool))
		for n, v := range b.PerTool {
			out.PerTool[n] = int32(v)
		}
	}
	for _, d := range b.Soft {
		out.Soft = append(out.Soft, v1alpha1.BudgetDimension(d))
	}
	return l
}

// Money reads a dollar amount of the API; field names it in the error.
// Empty is zero.
func Money(field string, v v1alpha1.USD) (loop.Money, error) {
	if v == "" {
		return 0, nil
	}
	m, err := loop.ParseMoney(string(v))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	return m, nil
}

// Duration is d's duration, 0 when unset.
func Duration(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}

// UsageStatus writes a usage vector (consumed or reserved) as status shows
// it: the wall clock in whole seconds, rounded up (WallClockSeconds), and
// only the tools that have calls.
func UsageStatus(u loop.Usage) *v1alpha1.UsageStatus {
	out := &v1alpha1.UsageStatus{
		Turns:             int32(u.Turns),
		InputTokens:       u.InputTokens,
		OutputTokens:      u.OutputTokens,
		CachedInputTokens: u.CachedInputTokens,
		CostUSD:           u.Cost.String(),
		ToolCalls:         int32(u.ToolCalls),
		WallClockSeconds:  WallClockSeconds(u.WallClock),
	}
	for k, v := range u.PerTool {
		if v > 0 {
			if out.PerTool == nil {
				out.PerTool = map[string]int32{}
			}
			out.PerTool[k] = int32(v)
		}
	}
	return out
}

// Usage reads a usage of status in the engine's measures; a cost that
// cannot be read counts zero. Nil is no usage.
func Usage(u *v1alpha1.UsageStatus) loop.Usage {
	if u == nil {
		return loop.Usage{}
	}
	out := loop.Usage{Turns: int(u.Turns), InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CachedInputTokens: u.CachedInputTokens,
		ToolCalls: int(u.ToolCalls), WallClock: time.Duration(u.WallClockSeconds) * time.Second}
	if m, err := loop.ParseMoney(u.CostUSD); err == nil {
		out.Cost = m
	}
	if len(u.PerTool) > 0 {
		out.PerTool = make(map[string]int, len(u.PerTool))
		for t, n := range u.PerTool {
			out.PerTool[t] = int(n)
		}
	}
	return out
}

// WallClockSeconds is a run's wall clock as status.usage.wallClockSeconds
// shows it: whole seconds, rounded up, so a run that worked at all shows
// at least one.
func WallClockSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
