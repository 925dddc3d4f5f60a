package evaluation

import (
	"encoding/json"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
)

// transcript is a run's: it looked the customer up, refunded 82.40,
// a refund of 500 was refused by policy, and it answered.
var transcript = []loop.Message{
	{Role: loop.RoleAssistant, Turn: 1, ToolCalls: []loop.ToolCall{{ID: "c1", Name: "lookup_customer", Arguments: json.RawMessage(`{"id":"cus_1"}`)}}},
	{Role: loop.RoleTool, Turn: 1, CallID: "c1", Tool: "lookup_customer", Content: "found", Status: loop.ObsOK},
	{Role: loop.RoleAssistant, Turn: 2, ToolCalls: []loop.ToolCall{
		{ID: "c2", Name: "issue_refund", Arguments: json.RawMessage(`{"amount":82.4,"currency":"EUR"}`)},
		{ID: "c3", Name: "issue_refund", Arguments: json.RawMessage(`{"amount":500,"currency":"EUR"}`)}}},
	{Role: loop.RoleTool, Turn: 2, CallID: "c2", Tool: "issue_refund", Content: "refunded", Status: loop.ObsOK},
	{Role: loop.RoleTool, Turn: 2, CallID: "c3", Tool: "issue_refund", Content: "denied by policy", Status: loop.ObsDenied},
	{Role: loop.RoleAssistant, Turn: 3, Content: "We refunded 82.40."},
}

// Calls that must be made, must not be made, or made a number of times,
// counted over the calls whose arguments satisfy when; the reason names
// the expectation, the tool, the condition and what the run did.
func TestScore_calls(t *testing.T) {
	ok := ended(v1alpha1.OutcomeCompleted, "We refunded 82.40.", "", "0.01", 3)
	cases := []struct {
		name  string
		calls []v1alpha1.CallExpectation
		want  string
	}{
		{"a required call made", []v1alpha1.CallExpectation{{Tool: "lookup_customer"}}, ""},
		{"a required call missing", []v1alpha1.CallExpectation{{Tool: "lookup_customer"}, {Tool: "verify_identity"}},
			"calls[1]: expected at least 1 call to verify_identity, the run made none"},
		{"a forbidden call made, refused or not", []v1alpha1.CallExpectation{{Tool: "close_account", Max: ptr.To[int32](0)}, {Tool: "issue_refund", Max: ptr.To[int32](0)}},
			"calls[1]: expected no call to issue_refund, the run made 2 (the first in turn 2)"},
		{"when on arguments: a forbidden refund over 100", []v1alpha1.CallExpectation{{Tool: "issue_refund", When: "args.amount > 100", Max: ptr.To[int32](0)}},
			"calls[0]: expected no call to issue_refund where args.amount > 100, the run made 1 (the first in turn 2)"},
		{"when on arguments: a required refund in EUR", []v1alpha1.CallExpectation{{Tool: "issue_refund", When: `args.currency == "EUR" && args.amount < 100`}}, ""},
		{"when on arguments holds for none", []v1alpha1.CallExpectation{{Tool: "lookup_customer", When: `args.id == "cus_2"`}},
			`calls[0]: expected at least 1 call to lookup_customer where args.id == "cus_2", the run made none`},
		{"a count within bounds", []v1alpha1.CallExpectation{{Tool: "issue_refund", Min: ptr.To[int32](1), Max: ptr.To[int32](2)}}, ""},
		{"over the most", []v1alpha1.CallExpectation{{Tool: "issue_refund", Max: ptr.To[int32](1)}},
			"calls[0]: expected at most 1 call to issue_refund, the run made 2"},
		{"under the fewest", []v1alpha1.CallExpectation{{Tool: "lookup_customer", Min: ptr.To[int32](2)}},
			"calls[0]: expected at least 2 calls to lookup_customer, the run made 1"},
		{"a condition that does not compile", []v1alpha1.CallExpectation{{Tool: "issue_refund", When: "args.amount > limit"}},
			`calls[0].when "args.amount > limit" does not compile: ERROR: <input>:1:15: undeclared reference to 'limit' (in container '')
 | args.amount > limit
 | ..............^`},
		{"a condition that is not one", []v1alpha1.CallExpectation{{Tool: "issue_refund", When: "args.amount + 1"}},
			`calls[0].when "args.amount + 1" must be a condition (true or false), not int`},
		{"a condition on a field a call lacks", []v1alpha1.CallExpectation{{Tool: "issue_refund", When: "args.reason == 'x'"}},
			`calls[0].when: on the call to issue_refund in turn 2: "args.reason == 'x'" could not be evaluated: no such key: reason`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			exp := v1alpha1.EvaluationExpectation{Calls: tc.calls}
			if diff := cmp.Diff(tc.want, ScoreWithCalls(&exp, ok, CallsOf(transcript))); diff != "" {
				t.Errorf("score (-want +got):\n%s", diff)
			}
		})
	}
}

// A plan step counts as a call to its tool; a condition cannot be
// checked on it, and the reason says why.
func TestScore_callsOfAPlan(t *testing.T) {
	msgs := []loop.Message{
		{Role: loop.RoleAssistant, Turn: 1, ToolCalls: []loop.ToolCall{{ID: "p1", Name: "submit_plan", Arguments: json.RawMessage(`{}`)}}},
		{Role: loop.RoleTool, Turn: 1, CallID: "p1", Tool: "submit_plan", Content: "accepted"},
		{Role: loop.RoleTool, Turn: 2, CallID: "plan-1-s1", Tool: "lookup_customer", Content: "found"},
	}
	ok := ended(v1alpha1.OutcomeCompleted, "done", "", "0", 2)
	for _, tc := range []struct {
		call v1alpha1.CallExpectation
		want string
	}{
		{v1alpha1.CallExpectation{Tool: "lookup_customer"}, ""},
		{v1alpha1.CallExpectation{Tool: "lookup_customer", When: "args.id == 'x'"},
			"calls[0].when: the call to lookup_customer in turn 2 is a plan step, whose arguments the transcript does not hold"},
	} {
		exp := v1alpha1.EvaluationExpectation{Calls: []v1alpha1.CallExpectation{tc.call}}
		if diff := cmp.Diff(tc.want, ScoreWithCalls(&exp, ok, CallsOf(msgs))); diff != "" {
			t.Errorf("%+v: score (-want +got):\n%s", tc.call, diff)
		}
	}
}

// The expectations are checked in the order of their fields: the
// outcome before the calls, the calls before the cost.
func TestScore_callsAfterTheOutputBeforeTheCost(t *testing.T) {
	exp := v1alpha1.EvaluationExpectation{Calls: []v1alpha1.CallExpectation{{Tool: "verify_identity"}}, MaxCostUSD: "0.001"}
	failed := ended(v1alpha1.OutcomeEscalated, "", "", "0.01", 1)
	if got := ScoreWithCalls(&exp, failed, CallsOf(transcript)); got != "outcome: expected Completed, the run ended Escalated (ended Escalated)" {
		t.Errorf("got %q", got)
	}
	done := ended(v1alpha1.OutcomeCompleted, "", "", "0.01", 1)
	if got := ScoreWithCalls(&exp, done, CallsOf(transcript)); got != "calls[0]: expected at least 1 call to verify_identity, the run made none" {
		t.Errorf("got %q", got)
	}
}

func TestCheckCalls(t *testing.T) {
	exp := v1alpha1.EvaluationExpectation{Calls: []v1alpha1.CallExpectation{{Tool: "a", When: "true"}, {Tool: "b", When: "args.x ="}}}
	err := CheckCalls(&exp)
	if err == nil || err.Error()[:len(`calls[1].when "args.x =" does not compile`)] != `calls[1].when "args.x =" does not compile` {
		t.Errorf("CheckCalls = %v, want calls[1].when does not compile", err)
	}
	if err := CheckCalls(&v1alpha1.EvaluationExpectation{Calls: exp.Calls[:1]}); err != nil {
		t.Errorf("CheckCalls of a valid condition = %v", err)
	}
}
