package loop

// Typed output: with Config.Output, the final answer is JSON that
// validates against a JSON Schema. The schema is in the system prompt and
// in every request (Request.Output), so that a provider with structured
// output constrains the answer to it. An answer that does not validate is
// not the final answer: it stays in the transcript, the model reads the
// validator's message, and the turn counts, as for an answer cut off at
// the output limit. The run ends as usual when its ceilings are reached.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Bounds of typed output (part of the API contract, documented on
// spec.output and status.output).
const (
	// MaxOutputBytes bounds the validated value kept in the state (and
	// status.output); a larger one is kept only in the transcript, and
	// the state keeps its digest and size.
	MaxOutputBytes = 16 << 10
	// MaxOutputSchemaBytes bounds spec.output.schema, compact: it is sent
	// with every request.
	MaxOutputSchemaBytes = 16 << 10
	// MaxOutputSchemaDepth bounds how deeply objects and arrays nest in
	// spec.output.schema.
	MaxOutputSchemaDepth = 32
)

// outputSchema is Config.Output, checked and compiled.
type outputSchema struct {
	compact json.RawMessage
	schema  *jsonschema.Schema
}

// outputInstructions is appended to the system prompt of a run with a
// typed output; the schema follows it.
const outputInstructions = "Your final answer (the reply with no tool calls) must be a single JSON value that validates " +
	"against the JSON Schema below, with no other text before or after it: no prose, no code fence. " +
	"An answer that does not validate is not accepted; you are told why and asked again, and the turn counts.\n\nJSON Schema of the final answer:\n"

// newOutputSchema checks the output schema's bounds and compiles it with
// the compiler that compiles tool parameters; nil without one.
func newOutputSchema(cfg *Config) (*outputSchema, error) {
	o := cfg.Output
	if o == nil {
		return nil, nil
	}
	if cfg.Strategy == PlanExecute {
		return nil, errors.New("output applies only to strategy react: a planExecute run's solver answers in its own form; remove spec.output or spec.strategy")
	}
	raw := bytes.TrimSpace(o.Schema)
	if len(raw) == 0 {
		return nil, errors.New("output.schema is empty: give the JSON Schema the final answer must validate against")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, fmt.Errorf("output.schema is not valid JSON: %v", err)
	}
	if b.Len() > MaxOutputSchemaBytes {
		return nil, fmt.Errorf("output.schema is %d bytes (compact); at most %d are allowed, as it is sent with every request", b.Len(), MaxOutputSchemaBytes)
	}
	if d := jsonDepth(b.Bytes()); d > MaxOutputSchemaDepth {
		return nil, fmt.Errorf("output.schema nests %d levels deep; at most %d are allowed", d, MaxOutputSchemaDepth)
	}
	var root struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(b.Bytes(), &root); err != nil || root.Type != "object" {
		return nil, errors.New("output.schema must describe a JSON object: set type: object")
	}
	s, err := compileSchema("output.schema", "mem://output", b.Bytes())
	if err != nil {
		return nil, err
	}
	return &outputSchema{compact: b.Bytes(), schema: s}, nil
}

// jsonDepth is how deeply objects and arrays nest in valid JSON.
func jsonDepth(doc []byte) int {
	d := json.NewDecoder(bytes.NewReader(doc))
	depth, most := 0, 0
	for {
		t, err := d.Token()
		if err != nil {
			return most
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
			most = max(most, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}

// check validates a final answer: the whole text, white space around it
// aside, must be one JSON value that the schema accepts. why is the
// validator's message, bounded, when it does not.
func (o *outputSchema) check(content string) (out *Output, why string) {
	text := strings.TrimSpace(content)
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	switch {
	case errors.Is(err, io.EOF):
		return nil, "it is not JSON: the answer is empty"
	case err != nil:
		return nil, "it is not JSON: " + cut(err.Error(), 200)
	}
	if err := o.schema.Validate(v); err != nil {
		return nil, schemaError(err)
	}
	sum := sha256.Sum256([]byte(text))
	out = &Output{Digest: "sha256:" + hex.EncodeToString(sum[:]), Bytes: len(text)}
	if len(text) <= MaxOutputBytes {
		var b bytes.Buffer
		_ = json.Compact(&b, []byte(text)) // valid: it was decoded above
		out.Value = b.Bytes()
	}
	return out, ""
}

// reject returns an answer that did not validate to the model: the
// answer stays in the transcript, the model reads why, and the turn is
// over.
func (o *outputSchema) reject(s *State, why string, notes *[]Note) next {
	s.OutputRejected = &OutputRejection{Turn: s.Turn, Why: why}
	s.Transcript = append(s.Transcript, Message{Role: RoleUser, Turn: s.Turn, Content: "Your final answer does not validate against " +
		"the JSON Schema of the final answer, so it was not accepted: " + why + ". Answer again with only a JSON value that validates."})
	*notes = append(*notes, Note{Kind: NoteOutputRejected, Turn: s.Turn, Warning: true, Message: fmt.Sprintf(
		"The final answer of turn %d does not validate against spec.output.schema (%s); the model is asked again", s.Turn, why)})
	return turnOver()
}

// withLastRejection adds the last rejected answer to the reason of a
// ceiling that ends the run right after it: the run ended without a
// typed answer, and the reason says why.
func (s *State) withLastRejection(rej *Rejection) *Rejection {
	r := s.OutputRejected
	if r == nil || r.Turn != s.Turn {
		return rej
	}
	c := *rej
	c.Reason += fmt.Sprintf("; the last answer (turn %d) did not validate against spec.output.schema: %s", r.Turn, r.Why)
	return &c
}
