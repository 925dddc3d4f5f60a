package plugin

import (
	"context"
	"io"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runclient"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ContinueOptions names the finished run to continue, the follow-up's
// goal and, optionally, its name (runclient.ContinueOptions).
type ContinueOptions = runclient.ContinueOptions

// Continue creates a follow-up of a finished run (runclient.Continue) and
// prints its name as kubectl create does.
func Continue(ctx context.Context, c client.Client, o ContinueOptions, w io.Writer) (*v1alpha1.AgentRun, error) {
	run, err := runclient.Continue(ctx, c, o)
	return created(w, run, err, o.Run.Namespace, o.Name)
}
