// Package tools holds the executors of a run's tools (local processes,
// HTTP requests, MCP calls, in the packages below it) and the Router that
// puts them behind the engine's loop.Toolbox interface.
package tools

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/agentrun/agentrun/internal/loop"
)

// Router is a loop.Toolbox that hands each invocation to the executor
// registered under the invocation's tool name. It is safe for concurrent
// use; the executors must be too.
type Router struct {
	executors map[string]loop.Toolbox
}

// NewRouter returns a Router over executors, keyed by tool name. The map
// is copied.
func NewRouter(executors map[string]loop.Toolbox) *Router {
	return &Router{executors: maps.Clone(executors)}
}

// Tools returns the names of the routed tools, sorted.
func (r *Router) Tools() []string {
	return slices.Sorted(maps.Keys(r.executors))
}

// Execute runs inv on its tool's executor. An unknown tool is an
// InvalidCall. An executor that panics, breaking its contract, yields an
// OutcomeUnknown result instead of taking the operator down: it may have
// acted before it failed (sent the request, started the process), so the
// call is neither called unavailable nor retried. This is the one place a
// panic is recovered; loop.ExecuteBatch stamps the call id and duration.
func (r *Router) Execute(ctx context.Context, inv loop.Invocation) (res loop.Result) {
	defer func() {
		if p := recover(); p != nil {
			res = loop.Result{Failure: &loop.Failure{Kind: loop.FailUnknown,
				Detail: loop.ClipDetail(fmt.Sprintf("the executor of %q failed unexpectedly: %v", inv.Tool, p))}}
		}
	}()
	e, ok := r.executors[inv.Tool]
	if !ok || e == nil {
		return loop.Result{Failure: &loop.Failure{Kind: loop.FailInvalid,
			Detail: loop.ClipDetail(fmt.Sprintf("unknown tool %q", inv.Tool))}}
	}
	return e.Execute(ctx, inv)
}

// Preflight calls Preflight on every executor that implements
// loop.Preflighter, all at once, and returns every failure, each naming
// its tool, in tool name order.
func (r *Router) Preflight(ctx context.Context) error {
	names := r.Tools()
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		p, ok := r.executors[name].(loop.Preflighter)
		if !ok {
			continue
		}
		wg.Go(func() {
			defer func() {
				if v := recover(); v != nil {
					errs[i] = fmt.Errorf("tool %q: preflight failed unexpectedly: %v", name, v)
				}
			}()
			if err := p.Preflight(ctx); err != nil {
				errs[i] = fmt.Errorf("tool %q: %w", name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
