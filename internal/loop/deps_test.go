package loop

import (
	"os/exec"
	"strings"
	"testing"
)

// The engine must stay free of Kubernetes: it is driven by the operator,
// by `make dev` and by `agentrun local` alike.
func TestPackageImportsNoKubernetes(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "sigs.k8s.io/") {
			t.Errorf("internal/loop depends on %s", p)
		}
	}
}
