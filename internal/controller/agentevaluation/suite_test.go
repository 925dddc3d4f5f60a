package agentevaluation

import (
	"os"
	"testing"

	"github.com/agentrun/agentrun/internal/testenv"
)

// cluster is the test API server (envtest) this package's tests share.
// The runs are ended by the tests, as the AgentRun reconciler would end
// them: scoring reads only a run's status.
var cluster testenv.Cluster

func TestMain(m *testing.M) { os.Exit(testenv.MainCluster(m, &cluster)) }
