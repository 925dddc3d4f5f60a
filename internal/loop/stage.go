package loop

// What a stage returns. A stage (admission, the reply, vetting, acting,
// plan then execute, verification, the context policy) never ends a turn
// or a run itself: it says what should happen next, and Engine.Step
// (engine.go) decides. Only engine.go ends a turn or a run.

// nextKind is what a stage asks the engine to do.
type nextKind uint8

const (
	// nextGo: hand the stage's effect to the caller (call the model, run
	// tools, ask a person, wait, or step again).
	nextGo nextKind = iota
	// nextEndTurn: the turn is over; the next step admits another.
	nextEndTurn
	// nextFinish: the run ends with an outcome and a reason.
	nextFinish
	// nextAct: the batch in State.Calls is vetted; admit what it may
	// spend, then act.
	nextAct
	// nextObserved: every call of the batch has its result.
	nextObserved
	// nextAdmit: admit the next turn now.
	nextAdmit
)

// next is a stage's result.
type next struct {
	kind nextKind
	// eff is the effect of nextGo.
	eff Effect
	// outcome and reason end the run (nextFinish); refused is the
	// ceiling's refusal behind it, named on the run's last note.
	outcome Outcome
	reason  string
	refused *Rejection
}

// proceed hands eff to the caller: the stage goes on (or waits).
func proceed(eff Effect) next { return next{kind: nextGo, eff: eff} }

// turnOver ends the turn.
func turnOver() next { return next{kind: nextEndTurn} }

// act admits the vetted batch and runs it.
func act() next { return next{kind: nextAct} }

// admitNow admits the next turn in the same step.
func admitNow() next { return next{kind: nextAdmit} }

// observed says every call of the batch has its result.
func observed() next { return next{kind: nextObserved} }

// finishWith ends the run with outcome o and reason.
func finishWith(o Outcome, reason string) next {
	return next{kind: nextFinish, outcome: o, reason: reason}
}

// refusal ends the run BudgetExhausted by a ceiling's refusal.
func refusal(rej *Rejection) next {
	return next{kind: nextFinish, outcome: BudgetExhausted, reason: rej.Reason, refused: rej}
}

// ends reports whether the run ends.
func (n next) ends() bool { return n.kind == nextFinish }
