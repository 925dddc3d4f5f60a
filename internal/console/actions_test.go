package console

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// finished creates a run that completes at its first turn and waits until
// it has.
func finished(t *testing.T, ns, name string) *v1alpha1.AgentRun {
	t.Helper()
	run := refundRun(ns, name)
	run.Spec.Goal = "Which invoice of the customer was charged twice?"
	run.Spec.Model.Script = []v1alpha1.ScriptStep{{Content: "Invoice in_9f21 was charged twice."}}
	create(t, run)
	endsWith(t, run, v1alpha1.OutcomeCompleted)
	return run
}

// Issue 49, item 2: a finished run's page offers Re-run; it makes a new
// run with the same spec, as kubectl agentrun rerun does, and opens its
// page. A run that has not finished offers Cancel instead.
func TestConsole_editorRerunsAFinishedRunAndLandsOnTheNewRun(t *testing.T) {
	ns := namespace(t, "console-rerun")
	bind(t, "rex", "agentrun-editor", ns)
	old := finished(t, ns, "charged-twice")

	ctx := tab(t)
	srv := consoleFor(t, "rex", ns)
	key := ns + "/charged-twice"
	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/charged-twice"), visible(`[data-rerun="`+key+`"]`))
	if eval[bool](t, ctx, `document.querySelector("[data-cancel]") !== null`) {
		t.Error("the page of a finished run offers to cancel it")
	}
	do(t, ctx, click(`[data-rerun="`+key+`"]`))
	var path string
	NewWithT(t).Eventually(func() string {
		path = eval[string](t, ctx, `location.pathname`)
		return path
	}, 30*time.Second, 100*time.Millisecond).Should(HavePrefix("/runs/" + ns + "/charged-twice-"))
	do(t, ctx, visible(`[data-phase]`))
	if got := text(t, ctx, `h1`); got != strings.TrimPrefix(path, "/runs/"+ns+"/") {
		t.Errorf("after Re-run the page's title is %q, want the new run's name (at %s)", got, path)
	}
	again := &v1alpha1.AgentRun{}
	again.Namespace, again.Name = ns, strings.TrimPrefix(path, "/runs/"+ns+"/")
	got := get(t, again)
	if diff := cmp.Diff(old.Spec, got.Spec); diff != "" {
		t.Errorf("the re-run's spec (-want +got):\n%s", diff)
	}
	if got.Labels[v1alpha1.LabelRerunOf] != "charged-twice" {
		t.Errorf("the re-run's labels are %v, want %s=charged-twice", got.Labels, v1alpha1.LabelRerunOf)
	}
	endsWith(t, again, v1alpha1.OutcomeCompleted)
}

// Issue 49, item 2: Cancel on the page of a run that waits for a person
// sets spec.cancel as kubectl agentrun cancel does; the run ends without
// running the call, and the page shows it. The runs page cancels too.
func TestConsole_editorCancelsAWaitingRunAndItEnds(t *testing.T) {
	ns := namespace(t, "console-cancel")
	bind(t, "cody", "agentrun-editor", ns)
	run := refundRun(ns, "refund-cancel")
	createWaiting(t, run)

	ctx := tab(t)
	srv := consoleFor(t, "cody", ns)
	key := ns + "/refund-cancel"
	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/refund-cancel"), visible(`[data-cancel="`+key+`"]`))
	if eval[bool](t, ctx, `document.querySelector("[data-rerun]") !== null`) {
		t.Error("the page of a run that waits offers to re-run it")
	}
	do(t, ctx, click(`[data-cancel="`+key+`"]`), visible(`.result.ok`))
	if message := text(t, ctx, `.result`); !strings.Contains(message, "cancel requested") {
		t.Errorf("after Cancel the page says %q", message)
	}
	endsWith(t, run, v1alpha1.OutcomeApprovalDenied)
	got := get(t, run)
	if !got.Spec.Cancel || len(got.Status.PendingApprovals) != 0 {
		t.Errorf("after Cancel: spec.cancel %v, pending %v; want cancelled and nothing waiting", got.Spec.Cancel, got.Status.PendingApprovals)
	}
	if !strings.Contains(got.Status.Reason, "cancel") {
		t.Errorf("the cancelled run's reason is %q, want it to say it was cancelled", got.Status.Reason)
	}
	// The page follows the run to its end, and then offers Re-run.
	do(t, ctx, visible(`[data-outcome]`), visible(`[data-rerun="`+key+`"]`))
	if outcome := text(t, ctx, `[data-outcome]`); outcome != string(v1alpha1.OutcomeApprovalDenied) {
		t.Errorf("the page shows the outcome %q", outcome)
	}

	// The runs page has a Cancel for each run that has not ended, and
	// keeps its filter.
	other := refundRun(ns, "refund-cancel-row")
	createWaiting(t, other)
	row := `tr[data-run="` + ns + `/refund-cancel-row"]`
	do(t, ctx, chromedp.Navigate(srv.URL+"/?namespace="+ns), visible(row+` [data-cancel]`))
	if eval[bool](t, ctx, `document.querySelector('tr[data-run="`+key+`"] [data-cancel]') !== null`) {
		t.Error("the runs page offers to cancel a run that has ended")
	}
	do(t, ctx, click(row+` [data-cancel]`), visible(`.result.ok`))
	if message := text(t, ctx, `.result`); !strings.Contains(message, "agentrun/refund-cancel-row: cancel requested") {
		t.Errorf("after Cancel the runs page says %q", message)
	}
	if filter := eval[string](t, ctx, `document.querySelector('.filter input[name="namespace"]').value`); filter != ns {
		t.Errorf("after Cancel the runs page's namespace filter is %q, want %q", filter, ns)
	}
	endsWith(t, other, v1alpha1.OutcomeApprovalDenied)
}

// Issue 49, item 2: a viewer's Cancel and Re-run are refused by the API
// server; the page shows its reason, and the runs are as they were.
func TestConsole_viewerCancelAndRerunAreRefusedWithTheAPIServersReason(t *testing.T) {
	ns := namespace(t, "console-cancel-viewer")
	bind(t, "vera", "agentrun-viewer", ns)
	run := refundRun(ns, "refund-vera")
	createWaiting(t, run)
	done := finished(t, ns, "done-vera")

	ctx := tab(t)
	srv := consoleFor(t, "vera", ns)
	key := ns + "/refund-vera"
	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/refund-vera"), visible(`[data-cancel="`+key+`"]`),
		click(`[data-cancel="`+key+`"]`), visible(`.result.refused`))
	if message := text(t, ctx, `.result`); !strings.Contains(message, `cannot patch resource "agentruns"`) {
		t.Errorf("the refusal shown is %q, want the API server's", message)
	}
	got := get(t, run)
	if got.Spec.Cancel || len(got.Status.PendingApprovals) != 1 || got.Status.Outcome != "" {
		t.Errorf("after a refused Cancel the run has spec.cancel %v, pending %v, outcome %q; want it still waiting",
			got.Spec.Cancel, got.Status.PendingApprovals, got.Status.Outcome)
	}

	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/done-vera"), visible(`[data-rerun="`+ns+`/done-vera"]`),
		click(`[data-rerun="`+ns+`/done-vera"]`), visible(`.result.refused`))
	if message := text(t, ctx, `.result`); !strings.Contains(message, `cannot create resource "agentruns"`) {
		t.Errorf("the refusal shown is %q, want the API server's", message)
	}
	var runs v1alpha1.AgentRunList
	if err := admin.List(context.Background(), &runs, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelRerunOf: done.Name}); err != nil {
		t.Fatal(err)
	}
	if len(runs.Items) != 0 {
		t.Errorf("a refused Re-run made %d runs", len(runs.Items))
	}
}
