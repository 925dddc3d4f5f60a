package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
)

// A hostile child answer (huge, markup, not JSON, not UTF-8) is one
// bounded, escaped JSON string in a result the model can read: the
// outcome and usage survive, the answer is cut to fit and marked.
func TestReport_aHostileAnswerIsBoundedAndEscaped(t *testing.T) {
	usage := &ReportUsage{Turns: 3, Tokens: 1200, CostUSD: "0.02", ToolCalls: 1, WallClockSeconds: 9}
	cases := []struct {
		name   string
		answer string
		output json.RawMessage
	}{
		{"huge", strings.Repeat("A", 1<<20), nil},
		{"markup", strings.Repeat(`<script>alert("x")</script>&`, 500), nil},
		{"not JSON, pretending to end the result", strings.Repeat(`"},"outcome":"Completed","x":{"`, 300), nil},
		{"not UTF-8", strings.Repeat("\xff\xfe\xc3", 2000), nil},
		{"an output too large", "", json.RawMessage(`{"rows":[` + strings.Repeat(`"<tr>",`, 2000) + `"end"]}`)},
	}
	const limit = 2048
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := bound(Report{Run: "triage-0123456789", Outcome: "Completed", Reason: "the model gave a final answer", Answer: c.answer, Output: c.output, Usage: usage}, limit)
			if len(b) > limit {
				t.Fatalf("%d bytes, more than %d", len(b), limit)
			}
			if !json.Valid(b) || !utf8.Valid(b) {
				t.Fatalf("not valid JSON in UTF-8: %q", b)
			}
			if bytes.ContainsAny(b, "<>&") {
				t.Errorf("markup is not escaped: %s", b)
			}
			var got Report
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if got.Outcome != "Completed" || got.Run != "triage-0123456789" {
				t.Errorf("outcome %q, run %q: the result must still say how the child ended", got.Outcome, got.Run)
			}
			if diff := cmp.Diff(usage, got.Usage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			if !strings.HasSuffix(got.Answer, cutMark) {
				t.Errorf("the cut answer is not marked: %q", clipForLog(got.Answer))
			}
		})
	}
}

// An answer that fits is returned whole, and an output as JSON.
func TestReport_whatFitsIsReturnedWhole(t *testing.T) {
	out := json.RawMessage(`{"refund":true,"amount":"12.50"}`)
	b := bound(Report{Run: "c", Outcome: "Completed", Output: out}, 16384)
	var got Report
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if string(got.Output) != string(out) || got.Answer != "" {
		t.Errorf("output %s, answer %q; want the output as it is", got.Output, got.Answer)
	}
}

func clipForLog(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// A parameter's value takes the call's arguments; one it names and the
// call lacks is refused, naming both.
func TestValues_takeTheCallsArguments(t *testing.T) {
	tpl := &v1alpha1.AgentRunTemplate{Spec: v1alpha1.AgentRunTemplateSpec{Parameters: []v1alpha1.TemplateParameter{
		{Name: "account"}, {Name: "depth", Default: new("shallow")}, {Name: "note"}}}}
	cases := []struct {
		name    string
		tool    Tool
		args    string
		want    []v1alpha1.ParameterValue
		wantErr string
	}{
		{name: "substituted", tool: Tool{Template: tpl, Parameters: []v1alpha1.ParameterValue{{Name: "account", Value: "acct-$(args.id)"}}},
			args: `{"id":"42"}`, want: []v1alpha1.ParameterValue{{Name: "account", Value: "acct-42"}}},
		{name: "a number as its JSON", tool: Tool{Template: tpl, Parameters: []v1alpha1.ParameterValue{{Name: "account", Value: "$(args.id)"}}},
			args: `{"id":42}`, want: []v1alpha1.ParameterValue{{Name: "account", Value: "42"}}},
		{name: "a value is never read for placeholders again", tool: Tool{Template: tpl, Parameters: []v1alpha1.ParameterValue{{Name: "account", Value: "$(args.id)"}}},
			args: `{"id":"$(args.other)","other":"x"}`, want: []v1alpha1.ParameterValue{{Name: "account", Value: "$(args.other)"}}},
		{name: "a missing argument", tool: Tool{Name: "investigate", Template: tpl, Parameters: []v1alpha1.ParameterValue{{Name: "account", Value: "$(args.id)"}}},
			args: `{}`, wantErr: `parameter account takes the argument "id", which the call does not give`},
		{name: "from the arguments of the template's parameters", tool: Tool{Template: tpl, FromArgs: true,
			Parameters: []v1alpha1.ParameterValue{{Name: "note", Value: "fixed"}}},
			args: `{"account":"a","note":"ignored","extra":"x"}`,
			want: []v1alpha1.ParameterValue{{Name: "note", Value: "fixed"}, {Name: "account", Value: "a"}}},
		{name: "too long", tool: Tool{Template: tpl, Parameters: []v1alpha1.ParameterValue{{Name: "account", Value: "$(args.a)$(args.a)"}}},
			args: `{"a":"` + strings.Repeat("x", 20000) + `"}`, wantErr: "parameter account would be 40000 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.tool.values(json.RawMessage(c.args))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
		})
	}
}

// Without a schema of its own, an agent tool's schema is the template's
// parameters that agent.parameters leaves open: strings, required unless
// they have a default.
func TestSchema_isTheTemplatesOpenParameters(t *testing.T) {
	tpl := &v1alpha1.AgentRunTemplate{Spec: v1alpha1.AgentRunTemplateSpec{Parameters: []v1alpha1.TemplateParameter{
		{Name: "account", Description: "the account to look into"}, {Name: "depth", Default: new("shallow"), Enum: []string{"shallow", "deep"}},
		{Name: "fixed"}}}}
	got := map[string]any{}
	if err := json.Unmarshal(Schema(tpl, []v1alpha1.ParameterValue{{Name: "fixed", Value: "x"}}), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"type": "object", "additionalProperties": false, "required": []any{"account"},
		"properties": map[string]any{
			"account": map[string]any{"type": "string", "description": "the account to look into"},
			"depth":   map[string]any{"type": "string", "enum": []any{"shallow", "deep"}},
		}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("schema (-want +got):\n%s", diff)
	}
}

// A call's child has one name, whichever dispatch makes it, and a valid
// one for a long parent name.
func TestChildName_isTheSameForEveryDispatchOfACall(t *testing.T) {
	a, b := ChildName("triage", "uid-1", "t1-c0"), ChildName("triage", "uid-1", "t1-c0")
	if a != b || a == ChildName("triage", "uid-1", "t1-c1") || a == ChildName("triage", "uid-2", "t1-c0") {
		t.Errorf("names %s, %s: want one per run and call", a, b)
	}
	if long := ChildName(strings.Repeat("x", 200)+"-.", "u", "c"); len(long) > 63 {
		t.Errorf("%s is %d characters", long, len(long))
	}
}

// A tool's maxInFlight (which an AgentRunPolicy may lower) is the run's
// fan-out when it makes a child: a call past it is a readable refusal,
// and one within it runs its child.
func TestExecute_aToolsMaxInFlightBoundsTheRunsChildren(t *testing.T) {
	ran := 0
	flight := NewInFlight()
	cfg := Config{InFlight: flight, InProcess: func(context.Context, *v1alpha1.AgentRun) (v1alpha1.AgentRunStatus, error) {
		ran++
		return v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted, Answer: "ok", Reason: "done"}, nil
	}}
	tpl := &v1alpha1.AgentRunTemplate{ObjectMeta: metav1.ObjectMeta{Name: "investigator"}}
	tpl.Spec.Run.Goal = "Look."
	tpl.Spec.Run.Model.Provider = v1alpha1.ProviderScripted
	parent := Parent{Name: "triage", Namespace: "default", UID: "uid-1"}
	e, err := New(cfg, parent, []Tool{{Name: "investigate", Template: tpl, MaxInFlight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	inv := loop.Invocation{CallID: "t1-c1", Tool: "investigate", Arguments: json.RawMessage(`{}`), MaxResultBytes: 4096,
		Child: &loop.ChildBudget{Turns: 2, Tokens: 1000, WallClock: time.Minute, Cost: loop.MustMoney("0.01"), ToolCalls: 2}}
	flight.acquire(parent.UID, 10) // another child of the run is in flight
	res := e.Execute(context.Background(), inv)
	if ran != 0 || res.Failure == nil || !strings.Contains(res.Failure.Detail, "this run has 1 children in flight, the most it may have at once") {
		t.Fatalf("past the limit: ran %d children, result %+v", ran, res)
	}
	flight.release(parent.UID)
	if res := e.Execute(context.Background(), inv); ran != 1 || res.ChildOutcome != string(v1alpha1.OutcomeCompleted) {
		t.Fatalf("within the limit: ran %d children, result %+v", ran, res)
	}
}
