package promrules

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// promtool builds Prometheus' promtool from this module's tool directive.
// The build tag remove_all_sd leaves out the service-discovery plugins
// (every cloud's SDK), which promtool test rules never uses: a cold build
// takes a third of the CPU it would otherwise.
func promtool(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "promtool")
	cmd := exec.Command("go", "build", "-tags", "remove_all_sd", "-o", bin, "github.com/prometheus/prometheus/cmd/promtool")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building promtool: %v\n%s", err, out)
	}
	return bin
}

// unitTests is the part of promtool's test file this check reads.
type unitTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestPromtool_everyAlertFiresOnItsSeries runs promtool test rules on
// testdata/alerts_test.yaml against the chart's alerts rendered with the
// default thresholds, and fails when an alert has no case there that
// fires or none where it stays quiet.
func TestPromtool_everyAlertFiresOnItsSeries(t *testing.T) {
	rs := rules(t, defaults(t))
	dir := t.TempDir()
	groups, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "agentrun", "rules": rs}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), groups, 0o600); err != nil {
		t.Fatal(err)
	}
	cases, err := os.ReadFile("testdata/alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), cases, 0o600); err != nil {
		t.Fatal(err)
	}

	var ut unitTests
	if err := yaml.Unmarshal(cases, &ut); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range ut.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range rs {
		name, _ := r["alert"].(string)
		if !fires[name] || !quiet[name] {
			t.Errorf("alert %s: testdata/alerts_test.yaml needs a case where it fires (%t) and one where it does not (%t)", name, fires[name], quiet[name])
		}
	}

	cmd := exec.Command(promtool(t), "test", "rules", "alerts_test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("promtool test rules:\n%s", out)
}
