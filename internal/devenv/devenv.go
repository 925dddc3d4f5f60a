// Package devenv is the local control plane of `make dev` and `make demo`:
// etcd and kube-apiserver on loopback (built from Go modules, see
// hack/envtest-bins.sh), the CRDs, approval admission policies and user
// roles the chart installs, and the operator
// running in-process with job tools as local processes.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/operator"
	"github.com/agentrun/agentrun/internal/testenv"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Env is a running local control plane with the operator.
type Env struct {
	Config     *rest.Config
	Kubeconfig string
	env        *envtest.Environment
	cancel     context.CancelFunc
	done       chan error
}

// Start brings up the control plane, writes an admin kubeconfig to
// kubeconfigPath and starts the operator. Stop tears everything down.
func Start(kubeconfigPath, toolsDir string) (*Env, error) {
	env, cfg, err := testenv.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	e := &Env{Config: cfg, env: env, done: make(chan error, 1)}
	user, err := env.AddUser(envtest.User{Name: "agentrun-dev", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	if kubeconfigPath != "" {
		if err := os.MkdirAll(filepath.Dir(kubeconfigPath), 0o755); err != nil {
			_ = env.Stop()
			return nil, err
		}
		if err := os.WriteFile(kubeconfigPath, kc, 0o600); err != nil {
			_ = env.Stop()
			return nil, err
		}
		e.Kubeconfig = kubeconfigPath
	}
	// What the chart installs besides the CRDs: the approval admission
	// policies and the user roles, so that approving, and who approved,
	// behave as in a cluster.
	admin, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err == nil {
		err = testenv.Apply(context.Background(), admin, testenv.ChartPolicies...)
	}
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("installing the approval policies and roles: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		// Development: models and tools on this machine (a local Ollama,
		// a fake) and on the local network are allowed; the cloud
		// metadata addresses and the API server stay refused.
		e.done <- operator.Run(ctx, cfg, operator.Options{LocalTools: true, LocalDir: toolsDir, Workers: 4, AgainInProcess: true,
			EgressAllow: egress.Loopback, EgressAllowPrivate: true})
	}()
	// Fail fast when the operator cannot start.
	select {
	case err := <-e.done:
		_ = env.Stop()
		return nil, fmt.Errorf("starting the operator: %w", err)
	case <-time.After(500 * time.Millisecond):
	}
	return e, nil
}

// Stop stops the operator and the control plane.
func (e *Env) Stop() error {
	e.cancel()
	var err error
	select {
	case err = <-e.done:
	case <-time.After(10 * time.Second):
		err = errors.New("the operator did not stop within 10s")
	}
	return errors.Join(err, e.env.Stop())
}
