package controller

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/transcript"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Rotating the state keys (docs/api.md "Sealed state"). A key may leave
// the keys Secret only once nothing the operator will still open is
// sealed with it, and that is more than the checkpoints of running runs:
// a run keeps its chunks and its resolved spec as they were sealed, so a
// run that started before a rotation reads chunks sealed with the old key
// until it ends, and a finished run is read once more when it is archived.
//
// The operator does not re-seal those objects: chunks and resolved specs
// are immutable Secrets, so a new seal would mean deleting and creating
// each again, and a crash between the two would lose the run's history.
// Instead it counts the sealed objects it will still open, by the key
// their seal names, in agentrun_state_key_objects{key}:
// the checkpoint, chunks, resolved spec and tool Jobs of each run that has
// not ended, and the chunks and resolved spec of each ended run the
// archive has not taken yet (it carries the archive's finalizer). A key
// whose count is 0 on every shard's leader may go. A seal that names a key
// the operator does not hold is counted too (it cannot be told from the
// operator's own) and logged as an error: those runs end Error when they
// are next read, unless the key is put back. Seals that a key the operator
// holds does not open are not the operator's and need no key; they are not
// counted, so nobody can hold a key in place by writing one.
//
// Counting reads every chunk of those runs (a seal is checked over its
// data), so it is done when the operator starts, which is when its keys
// change, and again every KeyUseEvery only while it holds more than one
// key: while a rotation is under way, the only time a key's count goes
// down to something a person waits for.

// DefaultKeyUseEvery is how often the operator counts the objects each
// state key seals while it holds more than one key.
const DefaultKeyUseEvery = 5 * time.Minute

// keyUse is the count of agentrun_state_key_objects, on the leader only,
// over the runs this manager drives (its cache's: its shard, its
// namespaces), reading the Secrets of their namespaces only.
type keyUse struct {
	r     *AgentRunReconciler
	every time.Duration
}

func (k *keyUse) NeedLeaderElection() bool { return true }

func (k *keyUse) Start(ctx context.Context) error {
	t := time.NewTicker(k.every)
	defer t.Stop()
	for {
		err := k.check(ctx)
		if err != nil && ctx.Err() == nil {
			ctrl.LoggerFrom(ctx).Error(err, "Counting the objects each state key seals")
		}
		if err == nil && len(k.r.Keys.IDs()) == 1 {
			return nil // no rotation under way: the count stands until the next start
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (k *keyUse) check(ctx context.Context) error {
	counts, err := k.count(ctx)
	if err != nil {
		return err
	}
	for _, id := range k.r.Keys.IDs() {
		counts[id] += 0 // every key held is reported, 0 when it may go
	}
	k.r.Metrics.keyObjects(counts)
	var missing []string
	for id, n := range counts {
		if n > 0 && !slices.Contains(k.r.Keys.IDs(), id) {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		ctrl.LoggerFrom(ctx).Error(nil, "Runs still need state keys the operator does not hold: they end Error when they are next read, or are archived without their transcript; put the keys back into the state keys Secret and restart the operator",
			"missingKeys", missing, "objects", counts)
	}
	return nil
}

// count returns, by key id, how many sealed objects the operator will
// still open.
func (k *keyUse) count(ctx context.Context) (map[string]int, error) {
	counts := map[string]int{}
	add := func(id string) {
		if id != "" {
			counts[id]++
		}
	}
	runs := &v1alpha1.AgentRunList{}
	if err := k.r.List(ctx, runs); err != nil {
		return nil, err
	}
	// live: runs that have not ended; read: those and the ended runs the
	// archive has yet to take.
	live, read := map[types.UID]*v1alpha1.AgentRun{}, map[types.UID]*v1alpha1.AgentRun{}
	namespaces := map[string]bool{}
	for i := range runs.Items {
		run := &runs.Items[i]
		switch {
		case run.Status.Outcome == "":
			live[run.UID], read[run.UID] = run, run
			add(transcript.CheckpointKey(k.r.Keys, run.UID, &run.Status))
		case slices.Contains(run.Finalizers, v1alpha1.FinalizerArchive):
			read[run.UID] = run
		default:
			continue
		}
		namespaces[run.Namespace] = true
	}
	req, err := labels.NewRequirement(transcript.LabelRunUID, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	sel := client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*req)}
	for _, ns := range slices.Sorted(maps.Keys(namespaces)) {
		// Chunks and resolved specs: Secrets, read uncached (the operator
		// watches no Secrets), a page at a time; a chunk may hold most of
		// a MiB, so pages are small.
		for cont := ""; ; {
			list := &corev1.SecretList{}
			opts := []client.ListOption{client.InNamespace(ns), sel, client.Limit(100)}
			if cont != "" {
				opts = append(opts, client.Continue(cont))
			}
			if err := k.r.APIReader.List(ctx, list, opts...); err != nil {
				return nil, err
			}
			for i := range list.Items {
				sec := &list.Items[i]
				run := read[types.UID(sec.Labels[transcript.LabelRunUID])]
				switch {
				case run == nil:
				case sec.Type == transcript.SecretType:
					add(transcript.ChunkKey(k.r.Keys, run, sec))
				case sec.Type == resolvedSpecType:
					add(k.r.resolvedKey(run, sec))
				}
			}
			if cont = list.Continue; cont == "" {
				break
			}
		}
	}
	if len(live) > 0 && k.r.ToolJobs != nil {
		// Tool Jobs, from the cache: a resumed call adopts its Job only
		// under its seal.
		if err := k.r.ToolJobs.SealKeys(ctx, k.r.Keys, func(uid types.UID) bool { return live[uid] != nil }, add); err != nil {
			return nil, err
		}
	}
	return counts, nil
}
