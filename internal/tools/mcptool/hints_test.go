package mcptool

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestHintsFrom(t *testing.T) {
	yes, no := true, false
	for name, tc := range map[string]struct {
		in   *mcp.ToolAnnotations
		want Hints
	}{
		"no annotations":             {in: nil, want: Hints{}},
		"read-only":                  {in: &mcp.ToolAnnotations{ReadOnlyHint: true}, want: Hints{Annotated: true, ReadOnly: true}},
		"read-only, destructive set": {in: &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &yes}, want: Hints{Annotated: true, ReadOnly: true}},
		"title only: spec defaults":  {in: &mcp.ToolAnnotations{Title: "Refund"}, want: Hints{Annotated: true, Destructive: true}},
		"mutating, not destructive":  {in: &mcp.ToolAnnotations{DestructiveHint: &no}, want: Hints{Annotated: true}},
		"mutating, destructive":      {in: &mcp.ToolAnnotations{DestructiveHint: &yes}, want: Hints{Annotated: true, Destructive: true}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, HintsFrom(tc.in)); diff != "" {
				t.Errorf("HintsFrom (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTighten_hintsOnlyTighten(t *testing.T) {
	readOnly := Hints{Annotated: true, ReadOnly: true}
	additive := Hints{Annotated: true}
	destructive := Hints{Annotated: true, Destructive: true}
	silent := Hints{}
	type decl struct{ mutates, reversible bool }
	for _, tc := range []struct {
		declared decl
		hints    Hints
		want     decl
	}{
		// The server cannot loosen the manifest.
		{declared: decl{true, false}, hints: readOnly, want: decl{true, false}},
		{declared: decl{true, true}, hints: readOnly, want: decl{true, true}},
		{declared: decl{true, false}, hints: silent, want: decl{true, false}},
		{declared: decl{false, true}, hints: silent, want: decl{false, true}},
		{declared: decl{false, true}, hints: readOnly, want: decl{false, true}},
		// It can tighten it.
		{declared: decl{false, true}, hints: additive, want: decl{true, true}},
		{declared: decl{false, true}, hints: destructive, want: decl{true, false}},
		{declared: decl{true, true}, hints: destructive, want: decl{true, false}},
		{declared: decl{true, false}, hints: additive, want: decl{true, false}},
	} {
		t.Run(fmt.Sprintf("%+v/%+v", tc.declared, tc.hints), func(t *testing.T) {
			m, r := Tighten(tc.declared.mutates, tc.declared.reversible, tc.hints)
			if got := (decl{m, r}); got != tc.want {
				t.Errorf("Tighten = %+v, want %+v", got, tc.want)
			}
		})
	}
}
