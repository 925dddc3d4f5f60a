package localrun_test

import (
	"fmt"
	"strings"

	"github.com/agentrun/agentrun/internal/localrun"
	"github.com/agentrun/agentrun/internal/loop"
)

// A manifest file holds one AgentRun and the Secrets it refers to.
func ExampleParseManifest() {
	m, err := localrun.ParseManifest(strings.NewReader(`
apiVersion: v1
kind: Secret
metadata: {name: openai}
stringData: {api-key: sk-local}
---
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: triage}
spec:
  goal: "Triage the open tickets."
  model: {provider: openai, name: gpt-5.1, apiKeySecretRef: {name: openai, key: api-key}}
  budget: {maxTurns: 6, maxCostUSD: "0.50"}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.Run.Name, m.Run.Spec.Model.Provider, len(m.Secrets), "Secret")
	// Output: triage openai 1 Secret
}

// The outcome of a run is the exit status of agentrun local.
func ExampleExitCode() {
	fmt.Println(localrun.ExitCode(loop.Completed), localrun.ExitCode(loop.LoopDetected), localrun.ExitCode(loop.ToolFailure))
	// Output: 0 4 7
}
