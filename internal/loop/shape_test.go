package loop

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// A function that takes three strings in a row invites swapped arguments
// the compiler cannot catch: such values go in a struct or a named type.
func TestNoFunctionTakesThreeAdjacentStrings(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			fn, ok := n.(*ast.FuncType)
			if !ok || fn.Params == nil {
				return true
			}
			run := 0
			for _, field := range fn.Params.List {
				names := max(len(field.Names), 1)
				if id, ok := field.Type.(*ast.Ident); ok && id.Name == "string" {
					run += names
				} else {
					run = 0
				}
				if run >= 3 {
					t.Errorf("%s: a function takes three or more adjacent string parameters", fset.Position(fn.Pos()))
					break
				}
			}
			return true
		})
	}
}
