package loop

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// refundSchema is the typed output of the tests: an object with a
// decision among two and an amount.
const refundSchema = `{"type":"object","properties":{"decision":{"enum":["refund","deny"]},"amountMinor":{"type":"integer","minimum":0}},` +
	`"required":["decision","amountMinor"],"additionalProperties":false}`

func (r *run) schema(s string) *run { r.cfg.Output = &OutputSpec{Schema: json.RawMessage(s)}; return r }

// Issue 45, item 1: an answer that does not validate is not the final
// answer. It costs its turn, the model reads the validator's message, and
// the next answer that validates completes the run with its value.
func TestOutput_anAnswerThatDoesNotValidateCostsATurnThenAValidOneCompletes(t *testing.T) {
	s, seen := makeRun(t).schema(refundSchema).then(
		answer(`{"decision":"maybe","amountMinor":100}`),
		answer("  {\"decision\": \"refund\",\n \"amountMinor\": 1250}\n"),
	).goSeen()
	expectOutcome(t, s, Completed)
	if s.Usage.Turns != 2 {
		t.Errorf("turns = %d, want 2: the answer that did not validate costs its turn", s.Usage.Turns)
	}
	text := "{\"decision\": \"refund\",\n \"amountMinor\": 1250}"
	sum := sha256.Sum256([]byte(text))
	want := &Output{Value: json.RawMessage(`{"decision":"refund","amountMinor":1250}`), Digest: "sha256:" + hex.EncodeToString(sum[:]), Bytes: len(text)}
	if d := cmp.Diff(want, s.Output); d != "" {
		t.Errorf("output (-want +got):\n%s", d)
	}
	if s.OutputRejected != nil {
		t.Errorf("a rejection is kept after a valid answer: %+v", s.OutputRejected)
	}
	// The second request carries the first answer and the validator's
	// message about it.
	if len(seen) != 2 {
		t.Fatalf("%d requests, want 2", len(seen))
	}
	last := seen[1].Messages[len(seen[1].Messages)-1]
	if last.Role != RoleUser || !strings.Contains(last.Content, "was not accepted") || !strings.Contains(last.Content, "at /decision") {
		t.Errorf("the model is not told why its answer was refused: %+v", last)
	}
	if !strings.Contains(requestText(seen[1]), `"decision":"maybe"`) {
		t.Error("the refused answer is not in the next request")
	}
	// Every request carries the schema, for providers that constrain
	// the answer, and the system prompt asks for it.
	for i, req := range seen {
		if string(req.Output) != refundSchema || !strings.Contains(req.System, outputInstructions+refundSchema) {
			t.Errorf("request %d: output %s, system %q: want the schema in both", i, req.Output, req.System)
		}
	}
}

// Issue 45, item 1: when the turns run out on answers that do not
// validate, the run ends as any run whose turns ran out, and the reason
// says the last answer did not validate and why.
func TestOutput_turnsRunningOutOnInvalidAnswersEndBudgetExhaustedReadably(t *testing.T) {
	s := makeRun(t).maxTurns(2).schema(refundSchema).then(
		answer(`The refund is 12.50.`),
		answer(`{"decision":"refund"}`),
	).go_()
	expectOutcome(t, s, BudgetExhausted)
	for _, w := range []string{"turns ceiling", "the last answer (turn 2) did not validate against spec.output.schema", "amountMinor"} {
		if !strings.Contains(s.Reason, w) {
			t.Errorf("reason %q does not say %q", s.Reason, w)
		}
	}
	if s.Output != nil {
		t.Errorf("output %+v: no answer validated", s.Output)
	}
}

// A hostile answer: not JSON, JSON in markup, JSON after prose, or
// JSON too large for status. What the model and the notes read is
// bounded; a valid answer over MaxOutputBytes is kept by digest only.
func TestOutput_hostileAnswersAreBounded(t *testing.T) {
	open := `{"type":"object","properties":{"note":{"type":"string"}}}`
	huge := `{"note":"` + strings.Repeat("<script>alert(1)</script>", 2000) + `"}`
	for _, tc := range []struct {
		name, answer, why string
	}{
		{"prose", "I think the refund is due.", "it is not JSON"},
		{"markup", "<b>{\"note\":\"x\"}</b>", "it is not JSON"},
		{"fenced", "```json\n{\"note\":\"x\"}\n```", "it is not JSON"},
		{"two values", `{"note":"x"} {"note":"y"}`, "it is not JSON"},
		{"huge and invalid", `{"note":` + strings.Repeat("[", 100_000), "it is not JSON"},
		{"wrong type", `{"note":` + strings.Repeat("1", 100_000) + `}`, "at /note"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &State{}
			e := makeRun(t).schema(open).engine()
			e.Step(s, Input{})
			eff := e.Step(s, Input{Reply: &Reply{Content: tc.answer}})
			if s.Done() || s.Output != nil {
				t.Fatalf("done %v (%s), output %+v: the answer must be refused", s.Done(), s.Reason, s.Output)
			}
			told := s.Transcript[len(s.Transcript)-1].Content
			if !strings.Contains(told, tc.why) || len(told) > 1000 {
				t.Errorf("the model reads %d bytes %q, want a bounded message saying %q", len(told), cut(told, 300), tc.why)
			}
			for _, n := range eff.Notes {
				if len(n.Message) > 1000 {
					t.Errorf("note %s is %d bytes", n.Kind, len(n.Message))
				}
			}
		})
	}
	s := makeRun(t).schema(open).then(answer(huge)).go_()
	expectOutcome(t, s, Completed)
	if s.Output == nil || s.Output.Value != nil || s.Output.Bytes != len(huge) || !strings.HasPrefix(s.Output.Digest, "sha256:") {
		t.Fatalf("output of %d bytes: %+v, want its digest and size only", len(huge), s.Output)
	}
}

// A schema the engine cannot use is refused when the run is built, with
// a reason that names spec.output.
func TestOutput_unusableSchemasAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name, schema, want string
	}{
		{"empty", ` `, "output.schema is empty"},
		{"not JSON", `{"type":`, "output.schema is not valid JSON"},
		{"not an object", `{"type":"string"}`, "must describe a JSON object"},
		{"too deep", `{"type":"object","x":` + strings.Repeat(`[`, MaxOutputSchemaDepth) + strings.Repeat(`]`, MaxOutputSchemaDepth) + `}`,
			fmt.Sprintf("at most %d are allowed", MaxOutputSchemaDepth)},
		{"too large", `{"type":"object","description":"` + strings.Repeat("x", MaxOutputSchemaBytes) + `"}`, "output.schema is 16"},
		{"a remote reference", `{"type":"object","properties":{"a":{"$ref":"https://example.com/s.json"}}}`, "files and URLs are never loaded"},
		{"not a schema", `{"type":"object","minProperties":"two"}`, "output.schema is not a usable JSON Schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := makeRun(t).schema(tc.schema)
			_, err := New(r.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	r := makeRun(t).schema(refundSchema)
	r.cfg.Strategy = PlanExecute
	if _, err := New(r.cfg); err == nil || !strings.Contains(err.Error(), "only to strategy react") {
		t.Fatalf("New with planExecute: %v", err)
	}
}

// Without spec.output nothing changes: no schema in the request, any
// text completes.
func TestOutput_withoutASchemaAnyTextCompletes(t *testing.T) {
	s, seen := makeRun(t).then(answer("not JSON at all")).goSeen()
	expectOutcome(t, s, Completed)
	if s.Output != nil || seen[0].Output != nil || strings.Contains(seen[0].System, "JSON Schema") {
		t.Fatalf("output %+v, request output %s", s.Output, seen[0].Output)
	}
}
