package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/model"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// The production manager cannot be switched to running job tools as local
// processes: the flag does not exist.
func TestFlags_noLocalToolsFlag(t *testing.T) {
	_, _, err := parseFlags([]string{"--local-tools"})
	if err == nil || !strings.Contains(err.Error(), "flag provided but not defined: -local-tools") {
		t.Errorf("--local-tools: err = %v, want an undefined flag", err)
	}
}

func TestFlags_namespacesAndToolResources(t *testing.T) {
	o, _, err := parseFlags([]string{"--watch-namespaces=team-a, team-b", "--tool-max-resources=cpu=2,memory=1Gi",
		"--tool-default-limits=", "--tool-network-policy=false"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.WatchNamespaces, ",") != "team-a,team-b" {
		t.Errorf("namespaces = %v", o.WatchNamespaces)
	}
	if q := o.ToolResources.Max["cpu"]; q.Cmp(resource.MustParse("2")) != 0 || len(o.ToolResources.Max) != 2 {
		t.Errorf("max = %v", o.ToolResources.Max)
	}
	if o.ToolResources.Limits == nil || len(o.ToolResources.Limits) != 0 {
		t.Errorf("an empty --tool-default-limits should set no default limits, got %v", o.ToolResources.Limits)
	}
	if o.ToolResources.Requests != nil {
		t.Errorf("requests not given should take the defaults (nil), got %v", o.ToolResources.Requests)
	}
	if !o.NoToolNetworkPolicy {
		t.Error("--tool-network-policy=false did not turn the policy off")
	}
}

// --shard names the shard this manager drives; a name that could not be a
// label value and a Lease's name is refused before anything starts.
func TestFlags_shard(t *testing.T) {
	o, _, err := parseFlags([]string{"--shard=team-a"})
	if err != nil || o.Shard != "team-a" {
		t.Fatalf("--shard=team-a: shard %q, err %v", o.Shard, err)
	}
	if o, _, err := parseFlags(nil); err != nil || o.Shard != "" {
		t.Fatalf("no --shard: shard %q, err %v", o.Shard, err)
	}
	for _, bad := range []string{"Team_A", "-a", strings.Repeat("a", 64)} {
		if _, _, err := parseFlags([]string{"--shard=" + bad}); err == nil {
			t.Errorf("--shard=%s was accepted", bad)
		}
	}
}

// --model-max-reply-bytes takes bytes or a quantity, and defaults to the
// code's limit, which is also the chart's default.
func TestFlags_modelMaxReplyBytes(t *testing.T) {
	o, _, err := parseFlags(nil)
	if err != nil || o.ModelMaxReplyBytes != model.DefaultMaxReplyBytes {
		t.Fatalf("no flag: %d, %v; want the default %d", o.ModelMaxReplyBytes, err, model.DefaultMaxReplyBytes)
	}
	for arg, want := range map[string]int64{"1Mi": 1 << 20, "1000": 1000, "16M": 16e6} {
		if o, _, err := parseFlags([]string{"--model-max-reply-bytes=" + arg}); err != nil || o.ModelMaxReplyBytes != want {
			t.Errorf("--model-max-reply-bytes=%s: %d, %v; want %d", arg, o.ModelMaxReplyBytes, err, want)
		}
	}
	for _, bad := range []string{"0", "-1", "1.5", "100m", "lots"} {
		if _, _, err := parseFlags([]string{"--model-max-reply-bytes=" + bad}); err == nil {
			t.Errorf("--model-max-reply-bytes=%s was accepted", bad)
		}
	}

	values, err := os.ReadFile(filepath.Join("..", "..", "charts", "agentrun", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		ModelMaxReplyBytes string `json:"modelMaxReplyBytes"`
	}
	if err := yaml.Unmarshal(values, &chart); err != nil {
		t.Fatal(err)
	}
	if q, err := resource.ParseQuantity(chart.ModelMaxReplyBytes); err != nil || q.Value() != model.DefaultMaxReplyBytes {
		t.Errorf("the chart's modelMaxReplyBytes is %q, want the code's default %d", chart.ModelMaxReplyBytes, model.DefaultMaxReplyBytes)
	}
}

// --cloud-identity lends the operator's identity to the providers named,
// and to none by default; a name that is not such a provider is refused.
func TestFlags_cloudIdentity(t *testing.T) {
	if o, _, err := parseFlags(nil); err != nil || o.CloudIdentity != nil {
		t.Fatalf("no flag: %v, %v; want none lent", o.CloudIdentity, err)
	}
	o, _, err := parseFlags([]string{"--cloud-identity=bedrock, azure"})
	if err != nil || !slices.Equal(o.CloudIdentity, []v1alpha1.ModelProvider{v1alpha1.ProviderBedrock, v1alpha1.ProviderAzure}) {
		t.Errorf("--cloud-identity=bedrock, azure: %v, %v", o.CloudIdentity, err)
	}
	for _, bad := range []string{"openai", "bedrock,aws"} {
		if _, _, err := parseFlags([]string{"--cloud-identity=" + bad}); err == nil || !strings.Contains(err.Error(), "is not a provider with a cloud identity") {
			t.Errorf("--cloud-identity=%s: %v", bad, err)
		}
	}
}

// --egress-allow-cidrs and --egress-allow-private set the egress policy of
// model and tool calls; by default nothing is allowed beyond public
// addresses, and a malformed entry is refused.
func TestFlags_egress(t *testing.T) {
	o, _, err := parseFlags(nil)
	if err != nil || len(o.EgressAllow) != 0 || o.EgressAllowPrivate {
		t.Fatalf("defaults: allow %v, private %v, err %v", o.EgressAllow, o.EgressAllowPrivate, err)
	}
	o, _, err = parseFlags([]string{"--egress-allow-cidrs=10.1.0.0/16, 169.254.169.254", "--egress-allow-private"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(o.EgressAllow) != "[10.1.0.0/16 169.254.169.254/32]" || !o.EgressAllowPrivate {
		t.Errorf("allow %v, private %v", o.EgressAllow, o.EgressAllowPrivate)
	}
	if _, _, err := parseFlags([]string{"--egress-allow-cidrs=10.0.0.0/33"}); err == nil {
		t.Error("a malformed CIDR was accepted")
	}
}

// --default-ttl-seconds-after-finished is unset (keep finished runs) unless
// given, takes whole seconds from 0, and refuses anything else.
func TestFlags_defaultTTLAfterFinished(t *testing.T) {
	if o, _, err := parseFlags(nil); err != nil || o.DefaultTTLAfterFinished != nil {
		t.Fatalf("no flag: %v, %v; want unset", o.DefaultTTLAfterFinished, err)
	}
	for arg, want := range map[string]time.Duration{"0": 0, "3600": time.Hour} {
		o, _, err := parseFlags([]string{"--default-ttl-seconds-after-finished=" + arg})
		if err != nil || o.DefaultTTLAfterFinished == nil || *o.DefaultTTLAfterFinished != want {
			t.Errorf("--default-ttl-seconds-after-finished=%s: %v, %v; want %s", arg, o.DefaultTTLAfterFinished, err, want)
		}
	}
	for _, bad := range []string{"-1", "1h", "1.5", ""} {
		if _, _, err := parseFlags([]string{"--default-ttl-seconds-after-finished=" + bad}); err == nil {
			t.Errorf("--default-ttl-seconds-after-finished=%s was accepted", bad)
		}
	}
}

// --tool-run-as-user takes a non-root uid or "assigned" (OpenShift), and
// refuses root and anything else.
func TestFlags_toolRunAsUser(t *testing.T) {
	if o, _, err := parseFlags(nil); err != nil || o.ToolRunAsUser != 0 || o.ToolAssignedUser {
		t.Fatalf("no flag: %d %v, %v; want the job package's default", o.ToolRunAsUser, o.ToolAssignedUser, err)
	}
	if o, _, err := parseFlags([]string{"--tool-run-as-user=1001"}); err != nil || o.ToolRunAsUser != 1001 || o.ToolAssignedUser {
		t.Errorf("1001: %d %v, %v", o.ToolRunAsUser, o.ToolAssignedUser, err)
	}
	if o, _, err := parseFlags([]string{"--tool-run-as-user=assigned"}); err != nil || !o.ToolAssignedUser {
		t.Errorf("assigned: %d %v, %v", o.ToolRunAsUser, o.ToolAssignedUser, err)
	}
	for _, bad := range []string{"0", "-5", "root", ""} {
		if _, _, err := parseFlags([]string{"--tool-run-as-user=" + bad}); err == nil {
			t.Errorf("--tool-run-as-user=%s was accepted", bad)
		}
	}
}

// The archive's DSN comes from the environment by default (a flag shows
// in the process list); --archive-ttl is a duration.
func TestParseFlags_archive(t *testing.T) {
	t.Setenv("AGENTRUN_ARCHIVE_DSN", "host=/run/pg dbname=agentrun")
	o, _, err := parseFlags([]string{"--archive-ttl=2160h"})
	if err != nil || o.ArchiveDSN != "host=/run/pg dbname=agentrun" || o.ArchiveTTL != 2160*time.Hour {
		t.Fatalf("got %q, %s, %v", o.ArchiveDSN, o.ArchiveTTL, err)
	}
	if _, _, err := parseFlags([]string{"--archive-ttl=90"}); err == nil {
		t.Error("--archive-ttl without a unit was accepted")
	}
}
