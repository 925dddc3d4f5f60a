package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// vetOne steps a fresh run of e up to the vetting of one call and returns
// the state (the call is s.Calls[0] unless the run ended).
func vetOne(t *testing.T, e *Engine, c ToolCall) *State {
	t.Helper()
	s := &State{}
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{c}}})
	return s
}

// Ignored arguments leave the loop signature only: a halt guardrail still
// sees them, and the tool never runs.
func TestGuardrail_matchesArgumentsIgnoredByLoopDetection(t *testing.T) {
	r := makeRun(t).readTool("lookup")
	r.cfg.Loop.IgnoreArguments = []string{"note", "request_id"}
	r.cfg.Guardrails = []Guardrail{{Name: "no-cards", Tools: []string{"*"}, Pattern: `\b\d{13,19}\b`, Severity: Halt}}
	r.then(calls(call("lookup", `{"id":"A-1","note":"card 4111111111111111"}`)), answer("done"))
	s := r.go_()
	expectOutcome(t, s, GuardrailStop)
	if len(r.tools.Ran()) != 0 {
		t.Fatalf("the tool ran: %v", r.tools.Ran())
	}
}

// Patterns see the text the tool receives, not JSON escapes: <, > and &
// as written, and ^/$ anchored at a string value's ends.
func TestGuardrail_matchesUnescapedText(t *testing.T) {
	cases := []struct {
		name, pattern, args string
		match               bool
	}{
		{"angle brackets", `<script>`, `{"html":"<p>hi</p><script>alert(1)</script>"}`, true},
		{"ampersands", `&&`, `{"cmd":"ls && rm -rf /"}`, true},
		{"escaped in the JSON the model sent", `<script>`, `{"html":"\u003cscript\u003e"}`, true},
		{"anchored at a string value", `^rm -rf`, `{"cmd":"rm -rf /","dry":false}`, true},
		{"a newline is a newline", `(?m)^DROP TABLE`, `{"sql":"SELECT 1;\nDROP TABLE users"}`, true},
		{"nested values", `^secret-`, `{"a":[{"b":"secret-x"}]}`, true},
		{"key and value in the compact JSON", `"amount":\d{5,}`, `{"amount": 125000, "currency":"EUR"}`, true},
		{"numbers normalised in the compact JSON", `"card":4111111111111111\b`, `{"card":4.111111111111111e15}`, true},
		{"no match", `<script>`, `{"html":"<p>hi</p>"}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := makeRun(t).readTool("post")
			r.cfg.Guardrails = []Guardrail{{Name: "g", Tools: []string{"*"}, Pattern: tc.pattern, Severity: Block}}
			s := vetOne(t, r.engine(), call("post", tc.args))
			blocked := s.Calls[0].Rule == "guardrail:g"
			if blocked != tc.match {
				t.Fatalf("blocked = %v, want %v (call %+v)", blocked, tc.match, s.Calls[0])
			}
		})
	}
}

func TestGuardrail_largeProgramIsRefusedAtBuild(t *testing.T) {
	// 80 bounded repeats: under 1,024 characters, about 160,000 RE2
	// instructions; matching 2 KB of "a" took 32 s.
	pattern := strings.Repeat(`(?:a{1,999})`, 80)
	r := makeRun(t).readTool("a")
	r.cfg.Guardrails = []Guardrail{{Name: "huge", Tools: []string{"*"}, Pattern: pattern}}
	_, err := New(r.cfg)
	if err == nil || !strings.Contains(err.Error(), "guardrails[0] (huge): pattern is too large") {
		t.Fatalf("err = %v", err)
	}
	r.cfg.Guardrails[0].Pattern = `\b\d{13,19}\b`
	if _, err := New(r.cfg); err != nil {
		t.Fatalf("an ordinary pattern was refused: %v", err)
	}
}

// A condition of 10^10 steps over literal lists (which the API server
// accepts: it is a string of about 1,500 characters) is refused when the
// run is built, in well under a second.
func TestPolicy_expensiveConditionIsRefusedAtBuild(t *testing.T) {
	list := make([]string, 100)
	for i := range list {
		list[i] = fmt.Sprint(i)
	}
	l := "[" + strings.Join(list, ",") + "]"
	when := fmt.Sprintf("%s.all(a, %s.all(b, %s.all(c, %s.all(d, %s.all(e, a+b+c+d+e >= 0)))))", l, l, l, l, l)
	r := makeRun(t).readTool("a")
	r.cfg.Policy.Rules = []Rule{
		{Tools: []string{"a"}, When: "args.items.all(i, i.amount < 100)", Decision: Allow},
		{Tools: []string{"a"}, When: when, Decision: Deny},
	}
	start := time.Now()
	_, err := New(r.cfg)
	if err == nil || !strings.Contains(err.Error(), "policy.rules[1].when") || !strings.Contains(err.Error(), "too expensive") {
		t.Fatalf("err = %v", err)
	}
	t.Logf("refused in %s: %v", time.Since(start), err)

	// Nested loops over the arguments are refused too.
	r.cfg.Policy.Rules[1].When = "args.items.all(i, args.items.all(j, i != j || i == j))"
	if _, err := New(r.cfg); err == nil || !strings.Contains(err.Error(), "policy.rules[1].when") {
		t.Fatalf("err = %v", err)
	}
}

// A condition that passes the estimate but runs past the cost limit on
// larger arguments than the estimate assumed is cut off: the call goes to
// a person and the reason names the limit.
func TestPolicy_conditionCutOffAtTheCostLimitAsks(t *testing.T) {
	r := makeRun(t).readTool("a")
	r.cfg.Policy.Rules = []Rule{{Tools: []string{"a"}, When: "args.xs.all(x, x >= 0 && x < 10)", Decision: Allow}}
	// The step's deadline is not what this test is about: on a loaded
	// machine decoding and evaluating take seconds.
	r.cfg.VetTimeout = 10 * time.Minute
	e := r.engine()
	args := `{"xs":[` + strings.TrimSuffix(strings.Repeat("1,", 15_000), ",") + `]}`
	start := time.Now()
	s := vetOne(t, e, call("a", args))
	took := time.Since(start)
	c := s.Calls[0]
	if c.Verdict != Ask || !strings.Contains(c.Reason, "cost limit") {
		t.Fatalf("call = %s %s %q", c.Verdict, c.Rule, c.Reason)
	}
	t.Logf("cut off after %s (decoding 15,000 numbers included)", took)
}

func TestPolicy_conditionStopsWhenTheContextIsDone(t *testing.T) {
	r := makeRun(t).readTool("a")
	r.cfg.Policy.Rules = []Rule{{Tools: []string{"a"}, When: "args.xs.all(x, x >= 0)", Decision: Allow}}
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	args := `{"xs":[` + strings.TrimSuffix(strings.Repeat("1,", 1000), ",") + `]}`
	e.Step(s, Input{Context: ctx, Reply: &Reply{ToolCalls: []ToolCall{call("a", args)}}})
	c := s.Calls[0]
	if c.Verdict != Ask || !strings.Contains(c.Reason, "interrupted") {
		t.Fatalf("call = %s %s %q", c.Verdict, c.Rule, c.Reason)
	}
}

// Numbers beyond 1e±1000 are refused before the schema validator (which
// computes with exact rationals) or CEL see them.
func TestVetting_hugeNumbersAreRefused(t *testing.T) {
	r := makeRun(t)
	r.cfg.Tools = []ToolSpec{{Name: "pay", Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":0}}}`)}}
	e := r.engine()
	for _, args := range []string{`{"n":1e999999}`, `{"n":1e-1001}`, `{"n":[1, -2.5E+1001]}`} {
		s := vetOne(t, e, call("pay", args))
		c := s.Calls[0]
		if c.ObsStatus != ObsInvalid || !strings.Contains(c.Observation, "out of range") {
			t.Fatalf("%s: call = %s %q", args, c.ObsStatus, c.Observation)
		}
	}
	s := vetOne(t, e, call("pay", `{"n":1e3}`))
	if c := s.Calls[0]; c.Verdict != Allow {
		t.Fatalf("1e3: call = %s %q", c.Verdict, c.Observation)
	}
}

// A tool's parameters may only refer inside themselves: no file, no URL,
// no other tool's schema; the error never shows a file's content.
func TestSchema_referencesOutsideTheSchemaAreRefused(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(secret, []byte(`{"type":"string","description":"TOPSECRET-42"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{"type":"string"}`))
	}))
	defer srv.Close()
	for _, ref := range []string{"file://" + secret, "file:///etc/passwd", srv.URL + "/schema.json", "mem://tools/other"} {
		t.Run(ref, func(t *testing.T) {
			r := makeRun(t).readTool("other")
			r.cfg.Tools = append(r.cfg.Tools, ToolSpec{Name: "read", Parameters: json.RawMessage(
				fmt.Sprintf(`{"type":"object","properties":{"path":{"$ref":%q}}}`, ref))})
			_, err := New(r.cfg)
			if err == nil || !strings.Contains(err.Error(), "tool read") || !strings.Contains(err.Error(), "only references inside the same schema") {
				t.Fatalf("err = %v", err)
			}
			if strings.Contains(err.Error(), "TOPSECRET") || strings.Contains(err.Error(), "root:") {
				t.Fatalf("the error shows a file's content: %v", err)
			}
		})
	}
	if hits.Load() != 0 {
		t.Fatalf("the schema URL was fetched %d times", hits.Load())
	}

	// References inside the schema work.
	r := makeRun(t)
	r.cfg.Tools = []ToolSpec{{Name: "read", Parameters: json.RawMessage(
		`{"type":"object","$defs":{"p":{"type":"string"}},"properties":{"path":{"$ref":"#/$defs/p"}}}`)}}
	e := r.engine()
	if c := vetOne(t, e, call("read", `{"path":3}`)).Calls[0]; c.ObsStatus != ObsInvalid {
		t.Fatalf("a local reference was not applied: %+v", c)
	}
	if c := vetOne(t, e, call("read", `{"path":"/tmp/x"}`)).Calls[0]; c.Verdict != Allow {
		t.Fatalf("call = %+v", c)
	}
}

// A rule with Mutating matches only tools that mutate (a platform's "every
// change asks"), and a rule's Label names it in the verdict.
func TestVet_mutatingRulesAndLabels(t *testing.T) {
	r := makeRun(t).readTool("lookup").tool("restock", true, true)
	r.cfg.Policy.Rules = []Rule{
		{Tools: []string{"*"}, Mutating: true, Decision: Ask, Reason: "every change is reviewed", Label: "AgentRunPolicy/p.rules[0]"},
		{Tools: []string{"*"}, Decision: Allow},
	}
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", `{}`), call("restock", `{}`)}}})
	if len(s.Calls) != 2 {
		t.Fatalf("%d calls", len(s.Calls))
	}
	if c := s.Calls[0]; c.Verdict != Allow || c.Rule != "policy.rules[1]" {
		t.Fatalf("the read: %s by %s; want allow by policy.rules[1]", c.Verdict, c.Rule)
	}
	if c := s.Calls[1]; c.Verdict != Ask || c.Rule != "AgentRunPolicy/p.rules[0]" || c.Reason != "every change is reviewed" {
		t.Fatalf("the write: %s by %s (%s); want ask by the labelled rule", c.Verdict, c.Rule, c.Reason)
	}
}
