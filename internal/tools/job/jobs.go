package job

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/internal/seal"
)

// Jobs is what the AgentRun reconciler does with the Jobs of job tools
// (controller.ToolJobs): it tells the calls that wait on a Job of its
// changes, deletes the kept Jobs of calls whose results are saved, and
// names the state key that sealed each Job of a live run. The operator
// builds one over its client and the Wakeups its executors wait on.
type Jobs struct {
	// Client reads Jobs (from the cache) and deletes them.
	Client client.Client
	// Wakeups is told of every change; nil tells nobody (the executors
	// then poll their Jobs).
	Wakeups *Wakeups
}

// Changed tells the calls that wait on the Job namespace/name that it
// changed.
func (j Jobs) Changed(namespace, name string) {
	if j.Wakeups != nil {
		j.Wakeups.Notify(namespace, name)
	}
}

// Release deletes the kept Jobs of these calls of the run (DeleteSaved).
func (j Jobs) Release(ctx context.Context, namespace string, run types.UID, callIDs []string) error {
	return DeleteSaved(ctx, j.Client, namespace, run, callIDs)
}

// SealKeys calls add with the key that sealed each tool Job of a run that
// live holds.
func (j Jobs) SealKeys(ctx context.Context, kr *seal.Keyring, live func(run types.UID) bool, add func(key string)) error {
	jobs := &batchv1.JobList{}
	if err := j.Client.List(ctx, jobs, client.HasLabels{LabelRunUID}); err != nil {
		return err
	}
	for i := range jobs.Items {
		if live(types.UID(jobs.Items[i].Labels[LabelRunUID])) {
			add(SealKey(kr, &jobs.Items[i]))
		}
	}
	return nil
}
