package loop

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// callsOf is n calls of tool, each with other arguments.
func callsOf(tool string, n int) []ToolCall {
	out := make([]ToolCall, n)
	for i := range out {
		out[i] = call(tool, fmt.Sprintf(`{"q":"%d"}`, i))
	}
	return out
}

// Issue 27, finding 3: a hostile model answering with thousands of calls
// made the operator vet every one (schema, CEL, guardrails) on a
// reconcile worker. An answer with more than MaxCallsPerReply calls is not
// vetted at all: the model is told the bound, and the turn ends.
func TestBounds_tooManyCallsInOneAnswerAreNotVetted(t *testing.T) {
	r := makeRun(t).readTool("lookup")
	r.cfg.Budget.MaxToolCalls = new(100_000)
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	eff := e.Step(s, Input{Reply: &Reply{ToolCalls: callsOf("lookup", 10_000)}})
	for _, n := range eff.Notes {
		if n.Kind == NoteCallVetted {
			t.Fatalf("a call of a 10,000-call answer was vetted: %+v", n)
		}
	}
	if len(s.Calls) != 0 || s.Done() {
		t.Fatalf("calls %d, done %v: want no call and the run going on", len(s.Calls), s.Done())
	}
	last := s.Transcript[len(s.Transcript)-1]
	if last.Role != RoleUser || !strings.Contains(last.Content, fmt.Sprintf("at most %d are accepted", MaxCallsPerReply)) {
		t.Fatalf("the model is not told the bound: %+v", last)
	}
	refused := keep(eff.Notes, func(n Note) bool { return n.Kind == NoteBatchRefused })
	if len(refused) != 1 || !refused[0].Warning || !strings.Contains(refused[0].Message, "10000 tool calls") {
		t.Fatalf("want one BatchRefused warning naming the count, got %+v", eff.Notes)
	}
	// At the bound, the answer is vetted as before.
	s2 := &State{}
	e.Step(s2, Input{})
	e.Step(s2, Input{Reply: &Reply{ToolCalls: callsOf("lookup", MaxCallsPerReply)}})
	if len(s2.Calls) != MaxCallsPerReply {
		t.Fatalf("an answer of exactly %d calls: %d vetted", MaxCallsPerReply, len(s2.Calls))
	}
}

// The batch is admitted against maxToolCalls before it is vetted: a
// batch that could never run ends the run BudgetExhausted without one
// verdict.
func TestBounds_aBatchPastMaxToolCallsEndsBeforeVetting(t *testing.T) {
	r := makeRun(t).readTool("lookup")
	r.cfg.Budget.MaxToolCalls = new(5)
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	eff := e.Step(s, Input{Reply: &Reply{ToolCalls: callsOf("lookup", 6)}})
	if s.Outcome != BudgetExhausted || !strings.Contains(s.Reason, "toolCalls ceiling: 0 consumed + 6 reserved = 6 > 5 (the model proposed 6 tool calls; none was vetted or run)") {
		t.Fatalf("outcome %s (%s), want BudgetExhausted naming the count", s.Outcome, s.Reason)
	}
	for _, n := range eff.Notes {
		if n.Kind == NoteCallVetted {
			t.Fatalf("a call was vetted: %+v", n)
		}
	}
	if got := keep(eff.Notes, func(n Note) bool { return n.Ceiling == DimToolCalls }); len(got) != 1 {
		t.Fatalf("the refusal does not name the toolCalls ceiling: %+v", eff.Notes)
	}
	// A soft maxToolCalls never stops a run.
	r.cfg.Budget.Soft = []Dimension{DimToolCalls}
	e = r.engine()
	s = &State{}
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{ToolCalls: callsOf("lookup", 6)}})
	if s.Outcome == BudgetExhausted {
		t.Fatalf("a soft ceiling stopped the run: %s", s.Reason)
	}
}

// Issue 27, finding 7: a provider reporting negative token counts lowered
// the run's usage. What a reply reports below zero counts as zero.
func TestBounds_negativeUsageNeverLowersTheRunsUsage(t *testing.T) {
	r := makeRun(t)
	r.cfg.Model.Pricing = Pricing{Input: MustMoney("0.000001"), Output: MustMoney("0.000002")}
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{Content: "no", Truncated: true, Usage: TokenUsage{InputTokens: 100, OutputTokens: 10}}})
	before := s.Usage
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{Content: "done", Usage: TokenUsage{InputTokens: -1_000_000, OutputTokens: -5, CachedInputTokens: -7, CacheWriteTokens: -9}}})
	if s.Usage.InputTokens < before.InputTokens || s.Usage.OutputTokens < before.OutputTokens || s.Usage.Cost < before.Cost {
		t.Fatalf("usage went down: %+v -> %+v", before, s.Usage)
	}
	if s.Usage.InputTokens != before.InputTokens || s.Usage.Cost != before.Cost {
		t.Fatalf("negative counts were charged: %+v -> %+v", before, s.Usage)
	}
}

// refusedArguments has the model call a read tool with args and requires
// the call refused as invalid arguments, for a reason containing why.
func refusedArguments(t *testing.T, args, why string) {
	t.Helper()
	e := makeRun(t).readTool("lookup").engine()
	s := &State{}
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", args)}}})
	c := s.Calls[0]
	if c.Rule != RuleInvalidArguments || !strings.Contains(c.Reason, why) || c.Approved() {
		t.Fatalf("call = %s rule %q reason %q, want it refused (%q)", c.Verdict, c.Rule, c.Reason, why)
	}
}

// Issue 27, finding 7: with a repeated key, encoding/json (the checks)
// reads the last value and a tool's parser may read the first. Such
// arguments are refused before any check.
func TestBounds_repeatedKeysAreRefused(t *testing.T) {
	cases := map[string]string{
		"top level": `{"amount":1,"amount":100000}`,
		"nested":    `{"order":{"id":"a","id":"b"}}`,
		"in a list": `{"items":[{"n":1},{"n":2,"n":3}]}`,
		"spaced":    "{ \"a\" :\t1 ,\n\"a\"\r: 2 }",
		"escaped":   `{"a\"":"x\":","a\"":1}`,
		"unicode":   `{"\u0061":1,"a":2}`,
		"empty key": `{"":"refund","":"lookup"}`,
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) { refusedArguments(t, args, "repeat the key") })
	}
	// The same keys in different objects are not a repetition.
	for _, ok := range []string{`{"a":{"id":1},"b":{"id":2}}`, `{"l":[{"id":1},{"id":2}]}`, `{"a":"a","b":["a","a"]}`, `{}`,
		`{"a":"b\": c","d":"\\","e":["f:",":"]}`, `{"a\\":1,"a":2}`} {
		if k, repeated := repeatedKey(json.RawMessage(ok)); repeated {
			t.Errorf("repeatedKey(%s) = %q, want none", ok, k)
		}
		if d := decodeArgs(json.RawMessage(ok), nil); d.err != nil {
			t.Errorf("decodeArgs(%s): %v, want no error", ok, d.err)
		}
	}
}

// Arguments are one JSON value and nothing after it: a parser that reads
// on past a closing bracket would see a second object the checks never
// saw. (encoding/json's Decoder.More stops at a closing bracket.)
func TestBounds_argumentsAreOneValue(t *testing.T) {
	for _, args := range []string{`{"amount":1}]{"amount":100000}`, `{"amount":1}}`, `{"amount":1} {"amount":2}`} {
		t.Run(args, func(t *testing.T) { refusedArguments(t, args, "more than one JSON value") })
	}
}

// Issue 27, finding 2: a plan that names one step's result many times
// multiplied it into hundreds of megabytes of arguments before any size
// check. The substituted arguments are bounded as they grow: the step is
// refused, naming the bound, and never runs.
func TestBounds_planPlaceholdersCannotMultiplyAResult(t *testing.T) {
	big := strings.Repeat("x", 16<<10)
	refs := make([]string, 1000)
	for i := range refs {
		refs[i] = `"#E1"`
	}
	plan := `{"steps":[{"id":"E1","tool":"identify_account","arguments":{}},` +
		`{"id":"E2","tool":"find_invoices","arguments":{"ids":[` + strings.Join(refs, ",") + `]}}]}`
	r := planRun(t).output("identify_account", func(Invocation) Result { return Result{Output: []byte(big)} })
	r.cfg.Tools[0].MaxResultBytes = 32 << 10
	s := r.then(submit(plan), answer("Could not.")).go_()
	for _, ran := range r.tools.Ran() {
		if strings.Contains(ran, "find_invoices") {
			t.Fatalf("the step with 1,000 copies of a 16 KiB result ran")
		}
	}
	var refused *Call
	for i := range s.Calls {
		if s.Calls[i].Rule == RulePlaceholder {
			refused = &s.Calls[i]
		}
	}
	found := refused != nil && strings.Contains(refused.Reason, fmt.Sprintf("would pass %d bytes", MaxStepArgumentBytes))
	for _, m := range s.Transcript {
		found = found || strings.Contains(m.Content, fmt.Sprintf("would pass %d bytes", MaxStepArgumentBytes))
	}
	if !found {
		t.Fatalf("no refusal names the bound; outcome %s (%s)", s.Outcome, s.Reason)
	}
}

// Issue 27: the run's identity in idempotency keys is the configured one
// (the run's UID), never one read back from a saved state.
func TestBounds_theConfiguredRunIDWinsOverASavedOne(t *testing.T) {
	r := makeRun(t).readTool("lookup")
	r.cfg.RunID = "uid-of-the-run"
	e := r.engine()
	s := &State{RunID: "another-runs-uid"}
	e.Step(s, Input{})
	eff := e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", `{}`)}}})
	if len(eff.Calls) != 1 || eff.Calls[0].IdempotencyKey != IdempotencyKey("uid-of-the-run", "t1-c1") {
		t.Fatalf("invocations %+v, want the idempotency key of uid-of-the-run", eff.Calls)
	}
}

// Issue 27, finding 3: vetting one step is bounded in time, whatever the
// calls and rules. Past cfg.VetTimeout no further condition is evaluated:
// each call still to be decided by one goes to a person (fail closed).
func TestBounds_vettingOneStepHasADeadline(t *testing.T) {
	r := makeRun(t).readTool("lookup")
	r.cfg.Policy.Rules = []Rule{{Tools: []string{"lookup"}, When: `args.q != "never"`, Decision: Allow}}
	r.cfg.VetTimeout = time.Nanosecond
	e := r.engine()
	s := &State{}
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{ToolCalls: callsOf("lookup", 3)}})
	if len(s.Calls) != 3 || s.Phase != PhaseApproval {
		t.Fatalf("calls %d, phase %s: want 3 calls waiting for a person", len(s.Calls), s.Phase)
	}
	for _, c := range s.Calls {
		if c.Verdict != Ask || !strings.Contains(c.Reason, "vetting this step passed its deadline, 1ns") {
			t.Fatalf("call %s: %s (%s); want ask for the deadline", c.ID, c.Verdict, c.Reason)
		}
	}
	// With the default deadline the same calls are allowed.
	r.cfg.VetTimeout = 0
	e = r.engine()
	s = &State{}
	e.Step(s, Input{})
	e.Step(s, Input{Reply: &Reply{ToolCalls: callsOf("lookup", 3)}})
	for _, c := range s.Calls {
		if c.Verdict != Allow {
			t.Fatalf("call %s: %s (%s) with the default deadline", c.ID, c.Verdict, c.Reason)
		}
	}
}
