package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Issue 44 item 8 found facts written again as features landed: conflict
// retry loops, event-time helpers, usage conversions, own-write caches.
// Each now has one home; this holds them there. A new place that needs one
// of these calls the home instead (the failure names it).
func TestOneHomeForEachFact(t *testing.T) {
	files := parseTree(t, "../../internal", "../../cmd")
	homes := map[string]struct {
		want []string
		use  string
	}{
		"retries a write on a conflict in a loop": {
			// One per object: a budget, a run (its reconcile, and its end
			// after repeated panics, outside any reconcile), a run's saves
			// record.
			want: []string{"internal/budget/write.go", "internal/controller/agentrun_controller.go",
				"internal/controller/panics.go", "internal/controller/rollback.go"},
			use: "budget.Ledgers.Write for a budget; for a run, a phase returns errConflict and reconcile reads the run again",
		},
		"reads when an Event was seen": {
			want: []string{"internal/kubeevent/kubeevent.go"},
			use:  "kubeevent.LastSeen",
		},
		"converts between loop.Usage and UsageStatus": {
			want: []string{"internal/limits/limits.go"},
			use:  "limits.Usage and limits.UsageStatus",
		},
		"keeps the versions its own writes replaced": {
			want: []string{"internal/ownwrite/ownwrite.go"},
			use:  "ownwrite.Writes",
		},
	}
	got := map[string][]string{}
	for path, f := range files {
		for fact := range homes {
			if holds(fact, f) {
				got[fact] = append(got[fact], path)
			}
		}
	}
	for fact, home := range homes {
		slices.Sort(got[fact])
		if diff := cmp.Diff(home.want, got[fact]); diff != "" {
			t.Errorf("files that %s (-want +got); use %s:\n%s", fact, home.use, diff)
		}
	}
}

// holds reports whether f does what fact names.
func holds(fact string, f *ast.File) bool {
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		switch fact {
		case "retries a write on a conflict in a loop":
			var body *ast.BlockStmt
			switch l := n.(type) {
			case *ast.ForStmt:
				body = l.Body
			case *ast.RangeStmt:
				body = l.Body
			}
			found = found || body != nil && mentions(body, "Conflict") && rereads(body)
		case "reads when an Event was seen":
			s, ok := n.(*ast.SelectorExpr)
			found = found || ok && (s.Sel.Name == "LastObservedTime" || s.Sel.Name == "LastTimestamp")
		case "converts between loop.Usage and UsageStatus":
			fn, ok := n.(*ast.FuncDecl)
			if ok {
				in, out := typesOf(fn.Type.Params), typesOf(fn.Type.Results)
				found = found || strings.Contains(in, "UsageStatus") && strings.Contains(out, "loop.Usage") ||
					strings.Contains(in, "loop.Usage") && strings.Contains(out, "UsageStatus")
			}
		case "keeps the versions its own writes replaced":
			// A set of resourceVersions: map[string]bool named for them.
			fld, ok := n.(*ast.Field)
			if ok && typeText(fld.Type) == "map[string]bool" {
				for _, name := range fld.Names {
					found = found || name.Name == "ours"
				}
			}
		}
		return true
	})
	return found
}

// mentions reports whether body names an identifier holding word
// (apierrors.IsConflict, an errConflict sentinel), outside any function
// literal (whose loop is its own).
func mentions(body *ast.BlockStmt, word string) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if _, lit := n.(*ast.FuncLit); lit {
			return false
		}
		if id, ok := n.(*ast.Ident); ok && strings.Contains(id.Name, word) {
			found = true
		}
		return !found
	})
	return found
}

// rereads reports whether body reads an object again: it calls Get, or a
// function whose name starts with read.
func rereads(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if _, lit := n.(*ast.FuncLit); lit {
			return false
		}
		if c, ok := n.(*ast.CallExpr); ok {
			name := ""
			switch f := c.Fun.(type) {
			case *ast.SelectorExpr:
				name = f.Sel.Name
			case *ast.Ident:
				name = f.Name
			}
			found = found || name == "Get" || strings.HasPrefix(strings.ToLower(name), "read")
		}
		return !found
	})
	return found
}

func typesOf(l *ast.FieldList) string {
	if l == nil {
		return ""
	}
	var out []string
	for _, f := range l.List {
		out = append(out, typeText(f.Type))
	}
	return strings.Join(out, ",")
}

// typeText prints a type expression as written.
func typeText(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return typeText(e.X) + "." + e.Sel.Name
	case *ast.StarExpr:
		return "*" + typeText(e.X)
	case *ast.MapType:
		return "map[" + typeText(e.Key) + "]" + typeText(e.Value)
	case *ast.ArrayType:
		return "[]" + typeText(e.Elt)
	}
	return "?"
}

// parseTree parses the Go files under dirs, test files left out, by path
// from the repository root.
func parseTree(t *testing.T, dirs ...string) map[string]*ast.File {
	t.Helper()
	out := map[string]*ast.File{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel("../..", path)
			out[filepath.ToSlash(rel)] = f
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}
