package loop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"

	"github.com/agentrun/agentrun/internal/weakcache"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
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
	// approvals is how many distinct people must approve an ask (the
	// rule's Approvals); 0 means one.
	approvals int
}

// Bounds on the work one call's vetting may do. A policy condition whose
// estimated cost (in CEL's cost units, about one per operation) can pass
// maxRuleCost is refused when the run is built; one that reaches it while
// evaluating (arguments larger than the estimate assumed) is cut off, and
// its call goes to a person. celSizeHint is the size the estimate assumes
// for every string, list or map taken from the arguments. The limit is
// kept low because cel-go's runtime cost tracking grows faster than
// linearly with the steps taken (about 0.5 s for 450,000 steps).
const (
	maxRuleCost         = 100_000
	celSizeHint         = 4096
	celInterruptEvery   = 100
	maxGuardrailProgram = 1000
)

func compileRules(p Policy) ([]compiledRule, error) {
	env, err := argsEnv()
	if err != nil {
		return nil, err
	}
	out := make([]compiledRule, len(p.Rules))
	for i, r := range p.Rules {
		out[i].Rule = r
		if strings.TrimSpace(r.When) == "" {
			continue
		}
		if out[i].prg, err = compileWhen(env, r.label(i)+".when", r.When); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// argsEnv is the CEL environment of a condition over a call's arguments:
// one variable, args, the arguments object.
func argsEnv() (*cel.Env, error) {
	return cel.NewEnv(cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)), cel.CrossTypeNumericComparisons(true))
}

// compileWhen compiles a condition over a call's arguments, named name
// in its errors, refusing one that is not a condition or may cost more
// than maxRuleCost.
func compileWhen(env *cel.Env, name, when string) (cel.Program, error) {
	ast, iss := env.Compile(when)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("%s %q does not compile: %v", name, when, iss.Err())
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("%s %q must be a condition (true or false), not %s", name, when, ast.OutputType())
	}
	est, err := env.EstimateCost(ast, argsSizeHint{})
	if err != nil {
		return nil, fmt.Errorf("%s: its cost cannot be estimated: %v", name, err)
	}
	if est.Max > maxRuleCost {
		return nil, fmt.Errorf("%s %q is too expensive: it may take up to %s evaluation steps per call "+
			"(with arguments of up to %d items or characters), and the limit is %d; avoid nested loops over arguments and over large lists",
			name, cut(when, 200), costString(est.Max), celSizeHint, maxRuleCost)
	}
	prg, err := env.Program(ast, cel.CostLimit(maxRuleCost), cel.InterruptCheckFrequency(celInterruptEvery))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return prg, nil
}

// CallCondition is a condition over a call's arguments in CEL, as a
// policy rule's when: the arguments object is args. Build it with
// CompileCallCondition.
type CallCondition struct {
	when string
	prg  cel.Program
}

// CompileCallCondition compiles when as a policy rule's condition is
// compiled, with its limits; name names it in the error.
func CompileCallCondition(name, when string) (*CallCondition, error) {
	env, err := argsEnv()
	if err != nil {
		return nil, err
	}
	prg, err := compileWhen(env, name, when)
	if err != nil {
		return nil, err
	}
	return &CallCondition{when: when, prg: prg}, nil
}

// Holds says whether the condition holds for the arguments (a JSON
// object). Arguments that are not an object, and a condition that
// cannot be evaluated on them, are an error.
func (c *CallCondition) Holds(args json.RawMessage) (bool, error) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return false, fmt.Errorf("the arguments are not a JSON object: %v", err)
	}
	out, _, err := c.prg.Eval(map[string]any{"args": celValue(v)})
	if err != nil {
		if strings.Contains(err.Error(), "cost limit exceeded") {
			return false, fmt.Errorf("%q reached the cost limit of %d evaluation steps", cut(c.when, 200), maxRuleCost)
		}
		return false, fmt.Errorf("%q could not be evaluated: %v", cut(c.when, 200), err)
	}
	b, ok := out.Value().(bool)
	return ok && b, nil
}

// argsSizeHint tells CEL's cost estimator how large values taken from the
// arguments can be; it has no better estimate for function calls.
type argsSizeHint struct{}

func (argsSizeHint) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{Min: 0, Max: celSizeHint}
}

func (argsSizeHint) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

func costString(c uint64) string {
	if c == math.MaxUint64 {
		return "an unbounded number of"
	}
	return strconv.FormatUint(c, 10)
}

// compileGuardrails compiles the patterns and refuses those whose RE2
// program is larger than maxGuardrailProgram instructions: matching costs
// the program's size for every byte of the arguments.
func compileGuardrails(gs []Guardrail) ([]compiledGuardrail, error) {
	out := make([]compiledGuardrail, len(gs))
	for i, g := range gs {
		re, err := regexp.Compile(g.Pattern)
		if err != nil {
			return nil, fmt.Errorf("guardrails[%d] (%s): pattern does not compile: %v", i, g.Name, err)
		}
		if n := programSize(g.Pattern); n > maxGuardrailProgram {
			return nil, fmt.Errorf("guardrails[%d] (%s): pattern is too large: it compiles to %d instructions, and the limit is %d; "+
				"use smaller repetition counts", i, g.Name, n, maxGuardrailProgram)
		}
		out[i] = compiledGuardrail{Guardrail: g, re: re}
	}
	return out, nil
}

// programSize is the number of instructions of the RE2 program that
// regexp.Compile builds for a pattern (which has compiled already).
func programSize(pattern string) int {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0
	}
	return len(prog.Inst)
}

// refuseLoads refuses every schema the compiler would load from
// outside the tool's own parameters: files, URLs, other tools' schemas.
// The message names no content (nothing was read).
type refuseLoads struct{}

func (refuseLoads) Load(string) (any, error) {
	return nil, errors.New("only references inside the same schema (such as \"#/$defs/item\") are allowed; files and URLs are never loaded")
}

// Schemas shares compiled parameter schemas between engines: a platform
// starts many runs with the same tools, and a compiled schema (about 3 KiB
// each) is read-only once compiled. An entry lives as long as an engine
// holds its schema (a weak pointer, dropped by a cleanup). Whoever builds
// many engines keeps one (kit.Builder) and gives it to each (WithSchemas).
// The zero value is ready.
type Schemas struct {
	cache weakcache.Cache[string, jsonschema.Schema]
}

// compile compiles the tools' parameter schemas, or takes those compiled
// from the same name and bytes that another engine holds. A nil s
// compiles every one.
func (s *Schemas) compile(tools []ToolSpec) (map[string]*jsonschema.Schema, error) {
	out := map[string]*jsonschema.Schema{}
	for _, t := range tools {
		if len(bytes.TrimSpace(t.Parameters)) == 0 {
			continue
		}
		var c *jsonschema.Schema
		var err error
		if s == nil {
			c, err = compileToolSchema(t.Name, t.Parameters)
		} else {
			c, err = s.cache.Get(t.Name+"\x00"+string(t.Parameters), func() (*jsonschema.Schema, error) {
				return compileToolSchema(t.Name, t.Parameters)
			})
		}
		if err != nil {
			return nil, err
		}
		out[t.Name] = c
	}
	return out, nil
}

// compileToolSchema compiles one tool's parameters.
func compileToolSchema(name string, params []byte) (*jsonschema.Schema, error) {
	// One compiler per tool: a schema cannot reach another tool's.
	return compileSchema("tool "+name+": parameters", "mem://tools/"+name, params)
}

// compileSchema compiles a JSON Schema that refers to nothing outside
// itself (refuseLoads). what names it in errors ("tool lookup:
// parameters", "output.schema"); url is where it is added.
func compileSchema(what, url string, raw []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %v", what, err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoads{})
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("%s is not a usable JSON Schema: %v", what, err)
	}
	return s, nil
}

func matchesTool(names []string, tool string) bool {
	return slices.Contains(names, "*") || slices.Contains(names, tool)
}

// guardrailMatches reports whether a pattern matches what the tool will
// receive: the compact JSON of all the arguments (sorted keys, numbers
// normalised, no HTML escaping), or any string value at any depth, as
// decoded text (no JSON escapes, so "<script>" and "a && b" are seen as
// written, and ^ and $ anchor at the value's ends).
func guardrailMatches(re *regexp.Regexp, full []byte, args any) bool {
	if re.Match(full) {
		return true
	}
	var walk func(v any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case string:
			return re.MatchString(x)
		case map[string]any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(args)
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

// errVetDeadline is why a step's vetting context ended.
var errVetDeadline = errors.New("vetting this step passed its deadline")
