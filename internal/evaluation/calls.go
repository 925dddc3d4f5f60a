package evaluation

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
)

// Call is a tool call the model made, as its transcript shows it.
type Call struct {
	// Turn is the turn the model made it in.
	Turn int
	Tool string
	// Arguments are those the model proposed.
	Arguments json.RawMessage
}

// CallsOf is every call the model made in a transcript, in order:
// those that ran and those refused alike. A plan step of a planExecute
// run is a call too, by its tool message; the transcript does not hold
// its arguments (they are filled in from earlier steps' results as it
// runs), so its Arguments are nil.
func CallsOf(msgs []loop.Message) []Call {
	out := []Call{}
	proposed := map[string]bool{}
	for _, m := range msgs {
		switch {
		case m.Role == loop.RoleAssistant:
			for _, c := range m.ToolCalls {
				proposed[c.ID] = true
				out = append(out, Call{Turn: m.Turn, Tool: c.Name, Arguments: c.Arguments})
			}
		case m.Role == loop.RoleTool && m.Tool != "" && !proposed[m.CallID]:
			out = append(out, Call{Turn: m.Turn, Tool: m.Tool})
		}
	}
	return out
}

// NeedsCalls says whether scoring exp needs the run's calls (and so its
// transcript).
func NeedsCalls(exp *v1alpha1.EvaluationExpectation) bool { return len(exp.Calls) > 0 }

// CheckCalls compiles the conditions of exp.Calls and returns the first
// error: the API server cannot compile them, so a local evaluation checks
// them before it runs anything.
func CheckCalls(exp *v1alpha1.EvaluationExpectation) error {
	for i := range exp.Calls {
		if _, err := callCondition(i, &exp.Calls[i]); err != nil {
			return err
		}
	}
	return nil
}

// callCondition compiles the i-th call expectation's when; nil when it
// has none.
func callCondition(i int, ce *v1alpha1.CallExpectation) (*loop.CallCondition, error) {
	if strings.TrimSpace(ce.When) == "" {
		return nil, nil
	}
	return loop.CompileCallCondition(fmt.Sprintf("calls[%d].when", i), ce.When)
}

// scoreCalls checks each call expectation's count against calls.
func scoreCalls(exps []v1alpha1.CallExpectation, calls []Call) string {
	for i := range exps {
		ce := &exps[i]
		cond, err := callCondition(i, ce)
		if err != nil {
			return excerpt(err.Error())
		}
		what := "call to " + ce.Tool
		if cond != nil {
			what += " where " + clipTo(ce.When, 100)
		}
		n, first := int32(0), 0
		for _, c := range calls {
			if c.Tool != ce.Tool {
				continue
			}
			if cond != nil {
				if c.Arguments == nil {
					return fmt.Sprintf("calls[%d].when: the call to %s in turn %d is a plan step, whose arguments the transcript does not hold", i, ce.Tool, c.Turn)
				}
				ok, err := cond.Holds(c.Arguments)
				if err != nil {
					return fmt.Sprintf("calls[%d].when: on the call to %s in turn %d: %s", i, ce.Tool, c.Turn, excerpt(err.Error()))
				}
				if !ok {
					continue
				}
			}
			if n++; n == 1 {
				first = c.Turn
			}
		}
		lo, hi := callBounds(ce)
		switch {
		case n < lo:
			return fmt.Sprintf("calls[%d]: expected at least %d %s, the run made %s", i, lo, plural(lo, what), count(n))
		case hi != nil && *hi == 0 && n > 0:
			return fmt.Sprintf("calls[%d]: expected no %s, the run made %d (the first in turn %d)", i, what, n, first)
		case hi != nil && n > *hi:
			return fmt.Sprintf("calls[%d]: expected at most %d %s, the run made %d", i, *hi, plural(*hi, what), n)
		}
	}
	return ""
}

// callBounds are the fewest and most calls ce allows; nil is no most.
func callBounds(ce *v1alpha1.CallExpectation) (int32, *int32) {
	switch {
	case ce.Min != nil:
		return *ce.Min, ce.Max
	case ce.Max != nil:
		return 0, ce.Max
	default:
		return 1, nil
	}
}

// plural is what ("call to x") for n calls.
func plural(n int32, what string) string {
	if n == 1 {
		return what
	}
	return "calls" + strings.TrimPrefix(what, "call")
}

func count(n int32) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprint(n)
}
