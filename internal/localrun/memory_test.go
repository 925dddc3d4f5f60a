package localrun

import "testing"

// agentrun local has no archive to keep a memory in: a run with
// spec.memory is refused before anything runs, saying where it can run.
func TestRun_aRunWithMemoryIsRefusedSayingWhy(t *testing.T) {
	r := run(t, `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: remembers}
spec:
  goal: Remember the gateway.
  model: {provider: scripted, script: [{content: done}]}
  budget: {maxTurns: 2}
  memory: {name: notes}
  tools: [{name: remember, builtin: memory.remember}]
`, Options{})
	r.mustExit(t, ExitUsage)
	mustContain(t, "stderr", r.stderr,
		`AgentRun "remembers" sets spec.memory, which is kept in the operator's archive (PostgreSQL); agentrun local has no archive`,
		"--archive-postgres-dsn")
}
