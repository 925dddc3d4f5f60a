package evaluation

import (
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
)

func TestPassRate_twoPlacesRoundedDown(t *testing.T) {
	for _, tc := range []struct {
		passed, n int32
		want      string
	}{{0, 3, "0.00"}, {2, 3, "0.66"}, {3, 4, "0.75"}, {99, 100, "0.99"}, {5, 5, "1.00"}} {
		if got := passRate(tc.passed, tc.n); got != tc.want {
			t.Errorf("passRate(%d, %d) = %s; want %s", tc.passed, tc.n, got, tc.want)
		}
	}
}

func TestPercentile_nearestRank(t *testing.T) {
	xs := []int32{5, 1, 3, 2, 4, 6, 7, 8, 9, 10}
	got := []*int32{percentile(xs, 50), percentile(xs, 95), percentile([]int32{7}, 95), percentile(nil, 50)}
	want := []*int32{ptr.To[int32](5), ptr.To[int32](10), ptr.To[int32](7), nil}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("percentiles (-want +got):\n%s", diff)
	}
}

// A case's failure reason is its lowest failed repeat's, whatever order
// its runs were scored in; a run is recorded once.
func TestRecord_firstFailedRepeatGivesTheReason(t *testing.T) {
	cs := &v1alpha1.EvaluationCaseStatus{Name: "c"}
	Record(cs, v1alpha1.EvaluationRunResult{Repeat: 3, Run: "e-c-3"}, "third")
	Record(cs, v1alpha1.EvaluationRunResult{Repeat: 1, Run: "e-c-1", Passed: true}, "")
	Record(cs, v1alpha1.EvaluationRunResult{Repeat: 2, Run: "e-c-2"}, "second")
	Record(cs, v1alpha1.EvaluationRunResult{Repeat: 2, Run: "e-c-2"}, "again")
	got := []any{len(cs.Results), cs.FailedRun, cs.FailureReason}
	if diff := cmp.Diff([]any{3, "e-c-2", "second"}, got); diff != "" {
		t.Errorf("(results, failedRun, failureReason) (-want +got):\n%s", diff)
	}
}
