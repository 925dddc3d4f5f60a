package kit

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
)

// Limits writes the limits an engine admits a run's steps by (its
// normalised configuration) as status.limits: the inverse of Config's
// conversion of spec.budget, every ceiling filled.
func Limits(cfg *loop.Config) *v1alpha1.LimitsStatus {
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
