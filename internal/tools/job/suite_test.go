package job

import (
	"os"
	"testing"

	"github.com/agentrun/agentrun/internal/testenv"
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
	os.Exit(testenv.Main(m, func(_ *envtest.Environment, cfg *rest.Config) (func() error, error) {
		restCfg = cfg
		var err error
		if k8sClient, err = client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme}); err != nil {
			return nil, err
		}
		clientset, err = kubernetes.NewForConfig(cfg)
		return nil, err
	}))
}
