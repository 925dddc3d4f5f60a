package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/archive/pgtest"
	"github.com/agentrun/agentrun/internal/runclient/archived"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"sigs.k8s.io/yaml"
)

// TestMain starts the throwaway PostgreSQL the archive tests read (the
// other tests of the package do not use it).
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// archiveClock is the listing's now in these tests.
var archiveClock = time.Date(2026, 5, 20, 12, 0, 0, 0, time.UTC)

// filledArchive fills a fresh archive with runs and returns the DSN of a
// role that may only SELECT, as a person reading the archive is given:
// refund-1042 in shop ran twice (the newer ended in Error), nightly-report
// once in shop and once in billing.
func filledArchive(t *testing.T) string {
	t.Helper()
	old := archiveNow
	archiveNow = func() time.Time { return archiveClock }
	t.Cleanup(func() { archiveNow = old })
	dsn := pgtest.DSN(t)
	s := pgtest.Open(t, dsn)
	transcript := `[{"role":"user","content":"Refund order 1042 if it was charged twice."},` +
		`{"role":"assistant","turn":1,"toolCalls":[{"id":"t1-c1","name":"get_order","arguments":{"order_id": "1042"}}]},` +
		`{"role":"tool","turn":1,"callID":"t1-c1","tool":"get_order","content":"{\"charges\":2}"},` +
		`{"role":"assistant","turn":2,"content":"Order 1042 was charged twice.\nI refunded the second charge."}]`
	for _, r := range []*archive.Record{
		{UID: "0b6f4f5e-1111-4c1e-9d4a-000000000001", Namespace: "shop", Name: "refund-1042",
			Labels: map[string]string{"app": "refunds"}, CreatedAt: archiveClock.Add(-26 * time.Hour),
			FinishedAt: archiveClock.Add(-25 * time.Hour), Outcome: "Completed", Reason: "the model answered",
			Spec:       json.RawMessage(`{"goal":"Refund order 1042 if it was charged twice.","budget":{"maxTurns":10}}`),
			Status:     json.RawMessage(`{"phase":"Succeeded","outcome":"Completed","reason":"the model answered","turn":2,"usage":{"costUSD":"0.0042"}}`),
			Transcript: json.RawMessage(`[{"role":"user","content":"first run"}]`), TranscriptState: archive.TranscriptComplete},
		{UID: "0b6f4f5e-2222-4c1e-9d4a-000000000002", Namespace: "shop", Name: "refund-1042",
			Labels: map[string]string{"app": "refunds"}, CreatedAt: archiveClock.Add(-3 * time.Hour),
			FinishedAt: archiveClock.Add(-2 * time.Hour), Outcome: "Error", Reason: "the model\nanswered nonsense",
			Spec: json.RawMessage(`{"goal":"Refund order 1042 if it was charged twice.","budget":{"maxTurns":10}}`),
			Status: json.RawMessage(`{"phase":"Failed","outcome":"Error","reason":"the model answered nonsense","turn":2,` +
				`"usage":{"costUSD":"0.0061","inputTokens":2100},"approvals":[{"callID":"t1-c1","decision":"Approved","by":"bob@example.com"}]}`),
			Transcript: json.RawMessage(transcript), TranscriptState: archive.TranscriptComplete},
		{UID: "0b6f4f5e-3333-4c1e-9d4a-000000000003", Namespace: "shop", Name: "nightly-report", Template: "report",
			Labels: map[string]string{"app": "reports"}, CreatedAt: archiveClock.Add(-50 * time.Minute),
			FinishedAt: archiveClock.Add(-45 * time.Minute), Outcome: "Completed",
			Status:          json.RawMessage(`{"phase":"Succeeded","outcome":"Completed","turn":7,"usage":{"costUSD":"0.0310"}}`),
			TranscriptState: archive.TranscriptUnsealed,
			TranscriptProblem: "the run's saved state was not written by the operator: transcript chunk Secret " +
				"shop/agentrun-0b6f4f5e-3333-4c1e-9d4a-000000000003-transcript-0001: the seal does not open"},
		{UID: "0b6f4f5e-4444-4c1e-9d4a-000000000004", Namespace: "billing", Name: "nightly-report", Template: "report",
			Labels: map[string]string{"app": "reports"}, CreatedAt: archiveClock.Add(-8 * 24 * time.Hour),
			FinishedAt: archiveClock.Add(-8 * 24 * time.Hour).Add(time.Minute), Outcome: "BudgetExhausted",
			Status: json.RawMessage(`{"phase":"Failed","outcome":"BudgetExhausted","turn":20,"usage":{"costUSD":"1.0000"}}`)},
	} {
		if err := s.Put(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []*archive.Evaluation{
		{UID: "5e1a0000-0000-4000-8000-000000000001", Namespace: "shop", Name: "refund-check", FinishedAt: archiveClock.Add(-3 * time.Hour),
			Phase: "Passed", Spec: json.RawMessage(`{"templateRef":{"name":"refund"}}`),
			Status: json.RawMessage(`{"phase":"Passed","totals":{"runs":4,"passed":4,"passRate":"1.00","costUSD":"0.0400"}}`)},
		{UID: "5e1a0000-0000-4000-8000-000000000002", Namespace: "billing", Name: "report-check", FinishedAt: archiveClock.Add(-30 * time.Minute),
			Phase: "Regressed", Spec: json.RawMessage(`{"templateRef":{"name":"report"}}`),
			Status: json.RawMessage(`{"phase":"Regressed","totals":{"runs":2,"passed":1,"failed":1,"passRate":"0.50","costUSD":"0.0210"}}`)},
	} {
		if err := s.PutEvaluation(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	return readOnly(t, dsn)
}

// readOnly is the address of the archive at dsn as a role that may only
// SELECT its tables.
func readOnly(t *testing.T, dsn string) string {
	t.Helper()
	role, readerDSN := pgtest.Role(t, dsn)
	grantSelect(t, dsn, role)
	return readerDSN
}

// grantSelect lets role SELECT the tables there are in the database.
func grantSelect(t *testing.T, dsn, role string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(context.Background(), `GRANT SELECT ON ALL TABLES IN SCHEMA public TO `+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
}

// Issue 49, item 5: reading the archive ran its migrations, so a role
// that may only SELECT could not list it ("permission denied for schema
// public"). list never migrates: before migrate ran it says to run it,
// and creates nothing; migrate applies the migrations once, and a second
// time applies none; then the read-only role lists.
func TestArchiveMigrate_thenAReadOnlyRoleLists(t *testing.T) {
	dsn := pgtest.DSN(t)
	role, readerDSN := pgtest.Role(t, dsn)
	code, stdout, stderr := agentrun(t, "archive", "list", "--dsn", readerDSN)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "holds no archive yet") || !strings.Contains(stderr, "agentrun archive migrate") {
		t.Errorf("list before migrate: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	code, stdout, stderr = agentrun(t, "archive", "migrate", "--dsn", readerDSN)
	if code != 1 || !strings.Contains(stderr, "permission denied") {
		t.Errorf("migrate as the read-only role: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}

	code, stdout, stderr = agentrun(t, "archive", "migrate", "--dsn", dsn)
	want := "Applied 0001_runs.sql.\nApplied 0002_transcript_state.sql.\nApplied 0003_memories.sql.\n" +
		"Applied 0004_numeric_usage.sql.\nApplied 0005_evaluations.sql.\nThe archive's schema is at version 5.\n"
	if code != 0 || stderr != "" {
		t.Fatalf("migrate: exit %d, stderr %s", code, stderr)
	}
	if diff := cmp.Diff(want, stdout); diff != "" {
		t.Errorf("migrate (-want +got):\n%s", diff)
	}
	code, stdout, stderr = agentrun(t, "archive", "migrate", "--dsn", dsn)
	if code != 0 || stdout != "The archive's schema is at version 5: nothing to apply.\n" {
		t.Errorf("migrate again: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}

	grantSelect(t, dsn, role)
	code, stdout, stderr = agentrun(t, "archive", "list", "--dsn", readerDSN)
	if code != 0 || stdout != "" || stderr != "No archived runs found.\n" {
		t.Errorf("list as the read-only role after migrate: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
}

func agentrun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = execute(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestArchiveList_kubectlColumns(t *testing.T) {
	dsn := filledArchive(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dsn", dsn}, `NAMESPACE   NAME             PHASE       OUTCOME           TURN   COST     FINISHED
shop        nightly-report   Succeeded   Completed         7      0.0310   45m
shop        refund-1042      Failed      Error             2      0.0061   120m
shop        refund-1042      Succeeded   Completed         2      0.0042   25h
billing     nightly-report   Failed      BudgetExhausted   20     1.0000   7d23h
`},
		{[]string{"--dsn", dsn, "-n", "shop", "-l", "app=refunds", "--outcome", "Completed"}, `NAME          PHASE       OUTCOME     TURN   COST     FINISHED
refund-1042   Succeeded   Completed   2      0.0042   25h
`},
		{[]string{"--dsn", dsn, "--since", "24h", "-o", "wide"}, `NAMESPACE   NAME             PHASE       OUTCOME     TURN   COST     FINISHED   UID                                    TEMPLATE   TRANSCRIPT   REASON
shop        nightly-report   Succeeded   Completed   7      0.0310   45m        0b6f4f5e-3333-4c1e-9d4a-000000000003   report     Unsealed     
shop        refund-1042      Failed      Error       2      0.0061   120m       0b6f4f5e-2222-4c1e-9d4a-000000000002   <none>     Complete     the model answered nonsense
`},
		{[]string{"--dsn", dsn, "-n", "billing", "-o", "wide"}, `NAME             PHASE    OUTCOME           TURN   COST     FINISHED   UID                                    TEMPLATE   TRANSCRIPT   REASON
nightly-report   Failed   BudgetExhausted   20     1.0000   7d23h      0b6f4f5e-4444-4c1e-9d4a-000000000004   report     <unknown>    
`},
		{[]string{"--dsn", dsn, "--since", "2026-05-12T00:00:00Z", "-l", "app!=refunds"}, `NAMESPACE   NAME             PHASE       OUTCOME           TURN   COST     FINISHED
shop        nightly-report   Succeeded   Completed         7      0.0310   45m
billing     nightly-report   Failed      BudgetExhausted   20     1.0000   7d23h
`},
	} {
		code, stdout, stderr := agentrun(t, append([]string{"archive", "list"}, tc.args...)...)
		if code != 0 || stdout != tc.want {
			t.Errorf("list %q: exit %d, stderr %s\ngot:\n%s\nwant:\n%s", tc.args[2:], code, stderr, stdout, tc.want)
		}
	}
	code, stdout, stderr := agentrun(t, "archive", "list", "--dsn", dsn, "-n", "nowhere")
	if code != 0 || stdout != "" || stderr != "No archived runs found.\n" {
		t.Errorf("an empty listing: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = agentrun(t, "archive", "list", "--dsn", dsn, "-o", "json", "--limit", "1")
	var listed []archived.Listed
	if err := json.Unmarshal([]byte(stdout), &listed); code != 0 || err != nil || len(listed) != 1 || listed[0].Name != "nightly-report" || listed[0].Turn != 7 {
		t.Errorf("-o json --limit 1: exit %d, %v:\n%s", code, err, stdout)
	}
}

// Issue 48: archived evaluations are listed, newest first, as a role that
// may only SELECT.
func TestArchiveEvaluations_listsThemNewestFirst(t *testing.T) {
	dsn := filledArchive(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `NAMESPACE   NAME           PHASE       PASS RATE   COST     FINISHED   UID
billing     report-check   Regressed   0.50        0.0210   30m        5e1a0000-0000-4000-8000-000000000002
shop        refund-check   Passed      1.00        0.0400   3h         5e1a0000-0000-4000-8000-000000000001
`},
		{[]string{"-n", "shop"}, `NAME           PHASE    PASS RATE   COST     FINISHED   UID
refund-check   Passed   1.00        0.0400   3h         5e1a0000-0000-4000-8000-000000000001
`},
	} {
		code, stdout, stderr := agentrun(t, append([]string{"archive", "evaluations", "--dsn", dsn}, tc.args...)...)
		if code != 0 || stdout != tc.want {
			t.Errorf("evaluations %q: exit %d, stderr %s\ngot:\n%s\nwant:\n%s", tc.args, code, stderr, stdout, tc.want)
		}
	}
	code, stdout, stderr := agentrun(t, "archive", "evaluations", "--dsn", dsn, "-n", "nowhere")
	if code != 0 || stdout != "" || stderr != "No archived evaluations found.\n" {
		t.Errorf("an empty listing: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestArchiveShow_theNewestRunOfANameAsKubectlPrintsIt(t *testing.T) {
	dsn := filledArchive(t)
	t.Setenv(archive.DSNEnv, dsn) // the DSN from the environment, as a person with a password would give it
	code, stdout, stderr := agentrun(t, "archive", "show", "refund-1042", "-n", "shop")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := `apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata:
  creationTimestamp: "2026-05-20T09:00:00Z"
  labels:
    app: refunds
  name: refund-1042
  namespace: shop
  uid: 0b6f4f5e-2222-4c1e-9d4a-000000000002
spec:
  budget:
    maxTurns: 10
  goal: Refund order 1042 if it was charged twice.
status:
  approvals:
  - by: bob@example.com
    callID: t1-c1
    decision: Approved
  outcome: Error
  phase: Failed
  reason: the model answered nonsense
  turn: 2
  usage:
    costUSD: "0.0061"
    inputTokens: 2100
`
	if stdout != want {
		t.Errorf("got:\n%s\nwant:\n%s", stdout, want)
	}
	if stderr != "shop/refund-1042 ran 2 times; this is the newest (uid 0b6f4f5e-2222-4c1e-9d4a-000000000002, "+
		"finished 2026-05-20T10:00:00Z). agentrun archive list -n shop -o wide shows the others' UIDs.\n" {
		t.Errorf("stderr does not say the name ran twice: %q", stderr)
	}

	// The older run by its UID, in JSON, needing no namespace.
	code, stdout, stderr = agentrun(t, "archive", "show", "0b6f4f5e-1111-4c1e-9d4a-000000000001", "-o", "json")
	var obj archived.Run
	if err := json.Unmarshal([]byte(stdout), &obj); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s%s", code, err, stdout, stderr)
	}
	if obj.Metadata.UID != "0b6f4f5e-1111-4c1e-9d4a-000000000001" || !strings.Contains(string(obj.Status), `"Completed"`) || stderr != "" {
		t.Errorf("show UID -o json: %s (stderr %q)", stdout, stderr)
	}
	var asYAML map[string]any
	if err := yaml.Unmarshal([]byte(want), &asYAML); err != nil {
		t.Errorf("the YAML does not parse: %v", err)
	}
}

func TestArchiveTranscript_printsAsKubectlAgentrunTranscript(t *testing.T) {
	dsn := filledArchive(t)
	code, stdout, stderr := agentrun(t, "archive", "transcript", "--dsn", dsn, "-n", "shop", "refund-1042")
	want := `goal: Refund order 1042 if it was charged twice.
[t0] user: Refund order 1042 if it was charged twice.
[t1] assistant -> get_order {"order_id":"1042"}
[t1] tool t1-c1 (get_order, ok): {"charges":2}
[t2] assistant: Order 1042 was charged twice.
    I refunded the second charge.
outcome: Error
reason: the model answered nonsense
`
	if code != 0 || stdout != want {
		t.Errorf("exit %d, stderr %s\ngot:\n%s\nwant:\n%s", code, stderr, stdout, want)
	}
	code, stdout, _ = agentrun(t, "archive", "transcript", "--dsn", dsn, "0b6f4f5e-1111-4c1e-9d4a-000000000001", "-o", "json")
	if code != 0 || stdout != "[\n  {\n    \"role\": \"user\",\n    \"content\": \"first run\"\n  }\n]\n" {
		t.Errorf("-o json: exit %d:\n%s", code, stdout)
	}
}

// Finding 8 of issue 42: a record kept without its transcript says so
// where it is read, with what was missing or unsealed; a record written
// before the archive recorded it says that it does not know.
func TestArchive_aRecordWithoutItsTranscriptSaysSo(t *testing.T) {
	dsn := filledArchive(t)
	unsealed := "shop/nightly-report was archived without its transcript (Unsealed): the run's saved state was not written by " +
		"the operator: transcript chunk Secret shop/agentrun-0b6f4f5e-3333-4c1e-9d4a-000000000003-transcript-0001: the seal does not open\n"
	older := "billing/nightly-report was archived before records said whether their transcript was complete and sealed.\n"
	for _, tc := range []struct {
		args       []string
		wantStderr string
	}{
		{[]string{"show", "-n", "shop", "nightly-report"}, unsealed},
		{[]string{"transcript", "-n", "shop", "nightly-report"}, unsealed},
		{[]string{"transcript", "-n", "billing", "nightly-report", "-o", "json"}, older},
		{[]string{"show", "-n", "shop", "0b6f4f5e-1111-4c1e-9d4a-000000000001"}, ""},
	} {
		code, stdout, stderr := agentrun(t, append([]string{"archive", "--dsn", dsn}, tc.args...)...)
		if code != 0 || stdout == "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %s", tc.args, code, stdout, stderr)
		}
		if diff := cmp.Diff(tc.wantStderr, stderr); diff != "" {
			t.Errorf("%q: stderr (-want +got):\n%s", tc.args, diff)
		}
	}
	code, stdout, _ := agentrun(t, "archive", "list", "--dsn", dsn, "-o", "json")
	var listed []archived.Listed
	if err := json.Unmarshal([]byte(stdout), &listed); code != 0 || err != nil {
		t.Fatalf("-o json: exit %d, %v", code, err)
	}
	got := map[string]string{}
	for _, l := range listed {
		got[l.UID[len(l.UID)-1:]] = l.Transcript
	}
	if diff := cmp.Diff(map[string]string{"1": "Complete", "2": "Complete", "3": "Unsealed", "4": ""}, got); diff != "" {
		t.Errorf("-o json transcript by UID's last digit (-want +got):\n%s", diff)
	}
}

func TestArchive_errors(t *testing.T) {
	dsn := filledArchive(t)
	t.Setenv(archive.DSNEnv, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"archive", "list"}, "no archive: give --dsn or set $AGENTRUN_ARCHIVE_DSN"},
		{[]string{"archive", "show", "--dsn", dsn, "refund-1042"}, `no run named "refund-1042" in namespace "default", and none with that UID`},
		{[]string{"archive", "list", "--dsn", dsn, "--since", "yesterday"}, `--since "yesterday": give a duration`},
		{[]string{"archive", "list", "--dsn", dsn, "-l", "a b"}, "the selector"},
		{[]string{"archive", "show", "--dsn", dsn, "-o", "wide", "x"}, `unknown output format "wide": use yaml or json`},
		{[]string{"archive", "transcript", "--dsn", dsn, "-o", "yaml", "x"}, `unknown output format "yaml": use text or json`},
		{[]string{"archive", "transcript", "--dsn", dsn}, "accepts 1 arg(s), received 0"},
		{[]string{"archive", "list", "--dsn", "postgres://reader:s3cret-pw@127.0.0.1:1/db?connect_timeout=2"}, "archive:"},
	} {
		code, stdout, stderr := agentrun(t, tc.args...)
		if code != 1 || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s", tc.args, code, stdout, stderr)
		}
		if strings.Contains(stderr, "s3cret-pw") {
			t.Errorf("%q: the password is shown: %s", tc.args, stderr)
		}
	}
}

// The archive commands docs/api.md shows print what it shows under them,
// against the archive above: the docs' blocks marked archive are run here,
// one command at a time, stderr then stdout.
func TestArchive_docsPrintWhatTheyShow(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := testenv.DocBlocks(root)
	if err != nil {
		t.Fatal(err)
	}
	dsn := filledArchive(t)
	t.Setenv(archive.DSNEnv, "")
	ran := 0
	for _, b := range blocks {
		if b.Mark != "archive" {
			continue
		}
		for _, c := range b.Commands() {
			if v, ok := strings.CutPrefix(c.Cmd, "export "+archive.DSNEnv+"="); ok {
				if !strings.HasPrefix(strings.Trim(v, "'"), "postgres://") {
					t.Errorf("%s:%d: %s is not a DSN", b.File, b.Line, v)
				}
				t.Setenv(archive.DSNEnv, dsn)
				continue
			}
			args, ok := strings.CutPrefix(c.Cmd, "agentrun ")
			if !ok {
				t.Fatalf("%s:%d: %q is not an agentrun command", b.File, b.Line, c.Cmd)
			}
			code, stdout, stderr := agentrun(t, strings.Fields(args)...)
			got := strings.Split(strings.TrimRight(stderr+stdout, "\n"), "\n")
			for i := range got {
				got[i] = strings.TrimRight(got[i], " ")
			}
			if code != 0 || !slices.Equal(got, c.Want) {
				t.Errorf("%s:%d: $ %s: exit %d, printed\n%s\nwhere the docs show\n%s", b.File, b.Line, c.Cmd, code,
					strings.Join(got, "\n"), strings.Join(c.Want, "\n"))
			}
			ran++
		}
	}
	if ran < 4 {
		t.Errorf("ran %d archive commands of the docs, want at least 4 (list twice, show, transcript)", ran)
	}
}

// docsRolesMark is the comment above the SQL block of docs/api.md that
// sets up the archive's roles.
const docsRolesMark = "<!-- archive roles: run by TestArchive_theDocsRolesMigrateAndRead in cmd/agentrun -->"

// docsRolesSQL is that block: its statements, and psql's \c lines.
func docsRolesSQL(t *testing.T) []string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(root + "/docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(raw), docsRolesMark+"\n```sql\n")
	if !ok {
		t.Fatalf("docs/api.md has no SQL block under %s", docsRolesMark)
	}
	block, _, _ := strings.Cut(after, "```")
	var out []string
	stmt := ""
	for _, l := range strings.Split(block, "\n") {
		switch {
		case strings.HasPrefix(l, `\c `):
			out = append(out, l)
		case strings.HasPrefix(l, "--"), strings.TrimSpace(l) == "":
		default:
			stmt += l + "\n"
			if strings.HasSuffix(l, ";") {
				out = append(out, stmt)
				stmt = ""
			}
		}
	}
	if stmt != "" {
		t.Fatalf("docs/api.md: a statement without its semicolon: %s", stmt)
	}
	return out
}

// The roles docs/api.md tells an administrator to create work as it says:
// the operator's migrates and writes, the readers' lists and reads every
// record with agentrun archive, and can write nothing.
func TestArchive_theDocsRolesMigrateAndRead(t *testing.T) {
	ctx := context.Background()
	super := pgtest.DSN(t)
	conn, err := pgx.Connect(ctx, super)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	// The database and roles belong to the server: gone after the test.
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, super)
		if err != nil {
			t.Error(err)
			return
		}
		defer func() { _ = c.Close(ctx) }()
		for _, sql := range []string{`DROP DATABASE IF EXISTS agentrun WITH (FORCE)`,
			`DROP ROLE IF EXISTS agentrun_operator`, `DROP ROLE IF EXISTS agentrun_reader`} {
			if _, err := c.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	for _, sql := range docsRolesSQL(t) {
		if db, ok := strings.CutPrefix(sql, `\c `); ok {
			_ = conn.Close(ctx)
			if conn, err = pgx.Connect(ctx, super+" dbname="+db); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("docs/api.md: %s: %v", sql, err)
		}
	}
	operator := super + " dbname=agentrun user=agentrun_operator"
	reader := super + " dbname=agentrun user=agentrun_reader"

	if code, stdout, stderr := agentrun(t, "archive", "migrate", "--dsn", operator); code != 0 {
		t.Fatalf("migrate as agentrun_operator: exit %d: %s%s", code, stdout, stderr)
	}
	s, err := archive.Open(ctx, operator)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(ctx, &archive.Record{UID: "u1", Namespace: "shop", Name: "refund-1042", Outcome: "Completed",
		CreatedAt: archiveClock, FinishedAt: archiveClock, Status: json.RawMessage(`{"phase":"Succeeded","usage":{"costUSD":"0.0042"}}`)}); err != nil {
		t.Fatalf("writing as agentrun_operator: %v", err)
	}
	code, stdout, stderr := agentrun(t, "archive", "list", "--dsn", reader, "-o", "wide")
	if code != 0 || !strings.Contains(stdout, "refund-1042") || !strings.Contains(stdout, "0.0042") {
		t.Errorf("list as agentrun_reader: exit %d, stdout:\n%s\nstderr %s", code, stdout, stderr)
	}
	if code, stdout, stderr := agentrun(t, "archive", "show", "--dsn", reader, "u1"); code != 0 {
		t.Errorf("show as agentrun_reader: exit %d, %s%s", code, stdout, stderr)
	}
	r, err := archive.Open(ctx, reader)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Put(ctx, &archive.Record{UID: "u2", Namespace: "shop", Name: "x", CreatedAt: archiveClock, FinishedAt: archiveClock}); err == nil ||
		!strings.Contains(err.Error(), "permission denied") {
		t.Errorf("writing as agentrun_reader: %v, want permission denied", err)
	}
}
