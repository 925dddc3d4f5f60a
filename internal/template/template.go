// Package template makes a run's spec from an AgentRunTemplate and a run's
// parameters: it checks the values against the parameters the template
// declares, and replaces each $(params.NAME) in the template's strings with
// the value of NAME.
//
// A value is data. It is put into a string the template wrote a
// placeholder in, as it is: never parsed as YAML or JSON, never searched for
// placeholders in turn, so it cannot add a tool, a rule or a field. The
// replacement works on the decoded spec, string by string, and the result
// is decoded into the run spec type, unknown fields refused.
package template

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// placeholder is $(params.NAME), as Tekton writes it.
var placeholder = regexp.MustCompile(`\$\(params\.([A-Za-z][A-Za-z0-9_-]*)\)`)

// Error is a run the template cannot make: a parameter missing, unknown or
// out of bounds, or a template that uses a parameter it does not declare.
// It is final: the same run and template give it again.
type Error struct {
	// Parameter is the parameter's name, when one is at fault.
	Parameter string
	// Required: the parameter is required and was not given.
	Required bool
	Message  string
}

// about is the parameter's description, for a message: the people who
// give the value read what it means where they got it wrong.
func about(p *v1alpha1.TemplateParameter) string {
	if p.Description == "" {
		return ""
	}
	return " (" + p.Description + ")"
}

func (e *Error) Error() string { return e.Message }

// quote shows a value in a message, cut so that a long value does not
// flood it.
func quote(v string) string {
	const most = 80
	if len(v) > most {
		cut := most
		for cut > 0 && !isRuneStart(v[cut]) {
			cut--
		}
		return fmt.Sprintf("%q (cut, %d bytes)", v[:cut], len(v))
	}
	return fmt.Sprintf("%q", v)
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// Values returns the value of every parameter the template declares: the
// run's, else the default, else "" when the parameter is optional. A
// parameter the template does not declare, a required one left out, or a
// value outside its enum or pattern is an *Error that names it.
func Values(t *v1alpha1.AgentRunTemplate, given []v1alpha1.ParameterValue) (map[string]string, error) {
	declared := map[string]*v1alpha1.TemplateParameter{}
	var names []string
	for i := range t.Spec.Parameters {
		p := &t.Spec.Parameters[i]
		declared[p.Name] = p
		names = append(names, p.Name)
	}
	sort.Strings(names)
	values := map[string]string{}
	for _, g := range given {
		if declared[g.Name] == nil {
			known := "none"
			if len(names) > 0 {
				known = strings.Join(names, ", ")
			}
			return nil, &Error{Parameter: g.Name, Message: fmt.Sprintf("parameter %q is not declared by AgentRunTemplate %s (it declares: %s)", g.Name, t.Name, known)}
		}
		values[g.Name] = g.Value
	}
	for _, name := range names {
		p := declared[name]
		v, ok := values[name]
		switch {
		case ok:
		case p.Default != nil:
			v = *p.Default
		case p.Required:
			return nil, &Error{Parameter: name, Required: true,
				Message: fmt.Sprintf("parameter %q is required by AgentRunTemplate %s and was not given%s", name, t.Name, about(p))}
		}
		if len(p.Enum) > 0 && !slices.Contains(p.Enum, v) {
			return nil, &Error{Parameter: name, Message: fmt.Sprintf("parameter %q must be one of %s, not %s%s", name, strings.Join(p.Enum, ", "), quote(v), about(p))}
		}
		if p.Pattern != "" {
			re, err := regexp.Compile(p.Pattern)
			if err != nil {
				return nil, &Error{Parameter: name, Message: fmt.Sprintf("parameter %q of AgentRunTemplate %s has a pattern that is not a regular expression: %v", name, t.Name, err)}
			}
			if !re.MatchString(v) {
				return nil, &Error{Parameter: name, Message: fmt.Sprintf("parameter %q must match the pattern %s, and %s does not%s", name, p.Pattern, quote(v), about(p))}
			}
		}
		values[name] = v
	}
	return values, nil
}

// Resolve returns the spec of a run made from the template with the given
// parameters. The result is a complete run spec; the caller adds what
// belongs to the run itself (cancel, ttlSecondsAfterFinished, templateRef
// and parameters).
func Resolve(t *v1alpha1.AgentRunTemplate, given []v1alpha1.ParameterValue) (*v1alpha1.AgentRunSpec, error) {
	values, err := Values(t, given)
	if err != nil {
		return nil, err
	}
	tree, err := decode(&t.Spec.Run)
	if err != nil {
		return nil, err
	}
	var unknown string
	tree = walk(tree, func(s string) string {
		return placeholder.ReplaceAllStringFunc(s, func(m string) string {
			name := placeholder.FindStringSubmatch(m)[1]
			v, ok := values[name]
			if !ok {
				if unknown == "" {
					unknown = name
				}
				return m
			}
			return v
		})
	})
	if unknown != "" {
		return nil, &Error{Parameter: unknown, Message: fmt.Sprintf("AgentRunTemplate %s uses $(params.%s) but declares no parameter %q", t.Name, unknown, unknown)}
	}
	raw, err := json.Marshal(tree)
	if err != nil {
		return nil, err
	}
	spec := &v1alpha1.AgentRunSpec{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(spec); err != nil {
		return nil, &Error{Message: fmt.Sprintf("AgentRunTemplate %s does not make a valid run spec: %v", t.Name, err)}
	}
	return spec, nil
}

// Undeclared returns, sorted, the names the template's placeholders use
// that it does not declare as parameters.
func Undeclared(t *v1alpha1.AgentRunTemplate) ([]string, error) {
	tree, err := decode(&t.Spec.Run)
	if err != nil {
		return nil, err
	}
	declared := map[string]bool{}
	for _, p := range t.Spec.Parameters {
		declared[p.Name] = true
	}
	seen := map[string]bool{}
	walk(tree, func(s string) string {
		for _, m := range placeholder.FindAllStringSubmatch(s, -1) {
			if !declared[m[1]] {
				seen[m[1]] = true
			}
		}
		return s
	})
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// Digest is "sha256:" and the hex SHA-256 of the spec's JSON, as the
// operator keeps it with the run.
func Digest(raw []byte) string {
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// decode turns the template's run spec into a JSON tree, numbers kept as
// written.
func decode(run *v1alpha1.TemplateRunSpec) (any, error) {
	raw, err := json.Marshal(run)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	return tree, nil
}

// walk replaces every string value of the tree (not the keys of objects)
// by f of it.
func walk(v any, f func(string) string) any {
	switch x := v.(type) {
	case string:
		return f(x)
	case map[string]any:
		for k, e := range x {
			x[k] = walk(e, f)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = walk(e, f)
		}
		return x
	default:
		return v
	}
}
