package controller

import (
	"context"
	"strconv"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ShardSelector selects the objects of one shard: labelled
// v1alpha1.LabelShard=shard or, for the empty shard (a manager without
// --shard), without the label.
func ShardSelector(shard string) labels.Selector {
	op, values := selection.DoesNotExist, []string(nil)
	if shard != "" {
		op, values = selection.Equals, []string{shard}
	}
	req, err := labels.NewRequirement(v1alpha1.LabelShard, op, values)
	if err != nil {
		panic(err) // a constant key; the operator validates the shard's name first
	}
	return labels.NewSelector().Add(*req)
}

// ShardCache is what a manager's cache holds of the kinds the reconciler
// watches, for one shard: its AgentRuns and the Jobs made for them (the
// job executor copies the run's shard label onto them). Runs of other
// shards never reach the cache, so this manager never reconciles them.
func ShardCache(shard string) map[client.Object]cache.ByObject {
	sel := ShardSelector(shard)
	return map[client.Object]cache.ByObject{
		&v1alpha1.AgentRun{}: {Label: sel},
		&batchv1.Job{}:       {Label: sel},
	}
}

// Defaults of the unclaimed-runs check.
const (
	DefaultUnclaimedEvery = 30 * time.Second
	DefaultUnclaimedAfter = 2 * time.Minute
)

// unclaimedCheck is the unsharded operator's look at the runs of every
// shard: it cannot drive them, but it can say which nobody drives. It
// lists only the labelled runs, a page at a time, every interval, on the
// leader only; in namespaces, when given (the operator may list nowhere
// else).
type unclaimedCheck struct {
	reader       client.Reader
	namespaces   []string
	every, after time.Duration
	now          func() time.Time
	metrics      *Metrics // agentrun_runs_unclaimed
}

func (u *unclaimedCheck) NeedLeaderElection() bool { return true }

func (u *unclaimedCheck) Start(ctx context.Context) error {
	t := time.NewTicker(u.every)
	defer t.Stop()
	for {
		if err := u.check(ctx); err != nil && ctx.Err() == nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the runs of shards")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (u *unclaimedCheck) check(ctx context.Context) error {
	req, err := labels.NewRequirement(v1alpha1.LabelShard, selection.Exists, nil)
	if err != nil {
		return err
	}
	sel := labels.NewSelector().Add(*req)
	counts := map[string]int{}
	var examples []string
	namespaces := u.namespaces
	if len(namespaces) == 0 {
		namespaces = []string{""} // all
	}
	for _, ns := range namespaces {
		if err := u.count(ctx, ns, sel, counts, &examples); err != nil {
			return err
		}
	}
	u.metrics.unclaimed(counts)
	if len(examples) > 0 {
		ctrl.LoggerFrom(ctx).Info("AgentRuns wait for a shard no operator serves", "unclaimed", counts, "examples", examples)
	}
	return nil
}

func (u *unclaimedCheck) count(ctx context.Context, ns string, sel labels.Selector, counts map[string]int, examples *[]string) error {
	cont := ""
	for {
		list := &v1alpha1.AgentRunList{}
		opts := []client.ListOption{client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}, client.Limit(500)}
		if cont != "" {
			opts = append(opts, client.Continue(cont))
		}
		if err := u.reader.List(ctx, list, opts...); err != nil {
			return err
		}
		for i := range list.Items {
			run := &list.Items[i]
			if run.Status.Phase != "" || run.Status.Outcome != "" || !run.DeletionTimestamp.IsZero() ||
				u.now().Sub(run.CreationTimestamp.Time) < u.after {
				continue
			}
			shard := run.Labels[v1alpha1.LabelShard]
			counts[shard]++
			if len(*examples) < 5 {
				*examples = append(*examples, run.Namespace+"/"+run.Name+" (shard "+strconv.Quote(shard)+")")
			}
		}
		if cont = list.Continue; cont == "" {
			return nil
		}
	}
}
