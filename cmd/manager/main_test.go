package main

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
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
