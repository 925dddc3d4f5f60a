package job

import (
	"fmt"
	"os"
	"testing"

	"github.com/agentrun/agentrun/internal/testenv"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	env, cfg, err := testenv.Start()
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
