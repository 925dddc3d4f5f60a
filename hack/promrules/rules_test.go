// Package promrules checks the chart's alert rules and dashboard.
package promrules

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
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
	want := map[string]bool{"AgentRunSpendRateHigh": false, "AgentRunAwaitingApprovalTooLong": false, "AgentRunEscalationUnacknowledged": false,
		"AgentRunToolFailureRateHigh": false, "AgentRunReconcileErrors": false, "AgentRunOperatorError": false,
		"AgentRunOperatorPanics": false, "AgentRunStuck": false, "AgentRunLoopsRising": false, "AgentRunToolUnavailable": false,
		"AgentRunBudgetNearLimit": false, "AgentRunOperatorDown": false, "AgentRunWorkqueueBacklog": false}
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

// panel is what the checks read of a dashboard panel.
type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// dashboard reads the chart's Grafana dashboard.
func dashboard(t *testing.T) (d struct {
	Panels []panel `json:"panels"`
}) {
	t.Helper()
	raw, err := os.ReadFile(chart + "files/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestGrafanaDashboard_everyQueryParses(t *testing.T) {
	d := dashboard(t)
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

// exported is every series name the operator exports: the agentrun_
// series docs/observability.md describes (a test in internal/controller
// checks that it describes every one the operator registers), with a
// histogram's _bucket, _sum and _count, and the controller-runtime series
// the alerts and panels use.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	row := regexp.MustCompile("(?m)^\\| (.*?) \\| (counter|gauge|histogram) \\|")
	name := regexp.MustCompile("`(agentrun_[a-z_]+)`")
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		for _, n := range name.FindAllStringSubmatch(m[1], -1) {
			out[n[1]] = true
			if m[2] == "histogram" {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					out[n[1]+suffix] = true
				}
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d series in docs/observability.md's table", len(out))
	}
	for _, n := range []string{"controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total", "workqueue_depth"} {
		out[n] = true
	}
	return out
}

// names lists the series an expression selects.
func names(t *testing.T, expr string) []string {
	t.Helper()
	e, err := promql.ParseExpr(expr)
	if err != nil {
		t.Fatalf("%q does not parse: %v", expr, err)
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs.Name)
		}
		return nil
	})
	return out
}

// Issue 33.6: every alert and every dashboard panel selects series the
// operator exports, so none stays silent for want of its series.
func TestQueries_nameOnlyExportedSeries(t *testing.T) {
	ok := exported(t)
	check := func(where, expr string) {
		for _, n := range names(t, expr) {
			if !ok[n] {
				t.Errorf("%s selects %s, which the operator does not export", where, n)
			}
		}
	}
	for _, r := range rules(t, defaults(t)) {
		check("alert "+r["alert"].(string), r["expr"].(string))
	}
	d := dashboard(t)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			check("panel "+p.Title, strings.ReplaceAll(tg.Expr, "$__rate_interval", "5m"))
		}
	}
	// The check can fail: a misspelled series is caught.
	if n := names(t, "sum(agentrun_run_finished_total)"); ok[n[0]] {
		t.Errorf("%s passes as exported", n[0])
	}
}
