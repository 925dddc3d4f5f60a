// Package promrules checks the chart's alert rules and dashboard.
package promrules

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"text/template"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

const chart = "../../charts/agentrun/"

// promql is Prometheus' own parser with its default functions.
var promql = parser.NewParser(parser.Options{})

// rules renders files/prometheus-rules.yaml as the chart's tpl does, with
// the chart's default values (the file uses only .Values, no Helm
// functions, so Go's text/template renders it as Helm would).
func rules(t *testing.T, values map[string]any) []map[string]any {
	t.Helper()
	src, err := os.ReadFile(chart + "files/prometheus-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.New("rules").Option("missingkey=error").Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, map[string]any{"Values": values}); err != nil {
		t.Fatal(err)
	}
	var rs []map[string]any
	if err := yaml.Unmarshal(out.Bytes(), &rs); err != nil {
		t.Fatalf("the rendered rules are not YAML: %v\n%s", err, out.String())
	}
	return rs
}

func defaults(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(chart + "values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPrometheusRule_everyAlertParsesAndHasItsParts(t *testing.T) {
	rs := rules(t, defaults(t))
	want := map[string]bool{"AgentRunSpendRateHigh": false, "AgentRunAwaitingApprovalTooLong": false,
		"AgentRunToolFailureRateHigh": false, "AgentRunReconcileErrors": false, "AgentRunOperatorError": false,
		"AgentRunOperatorPanics": false}
	for _, r := range rs {
		name, _ := r["alert"].(string)
		expr, _ := r["expr"].(string)
		if _, err := promql.ParseExpr(expr); err != nil {
			t.Errorf("%s: expr %q does not parse: %v", name, expr, err)
		}
		if _, ok := r["for"].(string); !ok {
			t.Errorf("%s has no for", name)
		}
		ann, _ := r["annotations"].(map[string]any)
		if ann["summary"] == nil || ann["description"] == nil {
			t.Errorf("%s lacks a summary or description", name)
		}
		if _, known := want[name]; !known {
			t.Errorf("unexpected alert %q", name)
		}
		want[name] = true
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("alert %s is missing", name)
		}
	}
}

// A threshold that is not a number breaks the expression: the check sees
// the rendered rules, not the template.
func TestPrometheusRule_aBadThresholdFailsTheParse(t *testing.T) {
	v := defaults(t)
	v["metrics"].(map[string]any)["prometheusRule"].(map[string]any)["spendUSDPerHour"] = "ten dollars"
	for _, r := range rules(t, v) {
		if r["alert"] == "AgentRunSpendRateHigh" {
			if _, err := promql.ParseExpr(r["expr"].(string)); err == nil {
				t.Fatalf("%q parsed", r["expr"])
			}
			return
		}
	}
	t.Fatal("no AgentRunSpendRateHigh alert")
}

func TestGrafanaDashboard_everyQueryParses(t *testing.T) {
	raw, err := os.ReadFile(chart + "files/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			// Grafana fills $__rate_interval in before Prometheus sees it.
			expr := strings.ReplaceAll(tg.Expr, "$__rate_interval", "5m")
			if _, err := promql.ParseExpr(expr); err != nil {
				t.Errorf("panel %q: %q does not parse: %v", p.Title, tg.Expr, err)
			}
			n++
		}
	}
	if n < 10 {
		t.Errorf("only %d queries", n)
	}
}
