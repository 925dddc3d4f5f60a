package loop

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestVetting(t *testing.T) {
	r := makeRun(t).readTool("lookup").tool("issue_refund", true, false).tool("note", true, true)
	r.cfg.Policy = Policy{Default: Allow, Rules: []Rule{
		{Tools: []string{"issue_refund"}, When: "args.amount_minor > 5000", Decision: Ask, Reason: "Refunds above 50.00 need a person."},
		{Tools: []string{"issue_refund"}, Decision: Allow},
	}}
	r.cfg.Guardrails = []Guardrail{{Name: "no-cards", Tools: []string{"*"}, Pattern: `\b\d{13,19}\b`, Severity: Block, Reason: "Card numbers must not leave the cluster."}}
	e := r.engine()
	cases := []struct {
		name     string
		call     ToolCall
		grants   []string
		verdict  Decision
		rule     string
		obsState CallState
	}{
		{"read allowed by default", call("lookup", `{"q":"x"}`), nil, Allow, "policy.default", CallProposed},
		{"guardrail block comes before policy", call("lookup", `{"card":"4111111111111111"}`), nil, Blocked, "guardrail:no-cards", CallDone},
		{"CEL condition true asks", call("issue_refund", `{"amount_minor":8240}`), nil, Ask, "policy.rules[0]", CallProposed},
		{"CEL condition false falls through, then irreversible tightens allow to ask", call("issue_refund", `{"amount_minor":100}`), nil, Ask, "tool.irreversible", CallProposed},
		{"a grant waives the irreversible ask", call("issue_refund", `{"amount_minor":100}`), []string{"issue_refund"}, Allow, "policy.grants", CallProposed},
		{"a reversible mutation is allowed", call("note", `{}`), nil, Allow, "policy.default", CallProposed},
		{"unknown tool", call("nope", `{}`), nil, Deny, "unknown-tool", CallDone},
		{"arguments not an object", call("lookup", `[1,2]`), nil, Deny, "invalid-arguments", CallDone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.cfg.Policy.Grants = tc.grants
			s := &State{}
			e.Step(s, Input{})
			e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{tc.call}}})
			c := s.Calls[0]
			if c.Verdict != tc.verdict || c.Rule != tc.rule || (c.State == CallDone) != (tc.obsState == CallDone) {
				t.Fatalf("call = verdict %s rule %s state %s, want %s %s %s (reason %q, obs %q)",
					c.Verdict, c.Rule, c.State, tc.verdict, tc.rule, tc.obsState, c.Reason, c.Observation)
			}
		})
	}
}

func TestVetting_schemaViolationIsAnObservation(t *testing.T) {
	r := makeRun(t)
	r.cfg.Tools = []ToolSpec{{Name: "identify_account", Parameters: json.RawMessage(`{"type":"object","properties":{"email":{"type":"string"}},"required":["email"]}`)}}
	r.then(calls(call("identify_account", `{"mail":"x"}`)), answer("gave up"))
	s := r.go_()
	expectOutcome(t, s, Completed)
	obs := toolMessages(s)[0]
	if obs.Status != ObsInvalid || !strings.Contains(obs.Content, "email") {
		t.Fatalf("observation = %+v", obs)
	}
	if len(r.tools.Ran()) != 0 {
		t.Fatalf("an invalid call ran")
	}
}

func TestVetting_badCELIsAConfigError(t *testing.T) {
	r := makeRun(t).readTool("a")
	r.cfg.Policy.Rules = []Rule{{Tools: []string{"a"}, When: "args.x >", Decision: Deny}}
	if _, err := New(r.cfg); err == nil || !strings.Contains(err.Error(), "policy.rules[0].when") {
		t.Fatalf("err = %v", err)
	}
}
