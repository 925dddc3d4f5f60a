package loop

import "slices"

// A configuration's defaults: every unset field filled in, from the
// defaults each part of the configuration declares beside its type.

// Normalize fills unset fields with their defaults and returns the result.
func (c Config) Normalize() Config {
	c.Budget = c.Budget.normalize()
	if c.Model.MaxOutputTokens <= 0 {
		c.Model.MaxOutputTokens = DefaultMaxOutputTokens
	}
	if c.Model.Timeout <= 0 {
		c.Model.Timeout = DefaultModelTimeout
	}
	c.Model.Retry = c.Model.Retry.normalize(DefaultModelRetry)
	c.Fallbacks = slices.Clone(c.Fallbacks)
	for i := range c.Fallbacks {
		f := &c.Fallbacks[i]
		if f.MaxOutputTokens <= 0 {
			f.MaxOutputTokens = c.Model.MaxOutputTokens
		}
		if f.Timeout <= 0 {
			f.Timeout = c.Model.Timeout
		}
		f.Retry = f.Retry.normalize(c.Model.Retry)
	}
	if c.ApprovalTimeout <= 0 {
		c.ApprovalTimeout = DefaultApprovalTimeout
	}
	if c.VetTimeout <= 0 {
		c.VetTimeout = DefaultVetTimeout
	}
	if c.Loop.Threshold <= 0 {
		c.Loop.Threshold = DefaultLoopThreshold
	}
	if c.Loop.MaxPeriod <= 0 {
		c.Loop.MaxPeriod = DefaultLoopMaxPeriod
	}
	if c.Loop.Window <= 0 {
		c.Loop.Window = c.Loop.Threshold * c.Loop.MaxPeriod
	}
	if c.Policy.Default == "" {
		c.Policy.Default = Allow
	}
	c.Plan = c.Plan.normalize()
	c.Context = c.Context.normalize()
	if c.Verify != nil {
		v := c.Verify.normalize()
		c.Verify = &v
	}
	tools := make([]ToolSpec, len(c.Tools))
	for i, t := range c.Tools {
		if t.Timeout <= 0 {
			t.Timeout = DefaultToolTimeout
		}
		if t.MaxResultBytes <= 0 {
			t.MaxResultBytes = DefaultMaxResultBytes
		}
		if !t.Mutates {
			t.Repeatable = true
		}
		t.Retry = t.Retry.normalize(DefaultToolRetry)
		tools[i] = t
	}
	c.Tools = tools
	return c
}
