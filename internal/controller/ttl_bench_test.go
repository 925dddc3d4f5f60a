package controller

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ttlBenchRuns is how many runs each variant of BenchmarkTTL creates;
// AGENTRUN_BENCH_TTL_RUNS shortens (or lengthens) it.
const ttlBenchRuns = 2000

// ttlBenchLists is how many full lists BenchmarkTTL times.
const ttlBenchLists = 20

// BenchmarkTTL measures what ttlSecondsAfterFinished saves the API server:
// the same number of one-turn runs (ttlBenchRuns), with a TTL of 10 s and
// without one, each in a namespace of its own. Once every run has ended
// (and, with the TTL, once its runs are gone) it reports etcd's object
// counts as the API server's metrics give them (apiserver_resource_objects,
// the whole server's: agentruns, secrets, all, and all less before the
// variant, since events outlive the runs by an hour), the latency of a full
// list of the namespace's runs (p50 and max of ttlBenchLists lists through
// an uncached client), the runs left, and the namespace's transcript
// Secrets whose run is gone. envtest runs no garbage collector, so those
// Secrets stay here; in a cluster they go with their run. Each variant
// deletes its runs and Secrets when it ends, so the next starts from the
// same counts. Run it alone: go test -run '^$' -bench TTL -benchtime 1x.
func BenchmarkTTL(b *testing.B) {
	runs := ttlBenchRuns
	if v := os.Getenv("AGENTRUN_BENCH_TTL_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("AGENTRUN_BENCH_TTL_RUNS=%q: a positive number of runs", v)
		}
		runs = n
	}
	for _, ttl := range []*int32{ptr.To(int32(10)), nil} {
		name := "ttl=none"
		if ttl != nil {
			name = fmt.Sprintf("ttl=%ds", *ttl)
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				benchmarkTTL(b, runs, ttl)
			}
		})
	}
}

func benchmarkTTL(b *testing.B, runs int, ttl *int32) {
	ctx := context.Background()
	ns := namespace(b)
	// Registered before the operator starts, so run after it stops (and
	// before namespace's own cleanup deletes the runs): envtest has no
	// garbage collector to delete the runs' Secrets.
	b.Cleanup(func() {
		if err := k8sClient.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(ns)); err != nil {
			b.Errorf("deleting the namespace's Secrets: %v", err)
		}
	})
	r, _ := startWith(b, &kits{tools: newTools()}, managerSetup{})
	before := settledObjects(b)
	b.Logf("%d runs in %s; etcd before: %d agentruns, %d secrets, %d objects", runs, ns,
		before[agentrunsResource], before["secrets"], before.total())

	start := time.Now()
	createRuns(b, ns, runs, ttl)
	created := time.Since(start)

	// Ended: no run of the namespace is without an outcome (with a TTL,
	// a run that is gone had ended). Read from the operator's cache, so
	// that waiting costs the API server nothing.
	var ended time.Duration
	if !poll(b, 10*time.Minute, time.Second, func() bool {
		list := &v1alpha1.AgentRunList{}
		if err := r.List(ctx, list, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		if ttl == nil && len(list.Items) < runs {
			return false
		}
		if slices.ContainsFunc(list.Items, func(run v1alpha1.AgentRun) bool { return run.Status.Outcome == "" }) {
			return false
		}
		ended = time.Since(start)
		return true
	}) {
		b.Fatal("not every run ended within 10 minutes")
	}
	if ttl != nil {
		// Gone: the TTL has passed for the last run to end; 10 s, a
		// second for completionTime's whole seconds, and slack.
		within := time.Duration(*ttl)*time.Second + 2*time.Minute
		if !poll(b, within, time.Second, func() bool { return countOf(b, ns, v1alpha1.GroupVersion.WithKind("AgentRunList")) == 0 }) {
			left := &v1alpha1.AgentRunList{}
			if err := k8sClient.List(ctx, left, client.InNamespace(ns)); err != nil {
				b.Fatal(err)
			}
			first := left.Items[0]
			b.Fatalf("%d runs were not deleted within %s, %s among them: ended at %s, %s", len(left.Items), within,
				first.Name, first.Status.CompletionTime, first.Status.Outcome)
		}
		b.ReportMetric(time.Since(start).Seconds()-ended.Seconds(), "s-ended-to-gone")
	}

	objs := settledObjects(b)

	lat := make([]time.Duration, 0, ttlBenchLists)
	left := 0
	for range ttlBenchLists {
		list := &v1alpha1.AgentRunList{}
		t := time.Now()
		if err := k8sClient.List(ctx, list, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
		left = len(list.Items)
	}
	slices.Sort(lat)

	secrets := &corev1.SecretList{}
	if err := k8sClient.List(ctx, secrets, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	remaining := &v1alpha1.AgentRunList{}
	if err := k8sClient.List(ctx, remaining, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	alive := map[types.UID]bool{}
	for _, run := range remaining.Items {
		alive[run.UID] = true
	}
	orphans := 0
	for _, s := range secrets.Items {
		if ref := metav1.GetControllerOf(&s); ref != nil && ref.Kind == "AgentRun" && !alive[ref.UID] {
			orphans++
		}
	}

	b.ReportMetric(float64(objs[agentrunsResource]), "agentruns-in-etcd")
	b.ReportMetric(float64(objs["secrets"]), "secrets-in-etcd")
	b.ReportMetric(float64(objs.total()), "objects-in-etcd")
	b.ReportMetric(float64(objs.total()-before.total()), "objects-added")
	b.Logf("etcd after, by resource added: %s", objs.added(before))
	b.ReportMetric(ms(lat[len(lat)/2]), "list-p50-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "list-max-ms")
	b.ReportMetric(float64(left), "runs-left")
	b.ReportMetric(float64(orphans), "secrets-of-deleted-runs")
	b.ReportMetric(created.Seconds(), "s-to-create")
	b.ReportMetric(ended.Seconds(), "s-to-end")
}

// createRuns creates n one-turn runs in ns, with ttl, from a few clients'
// worth of concurrent creates.
func createRuns(b *testing.B, ns string, n int, ttl *int32) {
	const creators = 8
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range creators {
		wg.Go(func() {
			for i := range next {
				run := makeRun(ns, fmt.Sprintf("ttl-%05d", i)).answer("done").r
				run.Spec.TTLSecondsAfterFinished = ttl
				if err := k8sClient.Create(context.Background(), run); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("creating %s: %w", run.Name, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

// poll calls done every interval until it returns true, for at most
// within, and says whether it did.
func poll(b *testing.B, within, interval time.Duration, done func() bool) bool {
	b.Helper()
	deadline := time.Now().Add(within)
	for !done() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}

// countOf is how many objects of a list kind the API server holds in ns
// (every namespace when empty), read as metadata only.
func countOf(b *testing.B, ns string, gvk schema.GroupVersionKind) int {
	b.Helper()
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk)
	if err := k8sClient.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	return len(list.Items)
}

const agentrunsResource = "agentruns.agents.agentrun.dev"

// objectCounts is etcd's object count by resource ("secrets",
// "agentruns.agents.agentrun.dev").
type objectCounts map[string]int

func (c objectCounts) total() int {
	n := 0
	for _, v := range c {
		n += max(v, 0) // -1: the API server could not count
	}
	return n
}

// settledObjects is etcd's object counts once the API server's metric
// has caught up with what a list shows of agentruns and secrets (the
// server counts every second under -bench, see TestMain, every minute by
// default).
func settledObjects(b *testing.B) objectCounts {
	b.Helper()
	var objs objectCounts
	if !poll(b, 2*time.Minute, time.Second, func() bool {
		objs = storageObjects(b)
		return objs[agentrunsResource] == countOf(b, "", v1alpha1.GroupVersion.WithKind("AgentRunList")) &&
			objs["secrets"] == countOf(b, "", corev1.SchemeGroupVersion.WithKind("SecretList"))
	}) {
		b.Fatal("etcd's object counts in the API server's metrics did not catch up with a list within 2 minutes")
	}
	return objs
}

// added is what c holds more (or less) than before, by resource.
func (c objectCounts) added(before objectCounts) string {
	var out []string
	for _, res := range slices.Sorted(maps.Keys(c)) {
		if d := c[res] - before[res]; d != 0 {
			out = append(out, fmt.Sprintf("%s %+d", res, d))
		}
	}
	return strings.Join(out, ", ")
}

// storageObjects reads etcd's object counts from the API server's
// /metrics: apiserver_resource_objects, or on servers that do not have it
// apiserver_storage_objects (hidden since 1.37, deprecated in 1.34) or
// etcd_object_counts (before 1.21).
func storageObjects(b *testing.B) objectCounts {
	b.Helper()
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("reading the API server's metrics: %v", err)
	}
	byName := map[string]objectCounts{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), "{")
		if !ok || name != "apiserver_resource_objects" && name != "apiserver_storage_objects" && name != "etcd_object_counts" {
			continue
		}
		labels, val, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			b.Fatalf("an object count the benchmark cannot read: %q", sc.Text())
		}
		// resource="secrets" or, in apiserver_resource_objects, a group
		// label beside it: named as the older metrics name it.
		res, group := label(labels, "resource"), label(labels, "group")
		if group != "" {
			res += "." + group
		}
		if byName[name] == nil {
			byName[name] = objectCounts{}
		}
		byName[name][res] = int(v)
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"apiserver_resource_objects", "apiserver_storage_objects", "etcd_object_counts"} {
		if c := byName[name]; len(c) > 0 {
			return c
		}
	}
	b.Fatal("the API server's metrics have no object counts (apiserver_resource_objects, apiserver_storage_objects, etcd_object_counts)")
	return nil
}

// label is the value of a Prometheus label in labels (`a="x",b="y"`).
func label(labels, name string) string {
	for kv := range strings.SplitSeq(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
