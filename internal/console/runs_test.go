package console

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// idleRuns creates n runs named run-0000... in namespace ns, labelled
// with labels(i). They carry another shard's label, so the control
// plane's operator (which drives the runs without one) leaves them as
// they are: a page of them reads the same from one moment to the next.
// They are created eight at a time, by a client without client-go's rate
// limit.
func idleRuns(tb testing.TB, ns string, n int, labels func(i int) map[string]string) {
	tb.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1 // no client-side rate limit
	c, err := client.New(cfg, client.Options{Scheme: kubescheme.Scheme})
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatal(err)
	}
	// Pages of every namespace read the runs in namespace order: left
	// behind, these would fill another test's first page.
	tb.Cleanup(func() {
		if err := c.DeleteAllOf(context.Background(), &v1alpha1.AgentRun{}, client.InNamespace(ns)); err != nil {
			tb.Errorf("deleting the idle runs of %s: %v", ns, err)
		}
	})
	idx := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range idx {
				l := map[string]string{v1alpha1.LabelShard: "idle"}
				for k, v := range labels(i) {
					l[k] = v
				}
				run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("run-%04d", i), Namespace: ns, Labels: l},
					Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{Goal: "g", Model: v1alpha1.ModelSpec{
						ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
						Script:        []v1alpha1.ScriptStep{{Content: "done"}}},
						Budget: v1alpha1.BudgetSpec{MaxTurns: 1}}}}
				if err := c.Create(ctx, run); err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		idx <- i
	}
	close(idx)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		tb.Fatal(err)
	}
}

// ended gives a run an outcome, as the operator would have.
func ended(t *testing.T, ns, name string, outcome v1alpha1.Outcome) {
	t.Helper()
	run := &v1alpha1.AgentRun{}
	if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
		t.Fatal(err)
	}
	run.Status.Phase, run.Status.Outcome = v1alpha1.PhaseFailed, outcome
	if outcome == v1alpha1.OutcomeCompleted {
		run.Status.Phase = v1alpha1.PhaseSucceeded
	}
	if err := admin.Status().Update(context.Background(), run); err != nil {
		t.Fatal(err)
	}
}

// rowsOf is the runs the page shows, by name.
func rowsOf(t *testing.T, ctx context.Context) []string {
	t.Helper()
	return eval[[]string](t, ctx, `[...document.querySelectorAll("tr[data-run]")].map(r => r.dataset.run.split("/")[1])`)
}

func names(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("run-%04d", i))
	}
	return out
}

// The runs page reads a page of 100 runs at a time: Next shows the next
// 100 without repeats, the last page has no Next, and First page goes
// back. A place in the list the API server did not give starts again
// from the first page, saying so.
func TestConsole_runsPageShowsAPageAtATime(t *testing.T) {
	ns := "console-paging"
	idleRuns(t, ns, 250, func(int) map[string]string { return nil })
	bind(t, "paige", "agentrun-viewer", ns)

	ctx := tab(t)
	srv := consoleFor(t, "paige", ns)
	var seen [][]string
	do(t, ctx, chromedp.Navigate(srv.URL+"/?namespace="+ns+"&sort=name"), visible(`a[data-next]`))
	seen = append(seen, rowsOf(t, ctx))
	do(t, ctx, click(`a[data-next]`), visible(`a[data-first]`), visible(`a[data-next]`))
	seen = append(seen, rowsOf(t, ctx))
	do(t, ctx, click(`a[data-next]`), visible(`a[data-first]`))
	seen = append(seen, rowsOf(t, ctx))
	if diff := cmp.Diff([][]string{names(0, 100), names(100, 200), names(200, 250)}, seen); diff != "" {
		t.Errorf("pages (-want +got):\n%s", diff)
	}
	if next := eval[int](t, ctx, `document.querySelectorAll("a[data-next]").length`); next != 0 {
		t.Error("the last page has a Next link")
	}
	do(t, ctx, click(`a[data-first]`), visible(`a[data-next]`))
	if diff := cmp.Diff(names(0, 100), rowsOf(t, ctx)); diff != "" {
		t.Errorf("first page again (-want +got):\n%s", diff)
	}

	do(t, ctx, chromedp.Navigate(srv.URL+"/?namespace="+ns+"&sort=name&at="+ns+"&continue=bm90LWEtdG9rZW4"), visible(`p.note`))
	if note := text(t, ctx, `p.note`); !strings.Contains(note, "this is the first page again") {
		t.Errorf("a token the API server did not give: note %q", note)
	}
	if diff := cmp.Diff(names(0, 100), rowsOf(t, ctx)); diff != "" {
		t.Errorf("after a token the API server did not give (-want +got):\n%s", diff)
	}
}

// A label selector is applied by the API server and narrows the pages; an
// outcome filter narrows the runs of the page read; a selector that does
// not parse is shown as what it is, with no runs.
func TestConsole_runsPageFiltersByLabelAndOutcome(t *testing.T) {
	ns := "console-filters"
	idleRuns(t, ns, 250, func(i int) map[string]string {
		if i%5 == 0 {
			return map[string]string{"paging-team": "billing"}
		}
		return map[string]string{"paging-team": "support"}
	})
	ended(t, ns, "run-0003", v1alpha1.OutcomeCompleted)
	ended(t, ns, "run-0005", v1alpha1.OutcomeCompleted)
	ended(t, ns, "run-0007", v1alpha1.OutcomeBudgetExhausted)
	bind(t, "fay", "agentrun-viewer", "")

	ctx := tab(t)
	srv := consoleFor(t, "fay", "")
	do(t, ctx, chromedp.Navigate(srv.URL+"/?sort=name&label=paging-team%3Dbilling"), visible(`tr[data-run]`))
	var billing []string
	for i := 0; i < 250; i += 5 {
		billing = append(billing, fmt.Sprintf("run-%04d", i))
	}
	if diff := cmp.Diff(billing, rowsOf(t, ctx)); diff != "" {
		t.Errorf("paging-team=billing across the cluster (-want +got):\n%s", diff)
	}

	do(t, ctx, chromedp.Navigate(srv.URL+"/?namespace="+ns+"&sort=name&outcome=Completed"), visible(`tr[data-run]`))
	if diff := cmp.Diff([]string{"run-0003", "run-0005"}, rowsOf(t, ctx)); diff != "" {
		t.Errorf("outcome Completed (-want +got):\n%s", diff)
	}
	do(t, ctx, chromedp.Navigate(srv.URL+"/?namespace="+ns+"&label=paging-team%3Dbilling&outcome=Completed"), visible(`tr[data-run]`))
	if diff := cmp.Diff([]string{"run-0005"}, rowsOf(t, ctx)); diff != "" {
		t.Errorf("team=billing and outcome Completed (-want +got):\n%s", diff)
	}

	do(t, ctx, chromedp.Navigate(srv.URL+"/?label=team%3D%3Dbilling%2C%21"), visible(`p.problem`))
	if problem := text(t, ctx, `p.problem`); !strings.HasPrefix(problem, "The label filter is not a label selector: ") {
		t.Errorf("an invalid selector: %q", problem)
	}
	if rows := rowsOf(t, ctx); len(rows) != 0 {
		t.Errorf("an invalid selector shows runs %q", rows)
	}
}

// BenchmarkRunsPage renders the first page of the runs page of a
// namespace of 5,000 runs, as its namespace's page and as the cluster's
// (the admin may list runs across the cluster).
func BenchmarkRunsPage(b *testing.B) {
	const ns, n = "console-bench", 5000
	idleRuns(b, ns, n, func(int) map[string]string { return nil })
	_, hs := newConsole(b, Options{Config: env.Config})
	srv := hs.URL
	for _, bc := range []struct{ name, query string }{{"namespace", "?namespace=" + ns}, {"cluster", ""}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := http.Get(srv + "/" + bc.query)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK || strings.Count(string(body), "<tr data-run=") != pageSize {
					b.Fatalf("%d with %d rows", resp.StatusCode, strings.Count(string(body), "<tr data-run="))
				}
			}
		})
	}
}

// The rows of a page sort newest first, by name, or by cost (highest
// first, a run that has spent nothing last), within the page.
func TestOrderOf_sortsThePagesRows(t *testing.T) {
	at := func(sec int64) time.Time { return time.Unix(sec, 0) }
	usd := func(s string) *big.Rat { r, _ := new(big.Rat).SetString(s); return r }
	rows := []runRow{
		{Key: "a/b", created: at(2), cost: usd("10.00")},
		{Key: "a/a", created: at(1)},
		{Key: "a/c", created: at(3), cost: usd("9.50")},
	}
	for _, tc := range []struct {
		sort string
		want []string
	}{
		{"", []string{"a/c", "a/b", "a/a"}},
		{"name", []string{"a/a", "a/b", "a/c"}},
		{"cost", []string{"a/b", "a/c", "a/a"}},
	} {
		got := slices.Clone(rows)
		slices.SortStableFunc(got, orderOf(tc.sort))
		var keys []string
		for _, r := range got {
			keys = append(keys, r.Key)
		}
		if diff := cmp.Diff(tc.want, keys); diff != "" {
			t.Errorf("sort %q (-want +got):\n%s", tc.sort, diff)
		}
	}
}

// The outcome and phase filters are applied by the API server (the CRD's
// selectable fields), not to the page read: the one Failed run among 101,
// last in the list's order, is on the first page of outcome=Failed, and
// phase=Failed, with no Next link.
func TestRunsPage_outcomeAndPhaseFilterOnTheAPIServer(t *testing.T) {
	const ns = "console-outcome-filter"
	idleRuns(t, ns, pageSize+1, func(int) map[string]string { return nil })
	ended(t, ns, fmt.Sprintf("run-%04d", pageSize), v1alpha1.OutcomeToolFailure)
	_, srv := newConsole(t, Options{Config: env.Config})
	for _, q := range []string{"outcome=" + string(v1alpha1.OutcomeToolFailure), "phase=" + string(v1alpha1.PhaseFailed)} {
		resp, err := http.Get(srv.URL + "/?namespace=" + ns + "&" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		rows := strings.Count(string(body), "<tr data-run=")
		if resp.StatusCode != http.StatusOK || rows != 1 || !strings.Contains(string(body), fmt.Sprintf(`data-run="%s/run-%04d"`, ns, pageSize)) {
			t.Errorf("%s: %d with %d rows: want the one run that failed", q, resp.StatusCode, rows)
		}
		if strings.Contains(string(body), "continue=") {
			t.Errorf("%s: the page links a next page: want none, the API server selected the one run", q)
		}
	}
}
