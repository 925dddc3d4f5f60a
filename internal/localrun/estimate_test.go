package localrun

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model/modeltest"
	"github.com/agentrun/agentrun/internal/testenv"
	"k8s.io/apimachinery/pkg/types"
)

// sampleCall is one model call of a sample run: the input tokens reserved
// for it, the whole bound of its request (the reservation before
// estimates were built on the provider's counts) and the count that
// modeltest.InputTokens, standing in for the provider, reported.
type sampleCall struct {
	reserved, bound, actual int64
}

// runSampleCounted runs the sample at path as agentrun local would, with
// the scripted model's input counts replaced by modeltest.InputTokens and
// every ASK approved, and returns its model calls. ok is false for a
// sample that agentrun local cannot run (other kinds than AgentRun and
// Secrets, or a tool that needs a cluster).
func runSampleCounted(tb testing.TB, path string) (calls []sampleCall, s *loop.State, ok bool) {
	tb.Helper()
	k, ok := buildSample(tb, path, func(*v1alpha1.AgentRun) {})
	if !ok {
		return nil, nil, false
	}
	s = &loop.State{}
	(&loop.Runner{Engine: k.Engine, Model: modeltest.Counting{Model: k.Model}, Tools: k.Tools, Approve: approveAll,
		OnStep: func(s *loop.State, eff loop.Effect) {
			if eff.Kind == loop.EffectCallModel {
				calls = append(calls, sampleCall{reserved: s.Reserved.InputTokens,
					bound: loop.ByteEstimator{}.EstimateInputTokens(eff.Request), actual: modeltest.InputTokens(eff.Request)})
			}
		}}).Run(context.Background(), s)
	return calls, s, true
}

// buildSample builds the sample at path as agentrun local would, after
// edit has changed its run; ok is false for a sample that agentrun local
// cannot run (other kinds than AgentRun and Secrets, or a tool that needs
// a cluster).
func buildSample(tb testing.TB, path string, edit func(*v1alpha1.AgentRun)) (*kit.Kit, bool) {
	tb.Helper()
	m, err := ReadManifest(path)
	if err != nil {
		return nil, false
	}
	run := m.Run
	run.Namespace, run.UID = "default", types.UID("local-sample")
	edit(run)
	k, err := (&kit.Builder{LocalJobs: true, Secrets: m.SecretReader(), LocalDir: filepath.Dir(path)}).Build(context.Background(), run, egress.Grant{})
	if errors.Is(err, kit.ErrUnavailable) {
		return nil, false
	}
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return k, true
}

// approveAll answers every ASK with approve.
func approveAll(_ context.Context, pending []loop.Call) map[string]loop.Answer {
	out := map[string]loop.Answer{}
	for _, c := range pending {
		out[c.ID] = loop.Approve
	}
	return out
}

// samplePaths is every manifest in config/samples.
func samplePaths(tb testing.TB) []string {
	tb.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	paths, err := filepath.Glob(filepath.Join(root, "config", "samples", "*.yaml"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no samples: %v", err)
	}
	return paths
}

// TestEstimate_samplesReserveAtLeastTheCount: in every sample that runs
// here, each model call reserves at least what the provider counts (its
// counts being consistent) and never more than the whole bound of its
// request; calls after the first are built on the count before them.
func TestEstimate_samplesReserveAtLeastTheCount(t *testing.T) {
	built := 0
	for _, path := range samplePaths(t) {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".yaml"), func(t *testing.T) {
			calls, s, ok := runSampleCounted(t, path)
			if !ok {
				t.Skip("agentrun local does not run this sample")
			}
			for i, c := range calls {
				if c.reserved < c.actual || c.reserved > c.bound {
					t.Errorf("model call %d reserved %d input tokens; want between the count %d and the whole bound %d", i+1, c.reserved, c.actual, c.bound)
				}
				if c.reserved < c.bound {
					built++
				}
			}
			t.Logf("%s after %d model calls: %+v", s.Outcome, len(calls), calls)
		})
	}
	if built == 0 {
		t.Errorf("no sample's estimate was built on a count")
	}
}

// BenchmarkEstimate_samples reports, per sample, the input estimate over
// the provider's count (modeltest.InputTokens) of its model calls:
// "est/actual" is what the engine reserves, "bound/actual" the whole bound
// it reserved before estimates were built on counts. It measures
// estimates, not time.
func BenchmarkEstimate_samples(b *testing.B) {
	for _, path := range samplePaths(b) {
		b.Run(strings.TrimSuffix(filepath.Base(path), ".yaml"), func(b *testing.B) {
			var calls []sampleCall
			for b.Loop() {
				var ok bool
				if calls, _, ok = runSampleCounted(b, path); !ok {
					b.Skip("agentrun local does not run this sample")
				}
			}
			if len(calls) == 0 {
				b.Skip("the sample makes no model call")
			}
			var est, bound, rest float64
			for i, c := range calls {
				q := float64(c.reserved) / float64(c.actual)
				est += q / float64(len(calls))
				bound += float64(c.bound) / float64(c.actual) / float64(len(calls))
				if i > 0 {
					rest = max(rest, q)
				}
			}
			b.ReportMetric(float64(len(calls)), "calls")
			b.ReportMetric(float64(calls[0].reserved)/float64(calls[0].actual), "est/actual-first")
			b.ReportMetric(rest, "est/actual-max-after-1st")
			b.ReportMetric(est, "est/actual-mean")
			b.ReportMetric(bound, "bound/actual-mean")
		})
	}
}
