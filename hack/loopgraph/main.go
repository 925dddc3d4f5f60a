// Command loopgraph measures the shape of package internal/loop (issue
// 43): how many methods Engine has, which files end a run (call the
// Engine method finish), which end a turn (endTurn), and how many
// references between the package's files "run back up".
//
// A reference is a use of an identifier that resolves to a top-level
// declaration of the package (a package-level const, var, type or func,
// or a method of a type declared in the package) declared in another
// file. Files A and B depend on each other when A references B and B
// references A; every reference occurrence between two such files, in
// either direction, counts as one that runs back up. Test files are not
// measured.
//
// Usage, from the repository root:
//
//	go run ./hack/loopgraph [-v] [dir]
//
// dir defaults to internal/loop; -v lists the files that depend on each
// other and what they reference.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "list the files that depend on each other")
	flag.Parse()
	dir := "internal/loop"
	if flag.NArg() > 0 {
		dir = flag.Arg(0)
	}
	if err := run(os.Stdout, dir, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "loopgraph:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, dir string, verbose bool) error {
	sh, err := measure(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Engine methods: %d\n", sh.methods)
	fmt.Fprintf(w, "files calling Engine.finish: %d %s\n", len(sh.finishers), sh.finishers)
	fmt.Fprintf(w, "files calling Engine.endTurn: %d %s\n", len(sh.turnEnders), sh.turnEnders)
	fmt.Fprintf(w, "references that run back up: %d (between %d pairs of files)\n", sh.backUp, len(sh.pairs))
	if verbose {
		for _, p := range sh.pairs {
			fmt.Fprintln(w, p)
		}
		if sh.layers == nil {
			fmt.Fprintln(w, "the files' references form a cycle")
		}
		for i, l := range sh.layers {
			fmt.Fprintf(w, "layer %d: %s\n", i, strings.Join(l, " "))
		}
	}
	return nil
}

// shape is what loopgraph measures of a package.
type shape struct {
	methods               int
	finishers, turnEnders []string
	backUp                int
	// pairs describes each pair of files that refer to each other.
	pairs []string
	// layers lists the files by how far they stand above the files that
	// refer to nothing in the package (layer 0), when their references
	// form no cycle; nil when they do.
	layers [][]string
}

func measure(dir string) (*shape, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no Go files in %s", dir)
	}
	exports, err := exportData("./" + filepath.ToSlash(dir))
	if err != nil {
		return nil, err
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		p, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(p)
	})}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, err := conf.Check(files[0].Name.Name, fset, files, info)
	if err != nil {
		return nil, err
	}

	fileOf := func(p token.Pos) string { return filepath.Base(fset.Position(p).Filename) }
	topLevel := func(o types.Object) bool {
		if o.Pkg() != pkg {
			return false
		}
		if o.Parent() == pkg.Scope() {
			return true
		}
		f, ok := o.(*types.Func)
		return ok && f.Signature().Recv() != nil
	}

	refs := map[[2]string]int{} // {from, to} -> occurrences
	used := map[[2]string]map[string]int{}
	finishers, turnEnders := map[string]bool{}, map[string]bool{}
	for id, o := range info.Uses {
		if o == nil || !topLevel(o) {
			continue
		}
		from, to := fileOf(id.Pos()), fileOf(o.Pos())
		if f, ok := o.(*types.Func); ok && isEngineMethod(f) {
			switch f.Name() {
			case "finish":
				finishers[from] = true
			case "endTurn":
				turnEnders[from] = true
			}
		}
		if from != to {
			k := [2]string{from, to}
			refs[k]++
			if used[k] == nil {
				used[k] = map[string]int{}
			}
			used[k][o.Name()]++
		}
	}

	methods := 0
	if obj, ok := pkg.Scope().Lookup("Engine").(*types.TypeName); ok {
		methods = obj.Type().(*types.Named).NumMethods()
	}

	backUp := 0
	var pairs []string
	for k, n := range refs {
		if m := refs[[2]string{k[1], k[0]}]; m > 0 {
			backUp += n
			if k[0] < k[1] {
				pairs = append(pairs, fmt.Sprintf("  %s <-> %s: %d + %d\n    -> %s\n    <- %s", k[0], k[1], n, m,
					counted(used[k]), counted(used[[2]string{k[1], k[0]}])))
			}
		}
	}
	sort.Strings(pairs)

	sh := &shape{methods: methods, finishers: keys(finishers), turnEnders: keys(turnEnders), backUp: backUp, pairs: pairs}
	sh.layers = layered(files, fset, refs)
	return sh, nil
}

// layered puts each file on the layer one above the highest file it
// refers to; it returns nil when the references form a cycle.
func layered(files []*ast.File, fset *token.FileSet, refs map[[2]string]int) [][]string {
	level := map[string]int{}
	for _, f := range files {
		level[filepath.Base(fset.Position(f.Pos()).Filename)] = 0
	}
	// A longest path has at most len(files)-1 edges: one more round that
	// still raises a level means a cycle.
	for range len(files) + 1 {
		raised := false
		for k := range refs {
			if level[k[0]] < level[k[1]]+1 {
				level[k[0]] = level[k[1]] + 1
				raised = true
			}
		}
		if !raised {
			var out [][]string
			for f, l := range level {
				for len(out) <= l {
					out = append(out, nil)
				}
				out[l] = append(out[l], f)
			}
			for _, l := range out {
				sort.Strings(l)
			}
			return out
		}
	}
	return nil
}

func isEngineMethod(f *types.Func) bool {
	recv := f.Signature().Recv()
	if recv == nil {
		return false
	}
	t := recv.Type()
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	return ok && n.Obj().Name() == "Engine"
}

// exportData maps the import paths the package depends on to their
// compiled export data, as the go command builds it (from the cache).
func exportData(pkg string) (map[string]string, error) {
	cmd := exec.Command("go", "list", "-deps", "-export", "-f", "{{.ImportPath}}\t{{.Export}}", pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.String())
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if path, export, ok := strings.Cut(line, "\t"); ok && export != "" {
			m[path] = export
		}
	}
	return m, nil
}

// counted lists the names referenced and how often, most first.
func counted(m map[string]int) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return m[ks[i]] > m[ks[j]] || m[ks[i]] == m[ks[j]] && ks[i] < ks[j] })
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s:%d", k, m[k])
	}
	return b.String()
}

func keys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
