package mcptool_test

import (
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrun/agentrun/internal/tools/mcptool"
)

// The manifest declares a tool read-only; its server annotates it as
// destructive. The run treats it as mutating and irreversible, so policy
// asks a person before it runs.
func ExampleTighten() {
	destructive := true
	hints := mcptool.HintsFrom(&mcp.ToolAnnotations{DestructiveHint: &destructive})

	mutates, reversible := mcptool.Tighten(false, true, hints)
	fmt.Println("mutates:", mutates, "reversible:", reversible)

	// A server cannot loosen what the manifest declares.
	mutates, reversible = mcptool.Tighten(true, false, mcptool.HintsFrom(&mcp.ToolAnnotations{ReadOnlyHint: true}))
	fmt.Println("mutates:", mutates, "reversible:", reversible)
	// Output:
	// mutates: true reversible: false
	// mutates: true reversible: false
}
