package loop

// A plan's steps as calls: the placeholders a step's arguments may hold
// ("#E1.path"), the results they name, and the call built from them.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// placeholder is one "#E1.path" string found in a step's arguments.
type placeholder struct {
	step string
	path []string
}

// parsePlaceholder reads a string as a placeholder when it names a step of
// ids; err is set when it can only be meant as one but names no step.
func parsePlaceholder(v string, ids map[string]bool) (ph placeholder, ok bool, err error) {
	if !strings.HasPrefix(v, "#") {
		return ph, false, nil
	}
	parts := strings.Split(v[1:], ".")
	if !ids[parts[0]] {
		if looksLikeStepRef.MatchString(v) {
			return ph, false, fmt.Errorf("%q names step %s, which the plan does not have", cut(v, 80), parts[0])
		}
		return ph, false, nil
	}
	for _, seg := range parts[1:] {
		if seg == "" {
			return ph, false, fmt.Errorf("%q has an empty segment in its path", cut(v, 80))
		}
	}
	return placeholder{step: parts[0], path: parts[1:]}, true, nil
}

// walkStrings calls fn on every string value of v (not on object keys);
// fn returns the value to put in its place.
func walkStrings(v any, fn func(string) (any, error)) (any, error) {
	switch x := v.(type) {
	case string:
		return fn(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := walkStrings(e, fn)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := walkStrings(e, fn)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

// dependencies lists the steps a step's arguments name, in first-use order.
func dependencies(args any, ids map[string]bool) ([]string, error) {
	var deps []string
	_, err := walkStrings(args, func(v string) (any, error) {
		ph, ok, err := parsePlaceholder(v, ids)
		if err != nil {
			return nil, err
		}
		if ok && !slices.Contains(deps, ph.step) {
			deps = append(deps, ph.step)
		}
		return v, nil
	})
	return deps, err
}

// MaxStepArgumentBytes bounds a plan step's arguments once its
// placeholders are replaced by the results they name.
const MaxStepArgumentBytes = 256 << 10

// jsonSize is the size of v as JSON (strings as their length plus quotes:
// an upper bound is not needed, only a measure that grows with v).
func jsonSize(v any) int {
	switch x := v.(type) {
	case string:
		return len(x) + 2
	case map[string]any:
		n := 2
		for k, e := range x {
			n += len(k) + 4 + jsonSize(e)
		}
		return n
	case []any:
		n := 2
		for _, e := range x {
			n += 1 + jsonSize(e)
		}
		return n
	case json.Number:
		return len(x)
	default:
		return 5
	}
}

// resolve follows a placeholder's path into a step's result.
func resolve(result string, ph placeholder) (any, error) {
	v, err := decodeJSON(json.RawMessage(result))
	if err != nil {
		if len(ph.path) == 0 {
			return result, nil // a result that is not JSON stands as a string
		}
		return nil, fmt.Errorf("the result of %s is not JSON, so #%s.%s has nothing to point into", ph.step, ph.step, strings.Join(ph.path, "."))
	}
	for i, seg := range ph.path {
		where := "#" + ph.step + "." + strings.Join(ph.path[:i+1], ".")
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[seg]
			if !ok {
				return nil, fmt.Errorf("%s: the result has no field %q there", where, seg)
			}
			v = e
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(x) {
				return nil, fmt.Errorf("%s: the result has a list of %d there, and %q is not an index of it", where, len(x), seg)
			}
			v = x[n]
		default:
			return nil, fmt.Errorf("%s: the result has a single value before %q", where, seg)
		}
	}
	return v, nil
}

// stepCall builds a step's call: its planned arguments with every
// placeholder replaced by the result it names (read from the transcript).
func (pl *planner) stepCall(s *State, d *planDoc, st *PlanStep) (ToolCall, error) {
	sd := d.step(st.ID)
	if sd == nil {
		return ToolCall{}, fmt.Errorf("step %s is not in the plan", st.ID)
	}
	tc := ToolCall{ID: StepCallID(s.Plan.Number, st.ID), Name: sd.Tool, Arguments: CallArguments(sd.Arguments)}
	if len(st.After) == 0 {
		return tc, nil
	}
	args, err := decodeJSON(tc.Arguments)
	if err != nil {
		return tc, err
	}
	ids := map[string]bool{}
	for _, p := range s.Plan.Steps {
		ids[p.ID] = true
	}
	// Each placeholder adds up to a whole result: the substituted
	// arguments are bounded as they grow, so that a plan repeating a
	// placeholder cannot multiply a result into megabytes.
	size := len(tc.Arguments)
	out, err := walkStrings(args, func(v string) (any, error) {
		ph, ok, err := parsePlaceholder(v, ids)
		if err != nil || !ok {
			return v, err
		}
		dep := s.Plan.step(ph.step)
		if dep == nil || dep.At <= 0 || dep.At >= len(s.Transcript) {
			return nil, fmt.Errorf("step %s has no result yet", ph.step)
		}
		r, err := resolve(s.Transcript[dep.At].Content, ph)
		if err != nil {
			return nil, err
		}
		if size += jsonSize(r); size > MaxStepArgumentBytes {
			return nil, fmt.Errorf("with its placeholders replaced, the step's arguments would pass %d bytes", MaxStepArgumentBytes)
		}
		return r, nil
	})
	if err != nil {
		return tc, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return tc, err
	}
	tc.Arguments = json.RawMessage(bytes.TrimSpace(b.Bytes()))
	return tc, nil
}

// stepCallOf is the call for the step of the accepted plan that callID
// names (see Engine.PlanStepCall).
func (pl *planner) stepCallOf(s *State, callID string) (ToolCall, bool) {
	if s.Plan == nil || s.Plan.Stage != StageExecuting || !strings.HasPrefix(callID, fmt.Sprintf("p%d-", s.Plan.Number)) {
		return ToolCall{}, false
	}
	st := s.Plan.step(stepOf(callID))
	if st == nil {
		return ToolCall{}, false
	}
	d, err := pl.acceptedPlan(s)
	if err != nil {
		return ToolCall{}, false
	}
	tc, err := pl.stepCall(s, d, st)
	return tc, err == nil
}
