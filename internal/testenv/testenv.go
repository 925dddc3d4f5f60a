// Package testenv starts a real kube-apiserver and etcd (envtest) with the
// AgentRun CRD installed, for tests of controller behaviour. The binaries
// are built from Go modules by hack/envtest-bins.sh and cached outside the
// repository; KUBEBUILDER_ASSETS, when set, wins.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/agentrun/agentrun/internal/kubescheme"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Scheme is kubescheme.Scheme, under the name the tests use.
var Scheme = kubescheme.Scheme

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

// Deps lists the packages the package in the working directory (the
// test's own) links, itself included, as `go list -deps .` prints them;
// an error fails the test with what go said.
func Deps(t TB) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = fmt.Errorf("%w\n%s", err, exit.Stderr)
		}
		t.Fatal(fmt.Sprintf("go list -deps: %v", err))
	}
	return strings.Fields(string(out))
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
		// envtest's default of 20 s is too short on a 2-core machine
		// that is also compiling; KUBEBUILDER_CONTROLPLANE_START_TIMEOUT
		// still overrides it.
		ControlPlaneStartTimeout: startTimeout(),
	}
	for _, a := range extraArgs {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		env.ControlPlane.GetAPIServer().Configure().Set(k, v)
	}
	cfg, err := env.Start()
	if err != nil {
		// A start that failed after the control plane came up (a CRD the
		// API server refuses, say) would leave kube-apiserver and etcd
		// running, orphaned, for as long as the machine runs.
		_ = env.Stop()
		return nil, nil, err
	}
	return env, cfg, nil
}

// startTimeout is how long each control-plane process may take to start.
func startTimeout() time.Duration {
	if v, err := time.ParseDuration(os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT")); err == nil {
		return v
	}
	return 2 * time.Minute
}

// ChartPolicies are what the chart installs besides the CRDs and the
// operator: the approval admission policies and the user roles, as files
// of the repository for Apply.
var ChartPolicies = []string{"config/admission/run-spec.yaml", "config/admission/approval-policy.yaml", "config/admission/approver-identity.yaml",
	"config/admission/platform-policy.yaml", "config/admission/operator-writes.yaml", "config/rbac/aggregated_roles.yaml"}

// Apply creates (or updates) every object of the YAML files under the
// repository root, e.g. "config/admission/approval-policy.yaml", so that a
// test runs against the files the project ships.
func Apply(ctx context.Context, c client.Client, files ...string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	for _, f := range files {
		objs, err := ReadObjects(filepath.Join(root, f))
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if err := c.Create(ctx, obj); apierrors.IsAlreadyExists(err) {
				cur := &unstructured.Unstructured{}
				cur.SetGroupVersionKind(obj.GroupVersionKind())
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
					return err
				}
				obj.SetResourceVersion(cur.GetResourceVersion())
				err = c.Update(ctx, obj)
				if err != nil {
					return fmt.Errorf("%s: updating %s %s: %w", f, obj.GetKind(), obj.GetName(), err)
				}
			} else if err != nil {
				return fmt.Errorf("%s: creating %s %s: %w", f, obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	return nil
}

// Main is a test package's TestMain body (m is its *testing.M): it starts an API server (as
// Start does, with extraArgs), calls setup with it, runs the package's
// tests, then calls the cleanup setup returned (when not nil) and stops
// the server. It returns the exit code for os.Exit; a server that does not
// start, a setup error or a cleanup error is printed and fails the run.
func Main(m interface{ Run() int }, setup func(env *envtest.Environment, cfg *rest.Config) (cleanup func() error, err error), extraArgs ...string) int {
	env, cfg, err := Start(extraArgs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	cleanup, err := setup(env, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "setting up the tests:", err)
		return 1
	}
	code := m.Run()
	if cleanup != nil {
		if err := cleanup(); err != nil {
			fmt.Fprintln(os.Stderr, "cleaning up after the tests:", err)
			return 1
		}
	}
	return code
}

// ReadObjects reads the objects of a YAML or JSON file of one or more
// documents, as written; empty documents are skipped. An error names the
// file.
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// TB is the part of testing.TB that Get uses.
type TB interface {
	Helper()
	Fatal(args ...any)
}

// Get reads obj's latest version from c into a new object of its type
// and returns it; an error fails the test.
func Get[T client.Object](t TB, c client.Reader, obj T) T {
	t.Helper()
	out := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(T)
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Chromium is the path of the Chromium (or Chrome) the browser tests
// drive, or "" when this machine has none (hack/chromium-deps.sh
// installs it).
func Chromium() string {
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	return ""
}

// RunSpecPolicy is the admission policy that keeps an AgentRun's spec as
// it was created (but for cancel and ttlSecondsAfterFinished).
const RunSpecPolicy = "config/admission/run-spec.yaml"

// runSpecProbe is the run EnforceRunSpec edits.
const runSpecProbe = `{"apiVersion": "agents.agentrun.dev/v1alpha1", "kind": "AgentRun",
 "metadata": {"generateName": "run-spec-probe-"},
 "spec": {"goal": "probe", "budget": {"maxTurns": 1}, "model": {"provider": "scripted", "script": [{"content": "ok"}]}}}`

// EnforceRunSpec applies RunSpecPolicy and waits (bounded) until the API
// server enforces it: an admission policy takes effect a moment after it
// is created, when the API server's informer has it. It probes with a run
// of its own in namespace, deleted after.
func EnforceRunSpec(ctx context.Context, c client.Client, namespace string) error {
	if err := Apply(ctx, c, RunSpecPolicy); err != nil {
		return err
	}
	probe := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(runSpecProbe), &probe.Object); err != nil {
		return err
	}
	probe.SetNamespace(namespace)
	if err := c.Create(ctx, probe); err != nil {
		return fmt.Errorf("creating the probe run: %w", err)
	}
	defer func() { _ = c.Delete(context.WithoutCancel(ctx), probe) }()
	last := "no attempt"
	refused := func(err error) bool { return err != nil && strings.Contains(err.Error(), "cannot change once created") }
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := c.Patch(ctx, probe, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"goal":"changed"}}`)))
		if err == nil {
			last = "a change of spec.goal was admitted"
			// Put the goal back, so that the next probe changes it again.
			// The policy may take effect between the two patches: then it
			// refuses this one, and it is enforced.
			err = c.Patch(ctx, probe, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"goal":"probe"}}`)))
			if refused(err) {
				return true, nil
			}
			return false, err
		}
		return refused(err), nil
	})
	if err != nil {
		return fmt.Errorf("the API server did not enforce %s within 30s (%s): %w", RunSpecPolicy, last, err)
	}
	return nil
}
