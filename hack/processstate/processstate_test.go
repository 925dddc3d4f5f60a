// Package processstate holds the test of issue 44's item 6: the process's
// state lives in values that someone constructs and passes down (the
// operator's metrics, a kit.Builder's shared clients, a notifier's
// counter), never in a package variable of internal/.
package processstate

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	module = "github.com/agentrun/agentrun"
	root   = "../.."
)

// helpers are the packages under internal/ that exist for tests (and `make
// dev`, which runs the test control plane): a throwaway PostgreSQL, the
// envtest control plane, the providers' conformance suite. Their state is
// the test process's.
var helpers = []string{"internal/archive/pgtest", "internal/testenv", "internal/model/modeltest"}

// immutable lists, by package and name, every package variable under
// internal/ that is not an error sentinel, a compiled regexp, a parsed
// address or embedded files (which are immutable by their kind), with why
// nothing changes it after init. The test also proves that no code of the
// module assigns to any of them, indexes into one to write, takes its
// address, deletes from or clears it. A new variable needs a line here,
// or a home in a constructed value.
var immutable = map[string]string{
	"internal/console.mapper":                          "RESTMapper built at init from the scheme, read only",
	"internal/console.pages":                           "html/template set parsed at init, only executed",
	"internal/console.phases":                          "list of phases the console offers as filters",
	"internal/console.sorts":                           "list of the orders the runs page offers",
	"internal/controller.perCall":                      "lookup table: notes counted per call",
	"internal/controller/agentschedule.startedOrEnded": "predicate of functions, no state",
	"internal/egress.Loopback":                         "address table",
	"internal/egress.Metadata":                         "address table",
	"internal/kubescheme.Scheme":                       "scheme built at init, only read afterwards",
	"internal/localrun.exitCodes":                      "lookup table: outcome to exit code",
	"internal/loop.DefaultMaxCost":                     "a Money value (copied on use)",
	"internal/loop.ceilings":                           "the table of ceilings, an array (copied on use)",
	"internal/loop.DefaultToolRetry":                   "a RetryPolicy value (copied on use)",
	"internal/loop.DefaultModelRetry":                  "a RetryPolicy value (copied on use)",
	"internal/loop.Outcomes":                           "list of outcomes",
	"internal/loop.escalateSchema":                     "constant JSON",
	"internal/loop.englishPrinter":                     "message printer, only read: each Sprintf prints with state of its own",
	"internal/model/openai.windows":                    "lookup table: context window by model prefix",
	"internal/notify.chatMarkup":                       "strings.Replacer, safe for concurrent use and never changed",
	"internal/plugin.answerHelp":                       "lookup table: help text per decision",
	"internal/runclient.gitopsDomains":                 "list of label domains",
	"internal/tools/httptool.funcs":                    "template functions",
	"internal/tools/httptool.forbidden":                "lookup table: template functions refused",
	"internal/tools/job.pullFailures":                  "lookup table: waiting reasons that mean an image pull failed",
	"internal/tools/job.DefaultRequests":               "default resource list, only read (resourcesFor writes into a copy)",
	"internal/tools/job.DefaultLimits":                 "default resource list, only read (resourcesFor writes into a copy)",
	"internal/tools/job.DefaultMax":                    "default resource list, only read (resourcesFor writes into a copy)",
	"internal/tools/kube.Builtins":                     "list of builtin tools",
	"internal/tools/kube.eventsResource":               "a GroupVersionResource value",
	"internal/version.Version":                         "set by the linker (-ldflags -X), never by code",
}

// stateful are package selectors whose types hold state: no package
// variable may have one in its type or value, allowlisted or not.
var stateful = map[string]bool{"sync": true, "atomic": true, "weakcache": true, "prometheus": true}

// Issue 44.6: no mutable package variable in internal/ outside test
// helpers. Every package variable is an immutable kind or on the
// allowlist, none holds a lock, cache or collector, and nothing writes to
// one after its declaration.
func TestNoProcessStateInPackageVariables(t *testing.T) {
	vars, files := scan(t)
	for _, v := range vars {
		if v.inHelper {
			continue
		}
		if kind := v.stateful(); kind != "" {
			t.Errorf("%s: package variable %s holds state (%s): make it a field of a value its owner constructs", v.pos, v.key, kind)
			continue
		}
		if v.immutableKind() {
			continue
		}
		if _, ok := immutable[v.key]; !ok {
			t.Errorf("%s: package variable %s: make it a field of a value its owner constructs, or add it to the allowlist saying why nothing changes it", v.pos, v.key)
		}
	}
	for key := range immutable {
		if !slices.ContainsFunc(vars, func(v pkgVar) bool { return v.key == key }) {
			t.Errorf("the allowlist names %s, which is no longer declared", key)
		}
	}
	byKey := map[string]pkgVar{}
	for _, v := range vars {
		byKey[v.key] = v
	}
	for _, f := range files {
		for _, w := range f.writes(byKey) {
			t.Error(w)
		}
	}
}

// Issue 44.6: one place registers metrics. Outside tests, only the
// operator's register (internal/operator/metrics.go) calls a Register,
// MustRegister or Unregister, and only the operator's wiring names the
// registry it serves (controller-runtime's metrics.Registry).
func TestMetricsAreRegisteredInOnePlace(t *testing.T) {
	_, files := scan(t)
	registers := 0
	for _, f := range files {
		inCode := strings.HasPrefix(f.path, "internal/") || strings.HasPrefix(f.path, "cmd/")
		if strings.HasSuffix(f.path, "_test.go") || !inCode {
			continue
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch sel.Sel.Name {
				case "Register", "MustRegister", "Unregister":
					if f.path != "internal/operator/metrics.go" {
						t.Errorf("%s: %s outside the operator's register", f.fset.Position(n.Pos()), sel.Sel.Name)
					}
					registers++
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && (x.Name+"."+n.Sel.Name == "metrics.Registry" || x.Name == "prometheus" && n.Sel.Name == "DefaultRegisterer") &&
					f.path != "internal/operator/operator.go" {
					t.Errorf("%s: %s.%s named outside the operator's wiring", f.fset.Position(n.Pos()), x.Name, n.Sel.Name)
				}
			}
			return true
		})
	}
	if registers == 0 {
		t.Error("no Register call found at all: is the scan reading internal/operator?")
	}
}

// The write finder itself: every way of writing a package variable is
// found, in its own package and through an import, and a local or a
// parameter of the same name is not mistaken for it.
func TestWrites_findsEveryWriteAndNoLocal(t *testing.T) {
	vars := map[string]pkgVar{"internal/a.m": {}, "internal/a.n": {}, "internal/a.s": {}, "internal/a.c": {}, "internal/b.Exported": {}}
	for _, tc := range []struct {
		name, file, src string
		want            []string // "what key", in order
	}{
		{"assign, index, field, op-assign", "internal/a/a.go", `package a
func f() { m = nil; m["k"] = 1; c.x = 2; n += 3; s = append(s, 1) }`,
			[]string{"assigns to internal/a.m", "assigns to internal/a.m", "assigns to internal/a.c", "assigns to internal/a.n", "assigns to internal/a.s"}},
		{"inc, range, address, delete, clear", "internal/a/a.go", `package a
func f() { n++; for n = range 3 {}; p := &c; _ = p; delete(m, "k"); clear(s) }`,
			[]string{"increments or decrements internal/a.n", "assigns (range) to internal/a.n", "takes the address of internal/a.c", "deletes from internal/a.m", "clears from internal/a.s"}},
		{"through an import, from a test", "internal/c/c_test.go", `package c_test
import b "github.com/agentrun/agentrun/internal/b"
func TestX() { b.Exported = nil; b.Exported["k"] = 1 }`,
			[]string{"assigns to internal/b.Exported", "assigns to internal/b.Exported"}},
		{"a test of the package swaps it", "internal/a/a_test.go", `package a
func TestX() { m = nil }`,
			[]string{"assigns to internal/a.m"}},
		{"locals and parameters of the same name", "internal/a/a.go", `package a
func f(m map[string]int) { m["k"] = 1; n := 1; n++; var s []int; s = append(s, n); c := struct{ x int }{}; c.x = 1; _ = c }
func g() { for n := range 3 { _ = n } }`,
			nil},
		{"the same file declares it", "internal/a/a.go", `package a
var n int
func f() { n = 1 }`,
			[]string{"assigns to internal/a.n"}},
		{"an external test's own variable", "internal/a/a_test.go", `package a_test
var m map[string]int
func TestX() { m = nil }`,
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parseFile(token.NewFileSet(), tc.file, []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range f.writes(vars) {
				// "file:line:col: what key after its declaration"
				w = w[strings.Index(w, ": ")+2:]
				got = append(got, strings.TrimSuffix(w, " after its declaration"))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
		})
	}
}

// pkgVar is one package-level variable declared in a non-test file.
type pkgVar struct {
	key      string // package directory (from the module root) "." name
	pos      token.Position
	typ      ast.Expr // nil when the declaration names none
	value    ast.Expr // nil without an initial value
	inHelper bool
	embedded bool // a //go:embed target
}

// stateful names what in v's type or value holds state, or "".
func (v pkgVar) stateful() string {
	var found string
	for _, e := range []ast.Expr{v.typ, v.value} {
		if e == nil {
			continue
		}
		ast.Inspect(e, func(n ast.Node) bool {
			if found != "" {
				return false
			}
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && stateful[x.Name] {
					found = x.Name + "." + n.Sel.Name
				}
			case *ast.ChanType:
				found = "a channel"
			}
			return true
		})
	}
	return found
}

// immutableKind: an error sentinel, a compiled regexp, a parsed address
// or prefix, files embedded in the binary, or a blank compile-time check.
func (v pkgVar) immutableKind() bool {
	if strings.HasSuffix(v.key, "._") || v.embedded {
		return true
	}
	call, ok := v.value.(*ast.CallExpr)
	if !ok || v.typ != nil {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok {
		return false
	}
	switch x.Name + "." + sel.Sel.Name {
	case "errors.New", "fmt.Errorf", "regexp.MustCompile", "netip.MustParsePrefix", "netip.MustParseAddr":
		return true
	}
	return false
}

// goFile is one parsed file of the module, test files included (a test
// that swaps a package variable is a writer too).
type goFile struct {
	path    string // from the module root
	pkgDir  string // its directory, from the module root
	ast     *ast.File
	fset    *token.FileSet
	imports map[string]string // local name -> package directory from the module root (internal ones only)
	top     map[*ast.ValueSpec]bool
}

func scan(t *testing.T) ([]pkgVar, []goFile) {
	t.Helper()
	fset := token.NewFileSet()
	var vars []pkgVar
	var files []goFile
	err := filepath.WalkDir(root, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, file)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == "testdata" || (strings.HasPrefix(d.Name(), ".") && rel != ".") || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(file, ".go") {
			return nil
		}
		src, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		gf, err := parseFile(fset, rel, src)
		if err != nil {
			return err
		}
		f, dir := gf.ast, gf.pkgDir
		test := strings.HasSuffix(file, "_test.go")
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				if test || !strings.HasPrefix(dir, "internal/") {
					continue
				}
				embedded := hasEmbed(g, vs)
				for i, n := range vs.Names {
					v := pkgVar{key: dir + "." + n.Name, pos: fset.Position(n.Pos()), typ: vs.Type, embedded: embedded,
						inHelper: slices.ContainsFunc(helpers, func(h string) bool { return dir == h || strings.HasPrefix(dir, h+"/") })}
					if i < len(vs.Values) {
						v.value = vs.Values[i]
					}
					vars = append(vars, v)
				}
			}
		}
		files = append(files, gf)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(vars) < 50 {
		t.Fatalf("found only %d package variables under internal/: is the walk reading the module?", len(vars))
	}
	return vars, files
}

// parseFile parses one file of the module, at rel from its root.
func parseFile(fset *token.FileSet, rel string, src []byte) (goFile, error) {
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
	if err != nil {
		return goFile{}, err
	}
	gf := goFile{path: rel, pkgDir: path.Dir(rel), ast: f, fset: fset, imports: map[string]string{}, top: map[*ast.ValueSpec]bool{}}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if !strings.HasPrefix(p, module+"/") {
			continue
		}
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		gf.imports[name] = strings.TrimPrefix(p, module+"/")
	}
	for _, decl := range f.Decls {
		if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, s := range g.Specs {
				gf.top[s.(*ast.ValueSpec)] = true
			}
		}
	}
	return gf, nil
}

// hasEmbed reports a //go:embed line in the comments of the declaration.
func hasEmbed(g *ast.GenDecl, vs *ast.ValueSpec) bool {
	for _, cg := range []*ast.CommentGroup{g.Doc, vs.Doc} {
		if cg == nil {
			continue
		}
		for _, c := range cg.List {
			if strings.HasPrefix(c.Text, "//go:embed") {
				return true
			}
		}
	}
	return false
}

// writes lists every place in f that changes a package variable of
// internal/ after its declaration: an assignment to it or into it (an
// element, a field), ++ or --, a range that assigns it, its address
// taken, delete or clear on it.
func (f goFile) writes(vars map[string]pkgVar) []string {
	var out []string
	external := strings.HasSuffix(f.ast.Name.Name, "_test")
	report := func(e ast.Expr, what string) {
		if key := f.target(e, external); key != "" {
			if v, ok := vars[key]; ok && !v.inHelper {
				out = append(out, fmt.Sprintf("%s: %s %s after its declaration", f.fset.Position(e.Pos()), what, key))
			}
		}
	}
	for _, decl := range f.ast.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for _, l := range n.Lhs {
					report(l, "assigns to")
				}
			case *ast.IncDecStmt:
				report(n.X, "increments or decrements")
			case *ast.RangeStmt:
				if n.Tok == token.ASSIGN {
					for _, e := range []ast.Expr{n.Key, n.Value} {
						if e != nil {
							report(e, "assigns (range) to")
						}
					}
				}
			case *ast.UnaryExpr:
				if n.Op == token.AND {
					report(n.X, "takes the address of")
				}
			case *ast.CallExpr:
				if id, ok := n.Fun.(*ast.Ident); ok && (id.Name == "delete" || id.Name == "clear") && len(n.Args) > 0 {
					report(n.Args[0], id.Name+"s from")
				}
			}
			return true
		})
	}
	return out
}

// target is the package variable an expression writes through ("dir.name"),
// or "" when it is a local, a parameter or not a variable of the module.
func (f goFile) target(e ast.Expr, external bool) string {
	for {
		switch x := e.(type) {
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.SelectorExpr:
			if id, ok := x.X.(*ast.Ident); ok && id.Obj == nil {
				if dir, ok := f.imports[id.Name]; ok {
					return dir + "." + x.Sel.Name
				}
			}
			e = x.X
		case *ast.Ident:
			if x.Name == "_" || external {
				return ""
			}
			// Unresolved in the file: declared at package level in
			// another file (or a builtin). Resolved: a package variable
			// only if its declaration is a top-level one.
			if x.Obj != nil {
				vs, ok := x.Obj.Decl.(*ast.ValueSpec)
				if !ok || !f.top[vs] {
					return ""
				}
			}
			return f.pkgDir + "." + x.Name
		default:
			return ""
		}
	}
}
