package crd_test

import (
	"fmt"
	"strings"
	"testing"
)

// typedRun is a run with a typed output; %s is its name and %s its
// output block (indented under spec).
const typedRun = namedRun + `  goal: Decide the refund of ticket T-1.
  model:
    provider: scripted
    script: [{content: '{"decision":"refund"}'}]
  budget: {maxTurns: 3}
%s`

// manyKeywords is an output block whose schema has n keywords at its
// top level.
func manyKeywords(n int) string {
	var b strings.Builder
	b.WriteString("  output:\n    schema:\n      type: object\n")
	for i := range n - 1 {
		fmt.Fprintf(&b, "      x-k%d: a\n", i)
	}
	return b.String()
}

// Issue 45, item 1: the API server refuses an output schema that is not
// an object, is empty, or has more keywords than a request should carry,
// and says so.
func TestCreate_output(t *testing.T) {
	cases := []specCase{
		{name: "an object schema", spec: `  output:
    schema:
      type: object
      properties: {decision: {enum: [refund, deny]}, amountMinor: {type: integer, minimum: 0}}
      required: [decision]
      $defs: {money: {type: integer}}
`},
		{name: "64 keywords", spec: manyKeywords(64)},
		{name: "no schema", spec: "  output: {}\n", wantErr: []string{"spec.output.schema", "Required value"}},
		{name: "an empty schema", spec: "  output: {schema: {}}\n", wantErr: []string{"spec.output.schema", "should have at least 1 properties"}},
		{name: "a schema that is not an object", spec: "  output: {schema: not-a-schema}\n",
			wantErr: []string{"spec.output.schema", "must be of type object"}},
		{name: "65 keywords", spec: manyKeywords(65), wantErr: []string{"spec.output.schema", "must have at most 64 items"}},
	}
	expectCreates(t, typedRun, "output", cases)
}

func TestUpdate_outputCannotChange(t *testing.T) {
	run := fmt.Sprintf(typedRun, "output-edit", "  output: {schema: {type: object}}\n")
	expectPatchRefused(testContext(t), t, run, `{"spec": {"output": {"schema": {"type": "object", "required": ["a"]}}}}`, specChangeRefused)
}
