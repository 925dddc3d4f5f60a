package plugin

import (
	"context"
	"io"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runclient"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RerunOptions names the run to repeat and, optionally, the new run
// (runclient.RerunOptions).
type RerunOptions = runclient.RerunOptions

// Rerun creates a new AgentRun with the spec of an existing one
// (runclient.Rerun) and prints its name as kubectl create does.
func Rerun(ctx context.Context, c client.Client, o RerunOptions, w io.Writer) (*v1alpha1.AgentRun, error) {
	run, err := runclient.Rerun(ctx, c, o)
	return created(w, run, err, o.Run.Namespace, o.Name)
}
