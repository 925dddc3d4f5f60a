package loop

import (
	"context"
	"sync"
	"time"
)

// Approver asks a person about pending calls and returns the answers it
// has (possibly none yet). Its context ends at the approval deadline (the
// oldest pending call's requestedAt + approvalTimeout): an Approver waits
// for answers until then, and no longer. Run calls it again until every
// call is answered or the approval timeout passes, which ends the run
// Escalated, as in the operator.
type Approver func(ctx context.Context, pending []Call) map[string]Answer

// Runner drives an Engine synchronously: model calls, approvals and tools
// happen in this process. `agentrun local`, tests and the examples use
// it; the operator drives the same Engine one step per reconcile.
type Runner struct {
	Engine *Engine
	Model  Model
	// Fallbacks are the models of Config.Fallbacks, in the same order.
	Fallbacks []Model
	Tools     Toolbox
	// Approve answers ASKs; nil declines every ASK.
	Approve Approver
	// OnStep sees the state after every step and the effect it produced
	// (persist here to checkpoint; print here to stream).
	OnStep func(s *State, eff Effect)
	// Cancelled is polled at each step; true ends the run ApprovalDenied
	// (with CancelReason as the reason, when set).
	Cancelled    func() bool
	CancelReason string
	// Interrupt, when closed, cuts a retry's backoff short so that
	// Cancelled is polled at once (agentrun local closes it on Ctrl-C).
	Interrupt <-chan struct{}
	// Sleep waits out a retry's backoff of d; nil waits on a timer,
	// returning early when ctx ends or Interrupt is closed. (Tests with a
	// fake clock advance it here.)
	Sleep func(ctx context.Context, d time.Duration)
}

// Run steps s until the run ends. It starts a new run from the zero State
// and resumes a reloaded one the same way.
func (r *Runner) Run(ctx context.Context, s *State) {
	in := Input{}
	if s.Phase == PhaseAdmit && s.Turn == 0 {
		if p, ok := r.Tools.(Preflighter); ok && r.Tools != nil {
			if err := p.Preflight(ctx); err != nil {
				eff := r.Engine.Abort(s, ToolFailure, "a declared tool is not available: "+err.Error())
				r.step(s, eff)
				return
			}
		}
	}
	for {
		if r.Cancelled != nil && r.Cancelled() {
			in.Cancel, in.CancelReason = true, r.CancelReason
		}
		in.Context = ctx
		eff := r.Engine.Step(s, in)
		r.step(s, eff)
		in = Input{}
		switch eff.Kind {
		case EffectFinish:
			return
		case EffectCallModel:
			reply, err := r.Engine.CallModel(ctx, r.model(eff.Request.Fallback), eff.Request)
			if err != nil {
				in.ModelErr = err
			} else {
				in.Reply = reply
			}
		case EffectAsk:
			if r.Approve == nil {
				in.Answers = map[string]Answer{}
				for _, c := range eff.Pending {
					in.Answers[c.ID] = DenyAnswer
				}
				continue
			}
			actx, cancel := ctx, context.CancelFunc(func() {})
			if d := r.Engine.ApprovalDeadline(s); !d.IsZero() {
				actx, cancel = context.WithDeadline(ctx, d)
			}
			in.Answers = r.Approve(actx, eff.Pending)
			cancel()
		case EffectRunTools:
			in.Results = ExecuteBatch(ctx, r.Tools, eff.Calls, eff.Concurrent)
		case EffectWait:
			r.sleep(ctx, eff.Until.Sub(r.Engine.clock()))
		}
		if ctx.Err() != nil {
			// Keep what came back: the engine settles it before it stops.
			in.Cancel = true
			if in.CancelReason == "" {
				in.CancelReason = r.CancelReason
			}
		}
	}
}

// model is the run's model i: Model, or the i-th of Fallbacks.
func (r *Runner) model(i int) Model {
	if i > 0 && i <= len(r.Fallbacks) {
		return r.Fallbacks[i-1]
	}
	return r.Model
}

func (r *Runner) sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	if r.Sleep != nil {
		r.Sleep(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-r.Interrupt:
	}
}

func (r *Runner) step(s *State, eff Effect) {
	if r.OnStep != nil {
		r.OnStep(s, eff)
	}
}

// CallModel asks m for the reply to req under the model call's deadline,
// Config.Model.Timeout, which is also the call's wall-clock reservation.
// It is the one place a model call gets its deadline: the Runner and the
// operator both call it, and the providers only read it from the context.
func (e *Engine) CallModel(ctx context.Context, m Model, req *Request) (*Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Model.Timeout)
	defer cancel()
	return m.Complete(ctx, req)
}

// ExecuteBatch runs one group of approved calls and returns their results
// in the order of calls. Concurrent groups (reads) run at most eight at a
// time; each call's context carries its deadline. It is the one place a
// result is stamped with its call's id (the engine joins results to calls
// by it) and, when the toolbox did not measure one, its duration. An
// executor that panics is recovered by tools.Router, the toolbox every run
// uses, inside the observers, so they see the failure too.
func ExecuteBatch(ctx context.Context, tb Toolbox, calls []Invocation, concurrent bool) []Result {
	out := make([]Result, len(calls))
	if !concurrent || len(calls) < 2 {
		for i := range calls {
			out[i] = executeOne(ctx, tb, calls[i])
		}
		return out
	}
	sem := make(chan struct{}, maxConcurrentReads)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = executeOne(ctx, tb, calls[i])
		}()
	}
	wg.Wait()
	return out
}

// executeOne runs one call of ExecuteBatch. The executor enforces the
// tool's deadline and kill grace; this backstop ends the call at the end
// of its wall-clock reservation, whatever the executor does, so a hard
// ceiling is never passed.
func executeOne(ctx context.Context, tb Toolbox, inv Invocation) Result {
	ctx, cancel := context.WithTimeout(ctx, inv.MaxDuration())
	defer cancel()
	start := time.Now()
	res := tb.Execute(ctx, inv)
	res.CallID = inv.CallID
	if res.Duration <= 0 {
		res.Duration = time.Since(start)
	}
	return res
}
