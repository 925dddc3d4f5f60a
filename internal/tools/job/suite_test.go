package job

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The executor's tests run against envtest: a real kube-apiserver and etcd,
// with no controllers and no kubelet. Where a Job would run, the tests
// stand in for the Job controller and the kubelet by creating the Job's pod
// and writing pod and Job status (and the termination message) themselves;
// nothing else of the cluster is faked.
var (
	restCfg   *rest.Config
	k8sClient client.Client
	clientset kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	if err := ensureAssets(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	restCfg = cfg
	if k8sClient, err = client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// ensureAssets sets KUBEBUILDER_ASSETS, when it is unset, from the
// repository's hack/envtest-bins.sh (which builds and caches etcd and
// kube-apiserver, and returns at once when they are cached).
func ensureAssets() error {
	if os.Getenv("KUBEBUILDER_ASSETS") != "" {
		return nil
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("bash", "hack/envtest-bins.sh")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("hack/envtest-bins.sh: %w", err)
	}
	return os.Setenv("KUBEBUILDER_ASSETS", strings.TrimSpace(string(out)))
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "envtest-bins.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no hack/envtest-bins.sh above the working directory")
		}
		dir = parent
	}
}
