package crd_test

import (
	"path/filepath"
	"testing"

	"github.com/agentrun/agentrun/internal/testenv"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Every AgentRun, AgentRunTemplate, AgentBudget, AgentSchedule, AgentEvaluation and AgentRunPolicy in config/samples and examples is accepted by the
// API server as written (a server-side dry run: nothing is stored).
func TestSamples_areAcceptedByTheAPIServer(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(repoRoot, "config", "samples", "*.yaml"))
	more, _ := filepath.Glob(filepath.Join(repoRoot, "config", "samples", "*", "*.yaml"))
	examples, _ := filepath.Glob(filepath.Join(repoRoot, "examples", "*", "*.yaml"))
	files = append(append(files, more...), examples...)
	if len(files) < 8 {
		t.Fatalf("found %d sample files", len(files))
	}
	ctx := testContext(t)
	runs := 0
	for _, f := range files {
		objs, err := testenv.ReadObjects(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs {
			switch obj.GetKind() {
			case "AgentRun", "AgentRunTemplate", "AgentBudget", "AgentSchedule", "AgentEvaluation":
				obj.SetNamespace(namespaceOf(ctx))
			case "AgentRunPolicy": // cluster-scoped
			default:
				continue
			}
			runs++
			if err := k8sClient.Create(ctx, obj, client.DryRunAll); err != nil {
				t.Errorf("%s: %s is rejected: %v", f, obj.GetName(), err)
			}
		}
	}
	t.Logf("%d AgentRuns, AgentRunTemplates, AgentBudgets and AgentRunPolicies in %d files accepted", runs, len(files))
}
