package console

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nightlySchedule runs at 03:00 UTC, so no run of its own starts while a
// test looks at it.
func nightlySchedule(ns string) *v1alpha1.AgentSchedule {
	return &v1alpha1.AgentSchedule{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns},
		Spec: v1alpha1.AgentScheduleSpec{Schedule: "0 3 * * *",
			RunTemplate: v1alpha1.ScheduledRun{Spec: &refundTemplate(ns).Spec.Run}}}
}

// scheduledRun is a finished-looking run the schedule name labels, as the
// schedule controller labels the runs it starts.
func scheduledRun(ns, name, schedule string) *v1alpha1.AgentRun {
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.AgentRunSpec{AgentSpec: refundTemplate(ns).Spec.Run.AgentSpec}}
	run.Spec.Goal = "Refund the day's invoices."
	if schedule != "" {
		run.Labels = map[string]string{v1alpha1.LabelSchedule: schedule}
	}
	return run
}

// Issue 49, item 1: the schedules page lists a schedule with its cron
// expression and its next run time; its page lists the runs labelled with
// it, newest first, linking to their pages; an editor suspends it
// (spec.suspend true in the API) and resumes it from there.
func TestConsole_editorSeesAScheduleWithItsRunsAndSuspendsAndResumesIt(t *testing.T) {
	ns := namespace(t, "console-schedules")
	bind(t, "tess", "agentrun-editor", ns)
	s := nightlySchedule(ns)
	create(t, s)
	older := scheduledRun(ns, "nightly-200", "nightly")
	create(t, older)
	NewWithT(t).Eventually(func() bool { return time.Since(get(t, older).CreationTimestamp.Time) > time.Second },
		10*time.Second, 50*time.Millisecond).Should(BeTrue())
	create(t, scheduledRun(ns, "nightly-100", "nightly"))
	create(t, scheduledRun(ns, "by-hand", ""))

	ctx := tab(t)
	srv := consoleFor(t, "tess", ns)
	row := `tr[data-schedule="` + ns + `/nightly"]`
	do(t, ctx, chromedp.Navigate(srv.URL+"/"), click(`nav a[href="/schedules"]`), visible(row))
	if got := text(t, ctx, row+` [data-suspended]`); got != "no" {
		t.Errorf("the schedules page says suspended %q, want no", got)
	}
	if got := text(t, ctx, row+` [data-next]`); !strings.HasSuffix(got, "T03:00:00Z") {
		t.Errorf("the schedules page's next run is %q, want the next 03:00 UTC", got)
	}

	do(t, ctx, click(row+` a`), visible(`[data-suspend]`))
	runs := eval[[]string](t, ctx, `[...document.querySelectorAll('.schedule-runs tr[data-run] a')].map(a => a.getAttribute("href"))`)
	if diff := cmp.Diff([]string{"/runs/" + ns + "/nightly-100", "/runs/" + ns + "/nightly-200"}, runs); diff != "" {
		t.Errorf("the schedule's runs, newest first (-want +got):\n%s", diff)
	}

	do(t, ctx, click(`[data-suspend]`), visible(`.result.ok`), visible(`[data-resume]`))
	if got := get(t, s).Spec.Suspend; got == nil || !*got {
		t.Fatalf("after Suspend spec.suspend is %v, want true", got)
	}
	if got := text(t, ctx, `[data-next]`); got != "none" {
		t.Errorf("a suspended schedule's next run is %q, want none", got)
	}
	do(t, ctx, click(`[data-resume]`), visible(`[data-suspend]`))
	if got := get(t, s).Spec.Suspend; got == nil || *got {
		t.Fatalf("after Resume spec.suspend is %v, want false", got)
	}
	if message := text(t, ctx, `.result`); !strings.Contains(message, "agentschedule/nightly resumed") {
		t.Errorf("the result shown is %q, want the resume's", message)
	}
}

// Issue 49, item 1: a person who may read schedules but not change them
// is refused by the API server, with its reason, on the schedule's page,
// and the schedule stays as it was.
func TestConsole_viewerSuspendingAScheduleSeesTheAPIServersRefusal(t *testing.T) {
	ns := namespace(t, "console-schedules-viewer")
	bind(t, "val", "agentrun-viewer", ns)
	s := nightlySchedule(ns)
	create(t, s)

	ctx := tab(t)
	srv := consoleFor(t, "val", ns)
	do(t, ctx, chromedp.Navigate(srv.URL+"/schedules/"+ns+"/nightly"), visible(`[data-suspend]`),
		click(`[data-suspend]`), visible(`.result.refused`))
	if message := text(t, ctx, `.result`); !strings.Contains(message, `cannot patch resource "agentschedules"`) {
		t.Errorf("the refusal shown is %q, want the API server's", message)
	}
	if got := get(t, s).Spec.Suspend; got != nil && *got {
		t.Errorf("a refused Suspend suspended the schedule")
	}
}

// Suspend, like every request that changes something, is refused from
// another site or without the page's token, and changes nothing.
func TestConsole_refusesACrossSiteSuspend(t *testing.T) {
	ns := namespace(t, "console-schedules-csrf")
	s := nightlySchedule(ns)
	create(t, s)
	shown := get(t, s)
	// The cluster's admin: only the console can refuse.
	c, srv := newConsole(t, Options{Config: env.Config})
	for _, tc := range []struct {
		name    string
		headers map[string]string
		csrf    string
	}{
		{"a foreign Origin", map[string]string{"Origin": "https://evil.example"}, c.token(c.local)},
		{"no page token", map[string]string{"Origin": srv.URL}, "forged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			form := url.Values{"namespace": {ns}, "name": {"nightly"}, "uid": {string(shown.UID)}, "suspend": {"true"}, "csrf": {tc.csrf}}
			if code := post(t, srv.URL+"/suspend", form, tc.headers); code != http.StatusForbidden {
				t.Errorf("got %d, want 403", code)
			}
			if got := get(t, s).Spec.Suspend; got != nil && *got {
				t.Error("a refused Suspend suspended the schedule")
			}
		})
	}
}
