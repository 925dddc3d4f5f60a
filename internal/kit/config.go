// Package kit turns an AgentRun's spec into what the loop engine runs: the
// engine's configuration, the model and the toolbox. The operator, `make
// dev` and `agentrun local` all build runs here, so a manifest means the
// same thing everywhere.
package kit

import (
	"encoding/json"
	"errors"
	"fmt"
	"k8s.io/utils/ptr"
	"strconv"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model/anthropic"
	"github.com/agentrun/agentrun/internal/model/gemini"
	"github.com/agentrun/agentrun/internal/model/openai"
	"github.com/agentrun/agentrun/internal/platform"
	"github.com/agentrun/agentrun/internal/tools/agent"
	"github.com/agentrun/agentrun/internal/tools/job"
	"github.com/agentrun/agentrun/internal/tools/job/entrypoint"
	"k8s.io/apimachinery/pkg/runtime"
)

// Kit is what one run needs to be driven: its engine, its model and its
// tools.
type Kit struct {
	Engine *loop.Engine
	Model  loop.Model
	// Fallbacks are the models of spec.model.fallbacks, in order.
	Fallbacks []loop.Model
	Tools     loop.Toolbox
	// Approvers is who the platform's policies let answer the run's
	// approvals (the operator sets it; the zero value refuses only
	// ServiceAccounts).
	Approvers platform.Approvers
	// Spec is the spec the kit was built from, as the platform's policies
	// govern it; for a run made from a template, the resolved spec. The
	// operator drops it (nil) when it is the run's own spec, unchanged.
	Spec *v1alpha1.AgentRunSpec
}

// ModelAt is the run's model i, as loop.Request.Fallback names it: 0 is
// Model, i the i-th of Fallbacks.
func (k *Kit) ModelAt(i int) loop.Model {
	if i > 0 && i <= len(k.Fallbacks) {
		return k.Fallbacks[i-1]
	}
	return k.Model
}

// agentTool sets what the engine knows of agent tool t (tools[i]): it
// mutates unless it says otherwise (a child run is work done outside the
// run), a crashed call may be dispatched again (it adopts its child), and
// each call reserves its child's ceilings, t's budget capped by tpl's (nil
// before the template is read: t's budget, the defaults where it is
// silent). The child's cost and wall clock are the call's.
func agentTool(ts *loop.ToolSpec, t *v1alpha1.ToolSpec, i int, tpl *v1alpha1.BudgetSpec) error {
	ts.Mutates = t.Mutates == nil || *t.Mutates
	ts.Repeatable = true
	ts.StartupGrace, ts.KillGrace = agent.StartGrace, agent.StopGrace
	var call v1alpha1.ChildBudget
	if t.Agent.Budget != nil {
		call = *t.Agent.Budget
	}
	base := v1alpha1.BudgetSpec{MaxTurns: 1} // the template is not read yet
	if call.MaxTurns != nil {
		base.MaxTurns = *call.MaxTurns
	}
	if tpl != nil {
		base = *tpl
	}
	b, err := limits.Budget(&base)
	if err != nil {
		return fmt.Errorf("tools[%d] (%s): the template's budget: %w", i, t.Name, err)
	}
	b = loop.Config{Budget: b}.Normalize().Budget
	c := loop.ChildBudget{Turns: b.MaxTurns, Tokens: b.MaxTokens, WallClock: b.MaxWallClock, Cost: *b.MaxCost, ToolCalls: *b.MaxToolCalls}
	if call.MaxTurns != nil {
		c.Turns = min(c.Turns, int(*call.MaxTurns))
	}
	if call.MaxTokens != nil {
		c.Tokens = min(c.Tokens, *call.MaxTokens)
	}
	if call.MaxWallClock != nil {
		c.WallClock = min(c.WallClock, call.MaxWallClock.Duration)
	}
	if call.MaxCostUSD != "" {
		m, err := limits.Money(fmt.Sprintf("tools[%d].agent.budget.maxCostUSD", i), call.MaxCostUSD)
		if err != nil {
			return err
		}
		c.Cost = min(c.Cost, m)
	}
	if call.MaxToolCalls != nil {
		c.ToolCalls = min(c.ToolCalls, int(*call.MaxToolCalls))
	}
	if t.MaxCostUSD != "" {
		// The tool's own maxCostUSD (which requireToolCosts asks for)
		// bounds its calls too.
		m, err := limits.Money(fmt.Sprintf("tools[%d].maxCostUSD", i), t.MaxCostUSD)
		if err != nil {
			return err
		}
		c.Cost = min(c.Cost, m)
	}
	ts.Child = &c
	ts.MaxCost, ts.CostDeclared, ts.Timeout = c.Cost, true, c.WallClock
	return nil
}

// Config converts a spec into the engine's configuration. Defaults the API
// server did not apply (a manifest read by agentrun local never met one)
// are applied by loop.Config.Normalize.
func Config(spec *v1alpha1.AgentRunSpec) (loop.Config, error) {
	cfg := loop.Config{Goal: spec.Goal, Instructions: spec.Instructions, FollowUp: spec.ContinueFrom != nil}
	if err := checkLimits(spec); err != nil {
		return cfg, err
	}
	var err error

	m := &spec.Model
	cfg.Model = loop.ModelConfig{Provider: string(m.Provider), Name: m.Name, Timeout: limits.Duration(m.Timeout)}
	if r := m.Retry; r != nil {
		cfg.Model.Retry = loop.RetryPolicy{MaxAttempts: i32(r.MaxAttempts), InitialBackoff: limits.Duration(r.InitialBackoff), MaxBackoff: limits.Duration(r.MaxBackoff)}
	}
	if m.MaxOutputTokens != nil {
		cfg.Model.MaxOutputTokens = int64(*m.MaxOutputTokens)
	}
	if cfg.Model.Pricing, err = pricing("model", m.Pricing); err != nil {
		return cfg, err
	}
	for i := range m.Fallbacks {
		f := &m.Fallbacks[i]
		// A fallback is called as the model is: its call settings
		// (maxOutputTokens, timeout, retry) are the model's.
		mc := cfg.Model
		mc.Provider, mc.Name = string(f.Provider), f.Name
		if mc.Pricing, err = pricing(fmt.Sprintf("model.fallbacks[%d]", i), f.Pricing); err != nil {
			return cfg, err
		}
		cfg.Fallbacks = append(cfg.Fallbacks, mc)
	}
	cfg.RouteOnBudget = m.RouteOnBudget

	if cfg.Budget, err = limits.Budget(&spec.Budget); err != nil {
		return cfg, err
	}

	if l := spec.LoopDetection; l != nil {
		cfg.Loop = loop.LoopDetection{Threshold: i32(l.Threshold), Window: i32(l.Window), MaxPeriod: i32(l.MaxPeriod), IgnoreArguments: l.IgnoreArguments}
		if l.Similarity != "" {
			f, err := strconv.ParseFloat(l.Similarity, 64)
			if err != nil || f <= 0 || f > 1 {
				return cfg, fmt.Errorf("loopDetection.similarity %q must be a decimal above 0 and at most 1, such as \"0.9\"", l.Similarity)
			}
			cfg.Loop.Similarity = f
		}
	}

	for i := range spec.Tools {
		t := &spec.Tools[i]
		ts := loop.ToolSpec{Name: t.Name, Description: t.Description, Reversible: true, Timeout: limits.Duration(t.Timeout)}
		if t.Parameters != nil && len(t.Parameters.Raw) > 0 {
			ts.Parameters = json.RawMessage(t.Parameters.Raw)
		}
		if t.Mutates != nil {
			ts.Mutates = *t.Mutates
		}
		if t.Reversible != nil {
			ts.Reversible = *t.Reversible
		}
		if t.MaxResultBytes != nil {
			ts.MaxResultBytes = int(*t.MaxResultBytes)
		}
		if ts.MaxCost, err = limits.Money(fmt.Sprintf("tools[%d].maxCostUSD", i), t.MaxCostUSD); err != nil {
			return cfg, err
		}
		ts.CostDeclared = platform.DeclaresCost(t)
		if r := t.Retry; r != nil {
			ts.Retry = loop.RetryPolicy{MaxAttempts: i32(r.MaxAttempts), InitialBackoff: limits.Duration(r.InitialBackoff),
				MaxBackoff: limits.Duration(r.MaxBackoff), MutatingSafe: r.MutatingSafe}
		}
		if t.Builtin == v1alpha1.BuiltinAskPerson {
			// The agent's question to a person: the engine waits for the
			// answer; nothing is executed.
			ts.AsksPerson = true
			if ts.Description == "" {
				ts.Description = loop.AskPersonDescription
			}
			if len(ts.Parameters) == 0 {
				ts.Parameters = loop.AskPersonSchema()
			}
		}
		if t.Agent != nil {
			if err := agentTool(&ts, t, i, nil); err != nil {
				return cfg, err
			}
		}
		if t.Job != nil {
			// A Job is named after its call, so a second dispatch after a
			// crash adopts the first: it may be dispatched again.
			ts.Repeatable = true
			// The pod's start-up allowance and the wrapper's kill grace
			// are part of the call's wall-clock reservation.
			ts.StartupGrace = job.DefaultPendingLimit
			ts.KillGrace = entrypoint.DefaultKillGrace
		}
		cfg.Tools = append(cfg.Tools, ts)
	}

	if p := spec.Policy; p != nil {
		cfg.Policy = loop.Policy{Default: loop.Decision(p.Default), Grants: p.Grants}
		for _, r := range p.Rules {
			cfg.Policy.Rules = append(cfg.Policy.Rules, loop.Rule{Tools: r.Tools, When: r.When, Decision: loop.Decision(r.Decision), Reason: r.Reason,
				Mutating: r.Mutating, Label: r.Name, Approvals: int(ptr.Deref(r.Approvals, 0))})
		}
	}
	for _, g := range spec.Guardrails {
		gr := loop.Guardrail{Name: g.Name, Tools: g.Tools, Pattern: g.Pattern, Severity: loop.Severity(g.Severity), Reason: g.Reason}
		for _, t := range g.On {
			gr.On = append(gr.On, loop.GuardrailTarget(t))
		}
		cfg.Guardrails = append(cfg.Guardrails, gr)
	}
	cfg.ApprovalTimeout = limits.Duration(spec.ApprovalTimeout)
	if v := spec.Verify; v != nil {
		cfg.Verify = &loop.Verify{Tool: v.Tool, MaxTrials: i32(v.MaxTrials), Memory: i32(v.Memory), StallTrials: i32(v.StallTrials)}
	}
	cfg.Context = contextPolicy(spec.Context, &cfg.Model)
	// A run that may fall back is held to the smallest window of its
	// models: its transcript goes to whichever of them it calls.
	for i := range cfg.Fallbacks {
		if p := contextPolicy(spec.Context, &cfg.Fallbacks[i]); inputLimit(p) < inputLimit(cfg.Context) {
			cfg.Context = p
		}
	}
	if o := spec.Output; o != nil {
		cfg.Output = &loop.OutputSpec{Schema: json.RawMessage(o.Schema.Raw)}
	}
	cfg.Strategy = loop.Strategy(spec.Strategy)
	if p := spec.Plan; p != nil {
		cfg.Plan.MaxSteps = i32(p.MaxSteps)
		if p.MaxReplans != nil {
			cfg.Plan.MaxReplans = new(int(*p.MaxReplans))
		}
	}
	return cfg, nil
}

// checkLimits refuses a limit set to zero (or below) where zero cannot be
// meant: the API server's schema rejects these with the same words, and a
// manifest read by agentrun local must not have such a zero quietly become
// the default (a ceiling never fails open).
func checkLimits(spec *v1alpha1.AgentRunSpec) error {
	b := &spec.Budget
	switch {
	case b.MaxTurns < 1:
		return errors.New("budget.maxTurns must be at least 1")
	case b.MaxTokens != nil && *b.MaxTokens < 1:
		return errors.New("budget.maxTokens must be at least 1: a run with no tokens cannot call the model")
	case b.MaxWallClock != nil && b.MaxWallClock.Duration <= 0:
		return errors.New("budget.maxWallClock must be a positive duration such as 90s or 15m")
	case b.MaxToolCalls != nil && *b.MaxToolCalls < 0:
		return errors.New("budget.maxToolCalls cannot be negative")
	case b.DefaultToolLimit != nil && *b.DefaultToolLimit < 0:
		return errors.New("budget.defaultToolLimit cannot be negative")
	case spec.Model.MaxOutputTokens != nil && *spec.Model.MaxOutputTokens < 1:
		return errors.New("model.maxOutputTokens must be at least 1: a model call cannot answer in no tokens")
	case spec.Model.Timeout != nil && spec.Model.Timeout.Duration <= 0:
		return errors.New("model.timeout must be a positive duration such as 60s or 2m")
	case spec.ApprovalTimeout != nil && spec.ApprovalTimeout.Duration <= 0:
		return errors.New("approvalTimeout must be a positive duration such as 30m or 1h")
	}
	if v := spec.Verify; v != nil {
		for _, f := range []struct {
			name string
			n    *int32
		}{{"maxTrials", v.MaxTrials}, {"memory", v.Memory}, {"stallTrials", v.StallTrials}} {
			if f.n != nil && (*f.n < 1 || *f.n > loop.MaxTrialsLimit) {
				return fmt.Errorf("verify.%s must be between 1 and %d", f.name, loop.MaxTrialsLimit)
			}
		}
	}
	if p := spec.Plan; p != nil {
		switch {
		case spec.Strategy != v1alpha1.StrategyPlanExecute:
			return errors.New("spec.plan applies only to strategy planExecute: set spec.strategy to planExecute or remove spec.plan")
		case p.MaxSteps != nil && (*p.MaxSteps < 1 || *p.MaxSteps > loop.PlanMaxStepsLimit):
			return fmt.Errorf("plan.maxSteps must be between 1 and %d", loop.PlanMaxStepsLimit)
		case p.MaxReplans != nil && (*p.MaxReplans < 0 || *p.MaxReplans > loop.MaxReplansLimit):
			return fmt.Errorf("plan.maxReplans must be between 0 and %d", loop.MaxReplansLimit)
		}
	}
	if err := checkContext(spec.Context); err != nil {
		return err
	}
	for n, v := range b.PerTool {
		if v < 0 {
			return fmt.Errorf("budget.perTool[%s] cannot be negative", n)
		}
	}
	for i := range spec.Tools {
		t := &spec.Tools[i]
		switch {
		case t.Timeout != nil && t.Timeout.Duration <= 0:
			return fmt.Errorf("tools[%d] (%s): tool timeout must be a positive duration such as 30s or 5m", i, t.Name)
		case t.MaxResultBytes != nil && *t.MaxResultBytes < 1:
			return fmt.Errorf("tools[%d] (%s): maxResultBytes must be at least 1", i, t.Name)
		}
	}
	return nil
}

// Script converts the scripted provider's script.
func Script(steps []v1alpha1.ScriptStep) []loop.ScriptEntry {
	out := make([]loop.ScriptEntry, len(steps))
	for i, st := range steps {
		e := loop.ScriptEntry{Content: st.Content, Refusal: st.Refusal, Error: st.Error, Transient: st.Transient,
			Truncated: st.Truncated, Delay: limits.Duration(st.Delay)}
		if u := st.Usage; u != nil {
			e.Usage = loop.TokenUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CachedInputTokens: u.CachedInputTokens}
		}
		for _, c := range st.ToolCalls {
			e.ToolCalls = append(e.ToolCalls, loop.ToolCall{Name: c.Name, Arguments: raw(c.Arguments)})
		}
		out[i] = e
	}
	return out
}

func raw(r *runtime.RawExtension) json.RawMessage {
	if r == nil || len(r.Raw) == 0 {
		return json.RawMessage("{}")
	}
	return json.RawMessage(r.Raw)
}

func i32(p *int32) int {
	if p == nil {
		return 0
	}
	return int(*p)
}

// pricing converts the prices of the model that field names (model, or
// model.fallbacks[i]); unset prices are zero.
func pricing(field string, p *v1alpha1.ModelPricing) (loop.Pricing, error) {
	var out loop.Pricing
	if p == nil {
		return out, nil
	}
	var err error
	if out.Input, err = limits.Money(field+".pricing.input", p.Input); err != nil {
		return out, err
	}
	if out.Output, err = limits.Money(field+".pricing.output", p.Output); err != nil {
		return out, err
	}
	if out.CachedInput, err = limits.Money(field+".pricing.cachedInput", p.CachedInput); err != nil {
		return out, err
	}
	return out, nil
}

// contextPolicy is the run's context policy: spec.context, with the
// model's window (less the output the request allows) as maxInputTokens
// when the spec sets none and the provider adapter knows the model; the
// engine puts the documented default otherwise.
func contextPolicy(c *v1alpha1.ContextSpec, m *loop.ModelConfig) loop.ContextPolicy {
	var p loop.ContextPolicy
	if c != nil {
		p.Strategy = loop.ContextStrategy(c.Strategy)
		p.KeepRecentTurns = i32(c.KeepRecentTurns)
		if c.MaxInputTokens != nil {
			p.MaxInputTokens, p.Source = *c.MaxInputTokens, loop.ContextFromSpec
		}
		if c.SummaryMaxOutputTokens != nil {
			p.SummaryMaxOutputTokens = *c.SummaryMaxOutputTokens
		}
	}
	if p.MaxInputTokens > 0 {
		return p
	}
	var window int64
	switch m.Provider {
	case string(v1alpha1.ProviderScripted):
		// A script has no window: the largest limit the schema allows, so
		// that a replay is never compacted unless its spec asks.
		p.MaxInputTokens, p.Source = maxContextInputTokens, loop.ContextFromModel
		return p
	case string(v1alpha1.ProviderOpenAI), string(v1alpha1.ProviderAzure):
		// An Azure deployment's window is known when it is named after
		// its model, as deployments usually are.
		window = openai.ContextWindow(m.Name)
	case string(v1alpha1.ProviderAnthropic), string(v1alpha1.ProviderBedrock), string(v1alpha1.ProviderVertex):
		window = anthropic.ContextWindow(m.Name)
	case string(v1alpha1.ProviderGemini):
		window = gemini.ContextWindow(m.Name)
	}
	out := m.MaxOutputTokens
	if out <= 0 {
		out = loop.DefaultMaxOutputTokens
	}
	if window > out {
		p.MaxInputTokens, p.Source = window-out, loop.ContextFromModel
	}
	return p
}

// inputLimit is the limit a context policy holds requests to, the
// engine's default when it sets none.
func inputLimit(p loop.ContextPolicy) int64 {
	if p.MaxInputTokens > 0 {
		return p.MaxInputTokens
	}
	return loop.DefaultMaxInputTokens
}

// maxContextInputTokens is the largest spec.context.maxInputTokens, and
// the limit of a scripted model's requests.
const maxContextInputTokens = 10_000_000

// checkContext refuses a context policy the API server's schema refuses,
// in the same words, for a manifest that never met it (agentrun local).
func checkContext(c *v1alpha1.ContextSpec) error {
	if c == nil {
		return nil
	}
	switch {
	case c.MaxInputTokens != nil && (*c.MaxInputTokens < 1024 || *c.MaxInputTokens > maxContextInputTokens):
		return errors.New("context.maxInputTokens must be between 1024 and 10000000")
	case c.KeepRecentTurns != nil && (*c.KeepRecentTurns < 1 || *c.KeepRecentTurns > 1000):
		return errors.New("context.keepRecentTurns must be between 1 and 1000")
	case c.Strategy != "" && c.Strategy != v1alpha1.ContextClear && c.Strategy != v1alpha1.ContextSummarize:
		return fmt.Errorf("context.strategy must be clear or summarize, not %q", c.Strategy)
	case c.SummaryMaxOutputTokens != nil && c.Strategy != v1alpha1.ContextSummarize:
		return errors.New("context.summaryMaxOutputTokens applies to strategy summarize only")
	case c.SummaryMaxOutputTokens != nil && (*c.SummaryMaxOutputTokens < 64 || *c.SummaryMaxOutputTokens > 32768):
		return errors.New("context.summaryMaxOutputTokens must be between 64 and 32768")
	}
	return nil
}
