package operator

import (
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// A shard's manager caches only its runs and their Jobs, elects its leader
// on a Lease of its own, and a name that could not be a label value or a
// Lease's name is refused.
func TestShard_cacheLeaseAndName(t *testing.T) {
	runOf := func(shard string, labelled bool) labels.Set {
		if !labelled {
			return labels.Set{}
		}
		return labels.Set{v1alpha1.LabelShard: shard}
	}
	for _, tc := range []struct {
		shard          string
		selects, skips []labels.Set
	}{
		{shard: "a", selects: []labels.Set{runOf("a", true)}, skips: []labels.Set{runOf("b", true), runOf("", false), runOf("", true)}},
		{shard: "", selects: []labels.Set{runOf("", false)}, skips: []labels.Set{runOf("a", true), runOf("", true)}},
	} {
		o := cacheOptions([]string{"team-a"}, tc.shard)
		if _, ok := o.DefaultNamespaces["team-a"]; !ok || len(o.DefaultNamespaces) != 1 {
			t.Errorf("shard %q: namespaces %v", tc.shard, o.DefaultNamespaces)
		}
		for obj, by := range o.ByObject {
			switch obj.(type) {
			case *v1alpha1.AgentRun, *batchv1.Job:
			default:
				t.Errorf("shard %q: the cache selects %T by shard", tc.shard, obj)
			}
			for _, l := range tc.selects {
				if !by.Label.Matches(l) {
					t.Errorf("shard %q: %T with labels %v not selected", tc.shard, obj, l)
				}
			}
			for _, l := range tc.skips {
				if by.Label.Matches(l) {
					t.Errorf("shard %q: %T with labels %v selected", tc.shard, obj, l)
				}
			}
		}
		if len(o.ByObject) != 2 {
			t.Errorf("shard %q: %d kinds selected, want AgentRun and Job", tc.shard, len(o.ByObject))
		}
		run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "r",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}}}
		if o.DefaultTransform == nil {
			t.Fatalf("shard %q: the cache keeps managed fields", tc.shard)
		}
		if out, err := o.DefaultTransform(run); err != nil || out.(*v1alpha1.AgentRun).ManagedFields != nil {
			t.Errorf("shard %q: managed fields cached: %v, %v", tc.shard, out, err)
		}
	}
	if a, b, none := LeaderElectionID("a"), LeaderElectionID("b"), LeaderElectionID(""); a == b || a == none || none != "agentrun.agents.agentrun.dev" {
		t.Errorf("leases: a %q, b %q, unsharded %q", a, b, none)
	}
	for _, bad := range []string{"A", "a_b", "-a", "a.b"} {
		if ValidateShard(bad) == nil {
			t.Errorf("shard %q accepted", bad)
		}
	}
}
