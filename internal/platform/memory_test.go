package platform

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestApply_memoryIsForbiddenOrCappedPerPolicy(t *testing.T) {
	withMemory := func(m *v1alpha1.MemorySpec) *v1alpha1.AgentRun {
		return run(func(s *v1alpha1.AgentRunSpec) { s.Memory = m })
	}
	hour := func(h int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(h) * time.Hour} }
	caps := policy("caps", func(s *v1alpha1.AgentRunPolicySpec) {
		s.Memory = &v1alpha1.PlatformMemory{MaxEntries: ptr(int32(100)), MaxEntryBytes: ptr(int32(512)), MaxTTL: hour(24)}
	})
	tests := []struct {
		name    string
		run     *v1alpha1.AgentRun
		pol     v1alpha1.AgentRunPolicy
		want    *v1alpha1.MemorySpec
		changes []string
		refused string
	}{{
		name: "forbidden",
		run:  withMemory(&v1alpha1.MemorySpec{Name: "notes"}),
		pol: policy("no-memory", func(s *v1alpha1.AgentRunPolicySpec) {
			s.Memory = &v1alpha1.PlatformMemory{Allowed: ptr(false)}
		}),
		refused: "AgentRunPolicy no-memory refuses it: runs of this namespace may not use memory (memory.allowed: false), and this run sets spec.memory (notes)",
	}, {
		name: "forbidden, but the run has no memory",
		run:  run(func(*v1alpha1.AgentRunSpec) {}),
		pol: policy("no-memory", func(s *v1alpha1.AgentRunPolicySpec) {
			s.Memory = &v1alpha1.PlatformMemory{Allowed: ptr(false)}
		}),
	}, {
		name: "above the caps: lowered",
		run:  withMemory(&v1alpha1.MemorySpec{Name: "notes", MaxEntries: ptr(int32(1000)), MaxEntryBytes: ptr(int32(4096)), TTL: hour(720)}),
		pol:  caps,
		want: &v1alpha1.MemorySpec{Name: "notes", MaxEntries: ptr(int32(100)), MaxEntryBytes: ptr(int32(512)), TTL: hour(24)},
		changes: []string{
			"memory.maxEntries lowered from 1000 to 100 by AgentRunPolicy caps",
			"memory.maxEntryBytes lowered from 4096 to 512 by AgentRunPolicy caps",
			"memory.ttl lowered from 720h0m0s to 24h0m0s by AgentRunPolicy caps",
		},
	}, {
		name: "unset bounds whose defaults pass the caps: set to them",
		run:  withMemory(&v1alpha1.MemorySpec{Name: "notes"}),
		pol:  caps,
		want: &v1alpha1.MemorySpec{Name: "notes", MaxEntries: ptr(int32(100)), MaxEntryBytes: ptr(int32(512)), TTL: hour(24)},
		changes: []string{
			"memory.maxEntries set to 100 by AgentRunPolicy caps (the run left it unset)",
			"memory.maxEntryBytes set to 512 by AgentRunPolicy caps (the run left it unset)",
			"memory.ttl set to 24h0m0s by AgentRunPolicy caps (the run left it unset)",
		},
	}, {
		name: "within the caps: untouched",
		run:  withMemory(&v1alpha1.MemorySpec{Name: "notes", MaxEntries: ptr(int32(10)), MaxEntryBytes: ptr(int32(100)), TTL: hour(1)}),
		pol:  caps,
		want: &v1alpha1.MemorySpec{Name: "notes", MaxEntries: ptr(int32(10)), MaxEntryBytes: ptr(int32(100)), TTL: hour(1)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changes, err := Apply(tt.run, []v1alpha1.AgentRunPolicy{tt.pol})
			if tt.refused != "" {
				var r *Refusal
				if !errors.As(err, &r) || err.Error() != tt.refused {
					t.Fatalf("err = %v, want the refusal %q", err, tt.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got.Spec.Memory); diff != "" {
				t.Errorf("spec.memory (-want +got):\n%s", diff)
			}
			var mem []string
			for _, c := range changes {
				if strings.HasPrefix(c, "memory.") {
					mem = append(mem, c)
				}
			}
			if diff := cmp.Diff(tt.changes, mem); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if tt.run.Spec.Memory != nil && got.Spec.Memory == tt.run.Spec.Memory {
				t.Error("Apply changed the run it was given")
			}
		})
	}
}
