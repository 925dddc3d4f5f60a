package kit

import (
	"strings"
	"testing"

	"github.com/agentrun/agentrun/internal/loop"
)

// zeroRun's model proposes one call to echo, then answers; the budget
// line is the case's.
func zeroRun(budget string) string {
	return `
metadata: {name: r}
spec:
  goal: Echo.
  model:
    provider: scripted
    pricing: {input: "3", output: "15"}
    script:
    - {toolCalls: [{name: echo, arguments: {x: 1}}], usage: {inputTokens: 10, outputTokens: 2}}
    - {content: done}
  budget: ` + budget + `
  tools:
  - name: echo
    job: {image: unused, command: [sh, -c, cat]}
`
}

// Zero means zero for the ceilings where zero is a real limit; only an
// unset ceiling takes the documented default.
func TestConfig_zeroCeilingsMeanZero(t *testing.T) {
	cases := []struct {
		name    string
		budget  string
		outcome loop.Outcome
		reason  string
		ran     int
	}{
		{"maxToolCalls 0: no tool may run", `{maxTurns: 3, maxToolCalls: 0}`, loop.BudgetExhausted, "toolCalls ceiling: 0 consumed + 1 reserved = 1 > 0", 0},
		{"defaultToolLimit 0: no unnamed tool may run", `{maxTurns: 3, defaultToolLimit: 0}`, loop.BudgetExhausted, "per-tool limit of echo: 0 calls made + 1 in this batch = 1 > 0", 0},
		{"perTool 0 for the tool", `{maxTurns: 3, perTool: {echo: 0}}`, loop.BudgetExhausted, "per-tool limit of echo", 0},
		{"maxCostUSD 0: nothing that costs money", `{maxTurns: 3, maxCostUSD: "0"}`, loop.BudgetExhausted, "cost ceiling: $0.0000 consumed + $", 0},
		{"unset: the defaults", `{maxTurns: 3}`, loop.Completed, "final answer", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := runLocally(t, parse(t, zeroRun(tc.budget)))
			if s.Outcome != tc.outcome || !strings.Contains(s.Reason, tc.reason) || s.Usage.ToolCalls != tc.ran {
				t.Fatalf("outcome %s (%s) after %d tool calls; want %s with %q after %d", s.Outcome, s.Reason, s.Usage.ToolCalls, tc.outcome, tc.reason, tc.ran)
			}
		})
	}
}

func TestConfig_unsetCeilingsTakeTheDocumentedDefaults(t *testing.T) {
	cfg, err := Config(&parse(t, zeroRun(`{maxTurns: 3}`)).Spec)
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Normalize().Budget
	if b.MaxTokens != loop.DefaultMaxTokens || b.MaxWallClock != loop.DefaultMaxWallClock || *b.MaxCost != loop.DefaultMaxCost ||
		*b.MaxToolCalls != loop.DefaultMaxToolCalls || *b.DefaultToolLimit != loop.DefaultToolLimit {
		t.Fatalf("normalised budget = %+v (cost %s, calls %d, default limit %d)", b, *b.MaxCost, *b.MaxToolCalls, *b.DefaultToolLimit)
	}
}

// A zero where zero cannot be meant is refused with the API server's
// words, never turned into the default (agentrun local never meets the
// API server).
func TestConfig_meaninglessZerosAreRefused(t *testing.T) {
	cases := []struct{ budget, model, tool, want string }{
		{budget: `{maxTurns: 0}`, want: "budget.maxTurns must be at least 1"},
		{budget: `{maxTurns: 3, maxTokens: 0}`, want: "budget.maxTokens must be at least 1"},
		{budget: `{maxTurns: 3, maxWallClock: 0s}`, want: "budget.maxWallClock must be a positive duration"},
		{budget: `{maxTurns: 3}`, model: "maxOutputTokens: 0", want: "model.maxOutputTokens must be at least 1"},
		{budget: `{maxTurns: 3}`, model: "timeout: 0s", want: "model.timeout must be a positive duration"},
		{budget: `{maxTurns: 3}`, tool: "timeout: 0s", want: "tools[0] (echo): tool timeout must be a positive duration"},
		{budget: `{maxTurns: 3}`, tool: "maxResultBytes: 0", want: "tools[0] (echo): maxResultBytes must be at least 1"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			m := zeroRun(tc.budget)
			if tc.model != "" {
				m = strings.Replace(m, "    provider: scripted\n", "    provider: scripted\n    "+tc.model+"\n", 1)
			}
			if tc.tool != "" {
				m = strings.Replace(m, "  - name: echo\n", "  - name: echo\n    "+tc.tool+"\n", 1)
			}
			_, err := Config(&parse(t, m).Spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
