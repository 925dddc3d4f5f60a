package controller

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/runstatus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
)

// errPanic marks an error made from a recovered panic: a defect of the
// operator, never the run author's doing.
var errPanic = errors.New("the operator panicked")

// failureCause says whose fault a failure to build a run's kit is.
type failureCause int

const (
	// causeDefect: the operator's (a panic) or the platform's (the API
	// server failed to answer): outcome Error.
	causeDefect failureCause = iota
	// causeConfiguration: the run's own manifest or namespace: outcome
	// Error with the condition reason InvalidConfiguration.
	causeConfiguration
	// causeUnavailable: a declared tool is not there: ToolFailure.
	causeUnavailable
)

// buildFailure classifies an error from building a run's kit. Anything
// the API server or the operator got wrong is a defect; the rest (a CEL
// condition that does not compile, a Secret the run's ServiceAccount may
// not read, a limit over the operator's caps) is what the run was given.
func buildFailure(err error) failureCause {
	switch {
	case errors.Is(err, kit.ErrUnavailable):
		return causeUnavailable
	case errors.Is(err, errPanic), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return causeDefect
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		switch {
		case apierrors.IsForbidden(err), apierrors.IsNotFound(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
			return causeConfiguration
		}
		return causeDefect // timeouts, throttling, an API server that failed
	}
	return causeConfiguration
}

// recovered turns a recovered panic value into an error (wrapping
// errPanic), logging its stack and counting it in m.
func recovered(ctx context.Context, m *Metrics, where string, p any) error {
	m.panicked(where)
	err := fmt.Errorf("%w: %s", errPanic, clip.Cut(fmt.Sprint(p), 512, runstatus.CutMark))
	ctrl.LoggerFrom(ctx).Error(err, "Recovered from a panic", "where", where, "stack", string(debug.Stack()))
	return err
}
