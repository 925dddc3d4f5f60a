package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/archive/pgtest"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// archivedRun is the record of a run that ended Completed and was
// deleted: a scripted run, so that a re-run of it is a valid run.
func archivedRun(t *testing.T, ns, name string) *archive.Record {
	t.Helper()
	spec, err := json.Marshal(v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{
		Goal: "Refund invoice in_9f21 if it was charged twice.",
		Model: v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
			Script: []v1alpha1.ScriptStep{{Content: "It was charged once: nothing to refund."}}},
		Budget: v1alpha1.BudgetSpec{MaxTurns: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := json.Marshal([]loop.Message{
		{Role: loop.RoleUser, Content: "Refund invoice in_9f21 if it was charged twice."},
		{Role: loop.RoleAssistant, Turn: 1, Content: "It was charged once: nothing to refund."},
	})
	if err != nil {
		t.Fatal(err)
	}
	finished := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	return &archive.Record{UID: string(uuid.NewUUID()), Namespace: ns, Name: name, Labels: map[string]string{"team": "billing"},
		CreatedAt: finished.Add(-time.Minute), FinishedAt: finished, Outcome: "Completed", Reason: "the model answered",
		Spec: spec, Status: json.RawMessage(`{"phase":"Succeeded","outcome":"Completed","turn":1,"usage":{"costUSD":"0.0123"}}`),
		Transcript: msgs, TranscriptState: archive.TranscriptComplete}
}

// readOnlyArchive is an archive on a real PostgreSQL, migrated by its
// admin, holding records, and opened as a role that may only SELECT, as
// docs/archive.md says the console's role is.
func readOnlyArchive(t *testing.T, records ...*archive.Record) *archive.Postgres {
	t.Helper()
	ctx := context.Background()
	writer, dsn := pgtest.Archive(t)
	for _, r := range records {
		if err := writer.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	role, readerDSN := pgtest.Role(t, dsn)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO `+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	reader, err := archive.Open(ctx, readerDSN)
	if err != nil {
		t.Fatalf("opening the archive as a read-only role: %v", err)
	}
	t.Cleanup(reader.Close)
	// The console's role cannot write: what it shows is what the operator
	// archived.
	if err := reader.Put(ctx, archivedRun(t, "anywhere", "forged")); err == nil {
		t.Fatal("the read-only role wrote a record")
	}
	return reader
}

// archiveConsoleFor serves a local console as user (impersonated) that
// reads the archive a.
func archiveConsoleFor(t *testing.T, user, ns string, a Archive) string {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	s, err := New(Options{Config: cfg, Namespace: ns, Resync: time.Second, Archive: a})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, s).URL
}

// Issue 49, items 1 and 5: the archive page, reading a real PostgreSQL as
// a read-only role, finds a person's archived run, shows its record and
// transcript, and re-runs it as them; it shows nothing of the runs of a
// namespace where the API server does not let them read runs (a
// SelfSubjectAccessReview), and says so in words; a viewer's Re-run is
// refused with the API server's reason.
func TestConsole_archivePageShowsOnlyWhatRBACAllowsAndReRuns(t *testing.T) {
	mine := namespace(t, "console-archive")
	theirs := namespace(t, "console-archive-other")
	bind(t, "ari", "agentrun-editor", mine)
	bind(t, "vic", "agentrun-viewer", mine)
	own, other := archivedRun(t, mine, "refund-1042"), archivedRun(t, theirs, "payroll-7")
	a := readOnlyArchive(t, own, other)

	ctx := tab(t)
	srv := archiveConsoleFor(t, "ari", mine, a)
	row := `tr[data-uid="` + own.UID + `"]`
	do(t, ctx, chromedp.Navigate(srv+"/"), click(`nav a[href="/archive"]`), visible(row))
	if got := eval[[]string](t, ctx, `[...document.querySelectorAll('tr[data-uid]')].map(r => r.dataset.archived)`); !cmp.Equal(got, []string{mine + "/refund-1042"}) {
		t.Errorf("the archive across namespaces shows %v, want only %s/refund-1042: ari may not list runs in %s", got, mine, theirs)
	}
	if got := text(t, ctx, `[data-archive-note]`); !strings.Contains(got, "left out") {
		t.Errorf("the archive's note is %q, want one that says records were left out", got)
	}

	// A search in the other namespace is refused, in words.
	do(t, ctx, chromedp.Navigate(srv+"/archive?"+url.Values{"namespace": {theirs}}.Encode()), visible(`[data-archive-problem]`))
	if got := text(t, ctx, `[data-archive-problem]`); !strings.Contains(got, "You may not list AgentRuns in namespace "+theirs) {
		t.Errorf("a search of %s shows %q, want the refusal", theirs, got)
	}
	// So is the other namespace's record, by its UID, and nothing of it
	// is on the page.
	do(t, ctx, chromedp.Navigate(srv+"/archive/"+other.UID), visible(`.problem`))
	if got := text(t, ctx, `.problem`); !strings.Contains(got, "You may not get AgentRuns in namespace "+theirs) {
		t.Errorf("the record of a run in %s shows %q, want the refusal", theirs, got)
	}
	if html := eval[string](t, ctx, `document.body.innerHTML`); strings.Contains(html, "payroll-7") || strings.Contains(html, "Refund invoice") {
		t.Error("the refused page shows something of the record")
	}

	// Search by name in the namespace (a name may have run several times).
	do(t, ctx, chromedp.Navigate(srv+"/archive?"+url.Values{"namespace": {mine}, "name": {"refund-1042"}}.Encode()), visible(row))
	// Search by label and outcome, then the record and its transcript.
	do(t, ctx, chromedp.Navigate(srv+"/archive?"+url.Values{"namespace": {mine}, "label": {"team=billing"}, "outcome": {"Completed"}, "since": {"7d"}}.Encode()),
		visible(row), click(row+` a`), visible(`[data-transcript]`))
	if got := text(t, ctx, `[data-transcript]`); !strings.Contains(got, "It was charged once: nothing to refund.") {
		t.Errorf("the archived transcript is %q, want the run's answer", got)
	}

	// Re-run creates a new run from the archived spec, as ari.
	do(t, ctx, click(`[data-rerun-archived]`), chromedp.WaitVisible(`section.summary[data-run]`))
	var runs v1alpha1.AgentRunList
	if err := admin.List(context.Background(), &runs, client.InNamespace(mine), client.MatchingLabels{v1alpha1.LabelRerunOf: "refund-1042"}); err != nil {
		t.Fatal(err)
	}
	if len(runs.Items) != 1 {
		t.Fatalf("after Re-run, %d runs are labelled rerun-of=refund-1042, want 1", len(runs.Items))
	}
	if got, want := runs.Items[0].Spec.Goal, "Refund invoice in_9f21 if it was charged twice."; got != want {
		t.Errorf("the re-run's goal is %q, want the archived run's %q", got, want)
	}
	if got := eval[string](t, ctx, `location.pathname`); got != "/runs/"+mine+"/"+runs.Items[0].Name {
		t.Errorf("after Re-run the browser is at %s, want the new run's page", got)
	}

	// A viewer reads the record, and their Re-run is refused by the API
	// server, with its reason.
	viewer := archiveConsoleFor(t, "vic", mine, a)
	do(t, ctx, chromedp.Navigate(viewer+"/archive/"+own.UID), visible(`[data-rerun-archived]`), click(`[data-rerun-archived]`), visible(`.result.refused`))
	if got := text(t, ctx, `.result`); !strings.Contains(got, `cannot create resource "agentruns"`) {
		t.Errorf("a viewer's Re-run shows %q, want the API server's refusal", got)
	}
}

// memoryArchive is an archive of records in memory, for the tests that
// are about the console's protections rather than the database.
type memoryArchive []*archive.Record

func (m memoryArchive) Get(_ context.Context, uid string) (*archive.Record, error) {
	for _, r := range m {
		if r.UID == uid {
			return r, nil
		}
	}
	return nil, archive.ErrNotFound
}

func (m memoryArchive) Find(context.Context, string, string) ([]archive.Summary, error) {
	return nil, nil
}

func (m memoryArchive) List(context.Context, archive.Filter) ([]archive.Summary, error) {
	return nil, nil
}

// Re-run from the archive, like every request that changes something, is
// refused from another site or without the page's token, and creates
// nothing.
func TestConsole_refusesACrossSiteArchiveRerun(t *testing.T) {
	ns := namespace(t, "console-archive-csrf")
	rec := archivedRun(t, ns, "refund-1")
	c, srv := newConsole(t, Options{Config: env.Config, Archive: memoryArchive{rec}}) // the cluster's admin: only the console can refuse
	for _, tc := range []struct {
		name    string
		headers map[string]string
		csrf    string
	}{
		{"a foreign Origin", map[string]string{"Origin": "https://evil.example"}, c.token(c.local)},
		{"no page token", map[string]string{"Origin": srv.URL}, "forged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			form := url.Values{"uid": {rec.UID}, "csrf": {tc.csrf}}
			if code := post(t, srv.URL+"/archive/rerun", form, tc.headers); code != http.StatusForbidden {
				t.Errorf("got %d, want 403", code)
			}
			var runs v1alpha1.AgentRunList
			if err := admin.List(context.Background(), &runs, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			if len(runs.Items) != 0 {
				t.Errorf("a refused Re-run created %d runs", len(runs.Items))
			}
		})
	}
}
