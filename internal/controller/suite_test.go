package controller

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller/agentbudget"
	"github.com/agentrun/agentrun/internal/controller/agentruntemplate"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/seal"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/agentrun/agentrun/internal/tools/job"
	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

var (
	restCfg *rest.Config
	// testEnv adds users that authenticate as themselves (AddUser).
	testEnv   *envtest.Environment
	k8sClient client.Client
	// testKeys seal runs' state for every operator the tests start, as
	// the key Secret does for an operator's replicas and restarts.
	testKeys = seal.Ephemeral()
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	flag.Parse()
	var apiServerArgs []string
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		// BenchmarkTTL reads etcd's object counts from the API server's
		// metrics, which it refreshes every minute by default.
		apiServerArgs = append(apiServerArgs, "--etcd-count-metric-poll-period=1s")
	}
	os.Exit(testenv.Main(m, func(env *envtest.Environment, cfg *rest.Config) (func() error, error) {
		restCfg, testEnv = cfg, env
		var err error
		admin, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.Scheme})
		if err != nil {
			return nil, err
		}
		k8sClient = throughParamSync(admin)
		// The API server runs with RBAC and the approval admission policies
		// and roles the project ships.
		if err := installApprovalPolicies(context.Background()); err != nil {
			return nil, fmt.Errorf("installing the approval policies: %w", err)
		}
		return nil, nil
	}, apiServerArgs...))
}

// throughParamSync sends a write again while the API server refuses it
// because an admission policy's parameter informer (agentrun-platform's
// AgentRunPolicy) is "not yet synced to use for admission", for up to 30
// seconds: with both cores busy the server was seen refusing a burst of
// creates that way in the middle of the suite. It fails closed by design;
// the tests are about the operator, not about that window.
func throughParamSync(c client.WithWatch) client.WithWatch {
	again := func(ctx context.Context, write func() error) error {
		var err error
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			err = write()
			return err == nil || !strings.Contains(err.Error(), "not yet synced to use for admission"), nil
		})
		return err
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return again(ctx, func() error { return c.Create(ctx, obj, opts...) })
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return again(ctx, func() error { return c.Update(ctx, obj, opts...) })
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return again(ctx, func() error { return c.Patch(ctx, obj, patch, opts...) })
		},
	})
}

// tools is a toolbox for tests: it counts every execution by call id and
// answers from per-tool functions.
type tools struct {
	mu    sync.Mutex
	runs  map[string]int
	funcs map[string]func(ctx context.Context, inv loop.Invocation) loop.Result
}

func newTools() *tools {
	return &tools{runs: map[string]int{}, funcs: map[string]func(context.Context, loop.Invocation) loop.Result{}}
}

func (t *tools) Execute(ctx context.Context, inv loop.Invocation) loop.Result {
	t.mu.Lock()
	t.runs[inv.CallID+":"+inv.Tool]++
	f := t.funcs[inv.Tool]
	t.mu.Unlock()
	if f != nil {
		return f(ctx, inv)
	}
	return loop.Result{Output: []byte(`{"ok":true,"call":"` + inv.CallID + `"}`)}
}

func (t *tools) counts() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int{}
	for k, v := range t.runs {
		out[k] = v
	}
	return out
}

// kits builds runs the way the operator does (kit.Config), with the
// scripted model and the test's toolbox.
type kits struct {
	tools *tools
	model loop.Model // overrides the scripted model when set
}

func (k *kits) Build(_ context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error) {
	cfg, err := kit.Config(&run.Spec)
	if err != nil {
		return nil, err
	}
	cfg.RunID = string(run.UID) // as kit.Builder does
	eng, err := loop.New(cfg)
	if err != nil {
		return nil, err
	}
	var m loop.Model = &loop.Scripted{Entries: kit.Script(run.Spec.Model.Script)}
	if k.model != nil {
		m = k.model
	}
	return &Kit{Engine: eng, Model: m, Tools: k.tools}, nil
}

// startManager runs the operator against envtest until the test ends or
// stop is called.
func startManager(t *testing.T, kb KitBuilder) (stop func()) {
	t.Helper()
	return startManagerWithWorkers(t, kb, 0)
}

func startManagerWithWorkers(t *testing.T, kb KitBuilder, workers int) (stop func()) {
	t.Helper()
	_, stop = startReconciler(t, kb, workers, nil)
	return stop
}

// startReconciler runs the operator with its client wrapped by wrap (when
// set; stop is the manager's cancel, for wrappers that crash it) and
// returns the reconciler for tests that look inside it.
func startReconciler(t *testing.T, kb KitBuilder, workers int, wrap func(c client.Client, crash func()) client.Client) (*AgentRunReconciler, func()) {
	t.Helper()
	return startWith(t, kb, managerSetup{workers: workers, wrap: wrap})
}

// managerSetup is what a test changes in the operator it starts; the zero
// value is the operator as the other tests run it.
type managerSetup struct {
	workers int
	wrap    func(c client.Client, crash func()) client.Client
	options func(*ctrl.Options) // the manager's (a cache for one namespace, a logger)
	config  func(*Config)       // the reconciler's (a tracer provider)
}

// statusAtEverySave makes every save a status write (StatusInterval 0),
// for the tests of what a status write does.
func statusAtEverySave(c *Config) { c.StatusInterval = 0 }

// startWith is the one way the tests start an operator: a manager against
// the test API server and the reconciler on it, stopped when the test ends.
// Its metrics are a set of its own (the reconciler's Metrics), registered
// nowhere: a test reads them there, or scrapes them (scrape).
func startWith(t testing.TB, kb KitBuilder, s managerSetup) (*AgentRunReconciler, func()) {
	t.Helper()
	opts := ctrl.Options{
		Scheme:                 testenv.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		// As the operator caches (internal/operator): without managed fields.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
	}
	if s.options != nil {
		s.options(&opts)
	}
	mgr, err := ctrl.NewManager(restCfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := mgr.GetClient()
	if s.wrap != nil {
		c = s.wrap(c, cancel)
	}
	cfg := Config{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("agentrun"), Kits: kb,
		MaxConcurrentReconciles: s.workers, StatusInterval: DefaultStatusInterval, Keys: testKeys, Metrics: NewMetrics(),
		ToolJobs: job.Jobs{Client: c}}
	if s.config != nil {
		s.config(&cfg)
	}
	r := NewAgentRunReconciler(cfg)
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := agentbudget.NewReconciler(agentbudget.Config{Base: reconcilers.Base{Client: c, APIReader: mgr.GetAPIReader(), Recorder: cfg.Recorder}, Ledgers: r.Ledgers,
		Metrics: agentbudget.NewMetrics()}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := (&agentruntemplate.Reconciler{Client: c}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return r, stop
}

func namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ar-test-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	// Every manager watches the whole cluster: a run a test leaves
	// unfinished (a slow model, a pending approval) would be driven by the
	// next test's manager with that test's model and tools, and counted
	// there. Registered first, this runs after the test's managers stop.
	t.Cleanup(func() {
		if err := k8sClient.DeleteAllOf(context.Background(), &v1alpha1.AgentRun{}, client.InNamespace(ns.Name)); err != nil {
			t.Errorf("deleting the test's runs: %v", err)
		}
	})
	return ns.Name
}

// refundRun is a run whose first turn asks to issue a refund, a write that
// waits for a person where policy says ASK.
func refundRun(ns, name string) *runBuilder {
	return makeRun(ns, name).writeTool("issue_refund", false).calls("issue_refund", `{"amount_minor":8240}`)
}

// pendingRefund starts an operator with test tools and a refundRun that
// answers once its refund is done, and waits for the refund to wait for a
// person.
func pendingRefund(t *testing.T) (*tools, *v1alpha1.AgentRun, *v1alpha1.AgentRun) {
	t.Helper()
	tb := newTools()
	startManager(t, &kits{tools: tb})
	run := refundRun(namespace(t), "refund").answer("Refunded.").create(t)
	return tb, run, waitPending(t, run, 1)
}

// runBuilder reads like the manifest it makes.
type runBuilder struct{ r *v1alpha1.AgentRun }

func makeRun(ns, name string) *runBuilder {
	return &runBuilder{r: &v1alpha1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.AgentRunSpec{
			AgentSpec: v1alpha1.AgentSpec{
				Goal:   "Find out what happened.",
				Model:  v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted}},
				Budget: v1alpha1.BudgetSpec{MaxTurns: 12},
			},
		},
	}}
}

func (b *runBuilder) maxTurns(n int32) *runBuilder { b.r.Spec.Budget.MaxTurns = n; return b }

func (b *runBuilder) budget(f func(*v1alpha1.BudgetSpec)) *runBuilder { f(&b.r.Spec.Budget); return b }

func (b *runBuilder) readTool(name string) *runBuilder {
	b.r.Spec.Tools = append(b.r.Spec.Tools, v1alpha1.ToolSpec{Name: name, Builtin: v1alpha1.BuiltinTool("kubernetes.get")})
	return b
}

func (b *runBuilder) writeTool(name string, reversible bool) *runBuilder {
	b.r.Spec.Tools = append(b.r.Spec.Tools, v1alpha1.ToolSpec{Name: name, Mutates: ptr.To(true), Reversible: ptr.To(reversible),
		Job: &v1alpha1.JobTool{Image: "example.com/tools:1", Command: []string{name}}})
	return b
}

func (b *runBuilder) calls(cs ...string) *runBuilder {
	st := v1alpha1.ScriptStep{Usage: &v1alpha1.ScriptUsage{InputTokens: 1000, OutputTokens: 20}}
	for i := 0; i < len(cs); i += 2 {
		st.ToolCalls = append(st.ToolCalls, v1alpha1.ScriptToolCall{Name: cs[i], Arguments: &runtime.RawExtension{Raw: []byte(cs[i+1])}})
	}
	b.r.Spec.Model.Script = append(b.r.Spec.Model.Script, st)
	return b
}

func (b *runBuilder) answer(s string) *runBuilder {
	b.r.Spec.Model.Script = append(b.r.Spec.Model.Script, v1alpha1.ScriptStep{Content: s, Usage: &v1alpha1.ScriptUsage{InputTokens: 1200, OutputTokens: 30}})
	return b
}

func (b *runBuilder) step(s v1alpha1.ScriptStep) *runBuilder {
	b.r.Spec.Model.Script = append(b.r.Spec.Model.Script, s)
	return b
}

func (b *runBuilder) with(f func(*v1alpha1.AgentRunSpec)) *runBuilder { f(&b.r.Spec); return b }

func (b *runBuilder) create(t *testing.T) *v1alpha1.AgentRun {
	t.Helper()
	if err := k8sClient.Create(context.Background(), b.r); err != nil {
		t.Fatalf("creating %s: %v", b.r.Name, err)
	}
	return b.r
}

// get reads obj (a run, a budget) as the API server has it now.
func get[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	return testenv.Get(t, k8sClient, obj)
}

// waitOutcome waits (bounded) for the run to end and returns it.
func waitOutcome(t *testing.T, run *v1alpha1.AgentRun, timeout time.Duration) *v1alpha1.AgentRun {
	t.Helper()
	g := NewWithT(t)
	var out *v1alpha1.AgentRun
	g.Eventually(func() v1alpha1.Outcome {
		out = get(t, run)
		return out.Status.Outcome
	}, timeout, 20*time.Millisecond).ShouldNot(BeEmpty(), "the run did not end")
	return out
}

func annotate(t *testing.T, run *v1alpha1.AgentRun, callID, answer string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.ApprovalAnnotationPrefix + callID: answer}}})
	if err := k8sClient.Patch(context.Background(), run.DeepCopy(), client.RawPatch("application/merge-patch+json", body), client.FieldOwner("kubectl-annotate")); err != nil {
		t.Fatal(err)
	}
}

// awaitStarted waits, at most 20 s, for a scripted tool to signal that its
// call has started.
func awaitStarted(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	await(t, entered, 20*time.Second, "the call never started")
}

// await waits at most within for ch to be closed or to deliver, and fails
// the test with msg if it is not.
func await[T any](t *testing.T, ch <-chan T, within time.Duration, msg string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatal(msg)
	}
}
