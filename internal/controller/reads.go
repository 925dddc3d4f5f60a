package controller

import (
	"context"
	"time"

	"github.com/agentrun/agentrun/internal/loop"
)

// reads is a group of free reads (loop.Config.Rerunnable) that advance
// started before the step that dispatched it was saved. When it ends
// within the reconcile's wait, its results are saved with that step: one
// save for a model's reply and what its reads brought back. Otherwise the
// step is saved as it stands and act hands the reads to the tracker
// (join).
type reads struct {
	ctx     context.Context
	cancel  context.CancelFunc
	ended   chan struct{}
	results []loop.Result
	err     error // a panic, recovered
}

// startReads runs fn in its own goroutine; onPanic turns a panic in it
// into the reads' error.
func startReads(ctx context.Context, onPanic func(context.Context, any) error, fn func(ctx context.Context) []loop.Result) *reads {
	ctx, cancel := context.WithCancel(ctx)
	b := &reads{ctx: ctx, cancel: cancel, ended: make(chan struct{})}
	go func() {
		defer close(b.ended)
		defer func() {
			if p := recover(); p != nil {
				b.err = onPanic(ctx, p)
			}
		}()
		b.results = fn(ctx)
	}()
	return b
}

// wait waits at most d for the reads and returns their results, or false
// when they are still running, ended in a panic or were cancelled (what
// came back then is not the calls' results).
func (b *reads) wait(d time.Duration) ([]loop.Result, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-b.ended:
		return b.results, b.err == nil && b.ctx.Err() == nil
	case <-timer.C:
		return nil, false
	}
}

// join waits for the reads to end and returns what they brought back;
// when ctx ends first, it cancels them.
func (b *reads) join(ctx context.Context) ([]loop.Result, error) {
	select {
	case <-b.ended:
		return b.results, b.err
	case <-ctx.Done():
		b.cancel()
		return nil, ctx.Err()
	}
}
