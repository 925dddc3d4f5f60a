// Package evaluation scores the runs of an AgentEvaluation against what
// their cases expect, and sums the results into its status. It reads
// objects and reads no cluster: the AgentEvaluation reconciler and a
// local evaluation share it.
package evaluation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// excerptBytes bounds what a failure reason quotes of a run (its answer,
// its reason, a field's value), so that a reason stays readable and
// within status.cases[].failureReason.
const excerptBytes = 200

// Score checks an ended run against what its case expects, in the order
// of the expectation's fields, and returns why it failed: the first
// expectation it missed, what was expected and what the run showed. ""
// is a pass. It is ScoreWithCalls of a run that made no calls: for an
// expectation that names none (NeedsCalls).
func Score(exp *v1alpha1.EvaluationExpectation, run *v1alpha1.AgentRun) string {
	return ScoreWithCalls(exp, run, nil)
}

// ScoreWithCalls is Score with the calls the run made, read from its
// transcript (CallsOf), for exp.calls.
func ScoreWithCalls(exp *v1alpha1.EvaluationExpectation, run *v1alpha1.AgentRun, calls []Call) string {
	st := &run.Status
	want := exp.Outcome
	if want == "" {
		want = v1alpha1.OutcomeCompleted // the CRD's default, for an object written before it
	}
	if st.Outcome != want {
		why := fmt.Sprintf("outcome: expected %s, the run ended %s", want, orNone(string(st.Outcome)))
		if st.Reason != "" {
			why += " (" + excerpt(st.Reason) + ")"
		}
		return why
	}
	for i, p := range exp.Answer {
		re, err := regexp.Compile(string(p))
		if err != nil { // the API server checks the syntax; Go's RE2 and CEL's agree
			return fmt.Sprintf("answer[%d]: %q is not a regular expression: %v", i, p, err)
		}
		if !re.MatchString(st.Answer) {
			return fmt.Sprintf("answer[%d]: expected a match for %q, the answer was %q", i, p, excerpt(st.Answer))
		}
	}
	if o := exp.Output; o != nil {
		if why := scoreOutput(o, st); why != "" {
			return why
		}
	}
	if why := scoreCalls(exp.Calls, calls); why != "" {
		return why
	}
	if exp.MaxCostUSD != "" {
		ceiling, err := limits.Money("maxCostUSD", exp.MaxCostUSD)
		if err != nil {
			return err.Error()
		}
		if spent := CostOf(run); spent > ceiling {
			return fmt.Sprintf("maxCostUSD: expected at most %s, the run spent %s", exp.MaxCostUSD, spent)
		}
	}
	if exp.MaxTurns != nil {
		if turns := turnsOf(run); turns > *exp.MaxTurns {
			return fmt.Sprintf("maxTurns: expected at most %d, the run took %d", *exp.MaxTurns, turns)
		}
	}
	return ""
}

// scoreOutput checks status.output against the fields, then the schema.
func scoreOutput(o *v1alpha1.OutputExpectation, st *v1alpha1.AgentRunStatus) string {
	if st.Output == nil || len(st.Output.Raw) == 0 {
		if st.OutputBytes > 0 {
			return fmt.Sprintf("output: expected a typed answer in status.output, the run's is %d bytes, too large for status", st.OutputBytes)
		}
		return "output: expected a typed answer in status.output, the run has none (does the template set spec.output?)"
	}
	var doc any
	if err := json.Unmarshal(st.Output.Raw, &doc); err != nil {
		return "output: status.output is not JSON: " + excerpt(err.Error())
	}
	for _, f := range o.Fields {
		var want any
		if err := json.Unmarshal(rawOrNull(f.Equals.Raw), &want); err != nil {
			return fmt.Sprintf("output.fields[%s]: equals is not JSON: %v", f.Path, err)
		}
		got, ok := lookup(doc, f.Path)
		if !ok {
			return fmt.Sprintf("output.fields[%s]: expected %s, the output has no such field", f.Path, compact(want))
		}
		if !reflect.DeepEqual(want, got) {
			return fmt.Sprintf("output.fields[%s]: expected %s, found %s", f.Path, compact(want), excerpt(compact(got)))
		}
	}
	if o.Schema != nil {
		s, err := loop.CompileSchema("output.schema", "mem://evaluation-output", o.Schema.Raw)
		if err != nil {
			return excerpt(err.Error())
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(st.Output.Raw))
		if err == nil {
			err = s.Validate(v)
		}
		if err != nil {
			return "output.schema: the output does not validate: " + loop.SchemaError(err)
		}
	}
	return ""
}

// lookup follows path (keys joined by '.') into doc.
func lookup(doc any, path string) (any, bool) {
	for _, k := range strings.Split(path, ".") {
		m, ok := doc.(map[string]any)
		if !ok {
			return nil, false
		}
		if doc, ok = m[k]; !ok {
			return nil, false
		}
	}
	return doc, true
}

// rawOrNull is raw, or JSON null when empty (RawExtension reads null as
// nothing).
func rawOrNull(raw []byte) []byte {
	if len(raw) == 0 {
		return []byte("null")
	}
	return raw
}

// compact is v as compact JSON.
func compact(v any) string {
	b, _ := json.Marshal(v) // decoded from JSON: it encodes
	return string(b)
}

// CostOf is what the run spent, zero when it records nothing readable.
func CostOf(run *v1alpha1.AgentRun) loop.Money {
	if run.Status.Usage == nil {
		return 0
	}
	m, _ := limits.Money("costUSD", v1alpha1.USD(run.Status.Usage.CostUSD))
	return m
}

// turnsOf is how many turns the run took.
func turnsOf(run *v1alpha1.AgentRun) int32 {
	if u := run.Status.Usage; u != nil && u.Turns > 0 {
		return u.Turns
	}
	return run.Status.Turn
}

// TurnsToCompletion is the turns a Completed run took, nil for another
// outcome.
func TurnsToCompletion(run *v1alpha1.AgentRun) *int32 {
	if c := run.Status.Convergence; c != nil && c.TurnsToCompletion != nil && run.Status.Outcome == v1alpha1.OutcomeCompleted {
		n := *c.TurnsToCompletion
		return &n
	}
	return nil
}

func excerpt(s string) string { return clipTo(s, excerptBytes) }

// clipTo cuts s to n bytes, marked as cut.
func clipTo(s string, n int) string { return clip.Cut(s, n, runstatus.CutMark) }

func orNone(s string) string {
	if s == "" {
		return "with no outcome"
	}
	return s
}
