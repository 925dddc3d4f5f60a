package loop

import "context"

// Observer watches the outside work of a run as it happens: every model
// call and every attempt of a tool call, from its start to its end, in
// the goroutine that makes it. Metrics and traces hang here. The engine
// never calls an Observer (it does no outside work); the callers that do
// the work (Runner, the operator) wrap their model and toolbox with
// ObserveModel and ObserveTools.
type Observer interface {
	// ModelCall is called before a model call. The context it returns is
	// the call's (a tracer puts its span there); done is called once,
	// with the reply or the error.
	ModelCall(ctx context.Context, req *Request) (context.Context, func(*Reply, error))
	// ToolCall is called before one attempt of a tool call; done is called
	// once, with its result. Reads run concurrently: ToolCall is called
	// from several goroutines at once, each with the batch's context.
	ToolCall(ctx context.Context, inv Invocation) (context.Context, func(Result))
}

// Observers combines observers: each sees every call, in order, and each
// call's context passes through all of them.
func Observers(obs ...Observer) Observer {
	var list multiObserver
	for _, o := range obs {
		if o != nil {
			list = append(list, o)
		}
	}
	return list
}

type multiObserver []Observer

func (m multiObserver) ModelCall(ctx context.Context, req *Request) (context.Context, func(*Reply, error)) {
	done := make([]func(*Reply, error), len(m))
	for i, o := range m {
		ctx, done[i] = o.ModelCall(ctx, req)
	}
	return ctx, func(r *Reply, err error) {
		for i := len(done) - 1; i >= 0; i-- {
			done[i](r, err)
		}
	}
}

func (m multiObserver) ToolCall(ctx context.Context, inv Invocation) (context.Context, func(Result)) {
	done := make([]func(Result), len(m))
	for i, o := range m {
		ctx, done[i] = o.ToolCall(ctx, inv)
	}
	return ctx, func(r Result) {
		for i := len(done) - 1; i >= 0; i-- {
			done[i](r)
		}
	}
}

// ObserveModel returns m with every call reported to o (m itself when o
// is nil).
func ObserveModel(m Model, o Observer) Model {
	if o == nil || m == nil {
		return m
	}
	return observedModel{m: m, o: o}
}

type observedModel struct {
	m Model
	o Observer
}

func (om observedModel) Complete(ctx context.Context, req *Request) (*Reply, error) {
	ctx, done := om.o.ModelCall(ctx, req)
	reply, err := om.m.Complete(ctx, req)
	done(reply, err)
	return reply, err
}

// ObserveTools returns tb with every attempt of every call reported to o
// (tb itself when o is nil). The wrapper keeps tb's Preflight.
func ObserveTools(tb Toolbox, o Observer) Toolbox {
	if o == nil || tb == nil {
		return tb
	}
	ot := observedTools{tb: tb, o: o}
	if p, ok := tb.(Preflighter); ok {
		return preflightedTools{observedTools: ot, p: p}
	}
	return ot
}

type observedTools struct {
	tb Toolbox
	o  Observer
}

func (ot observedTools) Execute(ctx context.Context, inv Invocation) Result {
	ctx, done := ot.o.ToolCall(ctx, inv)
	res := ot.tb.Execute(ctx, inv)
	done(res)
	return res
}

type preflightedTools struct {
	observedTools
	p Preflighter
}

func (pt preflightedTools) Preflight(ctx context.Context) error { return pt.p.Preflight(ctx) }

// refusedBy marks the note that ended a run because a reservation did not
// fit with the ceiling that refused it.
func refusedBy(notes []Note, rej *Rejection) {
	if len(notes) > 0 && rej != nil {
		notes[len(notes)-1].Ceiling = rej.Dimension
	}
}
