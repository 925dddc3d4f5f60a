package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The chart grants the operator exactly the rules that controller-gen
// generates from the controller's +kubebuilder:rbac markers
// (config/rbac/role.yaml), installs exactly the generated CRDs, and the
// approval admission policies and user roles of config/: all are copies
// that `make manifests` refreshes.
func TestChart_rbacAndCRDsAreTheGeneratedOnes(t *testing.T) {
	root := filepath.Join("..", "..")
	same := func(generated, copied string) {
		t.Helper()
		want, err := os.ReadFile(filepath.Join(root, generated))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, copied))
		if err != nil {
			t.Fatalf("%v: run make manifests", err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("%s differs from %s: run make manifests", copied, generated)
		}
	}
	same("config/rbac/role.yaml", "charts/agentrun/files/role.yaml")
	same("config/rbac/aggregated_roles.yaml", "charts/agentrun/files/aggregated_roles.yaml")
	same("config/admission/approval-policy.yaml", "charts/agentrun/files/admission/approval-policy.yaml")
	same("config/admission/approver-identity.yaml", "charts/agentrun/files/admission/approver-identity.yaml")
	crds, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	for _, c := range crds {
		name := filepath.Base(c)
		same(filepath.Join("config", "crd", "bases", name), filepath.Join("charts", "agentrun", "crds", name))
	}
}
