// Package testenv starts a real kube-apiserver and etcd (envtest) with the
// AgentRun CRD installed, for tests of controller behaviour. The binaries
// are built from Go modules by hack/envtest-bins.sh and cached outside the
// repository; KUBEBUILDER_ASSETS, when set, wins.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Scheme knows the built-in kinds and AgentRun.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// RepoRoot finds the repository root from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Assets returns the directory of the envtest binaries, building them on
// first use.
func Assets() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "envtest-bins.sh"))
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/envtest-bins.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Start starts an API server with the AgentRun CRD. extraArgs are added to
// kube-apiserver's flags (e.g. "--authorization-mode=RBAC").
func Start(extraArgs ...string) (*envtest.Environment, *rest.Config, error) {
	assets, err := Assets()
	if err != nil {
		return nil, nil, err
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme,
	}
	for _, a := range extraArgs {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		env.ControlPlane.GetAPIServer().Configure().Set(k, v)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, err
	}
	return env, cfg, nil
}
