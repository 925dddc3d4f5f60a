package loop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// EscalateTool is the harness's own tool, always offered to the model: a
// call to it hands the task to a person and ends the run as Escalated.
const EscalateTool = "escalate_to_human"

var escalateSchema = json.RawMessage(`{"type":"object","properties":{"reason":{"type":"string","description":"Why a person must take over, and what you found so far."}},"required":["reason"]}`)

// compiledRule is a policy rule with its CEL program.
type compiledRule struct {
	Rule
	prg cel.Program
}

type compiledGuardrail struct {
	Guardrail
	re *regexp.Regexp
}

// verdict is the outcome of vetting one call.
type verdict struct {
	decision Decision // allow, deny, ask; "" with halt or block set
	block    bool
	halt     bool
	rule     string
	reason   string
}

func compileRules(p Policy) ([]compiledRule, error) {
	env, err := cel.NewEnv(cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)), cel.CrossTypeNumericComparisons(true))
	if err != nil {
		return nil, err
	}
	out := make([]compiledRule, len(p.Rules))
	for i, r := range p.Rules {
		out[i].Rule = r
		if strings.TrimSpace(r.When) == "" {
			continue
		}
		ast, iss := env.Compile(r.When)
		if iss != nil && iss.Err() != nil {
			return nil, fmt.Errorf("policy.rules[%d].when %q does not compile: %v", i, r.When, iss.Err())
		}
		if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
			return nil, fmt.Errorf("policy.rules[%d].when %q must be a condition (true or false), not %s", i, r.When, ast.OutputType())
		}
		prg, err := env.Program(ast)
		if err != nil {
			return nil, fmt.Errorf("policy.rules[%d].when: %v", i, err)
		}
		out[i].prg = prg
	}
	return out, nil
}

func compileGuardrails(gs []Guardrail) ([]compiledGuardrail, error) {
	out := make([]compiledGuardrail, len(gs))
	for i, g := range gs {
		re, err := regexp.Compile(g.Pattern)
		if err != nil {
			return nil, fmt.Errorf("guardrails[%d] (%s): pattern does not compile: %v", i, g.Name, err)
		}
		out[i] = compiledGuardrail{Guardrail: g, re: re}
	}
	return out, nil
}

func compileSchemas(tools []ToolSpec) (map[string]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	out := map[string]*jsonschema.Schema{}
	for _, t := range tools {
		if len(bytes.TrimSpace(t.Parameters)) == 0 {
			continue
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.Parameters))
		if err != nil {
			return nil, fmt.Errorf("tool %s: parameters is not valid JSON: %v", t.Name, err)
		}
		url := "mem://tools/" + t.Name
		if err := c.AddResource(url, doc); err != nil {
			return nil, fmt.Errorf("tool %s: parameters: %v", t.Name, err)
		}
		s, err := c.Compile(url)
		if err != nil {
			return nil, fmt.Errorf("tool %s: parameters is not a usable JSON Schema: %v", t.Name, err)
		}
		out[t.Name] = s
	}
	return out, nil
}

func matchesTool(names []string, tool string) bool {
	return slices.Contains(names, "*") || slices.Contains(names, tool)
}

// vet decides one call: guardrails first (block this call, or halt the
// run), then the first matching policy rule (or the default), then the
// tightening rule. Tool metadata only ever tightens a verdict.
func (e *Engine) vet(tool *ToolSpec, name string, canonical []byte, args any) verdict {
	for _, g := range e.guardrails {
		if !matchesTool(g.Tools, name) || !g.re.Match(canonical) {
			continue
		}
		reason := g.Reason
		if reason == "" {
			reason = "the arguments match guardrail " + g.Name
		}
		v := verdict{rule: "guardrail:" + g.Name, reason: reason}
		if g.Severity == Halt {
			v.halt = true
		} else {
			v.block = true
		}
		return v
	}

	var celArgs any
	v := verdict{decision: e.cfg.Policy.Default, rule: "policy.default"}
	if v.decision == "" {
		v.decision = Allow
	}
	for i := range e.rules {
		r := &e.rules[i]
		if !matchesTool(r.Tools, name) {
			continue
		}
		if r.prg != nil {
			if celArgs == nil {
				celArgs = celValue(args)
			}
			out, _, err := r.prg.Eval(map[string]any{"args": celArgs})
			if err != nil {
				// Fail closed: a condition that cannot be evaluated sends
				// the call to a person rather than guessing.
				v = verdict{decision: Ask, rule: fmt.Sprintf("policy.rules[%d]", i),
					reason: fmt.Sprintf("the rule's condition %q could not be evaluated (%v); a person must decide", r.When, err)}
				break
			}
			if b, ok := out.Value().(bool); !ok || !b {
				continue
			}
		}
		v = verdict{decision: r.Decision, rule: fmt.Sprintf("policy.rules[%d]", i), reason: r.Reason}
		break
	}
	if v.decision == Allow && tool.Mutates && !tool.Reversible {
		if slices.Contains(e.cfg.Policy.Grants, name) {
			v.rule, v.reason = "policy.grants", "irreversible action granted for this run"
		} else {
			v = verdict{decision: Ask, rule: "tool.irreversible",
				reason: fmt.Sprintf("%s changes something that cannot be undone; a person must approve it", name)}
		}
	}
	return v
}

// celValue converts decoded JSON for CEL: json.Number becomes int64 when
// it is a whole number that fits, float64 otherwise.
func celValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = celValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = celValue(e)
		}
		return out
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}
