package mcptool

import "github.com/modelcontextprotocol/go-sdk/mcp"

// Hints is what an MCP server says about a tool's effects in the tool's
// annotations. Servers are not trusted to loosen what the manifest
// declares; their hints can only make a tool be treated more carefully
// (see Tighten).
type Hints struct {
	// Annotated is false when the server sent no annotations for the
	// tool. It then says nothing, and the other fields are false.
	Annotated bool
	// ReadOnly is the server's readOnlyHint.
	ReadOnly bool
	// Destructive is the server's destructiveHint, which the MCP
	// specification defaults to true when absent. It is meaningful only
	// for a tool that is not read-only, and false for one that is.
	Destructive bool
}

// HintsFrom reads a tool's annotations. When a server annotates a tool,
// absent hints take the specification's defaults: not read-only, and, if
// not read-only, destructive. (The SDK cannot tell an absent readOnlyHint
// from false; both mean "may modify its environment".)
func HintsFrom(a *mcp.ToolAnnotations) Hints {
	if a == nil {
		return Hints{}
	}
	h := Hints{Annotated: true, ReadOnly: a.ReadOnlyHint}
	if !h.ReadOnly {
		h.Destructive = a.DestructiveHint == nil || *a.DestructiveHint
	}
	return h
}

// Mutating reports whether the server says the tool may change its
// environment (readOnlyHint false).
func (h Hints) Mutating() bool { return h.Annotated && !h.ReadOnly }

// Irreversible reports whether the server says the tool's changes may be
// destructive (destructiveHint true, or absent, on a tool that is not
// read-only).
func (h Hints) Irreversible() bool { return h.Mutating() && h.Destructive }

// Tighten combines what the manifest declares about a tool with what its
// MCP server says. Hints may only tighten: a tool the server calls
// mutating is mutating, one it calls destructive is mutating and
// irreversible; a tool the manifest declares mutating or irreversible
// stays so whatever the server says.
func Tighten(declaredMutates, declaredReversible bool, h Hints) (mutates, reversible bool) {
	mutates = declaredMutates || h.Mutating() || h.Irreversible()
	reversible = declaredReversible && !h.Irreversible()
	return mutates, reversible
}
