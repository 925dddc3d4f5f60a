package agentbudget

import (
	"os"
	"testing"

	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// cluster is the test API server (envtest) this package's tests share.
var cluster testenv.Cluster

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(testenv.MainCluster(m, &cluster))
}
