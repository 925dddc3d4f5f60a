package localrun

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
)

// runSampleWith runs the sample at path as agentrun local would, every ASK
// approved, after edit has changed its run; ok is false for a sample that
// agentrun local cannot run.
func runSampleWith(tb testing.TB, path string, edit func(*v1alpha1.AgentRun)) (s *loop.State, ok bool) {
	tb.Helper()
	k, ok := buildSample(tb, path, edit)
	if !ok {
		return nil, false
	}
	s = &loop.State{}
	(&loop.Runner{Engine: k.Engine, Model: k.Model, Tools: k.Tools, Approve: approveAll}).Run(context.Background(), s)
	return s, true
}

// Issue 43, item 6: the near-repeat detector is off by default, and at the
// similarity the docs suggest (0.9) it flags no sample that ends
// otherwise: every sample that agentrun local runs ends the same with it
// on. The sample that loops (04, the login page) is caught by the exact
// detector either way.
func TestNearRepeat_noSampleEndsOtherwiseWithTheDetectorOn(t *testing.T) {
	ran, flagged := 0, 0
	for _, path := range samplePaths(t) {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		off, ok := runSampleWith(t, path, func(*v1alpha1.AgentRun) {})
		if !ok {
			continue
		}
		on, _ := runSampleWith(t, path, func(r *v1alpha1.AgentRun) {
			if r.Spec.LoopDetection == nil {
				r.Spec.LoopDetection = &v1alpha1.LoopDetectionSpec{}
			}
			r.Spec.LoopDetection.Similarity = "0.9"
		})
		ran++
		if on.Outcome != off.Outcome || on.Reason != off.Reason {
			flagged++
			t.Errorf("%s: %s (%s) with the detector on, %s (%s) without", name, on.Outcome, on.Reason, off.Outcome, off.Reason)
		}
	}
	if ran < 5 {
		t.Fatalf("only %d samples ran", ran)
	}
	t.Logf("near-repeat detector at 0.9: %d of %d samples end otherwise", flagged, ran)
}
