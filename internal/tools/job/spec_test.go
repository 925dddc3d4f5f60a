package job

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/agentrun/agentrun/internal/loop"
)

const runUID = types.UID("3f2a9c1e-7b4d-4e8a-9c1f-2d3e4f5a6b7c")

func TestJobName_isDeterministicDNSLabel(t *testing.T) {
	tests := []struct {
		callID string
		want   string // "" when only validity is checked
	}{
		{"t3-c1", "ar-3f2a9c1e-t3-c1"},
		{"t12-c10", "ar-3f2a9c1e-t12-c10"},
		{"T3_C1", ""},
		{strings.Repeat("t1-c1", 30), ""},
		{"---", ""},
		{"", ""},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := JobName(runUID, tt.callID)
		if tt.want != "" && got != tt.want {
			t.Errorf("JobName(%q) = %q, want %q", tt.callID, got, tt.want)
		}
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("JobName(%q) = %q, not a DNS-1123 label: %v", tt.callID, got, errs)
		}
		if again := JobName(runUID, tt.callID); again != got {
			t.Errorf("JobName(%q) changed between calls: %q, %q", tt.callID, got, again)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("call ids %q and %q share the name %q", other, tt.callID, got)
		}
		seen[got] = tt.callID
	}
	// Call ids that clean to the same text keep distinct names.
	if JobName(runUID, "t1.c1") == JobName(runUID, "t1_c1") {
		t.Error("t1.c1 and t1_c1 got the same Job name")
	}
}

func TestLabelValue_keepsValidValuesAndFixesOthers(t *testing.T) {
	for _, in := range []string{"issue_refund", "kubernetes.get", "a name with spaces", strings.Repeat("x", 100), "-leading", "é"} {
		got := labelValue(in)
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("labelValue(%q) = %q, invalid: %v", in, got, errs)
		}
		if len(validation.IsValidLabelValue(in)) == 0 && got != in {
			t.Errorf("labelValue(%q) = %q, want it unchanged", in, got)
		}
	}
}

func TestJobDeadline_addsTheStartupAllowanceToTheTimeout(t *testing.T) {
	ex, err := New(Config{Client: k8sClient, OperatorImage: "op"}, Run{Namespace: "ns",
		Owner: metav1.OwnerReference{Name: "r", UID: runUID}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		timeout, grace time.Duration
		want           int64
	}{
		{30 * time.Second, 0, 30 + 300 + 5 + 10},                // the pending limit
		{30 * time.Second, time.Minute, 30 + 60 + 5 + 10},       // a shorter grace
		{30 * time.Second, time.Hour, 30 + 300 + 5 + 10},        // the limit still holds
		{1500 * time.Millisecond, time.Minute, 2 + 60 + 5 + 10}, // rounded up
	}
	for _, tt := range tests {
		got := ex.jobDeadline(loop.Invocation{Timeout: tt.timeout, StartupGrace: tt.grace})
		if got != tt.want {
			t.Errorf("timeout %s, grace %s: deadline %ds, want %ds", tt.timeout, tt.grace, got, tt.want)
		}
	}
}

// Run.Labels (the run's shard label) reach the Job and its pod, so a
// sharded operator's cache selects the Jobs of its runs; they cannot
// override the executor's own labels.
func TestBuildJob_carriesTheRunsLabels(t *testing.T) {
	const shard = "sharding.agents.agentrun.dev/key"
	ex, err := New(Config{Client: k8sClient, OperatorImage: "op"}, Run{Namespace: "ns",
		Owner: metav1.OwnerReference{Name: "r", UID: runUID}, Labels: map[string]string{shard: "a", LabelRunUID: "forged"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	j := ex.buildJob(&Tool{Name: "t"}, loop.Invocation{CallID: "t1-c1", Tool: "t"}, "")
	for what, l := range map[string]map[string]string{"job": j.Labels, "pod": j.Spec.Template.Labels} {
		if l[shard] != "a" {
			t.Errorf("%s labels %v lack the shard label", what, l)
		}
		if l[LabelRunUID] != string(runUID) {
			t.Errorf("%s: run-uid label %q, want the run's UID", what, l[LabelRunUID])
		}
	}
}
