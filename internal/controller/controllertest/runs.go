package controllertest

import (
	"context"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EndRun writes run's status through c as the AgentRun reconciler's last
// write would: the engine's ended state at time at, with conv, for the
// run's generation. edit, when not nil, changes the status after that
// (a verifier's verdict, the transcript's count, a usage of its own). The
// run is the caller's copy, as read; it is updated in place.
func EndRun(t testing.TB, c client.Client, run *v1alpha1.AgentRun, state loop.State, conv loop.Convergence, at time.Time, edit func(*v1alpha1.AgentRunStatus)) {
	t.Helper()
	runstatus.SetFromState(&run.Status, &state, conv, metav1.NewTime(at))
	if edit != nil {
		edit(&run.Status)
	}
	run.Status.ObservedGeneration = run.Generation
	if err := c.Status().Update(context.Background(), run); err != nil {
		t.Fatal(err)
	}
}
