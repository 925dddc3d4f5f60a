//go:build e2e

// Package e2e runs AgentRuns against a real cluster where the operator was
// installed from its Helm chart and tool Jobs run in real pods: `make e2e`
// (hack/e2e.mk) brings up the e2e cluster, builds and loads the operator's
// image, installs the chart and runs these tests. They are behind the e2e
// build tag, so `go test ./...` does not compile them.
//
// Each test works in its own namespace that enforces the Pod Security
// "restricted" profile. Every model is scripted, so nothing leaves the
// machine. Settings come from the environment:
//
//	E2E_KUBECONFIG           admin kubeconfig (default .e2e/kubeconfig)
//	E2E_KUBECTL              kubectl for `kubectl annotate` (default: kubectl on PATH)
//	E2E_KUBECTL_AGENTRUN     the kubectl-agentrun plugin (default: built from ./cmd/kubectl-agentrun)
//	E2E_TESTTOOL_IMAGE       the test-tools image (default agentrun.local/testtool:e2e)
//	E2E_OPERATOR_NAMESPACE   where the chart is installed (default agentrun-system)
//	E2E_RELEASE              the Helm release (default agentrun)
//	E2E_KEEP=1               keep each test's namespace
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/tools/job"
	"github.com/agentrun/agentrun/internal/tools/job/entrypoint"
	"github.com/agentrun/agentrun/internal/transcript"
)

// Bounds of the waits. A run here takes a few seconds: a tool pod starts
// in about 3 s on the e2e node.
const (
	runTimeout = 3 * time.Minute
	poll       = 250 * time.Millisecond
)

var (
	cl             client.WithWatch
	clientset      *kubernetes.Clientset
	kubeconfig     string
	testtoolImage  = envOr("E2E_TESTTOOL_IMAGE", "agentrun.local/testtool:e2e")
	operatorNS     = envOr("E2E_OPERATOR_NAMESPACE", "agentrun-system")
	release        = envOr("E2E_RELEASE", "agentrun")
	operatorLabels = client.MatchingLabels{"app.kubernetes.io/name": "agentrun", "app.kubernetes.io/instance": release}
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	kubeconfig = envOr("E2E_KUBECONFIG", filepath.Join("..", "..", ".e2e", "kubeconfig"))
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: no cluster (%v): run make e2e, or make e2e-cluster and set E2E_KUBECONFIG\n", err)
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = 50, 100
	if cl, err = client.NewWithWatch(cfg, client.Options{Scheme: kubescheme.Scheme}); err != nil {
		panic(err)
	}
	if clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		panic(err)
	}
	code := m.Run()
	if pluginDir != "" {
		_ = os.RemoveAll(pluginDir)
	}
	os.Exit(code)
}

// newNamespace makes the test's namespace, enforcing the restricted Pod
// Security profile, and deletes it afterwards (E2E_KEEP=1 keeps it). A
// failed test prints what the namespace holds and the operator's log.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: prefix + "-" + rand.String(5),
		Labels: map[string]string{
			"pod-security.kubernetes.io/enforce":         "restricted",
			"pod-security.kubernetes.io/enforce-version": "latest",
			"e2e.agentrun.dev/test":                      "true",
		},
	}}
	ctx := context.Background()
	if err := cl.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	t.Cleanup(func() {
		if t.Failed() {
			dump(t, ns.Name, started)
		}
		if os.Getenv("E2E_KEEP") == "1" {
			t.Logf("keeping namespace %s (E2E_KEEP=1)", ns.Name)
			return
		}
		_ = cl.Delete(context.Background(), ns)
	})
	// Tool pods run as the namespace's default ServiceAccount unless the
	// run names another; it appears shortly after the namespace.
	g := NewWithT(t)
	g.Eventually(func() error {
		return cl.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "default"}, &corev1.ServiceAccount{})
	}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), "the default ServiceAccount of %s", ns.Name)
	return ns.Name
}

// fixture is what a manifest template may use.
type fixture struct {
	Namespace, Name, Image string
}

// createRun creates the AgentRun of a manifest template (text/template
// over fixture), decoded strictly so that a misspelt field fails the test.
func createRun(t *testing.T, ns, name, manifest string) *v1alpha1.AgentRun {
	t.Helper()
	run := &v1alpha1.AgentRun{}
	if err := yaml.UnmarshalStrict(render(t, manifest, fixture{Namespace: ns, Name: name, Image: testtoolImage}), run); err != nil {
		t.Fatalf("the test's manifest: %v", err)
	}
	run.Namespace, run.Name = ns, name
	if err := cl.Create(context.Background(), run); err != nil {
		t.Fatalf("creating AgentRun %s/%s: %v", ns, name, err)
	}
	return run
}

// apply creates the objects of a multi-document manifest template.
func apply(t *testing.T, ns, manifest string) {
	t.Helper()
	for doc := range strings.SplitSeq(string(render(t, manifest, fixture{Namespace: ns, Image: testtoolImage})), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, err := decode([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		obj.SetNamespace(ns)
		if err := cl.Create(context.Background(), obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
}

func decode(b []byte) (client.Object, error) {
	obj, _, err := clientgoscheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	if err != nil {
		return nil, err
	}
	co, ok := obj.(client.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not an object", obj)
	}
	return co, nil
}

func render(t *testing.T, manifest string, data any) []byte {
	t.Helper()
	tpl, err := template.New("manifest").Option("missingkey=error").Parse(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tpl.Execute(&b, data); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// waitRun waits until cond holds for the run, and returns it.
func waitRun(t *testing.T, ns, name, what string, timeout time.Duration, cond func(*v1alpha1.AgentRun) bool) *v1alpha1.AgentRun {
	t.Helper()
	run := &v1alpha1.AgentRun{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, run)).To(Succeed())
		g.Expect(cond(run)).To(BeTrue(), "phase %s, outcome %q, reason %q, turn %d", run.Status.Phase, run.Status.Outcome, run.Status.Reason, run.Status.Turn)
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), "AgentRun %s/%s: %s", ns, name, what)
	return run
}

// waitFinished waits for the run's outcome and checks it.
func waitFinished(t *testing.T, ns, name string, want v1alpha1.Outcome) *v1alpha1.AgentRun {
	t.Helper()
	run := waitRun(t, ns, name, "an outcome", runTimeout, func(r *v1alpha1.AgentRun) bool { return r.Status.Outcome != "" })
	if run.Status.Outcome != want {
		t.Fatalf("outcome %s (%s), want %s", run.Status.Outcome, run.Status.Reason, want)
	}
	return run
}

// observations returns the tool messages of the run's transcript by call
// id: what the model was shown.
func observations(t *testing.T, run *v1alpha1.AgentRun) map[string]loop.Message {
	t.Helper()
	msgs, err := transcript.Read(context.Background(), cl, run)
	if err != nil {
		t.Fatalf("reading the transcript: %v", err)
	}
	out := map[string]loop.Message{}
	for _, m := range msgs {
		if m.Role == loop.RoleTool {
			out[m.CallID] = m
		}
	}
	return out
}

// observation returns what the model saw for one call.
func observation(t *testing.T, run *v1alpha1.AgentRun, callID string) loop.Message {
	t.Helper()
	m, ok := observations(t, run)[callID]
	if !ok {
		t.Fatalf("the transcript has no observation for %s", callID)
	}
	return m
}

// jobsOf lists the run's Jobs, of one call when callID is set.
func jobsOf(t *testing.T, run *v1alpha1.AgentRun, callID string) []batchv1.Job {
	t.Helper()
	sel := client.MatchingLabels{job.LabelRunUID: string(run.UID)}
	if callID != "" {
		sel[job.LabelCallID] = callID
	}
	var jobs batchv1.JobList
	if err := cl.List(context.Background(), &jobs, client.InNamespace(run.Namespace), sel); err != nil {
		t.Fatal(err)
	}
	return jobs.Items
}

// onlyJob returns the one Job of a call, failing if there are more or none.
func onlyJob(t *testing.T, run *v1alpha1.AgentRun, callID string) batchv1.Job {
	t.Helper()
	jobs := jobsOf(t, run, callID)
	if len(jobs) != 1 {
		t.Fatalf("%d Jobs for call %s, want 1", len(jobs), callID)
	}
	return jobs[0]
}

// podsOf lists a Job's pods.
func podsOf(t *testing.T, j *batchv1.Job) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := cl.List(context.Background(), &pods, client.InNamespace(j.Namespace),
		client.MatchingLabels{batchv1.ControllerUidLabel: string(j.UID)}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// toolState returns the terminated state of the tool container of a Job's
// only pod, and the wrapper's summary in its termination message.
func toolState(t *testing.T, j *batchv1.Job) (*corev1.ContainerStateTerminated, entrypoint.Summary) {
	t.Helper()
	pods := podsOf(t, j)
	if len(pods) != 1 {
		t.Fatalf("Job %s has %d pods, want 1", j.Name, len(pods))
	}
	for _, s := range pods[0].Status.ContainerStatuses {
		if s.Name == job.ToolContainer && s.State.Terminated != nil {
			sum, err := entrypoint.ParseSummary(s.State.Terminated.Message)
			if err != nil {
				t.Fatalf("pod %s: %v", pods[0].Name, err)
			}
			return s.State.Terminated, sum
		}
	}
	t.Fatalf("pod %s: the tool container has not terminated", pods[0].Name)
	return nil, entrypoint.Summary{}
}

// kubectl runs the kubectl a person would, against the e2e cluster.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	bin := envOr("E2E_KUBECTL", "kubectl")
	cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var (
	pluginOnce sync.Once
	pluginDir  string
	pluginErr  error
)

// kubectlAgentrun runs `kubectl agentrun ARGS` as a person would: kubectl
// finds the plugin on PATH and hands it the arguments. It returns the
// combined output and the exit status; it fails the test only when the
// command could not be started.
func kubectlAgentrun(t *testing.T, args ...string) (string, int) {
	t.Helper()
	pluginOnce.Do(func() {
		// kubectl finds plugins by name on PATH: a directory of our own
		// holds the one under test.
		if pluginDir, pluginErr = os.MkdirTemp("", "e2e-plugin"); pluginErr != nil {
			return
		}
		bin := os.Getenv("E2E_KUBECTL_AGENTRUN")
		if bin == "" { // built once per test binary
			out, err := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(pluginDir, "kubectl-agentrun"), "../../cmd/kubectl-agentrun").CombinedOutput()
			if err != nil {
				pluginErr = fmt.Errorf("building kubectl-agentrun: %v\n%s", err, out)
			}
			return
		}
		if bin, pluginErr = filepath.Abs(bin); pluginErr == nil {
			pluginErr = os.Symlink(bin, filepath.Join(pluginDir, "kubectl-agentrun"))
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	kc, err := filepath.Abs(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(envOr("E2E_KUBECTL", "kubectl"), append([]string{"agentrun"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kc)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("kubectl agentrun %s: %v\n%s", strings.Join(args, " "), err, out)
	return "", -1
}

// operatorPods lists the operator's pods that are not being deleted.
func operatorPods(t *testing.T) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := cl.List(context.Background(), &pods, client.InNamespace(operatorNS), operatorLabels); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// dump prints what a failed test's namespace holds, and the operator's log
// since the test started.
func dump(t *testing.T, ns string, since time.Time) {
	ctx := context.Background()
	var runs v1alpha1.AgentRunList
	if err := cl.List(ctx, &runs, client.InNamespace(ns)); err == nil {
		for i := range runs.Items {
			r := &runs.Items[i]
			r.ManagedFields, r.Status.Checkpoint = nil, nil
			b, _ := yaml.Marshal(r)
			t.Logf("AgentRun %s:\n%s", r.Name, b)
			if msgs, err := transcript.Read(ctx, cl, r); err == nil {
				for _, m := range msgs {
					t.Logf("  [t%d] %s %s %s %s: %.300s", m.Turn, m.Role, m.CallID, m.Tool, m.Status, m.Content)
				}
			}
		}
	}
	var jobs batchv1.JobList
	if err := cl.List(ctx, &jobs, client.InNamespace(ns)); err == nil {
		for _, j := range jobs.Items {
			t.Logf("Job %s uid %s created %s: active %d succeeded %d failed %d conditions %+v", j.Name, j.UID,
				j.CreationTimestamp.Format(time.RFC3339), j.Status.Active, j.Status.Succeeded, j.Status.Failed, j.Status.Conditions)
		}
	}
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(ns)); err == nil {
		for _, p := range pods.Items {
			t.Logf("Pod %s: %s %s %s", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
			for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
				t.Logf("  container %s: %+v", s.Name, s.State)
			}
		}
	}
	var events corev1.EventList
	if err := cl.List(ctx, &events, client.InNamespace(ns)); err == nil {
		for _, e := range events.Items {
			t.Logf("Event %s %s/%s %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	var pods2 corev1.PodList
	if err := cl.List(ctx, &pods2, client.InNamespace(operatorNS), operatorLabels); err == nil {
		s := metav1.NewTime(since)
		for _, p := range pods2.Items {
			b, err := clientset.CoreV1().Pods(operatorNS).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &s}).DoRaw(ctx)
			if err != nil {
				t.Logf("operator pod %s: no log: %v", p.Name, err)
				continue
			}
			var keep []string
			for l := range strings.Lines(string(b)) {
				if strings.Contains(l, ns) || strings.Contains(l, "ERROR") || strings.Contains(l, "error") {
					keep = append(keep, strings.TrimRight(l, "\n"))
				}
			}
			if len(keep) > 80 {
				keep = keep[len(keep)-80:]
			}
			t.Logf("operator pod %s, log lines about %s or errors:\n%s", p.Name, ns, strings.Join(keep, "\n"))
		}
	}
}
