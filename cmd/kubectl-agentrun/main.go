// Command kubectl-agentrun is the kubectl plugin for AgentRuns: put it on
// PATH and run `kubectl agentrun --help`. The commands live in
// internal/plugin, the console in internal/console.
package main

import (
	"os"

	"github.com/agentrun/agentrun/internal/console"
	"github.com/agentrun/agentrun/internal/plugin"
)

func main() {
	os.Exit(plugin.Main(os.Args[1:], os.Stdout, os.Stderr, console.Command))
}
