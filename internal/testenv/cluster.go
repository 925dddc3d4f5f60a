package testenv

import (
	"context"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Cluster is the API server a test package's TestMain started
// (MainCluster): its config and a client of its administrator.
type Cluster struct {
	Config *rest.Config
	Client client.Client
}

// MainCluster is Main for a package whose tests need only the API server
// and an administrator's client: it fills c before the tests run, and
// discards controller-runtime's log.
func MainCluster(m interface{ Run() int }, c *Cluster) int {
	ctrl.SetLogger(logr.Discard())
	return Main(m, func(_ *envtest.Environment, cfg *rest.Config) (func() error, error) {
		admin, err := client.New(cfg, client.Options{Scheme: Scheme})
		c.Config, c.Client = cfg, admin
		return nil, err
	})
}

// Namespace creates a namespace of the test's own (a generated name) and
// returns its name.
func Namespace(t TB, c client.Client) string {
	t.Helper()
	return NamespaceNamed(t, c, "ar-test")
}

// NamespaceNamed is Namespace with a name that starts with prefix, for a
// test whose namespace shows in what it reads (a page, a URL).
func NamespaceNamed(t TB, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// CleanupTB is the part of testing.TB that StartManager uses (testenv
// does not import testing: devenv links it into commands).
type CleanupTB interface {
	TB
	Errorf(format string, args ...any)
	Cleanup(func())
}

// StartManager runs a manager against cfg whose cache holds the objects
// of namespace ns only, with the reconcilers add sets up on it, until the
// test ends.
func StartManager(t CleanupTB, cfg *rest.Config, ns string, add func(ctrl.Manager) error) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := add(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}
