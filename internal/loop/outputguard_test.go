package loop

import (
	"context"
	"strings"
	"testing"
)

const card = "4111 1111 1111 1111"

func cardGuardrail(sev Severity, on ...GuardrailTarget) Guardrail {
	return Guardrail{Name: "pan", Tools: []string{"*"}, Pattern: `\b(?:\d[ -]?){13,19}\b`, Severity: sev, On: on}
}

// transcriptHas reports whether any message of s holds sub.
func transcriptHas(s *State, sub string) bool {
	for _, m := range s.Transcript {
		if strings.Contains(m.Content, sub) {
			return true
		}
	}
	return false
}

// Issue 27, finding 7: guardrails never looked at what comes back, so a
// card number in a tool result went into the next prompt and the
// transcript. A guardrail on results with block redacts it first.
func TestOutputGuardrail_blockRedactsAToolResult(t *testing.T) {
	r := makeRun(t).readTool("lookup").output("lookup", func(Invocation) Result {
		return Result{Output: []byte(`{"customer":"R. Okafor","card":"` + card + `"}`)}
	}).then(calls(call("lookup", `{}`)), answer("The card on file ends in 1111."))
	r.cfg.Guardrails = []Guardrail{cardGuardrail(Block, OnResults)}
	var reqs []*Request
	s := &State{}
	(&Runner{Engine: r.engine(), Model: modelFunc(func(ctx context.Context, req *Request) (*Reply, error) {
		reqs = append(reqs, req)
		return (&Scripted{Entries: r.script}).Complete(ctx, req)
	}), Tools: r.tools}).Run(context.Background(), s)
	expectOutcome(t, s, Completed)
	if transcriptHas(s, card) {
		t.Fatalf("the card number is in the transcript: %+v", s.Transcript)
	}
	if !transcriptHas(s, "[redacted by guardrail pan]") {
		t.Fatalf("the redaction is not marked: %+v", s.Transcript)
	}
	for _, m := range reqs[len(reqs)-1].Messages {
		if strings.Contains(m.Content, card) {
			t.Fatalf("the card number reached the next prompt: %q", m.Content)
		}
	}
}

// A guardrail on results with halt ends the run GuardrailStop, naming
// the call; the result is redacted all the same.
func TestOutputGuardrail_haltOnAResultEndsTheRun(t *testing.T) {
	r := makeRun(t).readTool("lookup").output("lookup", func(Invocation) Result { return Result{Output: []byte(card)} }).
		then(calls(call("lookup", `{}`)), answer("unused"))
	r.cfg.Guardrails = []Guardrail{cardGuardrail(Halt, OnResults)}
	s := r.go_()
	expectOutcome(t, s, GuardrailStop)
	if !strings.Contains(s.Reason, "guardrail pan halted the run: it matched the result of call t1-c1 (lookup)") {
		t.Fatalf("reason = %q", s.Reason)
	}
	if s.Calls[0].Observation == card || strings.Contains(s.Calls[0].Observation, card) {
		t.Fatalf("the halting result was kept: %q", s.Calls[0].Observation)
	}
}

// On the final answer: block redacts what status.answer holds, halt ends
// the run GuardrailStop without an answer.
func TestOutputGuardrail_finalAnswer(t *testing.T) {
	r := makeRun(t).then(answer("Refund sent to card " + card + "."))
	r.cfg.Guardrails = []Guardrail{cardGuardrail(Block, OnAnswer)}
	s := r.go_()
	expectOutcome(t, s, Completed)
	if strings.Contains(s.Answer, card) || !strings.Contains(s.Answer, "[redacted by guardrail pan]") || transcriptHas(s, card) {
		t.Fatalf("answer %q, transcript %+v: want the card redacted", s.Answer, s.Transcript)
	}

	r = makeRun(t).then(answer("Refund sent to card " + card + "."))
	r.cfg.Guardrails = []Guardrail{cardGuardrail(Halt, OnAnswer)}
	s = r.go_()
	expectOutcome(t, s, GuardrailStop)
	if s.Answer != "" || transcriptHas(s, card) || !strings.Contains(s.Reason, "matched the final answer of turn 1") {
		t.Fatalf("answer %q, reason %q: want no answer and the guardrail named", s.Answer, s.Reason)
	}
}

// A guardrail without on watches arguments only, as before: results and
// answers pass untouched.
func TestOutputGuardrail_argumentsOnlyByDefault(t *testing.T) {
	r := makeRun(t).readTool("lookup").output("lookup", func(Invocation) Result { return Result{Output: []byte(card)} }).
		then(calls(call("lookup", `{}`)), answer("Card "+card))
	r.cfg.Guardrails = []Guardrail{cardGuardrail(Halt)}
	s := r.go_()
	expectOutcome(t, s, Completed)
	if !strings.Contains(s.Answer, card) {
		t.Fatalf("a guardrail on arguments changed the answer: %q", s.Answer)
	}
}
