package agentruntemplate

import (
	"os"
	"testing"

	"github.com/agentrun/agentrun/internal/testenv"
)

// cluster is the test API server (envtest) this package's tests share.
var cluster testenv.Cluster

func TestMain(m *testing.M) { os.Exit(testenv.MainCluster(m, &cluster)) }
