package loop

// Refuse ends the run BudgetExhausted in place of the work the last step
// asked for (eff, not started): a limit outside the run, such as a shared
// tenant budget, does not cover the step's reservation. It is the same end
// as a refusal by the run's own ceilings: nothing of the step is spent, the
// reservation is dropped, and a turn that was only admitted is not
// counted. reason names the limit and its arithmetic.
func (e *Engine) Refuse(s *State, eff Effect, reason string) Effect {
	if s.Done() {
		return Effect{Kind: EffectFinish}
	}
	if eff.Kind == EffectCallModel && s.Phase == PhaseModel && s.Attempt == 1 && s.RetryAt == nil {
		s.Turn-- // admitted, never called
	}
	var notes []Note
	e.finish(s, BudgetExhausted, reason, &notes)
	return Effect{Kind: EffectFinish, Notes: notes}
}
