package localrun

import (
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Status is the AgentRun status the operator would write for a run in
// state s, computed by the operator's own setters. now stamps
// completionTime and the conditions.
func Status(s *loop.State, conv loop.Convergence, now time.Time) v1alpha1.AgentRunStatus {
	st := v1alpha1.AgentRunStatus{}
	runstatus.SetFromState(&st, s, conv, metav1.NewTime(now.UTC().Truncate(time.Second)))
	return st
}

// FailedStatus is the status of a run that could not start (a declared
// tool that is not available), as the operator writes it.
func FailedStatus(o loop.Outcome, reason string, now time.Time) v1alpha1.AgentRunStatus {
	st := v1alpha1.AgentRunStatus{}
	runstatus.SetFailed(&st, v1alpha1.Outcome(o), reason, metav1.NewTime(now.UTC().Truncate(time.Second)))
	return st
}
