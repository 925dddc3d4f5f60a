// Command scale is `make scale`: one run on one machine that measures what
// the operator costs at scale against what the API server can do, on a
// local control plane (envtest's etcd and kube-apiserver) with the operator
// in this process, a fake OpenAI-compatible model and an HTTP tool served
// on loopback by a child process. It prints:
//
//   - turns/s of many runs with an instant model, against bare ConfigMap
//     merge patches/s (of an object the size of a run) on the same server;
//   - the wall time of many runs with a slow model, against the ideal
//     (turns x latency);
//   - the operator's heap per active run, with many runs in flight;
//   - the API server's CPU per AgentRun status merge patch, against a
//     ConfigMap merge patch of the same size, and the same patch of copies
//     of the CRD without its oldSelf rules, without any CEL rule and with
//     no schema at all (where the write's cost goes);
//   - the throughput measure again with every run under one shared
//     AgentBudget: turns/s against the same runs without it, writes to
//     the AgentBudget per turn, and whether its ledger settled to the
//     runs' own spend with nothing left reserved.
//
// It is a benchmark, not a test: nothing here fails on a slow machine.
// Sizes are flags (see `make scale` for the variables).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/budget"
	"github.com/agentrun/agentrun/internal/controller"
	"github.com/agentrun/agentrun/internal/crdguard"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/operator"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

type options struct {
	runs, turns             int
	slowRuns, slowTurns     int
	slowLatency             time.Duration
	memRuns, memTurns       int
	writes                  int
	workers, burst          int
	qps                     float64
	statusInterval          time.Duration
	profileDir              string
	heapProfile             string
	skip                    string
	sampleFile              string
	timeout                 time.Duration
	logOperator             bool
	bareWorkers, createWork int
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "serve" {
		if err := serve(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "scale serve:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	fs.IntVar(&o.runs, "runs", 100, "Runs of the throughput measure.")
	fs.IntVar(&o.turns, "turns", 10, "Turns of each run of the throughput measure (each but the last calls an HTTP tool).")
	fs.IntVar(&o.slowRuns, "slow-runs", 200, "Runs of the slow-model measure.")
	fs.IntVar(&o.slowTurns, "slow-turns", 5, "Turns of each run of the slow-model measure.")
	fs.DurationVar(&o.slowLatency, "slow-latency", 2*time.Second, "The slow model's latency per call.")
	fs.IntVar(&o.memRuns, "mem-runs", 1000, "Runs in flight for the memory measure.")
	fs.IntVar(&o.memTurns, "mem-turns", 1, "Turns of each run of the memory measure (the first call is held until all runs are in flight).")
	fs.IntVar(&o.writes, "writes", 1000, "Status writes (and ConfigMap patches) of the API server CPU measure.")
	fs.IntVar(&o.workers, "workers", 8, "The operator's reconcile workers (cmd/manager's default).")
	fs.Float64Var(&o.qps, "qps", 0, "The operator's client QPS, as cmd/manager's --kube-api-qps (and its default).")
	fs.IntVar(&o.burst, "burst", 0, "The operator's client burst, as cmd/manager's --kube-api-burst (and its default).")
	fs.DurationVar(&o.statusInterval, "status-interval", controller.DefaultStatusInterval, "The operator's --status-interval (and its default); 0 writes status at every save.")
	fs.IntVar(&o.bareWorkers, "bare-workers", 32, "Concurrent writers of the bare ConfigMap patch rate.")
	fs.IntVar(&o.createWork, "create-workers", 16, "Concurrent writers creating the runs.")
	fs.StringVar(&o.profileDir, "profile-dir", "", "When set, save CPU profiles here: kube-apiserver's over the first 5 s of the throughput measure and over the status writes and ConfigMap patches of the CPU measure, and this process's (the operator and the harness) over the whole throughput and slow-model measures.")
	fs.StringVar(&o.heapProfile, "heap-profile", "", "When set, write the operator process's heap profile here while the memory measure's runs are all in flight (go tool pprof -sample_index=inuse_space).")
	fs.StringVar(&o.sampleFile, "sample", "", "A file for the run the CPU measure writes: saved by the throughput measure, read when it is skipped.")
	fs.StringVar(&o.skip, "skip", "", "Comma-separated measures to skip: throughput, budget, slow, memory, cpu.")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "Give up after this long.")
	fs.BoolVar(&o.logOperator, "v", false, "Log the operator's errors.")
	_ = fs.Parse(os.Args[1:])
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

// row is one line of the report.
type row struct{ measure, value, against, ratio string }

type bench struct {
	o    options
	c    client.WithWatch
	cs   *kubernetes.Clientset
	cfg  *rest.Config
	addr string // the fake's plain HTTP/1.1 listener (model and tool)
	// tlsAddr is the fake's TLS listener (HTTP/2); modelBase is the model
	// endpoint the runs created now use.
	tlsAddr, modelBase string
	rows               []row
	notes              []string
	sample             *v1alpha1.AgentRun // a run in the middle of the throughput measure
	// unbudgeted is the throughput measure's turns/s, which the budget
	// measure compares itself with (0 when throughput was skipped).
	unbudgeted float64
}

func run(o options) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	// Ctrl-C, a kill or a closed pipe (| head) ends the measures early but
	// still stops etcd and kube-apiserver (deferred below): left running,
	// they would load the machine under every later measure.
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
	defer stopSignals()
	if o.logOperator {
		ctrl.SetLogger(logr.New(errorLogger{}))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	addr, tlsAddr, stop, err := startFake()
	if err != nil {
		return fmt.Errorf("starting the fake model: %w", err)
	}
	defer stop()

	fmt.Fprintln(os.Stderr, "Starting etcd and kube-apiserver")
	env, cfg, err := testenv.Start("--profiling=true")
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	// The benchmark's own client is not throttled; the operator's is.
	bcfg := rest.CopyConfig(cfg)
	bcfg.QPS, bcfg.Burst = -1, 0
	c, err := client.NewWithWatch(bcfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(bcfg)
	if err != nil {
		return err
	}
	// The API server runs the admission policies the chart installs.
	if err := testenv.Apply(ctx, c, "config/admission/approval-policy.yaml", "config/admission/approver-identity.yaml", "config/admission/run-spec.yaml",
		"config/rbac/aggregated_roles.yaml"); err != nil {
		return err
	}
	b := &bench{o: o, c: c, cs: cs, cfg: cfg, addr: addr, tlsAddr: tlsAddr, modelBase: "http://" + addr + "/v1"}
	// The CRD is served, and known to the mutating admission policy, a
	// moment after it is established.
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		err := c.Create(ctx, b.makeRun("default", "probe", "scale-t1-l0"), client.DryRunAll)
		if err == nil {
			break
		}
		if time.Since(start) > time.Minute {
			return fmt.Errorf("the AgentRun CRD is not served: %w", err)
		}
	}

	octx, stopOperator := context.WithCancel(ctx)
	defer stopOperator()
	opDone := make(chan error, 1)
	dir, err := os.MkdirTemp("", "agentrun-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	go func() {
		// The fake model listens on loopback, which the egress policy
		// refuses unless allowed.
		opDone <- operator.Run(octx, cfg, operator.Options{LocalTools: true, LocalDir: dir, Workers: o.workers,
			QPS: float32(o.qps), Burst: o.burst, StatusInterval: &o.statusInterval, EgressAllow: egress.Loopback})
	}()
	skip := map[string]bool{}
	for s := range strings.SplitSeq(o.skip, ",") {
		skip[strings.TrimSpace(s)] = true
	}
	fmt.Fprintf(os.Stderr, "Operator: %d workers, client QPS %g, burst %d (0: cmd/manager's defaults); GOMAXPROCS %d\n", o.workers, o.qps, o.burst, runtime.GOMAXPROCS(0))
	if err := b.warmUp(ctx); err != nil {
		return err
	}
	for _, m := range []struct {
		name string
		f    func(context.Context) error
	}{{"throughput", b.throughput}, {"budget", b.budget}, {"slow", b.slow}, {"memory", b.memory}} {
		if skip[m.name] {
			continue
		}
		if err := b.measure(ctx, m.name, m.f); err != nil {
			return err
		}
	}
	stopOperator()
	select {
	case err := <-opDone:
		if err != nil {
			return fmt.Errorf("the operator: %w", err)
		}
	case <-time.After(30 * time.Second):
		return fmt.Errorf("the operator did not stop")
	}
	if !skip["cpu"] {
		if err := b.measure(ctx, "cpu", b.cpu); err != nil {
			return err
		}
	}
	b.print(os.Stdout)
	return nil
}

// warmUp drives one run to its end before anything is measured, so that
// no measure counts the operator's start (its caches syncing, its workers
// starting: about a second, in which the first runs created only wait).
func (b *bench) warmUp(ctx context.Context) error {
	ns, err := b.namespace(ctx, "scale-warmup")
	if err != nil {
		return err
	}
	res, err := b.drive(ctx, ns, 1, "scale-t2-l0", 0, nil)
	if err != nil {
		return fmt.Errorf("warming up: %w", err)
	}
	if res.failed > 0 {
		return fmt.Errorf("warming up: %s", res.firstFailure)
	}
	fmt.Fprintf(os.Stderr, "Warmed up: one run of two turns ended %.1f s after its create\n", res.elapsed.Seconds())
	return b.cleanup(ctx, ns)
}

// print writes the table of every measure so far (each measure prints
// it again to stderr as it ends, so that a run cut short keeps what it
// measured).
func (b *bench) print(out io.Writer) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASURE\tVALUE\tFLOOR / IDEAL\tRATIO")
	for _, r := range b.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.measure, r.value, r.against, r.ratio)
	}
	tw.Flush()
	for _, n := range b.notes {
		fmt.Fprintln(out, n)
	}
}

// measure runs one measure, saying how long it took.
func (b *bench) measure(ctx context.Context, name string, f func(context.Context) error) error {
	start := time.Now()
	fmt.Fprintf(os.Stderr, "Measuring %s\n", name)
	if err := f(ctx); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintf(os.Stderr, "Measured %s in %.0f s\n", name, time.Since(start).Seconds())
	b.print(os.Stderr)
	return nil
}

// throughput: runs x turns with an instant model, against bare patches.
func (b *bench) throughput(ctx context.Context) error {
	o := b.o
	ns, err := b.namespace(ctx, "scale-throughput")
	if err != nil {
		return err
	}
	before, err := b.requests(ctx)
	if err != nil {
		return err
	}
	ownBefore, machineBefore, procsBefore := ownCPU(), machineCPU(), procCPU()
	var profiled chan error // the API server's profile over the first seconds, when asked for
	stopSelf := func() {}   // this process's profile over the runs, when asked for
	if o.profileDir != "" {
		profiled = make(chan error, 1)
		go func() { profiled <- b.profile(ctx, filepath.Join(o.profileDir, "apiserver-throughput.pprof"), 5) }()
		if stopSelf, err = profileSelf(filepath.Join(o.profileDir, "operator-throughput.pprof")); err != nil {
			return err
		}
	}
	res, err := b.drive(ctx, ns, o.runs, fmt.Sprintf("scale-t%d-l0", o.turns), int32(o.turns/2+1), nil)
	stopSelf()
	if err != nil {
		return err
	}
	own, machine, procs := ownCPU()-ownBefore, machineCPU()-machineBefore, procCPU()
	if profiled != nil {
		if err := <-profiled; err != nil {
			b.notes = append(b.notes, "throughput: API server profile: "+err.Error())
		}
	}
	after, err := b.requests(ctx)
	if err != nil {
		return err
	}
	b.sample = res.sample
	if o.sampleFile != "" && res.sample != nil {
		raw, _ := json.MarshalIndent(res.sample, "", "  ")
		if err := os.WriteFile(o.sampleFile, raw, 0o644); err != nil {
			return err
		}
	}
	turns := res.turns
	rate := float64(turns) / res.elapsed.Seconds()
	b.unbudgeted = rate
	size := res.sampleSize
	if size == 0 {
		size = 4096
	}
	bareRate, bareCPU, err := b.bareRate(ctx, ns, size, max(2000, turns))
	if err != nil {
		return err
	}
	events, err := b.events(ctx, ns)
	if err != nil {
		return err
	}
	// Mutating requests, less the benchmark's own creates.
	writes := after.writes - before.writes - float64(o.runs)
	b.rows = append(b.rows,
		row{fmt.Sprintf("%d runs x %d turns, instant model", o.runs, o.turns), fmt.Sprintf("%.1f turns/s", rate),
			fmt.Sprintf("%.0f ConfigMap merge patches/s (%d B, %d writers)", bareRate, size, o.bareWorkers), fmt.Sprintf("%.3f", rate/bareRate)},
		row{"  API writes per turn (operator, events included)", fmt.Sprintf("%.2f", writes/float64(turns)), "", ""},
		row{"  events per turn", fmt.Sprintf("%.2f", float64(events)/float64(turns)), "at most 1", ""},
		row{"  largest AgentRun seen", fmt.Sprintf("%d B", res.largest), "32768 B", ""},
		row{"  CPU per turn: API server; operator process", fmt.Sprintf("%.2f ms; %.2f ms", 1000*(after.cpu-before.cpu)/float64(turns), 1000*own.Seconds()/float64(turns)),
			"the operator's share includes this harness (creating and watching the runs)", ""},
		row{"  machine CPU per turn (every process)", fmt.Sprintf("%.2f ms (%.0f%% of %d cores busy)", 1000*machine.Seconds()/float64(turns),
			100*machine.Seconds()/res.elapsed.Seconds()/float64(runtime.NumCPU()), runtime.NumCPU()),
			fmt.Sprintf("%.2f ms per bare patch", 1000*bareCPU.Seconds()), fmt.Sprintf("%.1f patches", machine.Seconds()/bareCPU.Seconds()/float64(turns))},
		row{"  of which etcd; the fake model and tool", fmt.Sprintf("%.2f ms; %.2f ms", 1000*(procs["etcd"]-procsBefore["etcd"]).Seconds()/float64(turns),
			1000*(procs["fake"]-procsBefore["fake"]).Seconds()/float64(turns)), "", ""},
	)
	b.notes = append(b.notes, "throughput: API requests a turn (the runs' creates included): "+perTurn(before, after, turns))
	if res.failed > 0 {
		b.notes = append(b.notes, fmt.Sprintf("throughput: %d of %d runs did not complete: %s", res.failed, o.runs, res.firstFailure))
	}
	return b.cleanup(ctx, ns)
}

// budget: the throughput measure's runs and turns again, every run under
// one hard AgentBudget with room for all of them, so that each step also
// leases from the shared ledger. It reports turns/s against the same runs
// without a budget, the writes to the AgentBudget per turn, and whether
// the ledger ended settled: consumed equal to the runs' own spend, nothing
// reserved, no run active.
func (b *bench) budget(ctx context.Context) error {
	o := b.o
	ns, err := b.namespace(ctx, "scale-budget")
	if err != nil {
		return err
	}
	ab := &v1alpha1.AgentBudget{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: ns},
		Spec: v1alpha1.AgentBudgetSpec{MaxCostUSD: v1alpha1.USD(strconv.Itoa(10 * o.runs))}}
	if err := b.c.Create(ctx, ab); err != nil {
		return err
	}
	before, err := b.requests(ctx)
	if err != nil {
		return err
	}
	res, err := b.drive(ctx, ns, o.runs, fmt.Sprintf("scale-t%d-l0", o.turns), 0, nil)
	if err != nil {
		return err
	}
	after, err := b.requests(ctx)
	if err != nil {
		return err
	}
	rate := float64(res.turns) / res.elapsed.Seconds()
	against, ratio := "throughput skipped", ""
	if b.unbudgeted > 0 {
		against, ratio = fmt.Sprintf("%.1f turns/s without a budget", b.unbudgeted), fmt.Sprintf("%.2f", rate/b.unbudgeted)
	}
	b.rows = append(b.rows,
		row{fmt.Sprintf("%d runs x %d turns under one AgentBudget", o.runs, o.turns), fmt.Sprintf("%.1f turns/s", rate), against, ratio},
		row{"  AgentBudget writes per turn", fmt.Sprintf("%.2f", (after.budgetWrites-before.budgetWrites)/float64(max(1, res.turns))), "", ""})
	if res.failed > 0 {
		b.notes = append(b.notes, fmt.Sprintf("budget: %d of %d runs did not complete: %s", res.failed, o.runs, res.firstFailure))
	}
	settled, err := b.settled(ctx, ns)
	if err != nil {
		return err
	}
	b.rows = append(b.rows, row{"  ledger at the end", settled, "consumed = the runs' spend, 0 reserved, 0 active", ""})
	if err := b.c.Delete(ctx, ab); err != nil {
		return err
	}
	return b.cleanup(ctx, ns)
}

// settled waits (up to a minute) for the namespace's AgentBudget to
// settle every run that ended, and says what its ledger holds against
// the sum of the runs' own spend.
func (b *bench) settled(ctx context.Context, ns string) (string, error) {
	var say string
	for start := time.Now(); ; time.Sleep(250 * time.Millisecond) {
		var ab v1alpha1.AgentBudget
		if err := b.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "team"}, &ab); err != nil {
			return "", err
		}
		var runs v1alpha1.AgentRunList
		if err := b.c.List(ctx, &runs, client.InNamespace(ns)); err != nil {
			return "", err
		}
		var spent loop.Money
		for _, r := range runs.Items {
			if r.Status.Usage != nil {
				spent += budget.Money(v1alpha1.USD(r.Status.Usage.CostUSD))
			}
		}
		consumed, reserved := budget.Money(ab.Status.ConsumedCostUSD), budget.Money(ab.Status.ReservedCostUSD)
		say = fmt.Sprintf("consumed $%s, runs spent $%s, reserved $%s, %d active", consumed, spent, reserved, ab.Status.ActiveRuns)
		if consumed == spent && reserved == 0 && ab.Status.ActiveRuns == 0 {
			return say + " (settled)", nil
		}
		if time.Since(start) > time.Minute {
			return say + " (NOT settled after 1m)", nil
		}
	}
}

// slow: runs x turns with a model that takes its latency per call.
func (b *bench) slow(ctx context.Context) error {
	o := b.o
	ns, err := b.namespace(ctx, "scale-slow")
	if err != nil {
		return err
	}
	before := operatorTimes()
	reqBefore, err := b.requests(ctx)
	if err != nil {
		return err
	}
	ownBefore, machineBefore, procsBefore := ownCPU(), machineCPU(), procCPU()
	var profiled chan error // the API server's profile over the runs' first seconds, when asked for
	stopSelf := func() {}   // this process's profile over the runs, when asked for
	if o.profileDir != "" {
		profiled = make(chan error, 1)
		go func() { profiled <- b.profile(ctx, filepath.Join(o.profileDir, "apiserver-slow.pprof"), 10) }()
		if stopSelf, err = profileSelf(filepath.Join(o.profileDir, "operator-slow.pprof")); err != nil {
			return err
		}
	}
	if _, err := b.sent(ctx); err != nil { // forget earlier calls
		return err
	}
	sampled, stopSampling := make(chan []float64, 1), make(chan struct{})
	go func() { sampled <- sampleBusy(stopSampling) }()
	res, err := b.drive(ctx, ns, o.slowRuns, fmt.Sprintf("scale-t%d-l%d", o.slowTurns, o.slowLatency.Milliseconds()), 0, nil)
	close(stopSampling)
	busy := <-sampled
	stopSelf()
	if err != nil {
		return err
	}
	sent, err := b.sent(ctx)
	if err != nil {
		return err
	}
	for _, l := range res.timeline(sent, busy, o.slowLatency) {
		b.notes = append(b.notes, "slow model: "+l)
	}
	if profiled != nil {
		if err := <-profiled; err != nil {
			b.notes = append(b.notes, "slow model: API server profile: "+err.Error())
		}
	}
	own, machine, procs := ownCPU()-ownBefore, machineCPU()-machineBefore, procCPU()
	reqAfter, err := b.requests(ctx)
	if err != nil {
		return err
	}
	b.notes = append(b.notes, "slow model: "+operatorTimes().since(before),
		fmt.Sprintf("slow model: machine CPU %.1f s (%.0f%% of %d cores busy): API server %.1f s, etcd %.1f s, operator with the harness %.1f s, fake %.1f s",
			machine.Seconds(), 100*machine.Seconds()/res.elapsed.Seconds()/float64(runtime.NumCPU()), runtime.NumCPU(),
			reqAfter.cpu-reqBefore.cpu, (procs["etcd"]-procsBefore["etcd"]).Seconds(), own.Seconds(), (procs["fake"]-procsBefore["fake"]).Seconds()),
		"slow model: API requests a turn (the runs' creates included): "+perTurn(reqBefore, reqAfter, res.turns))
	ideal := time.Duration(o.slowTurns) * o.slowLatency
	b.rows = append(b.rows, row{fmt.Sprintf("%d runs x %d turns, model latency %s", o.slowRuns, o.slowTurns, o.slowLatency),
		fmt.Sprintf("%.1f s", res.elapsed.Seconds()), fmt.Sprintf("ideal %.1f s", ideal.Seconds()),
		fmt.Sprintf("%.2fx ideal", res.elapsed.Seconds()/ideal.Seconds())},
		row{"  " + res.spread(), "", "", ""})
	if res.failed > 0 {
		b.notes = append(b.notes, fmt.Sprintf("slow model: %d of %d runs did not complete: %s", res.failed, o.slowRuns, res.firstFailure))
	}
	return b.cleanup(ctx, ns)
}

// memory: the operator's heap with memRuns runs in flight, measured
// twice: with the model behind TLS and HTTP/2, as the hosted providers
// serve it (the calls in flight share a few connections), and behind
// plain HTTP/1.1, as an OpenAI-compatible server inside the cluster may
// serve it (each call in flight holds a connection of its own).
func (b *bench) memory(ctx context.Context) error {
	defer func() { b.modelBase = "http://" + b.addr + "/v1" }()
	for _, m := range []struct{ base, label, profileSuffix string }{
		{"https://" + b.tlsAddr + "/v1", "HTTPS, HTTP/2 model endpoint", ""},
		{"http://" + b.addr + "/v1", "plain HTTP/1.1 model endpoint", ".http1"},
	} {
		b.modelBase = m.base
		if err := b.memoryOver(ctx, m.label, m.profileSuffix); err != nil {
			return err
		}
	}
	return nil
}

// memoryOver is one memory measure, its heap profile (when asked for)
// written to -heap-profile plus profileSuffix. Each run's first model call
// is held until every run has made one.
func (b *bench) memoryOver(ctx context.Context, label, profileSuffix string) error {
	o := b.o
	ns, err := b.namespace(ctx, "scale-memory")
	if err != nil {
		return err
	}
	_, calls0, h2Before, err := b.inflight(ctx)
	if err != nil {
		return err
	}
	base := heapInuse()
	var perRun float64
	var inflight int
	var held time.Duration
	res, err := b.drive(ctx, ns, o.memRuns, fmt.Sprintf("scale-t%d-hold", o.memTurns), 0, func(start time.Time) error {
		// All created: wait for every run's first call, then measure.
		for {
			n, _, _, err := b.inflight(ctx)
			if err != nil {
				return err
			}
			if n >= o.memRuns {
				held = time.Since(start)
				break
			}
			if time.Since(start) > 4*time.Minute {
				b.notes = append(b.notes, fmt.Sprintf("memory (%s): only %d of %d runs had a model call in flight after 4m", label, n, o.memRuns))
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		n, _, _, err := b.inflight(ctx)
		if err != nil {
			return err
		}
		inflight = n
		perRun = float64(heapInuse()-base) / float64(max(1, n))
		if o.heapProfile != "" {
			if err := writeHeapProfile(o.heapProfile + profileSuffix); err != nil {
				b.notes = append(b.notes, "memory: heap profile: "+err.Error())
			}
		}
		return b.release(ctx)
	})
	if err != nil {
		return err
	}
	_, calls1, h2After, err := b.inflight(ctx)
	if err != nil {
		return err
	}
	b.rows = append(b.rows, row{fmt.Sprintf("operator heap per active run (%d in flight, %s)", inflight, label),
		fmt.Sprintf("%.1f KiB", perRun/1024), "at most 50 KiB", ""},
		row{fmt.Sprintf("  %d runs x %d turns: all in flight after", o.memRuns, o.memTurns), fmt.Sprintf("%.1f s", held.Seconds()),
			fmt.Sprintf("completed %d of %d in %.1f s; %d of %d model calls over HTTP/2", o.memRuns-res.failed, o.memRuns, res.elapsed.Seconds(),
				h2After-h2Before, calls1-calls0), ""})
	if res.failed > 0 {
		b.notes = append(b.notes, fmt.Sprintf("memory (%s): %d of %d runs did not complete: %s", label, res.failed, o.memRuns, res.firstFailure))
	}
	return b.cleanup(ctx, ns)
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// heapInuse is the heap in use after a collection.
func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// driven is what drive saw.
type driven struct {
	elapsed      time.Duration
	turns        int
	failed       int
	firstFailure string
	largest      int
	sample       *v1alpha1.AgentRun
	sampleSize   int
	// created is when the last create returned, ends when each run was
	// seen ended (in order), both from the first create.
	created time.Duration
	ends    []time.Duration
	// start is when the first create was sent.
	start time.Time
}

// spread says when the runs were created and ended, from the first create:
// where the time beyond the ideal went.
func (d *driven) spread() string {
	if len(d.ends) == 0 {
		return ""
	}
	return fmt.Sprintf("created by %.1f s; ended: first %.1f s, median %.1f s, 90%% %.1f s, last %.1f s",
		d.created.Seconds(), d.ends[0].Seconds(), quantile(d.ends, 0.5).Seconds(), quantile(d.ends, 0.9).Seconds(), d.ends[len(d.ends)-1].Seconds())
}

// quantile is the element at q (0-1) of the sorted, non-empty s.
func quantile[T any](s []T, q float64) T { return s[min(len(s)-1, int(q*float64(len(s))))] }

// sampleBusy returns the share of the machine's CPU in use in each whole
// second until stop is closed.
func sampleBusy(stop <-chan struct{}) []float64 {
	var busy []float64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, at := machineCPU(), time.Now()
	for {
		select {
		case <-stop:
			return busy
		case now := <-tick.C:
			cpu := machineCPU()
			busy = append(busy, (cpu-last).Seconds()/now.Sub(at).Seconds()/float64(runtime.NumCPU()))
			last, at = cpu, now
		}
	}
}

// timeline says when the model calls of each turn went out, from the
// first create, and how busy the machine was in each second of the drive
// (busy, from sampleBusy): where the time beyond the ideal went. sent is
// the fake model's record of the calls by turn (Unix milliseconds).
func (d *driven) timeline(sent map[int][]int64, busy []float64, latency time.Duration) []string {
	var lines []string
	if len(sent) > 0 {
		turns := make([]int, 0, len(sent))
		for t := range sent {
			turns = append(turns, t)
		}
		slices.Sort(turns)
		var parts []string
		var last float64
		for _, t := range turns {
			at := make([]float64, len(sent[t]))
			for i, ms := range sent[t] {
				at[i] = time.UnixMilli(ms).Sub(d.start).Seconds()
			}
			slices.Sort(at)
			parts = append(parts, fmt.Sprintf("turn %d %.1f/%.1f/%.1f", t, quantile(at, 0.5), quantile(at, 0.9), at[len(at)-1]))
			last = max(last, at[len(at)-1])
		}
		lines = append(lines, fmt.Sprintf("model calls sent, s from the first create (median/90%%/last): %s; the last answer at %.1f s",
			strings.Join(parts, ", "), last+latency.Seconds()))
	}
	if len(busy) > 0 {
		pct := make([]string, len(busy))
		for i, b := range busy {
			pct[i] = strconv.Itoa(int(math.Round(100 * b)))
		}
		lines = append(lines, "machine CPU busy in each second of the runs, %: "+strings.Join(pct, " "))
	}
	return lines
}

// drive creates n runs of the model and waits, on a watch, until every
// one has ended. sampleTurn > 0 keeps a copy of a running run, the first
// seen at that turn or, since most saves write no status, the furthest
// seen short of it.
// afterCreate, when set, runs once every run is created.
func (b *bench) drive(ctx context.Context, ns string, n int, model string, sampleTurn int32, afterCreate func(time.Time) error) (*driven, error) {
	w, err := b.c.Watch(ctx, &v1alpha1.AgentRunList{}, client.InNamespace(ns))
	if err != nil {
		return nil, err
	}
	defer func() { w.Stop() }()
	res := &driven{start: time.Now()}
	start := res.start
	if err := b.createRuns(ctx, ns, n, model); err != nil {
		return nil, err
	}
	res.created = time.Since(start)
	if afterCreate != nil {
		if err := afterCreate(start); err != nil {
			return nil, err
		}
	}
	ended := map[string]bool{}
	var rv string
	for len(ended) < n {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-w.ResultChan():
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d runs ended: %w", len(ended), n, ctx.Err())
		}
		if !ok {
			// The server closed the watch: resume where it left off.
			w, err = b.c.Watch(ctx, &v1alpha1.AgentRunList{}, client.InNamespace(ns),
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err != nil {
				return nil, err
			}
			continue
		}
		run, isRun := ev.Object.(*v1alpha1.AgentRun)
		if !isRun {
			return nil, fmt.Errorf("watch: %v", ev.Object)
		}
		rv = run.ResourceVersion
		raw, _ := json.Marshal(run)
		res.largest = max(res.largest, len(raw))
		if sampleTurn > 0 && run.Status.Checkpoint != nil && run.Status.Turn <= sampleTurn &&
			(res.sample == nil || res.sample.Status.Turn < run.Status.Turn) {
			res.sample, res.sampleSize = run.DeepCopy(), len(raw)
		}
		if run.Status.Outcome != "" && !ended[run.Name] {
			ended[run.Name] = true
			res.ends = append(res.ends, time.Since(start))
			res.turns += int(run.Status.Turn)
			if run.Status.Outcome != v1alpha1.OutcomeCompleted {
				res.failed++
				if res.firstFailure == "" {
					res.firstFailure = fmt.Sprintf("%s: %s: %s", run.Name, run.Status.Outcome, run.Status.Reason)
				}
			}
		}
	}
	res.elapsed = time.Since(start)
	return res, nil
}

func (b *bench) createRuns(ctx context.Context, ns string, n int, model string) error {
	return parallel(n, b.o.createWork, func(i int) error {
		return b.c.Create(ctx, b.makeRun(ns, fmt.Sprintf("run-%04d", i), model))
	})
}

// makeRun is a run like one a platform would create: instructions, a
// priced model, a budget and three HTTP tools with parameter schemas,
// each declaring what a call costs (nothing), as a cost ceiling asks.
func (b *bench) makeRun(ns, name, model string) *v1alpha1.AgentRun {
	tool := func(name, desc, params string) v1alpha1.ToolSpec {
		return v1alpha1.ToolSpec{Name: name, Description: desc, Parameters: &kruntime.RawExtension{Raw: []byte(params)},
			MaxCostUSD: "0", HTTP: &v1alpha1.HTTPTool{URL: "http://" + b.addr + "/tool?q={{.q}}"}}
	}
	timeout := metav1.Duration{Duration: time.Minute}
	return &v1alpha1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/part-of": "scale"}},
		Spec: v1alpha1.AgentRunSpec{
			AgentSpec: v1alpha1.AgentSpec{
				Goal: "A customer asks why their last invoice is higher than the one before. Look the account up, " +
					"compare the two invoices line by line and explain the difference in two sentences.",
				Instructions: "You are a billing assistant. Use the tools to look facts up; never guess an amount. " +
					"Answer in plain language a customer understands, and name the invoice lines you compared.",
				Model: v1alpha1.ModelSpec{
					ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: model, BaseURL: b.modelBase, APIKeySecretRef: &v1alpha1.SecretKeySelector{Name: "model-key", Key: "api-key"}, Pricing: &v1alpha1.ModelPricing{Input: "1.25", Output: "10"}},
					Timeout:       &timeout,
				},
				Budget: v1alpha1.BudgetSpec{MaxTurns: 50, MaxCostUSD: "5"},
				Tools: []v1alpha1.ToolSpec{
					tool("lookup", "Look a fact up by a query string.",
						`{"type":"object","properties":{"q":{"type":"string","description":"what to look up"}},"required":["q"]}`),
					tool("find_invoices", "List an account's invoices between two dates.",
						`{"type":"object","properties":{"account_id":{"type":"string"},"from_date":{"type":"string","format":"date"},`+
							`"to_date":{"type":"string","format":"date"}},"required":["account_id"]}`),
					tool("invoice_lines", "List the lines of one invoice with their amounts in minor units.",
						`{"type":"object","properties":{"invoice_id":{"type":"string"},"currency":{"type":"string","enum":["EUR","USD","GBP"]}},`+
							`"required":["invoice_id"]}`),
				},
			},
		},
	}
}

// namespace creates a namespace with the model key Secret, readable by
// the runs' ServiceAccount.
func (b *bench) namespace(ctx context.Context, name string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}
	if err := b.c.Create(ctx, ns); err != nil {
		return "", err
	}
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "model-key", Namespace: ns.Name}, StringData: map[string]string{"api-key": "sk-scale"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "model-key-reader", Namespace: ns.Name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"model-key"}, Verbs: []string{"get"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "model-key-reader", Namespace: ns.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "model-key-reader"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: ns.Name}}},
	}
	for _, o := range objs {
		if err := b.c.Create(ctx, o); err != nil {
			return "", err
		}
	}
	return ns.Name, nil
}

// cleanup deletes a measure's runs (envtest has no namespace controller),
// so the operator's cache does not carry them into the next measure.
func (b *bench) cleanup(ctx context.Context, ns string) error {
	if err := b.c.DeleteAllOf(ctx, &v1alpha1.AgentRun{}, client.InNamespace(ns)); err != nil {
		return err
	}
	return b.c.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(ns))
}

// bareRate measures ConfigMap merge patches per second: writers objects
// of size bytes, each patched in turn by its own writer, total patches.
func (b *bench) bareRate(ctx context.Context, ns string, size, total int) (rate float64, cpu time.Duration, err error) {
	workers := b.o.bareWorkers
	for i := 0; i < workers; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bare-%d", i), Namespace: ns},
			Data: map[string]string{"payload": strings.Repeat("x", size), "n": "0"}}
		if err := b.c.Create(ctx, cm); err != nil {
			return 0, 0, err
		}
	}
	var next atomic.Int64
	start, machineBefore := time.Now(), machineCPU()
	err = parallel(workers, workers, func(i int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bare-%d", i), Namespace: ns}}
		for k := next.Add(1); k <= int64(total); k = next.Add(1) {
			body := fmt.Sprintf(`{"data":{"n":"%d"}}`, k)
			if err := b.c.Patch(ctx, cm, client.RawPatch("application/merge-patch+json", []byte(body))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return float64(total) / time.Since(start).Seconds(), (machineCPU() - machineBefore) / time.Duration(total), nil
}

// cpu measures the API server's CPU per AgentRun status merge patch (of a
// run as the throughput measure left one mid-way: spec, status and
// checkpoint) and per ConfigMap merge patch of the same size.
func (b *bench) cpu(ctx context.Context) error {
	ns, err := b.namespace(ctx, "scale-cpu")
	if err != nil {
		return err
	}
	sample := b.sample
	if sample == nil && b.o.sampleFile != "" {
		raw, err := os.ReadFile(b.o.sampleFile)
		if err != nil {
			return err
		}
		sample = &v1alpha1.AgentRun{}
		if err := json.Unmarshal(raw, sample); err != nil {
			return err
		}
	}
	if sample == nil {
		sample = b.makeRun(ns, "sample", "scale-t10-l0")
		sample.Status.Turn = 5
		sample.Status.Checkpoint = &kruntime.RawExtension{Raw: []byte(`{"turn":5}`)}
	}
	workers := 4
	runs := make([]*v1alpha1.AgentRun, workers)
	for i := range runs {
		r := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cpu-%d", i), Namespace: ns}, Spec: *sample.Spec.DeepCopy()}
		if err := b.c.Create(ctx, r); err != nil {
			return err
		}
		base := r.DeepCopy()
		r.Status = *sample.Status.DeepCopy()
		if err := b.c.Status().Patch(ctx, r, client.MergeFrom(base)); err != nil {
			return err
		}
		runs[i] = r
	}
	raw, _ := json.Marshal(runs[0])
	size := len(raw)
	// The operator's write: the whole status under the version read
	// (writeStatus); turn, usage, conditions and the checkpoint change
	// every time. asPatch writes the same as a merge patch under the same
	// version, as the operator did before.
	asPatch := false
	arWrite := func(i, k int) error {
		r := runs[i]
		base := r.DeepCopy()
		r.Status.Turn++
		if len(r.Status.Conditions) > 0 {
			r.Status.Conditions[0].Message = fmt.Sprintf("turn %d", k)
		}
		r.Status.Checkpoint = &kruntime.RawExtension{Raw: bumpCheckpoint(r.Status.Checkpoint, k)}
		if asPatch {
			return b.c.Status().Patch(ctx, r, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		}
		return b.c.Status().Update(ctx, r)
	}
	// Something watches both kinds, as the operator does in a cluster.
	for _, l := range []client.ObjectList{&v1alpha1.AgentRunList{}, &corev1.ConfigMapList{}} {
		w, err := b.c.Watch(ctx, l, client.InNamespace(ns))
		if err != nil {
			return err
		}
		defer w.Stop()
		go func() {
			for range w.ResultChan() {
			}
		}()
	}
	arCPU, arN, err := b.measureCPU(ctx, workers, "agentrun-status", arWrite)
	if err != nil {
		return err
	}
	asPatch = true
	patchCPU, patchN, err := b.measureCPU(ctx, workers, "agentrun-status-patch", arWrite)
	if err != nil {
		return err
	}
	// A ConfigMap of the same size, whose patch carries as much.
	patchBytes := 0
	if sample.Status.Checkpoint != nil {
		patchBytes = len(sample.Status.Checkpoint.Raw)
	}
	cms := make([]*corev1.ConfigMap, workers)
	for i := range cms {
		cms[i] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cpu-%d", i), Namespace: ns},
			Data: map[string]string{"payload": strings.Repeat("x", max(0, size-patchBytes-300)), "state": strings.Repeat("y", patchBytes)}}
		if err := b.c.Create(ctx, cms[i]); err != nil {
			return err
		}
	}
	cmWrite := func(i, k int) error {
		cm := cms[i]
		base := cm.DeepCopy()
		cm.Data["state"] = string(bumpCheckpoint(&kruntime.RawExtension{Raw: []byte(cm.Data["state"])}, k))
		return b.c.Patch(ctx, cm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}
	cmCPU, cmN, err := b.measureCPU(ctx, workers, "configmap", cmWrite)
	if err != nil {
		return err
	}
	floorCPU, floorN, err := b.schemalessFloor(ctx, ns, runs, workers)
	if err != nil {
		return err
	}
	// Where the rest goes: a copy of the CRD whose spec rules are checked
	// at every write, as controller-gen writes them (what hack/crdguard
	// saves), and one without any rule.
	unguardedCPU, unguardedN, err := b.variantCPU(ctx, ns, runs, workers, "unguarded.scale.agentrun.dev",
		func(rule map[string]any) bool { crdguard.Unguard(rule); return true })
	if err != nil {
		return err
	}
	nocelCPU, nocelN, err := b.variantCPU(ctx, ns, runs, workers, "nocel.scale.agentrun.dev",
		func(map[string]any) bool { return false })
	if err != nil {
		return err
	}
	ar, cm, floor := arCPU/float64(arN), cmCPU/float64(cmN), floorCPU/float64(floorN)
	unguarded, nocel, patch := unguardedCPU/float64(unguardedN), nocelCPU/float64(nocelN), patchCPU/float64(patchN)
	b.rows = append(b.rows, row{fmt.Sprintf("API server CPU per AgentRun status write (%d B object)", size),
		fmt.Sprintf("%.2f ms", ar*1000), fmt.Sprintf("%.2f ms per ConfigMap patch", cm*1000), fmt.Sprintf("%.1fx", ar/cm)},
		row{"  the same status as a merge patch under the same version", fmt.Sprintf("%.2f ms", patch*1000),
			"the operator's write before it put the whole status", fmt.Sprintf("%.1fx", patch/cm)},
		row{"  the patch, the CRD's spec rules checked at every write", fmt.Sprintf("%.2f ms", unguarded*1000),
			"as controller-gen writes them, without hack/crdguard", fmt.Sprintf("%.1fx", unguarded/cm)},
		row{"  the patch, the CRD without any CEL rule", fmt.Sprintf("%.2f ms", nocel*1000),
			"the schema's validation, defaulting and pruning only", fmt.Sprintf("%.1fx", nocel/cm)},
		row{"  the same patch of the same object, a CRD with no schema", fmt.Sprintf("%.2f ms", floor*1000),
			"the floor of a custom resource", fmt.Sprintf("%.1fx", floor/cm)})
	return nil
}

// schemalessFloor measures the status patch of the runs' very objects as
// resources of a CRD that has no schema (every field kept, nothing
// validated, defaulted or pruned, no CEL rule; only status atomic for
// managed fields, as AgentRun's is): what any custom resource of that
// size costs the API server, whatever its CRD says.
func (b *bench) schemalessFloor(ctx context.Context, ns string, runs []*v1alpha1.AgentRun, workers int) (float64, int, error) {
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "floors.scale.agentrun.dev"},
		"spec": map[string]any{
			"group": "scale.agentrun.dev", "scope": "Namespaced",
			"names": map[string]any{"plural": "floors", "singular": "floor", "kind": "Floor", "listKind": "FloorList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"subresources": map[string]any{"status": map[string]any{}},
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true,
					// status is one managed field, as in the AgentRun CRD
					"properties": map[string]any{"status": map[string]any{"type": "object",
						"x-kubernetes-preserve-unknown-fields": true, "x-kubernetes-map-type": "atomic"}}}}}},
		},
	}}
	return b.copyStatusCPU(ctx, ns, runs, workers, crd, "schemaless-status")
}

// variantCPU measures the status patch of the runs' very objects as
// resources of a copy of the AgentRun CRD, under another group, whose CEL
// rules edit changes, or leaves out where it returns false: where a status
// write's cost goes.
func (b *bench) variantCPU(ctx context.Context, ns string, runs []*v1alpha1.AgentRun, workers int, group string, edit func(rule map[string]any) bool) (float64, int, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return 0, 0, err
	}
	objs, err := testenv.ReadObjects(filepath.Join(root, "config/crd/bases/agents.agentrun.dev_agentruns.yaml"))
	if err != nil {
		return 0, 0, err
	}
	if len(objs) != 1 {
		return 0, 0, fmt.Errorf("the AgentRun CRD file holds %d objects", len(objs))
	}
	crd := objs[0]
	crd.SetName("agentruns." + group)
	if err := unstructured.SetNestedField(crd.Object, group, "spec", "group"); err != nil {
		return 0, 0, err
	}
	editRules(crd.Object, edit)
	return b.copyStatusCPU(ctx, ns, runs, workers, crd, group+"-status")
}

// editRules calls edit on every CEL rule of a CRD, and removes those for
// which it returns false.
func editRules(v any, edit func(rule map[string]any) bool) {
	switch v := v.(type) {
	case map[string]any:
		if rules, ok := v["x-kubernetes-validations"].([]any); ok {
			var keep []any
			for _, r := range rules {
				if m, _ := r.(map[string]any); m == nil || edit(m) {
					keep = append(keep, r)
				}
			}
			if len(keep) == 0 {
				delete(v, "x-kubernetes-validations")
			} else {
				v["x-kubernetes-validations"] = keep
			}
		}
		for _, e := range v {
			editRules(e, edit)
		}
	case []any:
		for _, e := range v {
			editRules(e, edit)
		}
	}
}

// copyStatusCPU creates crd, then a copy of each of runs as its
// resource, and measures the operator's status write of them.
func (b *bench) copyStatusCPU(ctx context.Context, ns string, runs []*v1alpha1.AgentRun, workers int, crd *unstructured.Unstructured, name string) (float64, int, error) {
	if err := b.c.Create(ctx, crd); err != nil {
		return 0, 0, err
	}
	defer func() { _ = b.c.Delete(context.Background(), crd) }()
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	version := ""
	if len(versions) > 0 {
		if v, ok := versions[0].(map[string]any); ok {
			version, _, _ = unstructured.NestedString(v, "name")
		}
	}
	apiVersion := group + "/" + version
	copyOf := func(r *v1alpha1.AgentRun, name string) (*unstructured.Unstructured, error) {
		raw, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(raw, &u.Object); err != nil {
			return nil, err
		}
		u.Object["metadata"] = map[string]any{"name": name, "namespace": ns}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		return u, nil
	}
	objs := make([]*unstructured.Unstructured, workers)
	for i := range objs {
		u, err := copyOf(runs[i], fmt.Sprintf("copy-%d", i))
		if err != nil {
			return 0, 0, err
		}
		status := u.Object["status"]
		for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
			err = b.c.Create(ctx, u.DeepCopy())
			if err == nil || time.Since(start) > time.Minute {
				break
			}
		}
		if err != nil {
			return 0, 0, fmt.Errorf("the CRD %s is not served: %w", crd.GetName(), err)
		}
		if err := b.c.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return 0, 0, err
		}
		base := u.DeepCopy()
		u.Object["status"] = status
		if err := b.c.Status().Patch(ctx, u, client.MergeFrom(base)); err != nil {
			return 0, 0, err
		}
		objs[i] = u
	}
	// Watched, as the runs are.
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion(apiVersion)
	list.SetKind(kind + "List")
	w, err := b.c.Watch(ctx, list, client.InNamespace(ns))
	if err != nil {
		return 0, 0, err
	}
	defer w.Stop()
	go func() {
		for range w.ResultChan() {
		}
	}()
	// The operator's write, as arWrite makes it.
	write := func(i, k int) error {
		u := objs[i]
		base := u.DeepCopy()
		st, _ := u.Object["status"].(map[string]any)
		if st == nil {
			st = map[string]any{}
			u.Object["status"] = st
		}
		turn, _ := st["turn"].(int64)
		st["turn"] = turn + 1
		if conds, _ := st["conditions"].([]any); len(conds) > 0 {
			if c0, ok := conds[0].(map[string]any); ok {
				c0["message"] = fmt.Sprintf("turn %d", k)
			}
		}
		var cp *kruntime.RawExtension
		if raw, err := json.Marshal(st["checkpoint"]); err == nil {
			cp = &kruntime.RawExtension{Raw: raw}
		}
		var next any
		if err := json.Unmarshal(bumpCheckpoint(cp, k), &next); err != nil {
			return err
		}
		st["checkpoint"] = next
		return b.c.Status().Patch(ctx, u, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}
	return b.measureCPU(ctx, workers, name, write)
}

// bumpCheckpoint changes a checkpoint-sized value without changing its size
// much: its last digits count the write.
func bumpCheckpoint(cp *kruntime.RawExtension, k int) []byte {
	if cp == nil || len(cp.Raw) == 0 {
		return []byte(fmt.Sprintf(`{"k":%d}`, k))
	}
	var m map[string]any
	if err := json.Unmarshal(cp.Raw, &m); err != nil {
		// Not JSON (a ConfigMap's filler): replace its tail.
		s := string(cp.Raw)
		tag := fmt.Sprintf("%08d", k)
		if len(s) < len(tag) {
			return []byte(tag)
		}
		return []byte(s[:len(s)-len(tag)] + tag)
	}
	m["scaleWrite"] = k
	out, _ := json.Marshal(m)
	return out
}

// measureCPU runs writes until o.writes are done (and, when profiling,
// until the profile is taken) and returns the API server's CPU seconds
// spent and the writes made.
func (b *bench) measureCPU(ctx context.Context, workers int, name string, write func(i, k int) error) (float64, int, error) {
	before, err := b.requests(ctx)
	if err != nil {
		return 0, 0, err
	}
	var profiled atomic.Bool
	profiled.Store(b.o.profileDir == "")
	var perr error
	var pwg sync.WaitGroup
	if b.o.profileDir != "" {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			defer profiled.Store(true)
			perr = b.profile(ctx, filepath.Join(b.o.profileDir, "apiserver-"+name+".pprof"), 10)
		}()
	}
	var done atomic.Int64
	err = parallel(workers, workers, func(i int) error {
		for {
			k := int(done.Add(1))
			if k > b.o.writes && profiled.Load() {
				done.Add(-1)
				return nil
			}
			if err := write(i, k); err != nil {
				return err
			}
		}
	})
	pwg.Wait()
	if err != nil {
		return 0, 0, err
	}
	if perr != nil {
		return 0, 0, perr
	}
	after, err := b.requests(ctx)
	if err != nil {
		return 0, 0, err
	}
	return after.cpu - before.cpu, int(done.Load()), nil
}

// profile saves a CPU profile of the API server over the next seconds.
func (b *bench) profile(ctx context.Context, path string, seconds int) error {
	raw, err := b.cs.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).
		Timeout(time.Duration(seconds+30) * time.Second).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("profiling kube-apiserver: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "Saved", path)
	return os.WriteFile(path, raw, 0o644)
}

// profileSelf starts a CPU profile of this process (the operator and the
// harness) into path; stop ends it.
func profileSelf(path string) (stop func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		fmt.Fprintln(os.Stderr, "Saved", path)
	}, nil
}

// machineCPU is the CPU time every process on this machine has used
// (the busy time of /proc/stat), 0 where there is no /proc.
func machineCPU() time.Duration {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// procCPU is the CPU time of every other process on this machine by
// command name (/proc/PID/stat), with "fake" for the fake model and tool
// (a child of this process, by the same name).
func procCPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	self := os.Getpid()
	selfComm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", self))
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == self {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		open, shut := strings.IndexByte(string(raw), '('), strings.LastIndexByte(string(raw), ')')
		if open < 0 || shut < open {
			continue
		}
		comm := string(raw[open+1 : shut])
		if comm+"\n" == string(selfComm) {
			comm = "fake"
		}
		f := strings.Fields(string(raw[shut+1:]))
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		out[comm] += time.Duration(utime+stime) * 10 * time.Millisecond
	}
	return out
}

// histSums are the sums and counts of the operator's own latency
// histograms, from this process's metrics registry.
type histSums map[string][2]float64

// operatorTimes reads where the operator's reconciles spent their time:
// waiting in the workqueue, and reconciling.
func operatorTimes() histSums {
	out := histSums{}
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h == nil {
				continue
			}
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			name := mf.GetName()
			queue := (name == "workqueue_queue_duration_seconds" || name == "workqueue_work_duration_seconds") && labels["name"] == "agentrun"
			if !queue && name != "agentrun_client_throttle_seconds" {
				continue
			}
			key := strings.TrimPrefix(strings.TrimPrefix(name, "workqueue_"), "agentrun_")
			v := out[key]
			out[key] = [2]float64{v[0] + h.GetSampleSum(), v[1] + float64(h.GetSampleCount())}
		}
	}
	return out
}

// since says the mean of each histogram over what was observed after
// before.
func (h histSums) since(before histSums) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		sum, n := h[k][0]-before[k][0], h[k][1]-before[k][1]
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f x %.1f ms", k, n, 1000*sum/n))
		}
	}
	return "operator means: " + strings.Join(parts, ", ")
}

// ownCPU is the user and system CPU time this process (the operator and the
// harness) has used.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverStats are counters of the API server's /metrics.
type serverStats struct {
	cpu          float64 // process_cpu_seconds_total
	writes       float64 // mutating requests (POST, PUT, PATCH, DELETE)
	budgetWrites float64 // the mutating requests of them to agentbudgets
	// byKind counts every request (reads and watches too) by verb and
	// resource, "PATCH agentruns/status".
	byKind map[string]float64
}

// labelOf is the value of label name in a metric line, "" when absent.
func labelOf(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	v := line[i+len(name)+2:]
	return v[:strings.IndexByte(v, '"')]
}

// perTurn says how many requests of each kind that happened between
// before and after were made a turn, the most first.
func perTurn(before, after serverStats, turns int) string {
	type kind struct {
		name string
		n    float64
	}
	var ks []kind
	for k, v := range after.byKind {
		if n := (v - before.byKind[k]) / float64(turns); n >= 0.005 {
			ks = append(ks, kind{k, n})
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].n > ks[j].n })
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s %.2f", k.name, k.n)
	}
	return strings.Join(parts, ", ")
}

func (b *bench) requests(ctx context.Context) (serverStats, error) {
	raw, err := b.cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return serverStats{}, err
	}
	s := serverStats{byKind: map[string]float64{}}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "process_cpu_seconds_total "):
			s.cpu, _ = strconv.ParseFloat(strings.TrimPrefix(line, "process_cpu_seconds_total "), 64)
		case strings.HasPrefix(line, "apiserver_request_total{"):
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			kind := labelOf(line, "verb") + " " + labelOf(line, "resource")
			if sub := labelOf(line, "subresource"); sub != "" {
				kind += "/" + sub
			}
			s.byKind[kind] += v
			if !mutating(line) {
				continue
			}
			s.writes += v
			if strings.Contains(line, `resource="agentbudgets"`) {
				s.budgetWrites += v
			}
		}
	}
	return s, sc.Err()
}

func mutating(line string) bool {
	for _, v := range []string{`verb="POST"`, `verb="PUT"`, `verb="PATCH"`, `verb="DELETE"`, `verb="APPLY"`} {
		if strings.Contains(line, v) {
			return true
		}
	}
	return false
}

// events counts the events about runs in ns (a series counts its count).
func (b *bench) events(ctx context.Context, ns string) (int, error) {
	evs, err := b.cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range evs.Items {
		if e.Regarding.Kind != "AgentRun" {
			continue
		}
		n++
		if e.Series != nil {
			n += int(e.Series.Count) - 1
		} else if e.DeprecatedCount > 1 {
			n += int(e.DeprecatedCount) - 1
		}
	}
	return n, nil
}

// fake makes a request of the fake model's control endpoints.
func (b *bench) fake(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+b.addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err == nil && resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("the fake answered %s %s with %s", method, path, resp.Status)
	}
	return resp, err
}

// inflight asks the fake how many model calls it holds now, how many it
// has answered in all, and how many of those came over HTTP/2.
func (b *bench) inflight(ctx context.Context) (n, calls, h2 int, err error) {
	resp, err := b.fake(ctx, http.MethodGet, "/inflight")
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	_, err = fmt.Fscanf(resp.Body, "%d %d %d", &n, &calls, &h2)
	return n, calls, h2, err
}

// sent returns, and makes the fake forget, when each call of a model with
// a latency arrived, by turn (Unix milliseconds).
func (b *bench) sent(ctx context.Context) (map[int][]int64, error) {
	resp, err := b.fake(ctx, http.MethodGet, "/sent")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sent := map[int][]int64{}
	return sent, json.NewDecoder(resp.Body).Decode(&sent)
}

func (b *bench) release(ctx context.Context) error {
	resp, err := b.fake(ctx, http.MethodPost, "/release")
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// startFake runs this binary's "serve" in a child process and returns its
// plain and TLS addresses. This process trusts the TLS listener's
// certificate (SSL_CERT_FILE, read when the first TLS connection checks a
// certificate against the system roots), as a pod trusts a provider's.
func startFake() (addr, tlsAddr string, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return "", "", nil, err
	}
	dir, err := os.MkdirTemp("", "agentrun-scale-fake-")
	if err != nil {
		return "", "", nil, err
	}
	certFile := filepath.Join(dir, "ca.pem")
	cmd := exec.Command(self, "serve", certFile)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", "", nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		return "", "", nil, err
	}
	addrs := strings.Fields(line)
	if len(addrs) != 2 {
		_ = cmd.Process.Kill()
		return "", "", nil, fmt.Errorf("the fake printed %q, want two addresses", line)
	}
	if err := os.Setenv("SSL_CERT_FILE", certFile); err != nil {
		_ = cmd.Process.Kill()
		return "", "", nil, err
	}
	stop = func() {
		_ = stdin.Close()
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	}
	return addrs[0], addrs[1], stop, nil
}

// parallel runs f(0..n-1) on at most workers goroutines; the first error
// wins.
func parallel(n, workers int, f func(i int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	idx := make(chan int)
	for w := 0; w < min(n, workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		idx <- i
	}
	close(idx)
	wg.Wait()
	return first
}

// errorLogger prints the operator's errors only.
type errorLogger struct{}

func (errorLogger) Init(logr.RuntimeInfo)            {}
func (errorLogger) Enabled(int) bool                 { return false }
func (errorLogger) Info(int, string, ...any)         {}
func (l errorLogger) WithValues(...any) logr.LogSink { return l }
func (l errorLogger) WithName(string) logr.LogSink   { return l }
func (errorLogger) Error(err error, msg string, kv ...any) {
	fmt.Fprintln(os.Stderr, "operator:", msg, err, kv)
}

var _ logr.LogSink = errorLogger{}
