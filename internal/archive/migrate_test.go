package archive_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/archive/pgtest"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// newestVersion is the number of the newest file in migrations/.
func newestVersion(t *testing.T) int64 {
	t.Helper()
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("migrations: %v, %v", files, err)
	}
	return int64(len(files))
}

// connect is a connection as the test database's owner (the admin).
func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func exec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// tables are the tables of the schema public, by name.
func tables(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// Issue 49, item 5: agentrun archive list with a read-only role failed
// with "permission denied for schema public", because opening the archive
// always ran the migrations. Reading changes nothing: before an admin
// migrated, a reader is told so and nothing is created; after, a role
// that may only SELECT lists and reads every record, and cannot write.
func TestOpen_aReadOnlyRoleReadsWhatAnAdminMigrated(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	admin := connect(t, dsn)
	role, readerDSN := pgtest.Role(t, dsn)

	_, err := archive.Open(ctx, readerDSN)
	if err == nil || !strings.Contains(err.Error(), "agentrun archive migrate") {
		t.Fatalf("a reader's Open of a database never migrated: %v, want an error that says to run agentrun archive migrate", err)
	}
	if got := tables(t, admin); len(got) != 0 {
		t.Errorf("a reader's Open created tables: %v", got)
	}

	if _, _, err := archive.Migrate(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	writer, err := archive.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	want := record("uid-1", "shop", "refund-1042", base, "Completed", map[string]string{"app": "refunds"}, 2)
	put(t, writer, want, record("uid-2", "billing", "nightly", base.Add(time.Hour), "Error", nil, 1))
	exec(t, admin, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO `+pgx.Identifier{role}.Sanitize())

	reader, err := archive.Open(ctx, readerDSN)
	if err != nil {
		t.Fatalf("a read-only role's Open after the admin migrated: %v", err)
	}
	defer reader.Close()
	listed, err := reader.List(ctx, archive.Filter{})
	if err != nil {
		t.Fatalf("a read-only role's List: %v", err)
	}
	if diff := cmp.Diff([]string{"uid-2", "uid-1"}, uids(listed)); diff != "" {
		t.Errorf("listed as the reader (-want +got):\n%s", diff)
	}
	found, err := reader.Find(ctx, "shop", "refund-1042")
	if err != nil || len(found) != 1 {
		t.Fatalf("a read-only role's Find: %v, %v", found, err)
	}
	got, err := reader.Get(ctx, "uid-1")
	if err != nil {
		t.Fatalf("a read-only role's Get: %v", err)
	}
	if string(got.Transcript) != string(want.Transcript) || got.Outcome != want.Outcome {
		t.Errorf("read as the reader: outcome %q, transcript %s; want %q, %s", got.Outcome, got.Transcript, want.Outcome, want.Transcript)
	}
	var pgErr *pgconn.PgError
	if err := reader.Put(ctx, record("uid-3", "shop", "x", base, "Completed", nil, 1)); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("a read-only role's Put: %v, want permission denied (42501)", err)
	}
}

// A reader of a schema older than its binary reads is told to migrate,
// rather than failing later on a missing column.
func TestOpen_refusesASchemaOlderThanItReads(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	oldSchema(t, connect(t, dsn))
	if _, err := archive.Open(ctx, dsn); err == nil || !strings.Contains(err.Error(), "agentrun archive migrate") {
		t.Errorf("Open of a database the old code made: %v, want an error that says to run agentrun archive migrate", err)
	}
}

func TestMigrate_twiceIsANoOp(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	v, applied, err := archive.Migrate(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if v != newestVersion(t) || int64(len(applied)) != newestVersion(t) {
		t.Fatalf("the first Migrate: version %d, applied %v; want version %d, all applied", v, applied, newestVersion(t))
	}
	admin := connect(t, dsn)
	count := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+archive.VersionTable).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	v, applied, err = archive.Migrate(ctx, dsn)
	if err != nil {
		t.Fatalf("the second Migrate: %v", err)
	}
	if v != newestVersion(t) || len(applied) != 0 {
		t.Errorf("the second Migrate: version %d, applied %v; want version %d, none applied", v, applied, newestVersion(t))
	}
	if after := count(); after != before {
		t.Errorf("%d rows in %s after the second Migrate, %d before", after, archive.VersionTable, before)
	}
}

func TestMigrate_concurrentOnAFreshDatabase(t *testing.T) {
	dsn := pgtest.DSN(t)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	applied := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, a, err := archive.Migrate(context.Background(), dsn)
			errs[i], applied[i] = err, len(a)
		}()
	}
	wg.Wait()
	total := 0
	for i, err := range errs {
		if err != nil {
			t.Errorf("Migrate %d: %v", i, err)
		}
		total += applied[i]
	}
	if int64(total) != newestVersion(t) {
		t.Errorf("%d migrations applied in all, want each of the %d once", total, newestVersion(t))
	}
}

// oldSchema makes the database as the archive's code before goose did:
// migrations 1 to 3 applied and recorded in schema_migrations.
func oldSchema(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	exec(t, conn, `CREATE TABLE schema_migrations (
		version integer PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`)
	for i, name := range []string{"0001_runs.sql", "0002_transcript_state.sql", "0003_memories.sql"} {
		sql, err := os.ReadFile(filepath.Join("migrations", name))
		if err != nil {
			t.Fatal(err)
		}
		exec(t, conn, string(sql))
		exec(t, conn, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, i+1, name)
	}
}

// A database the old code made (its tables there, its migrations recorded
// in schema_migrations, costs stored as text) is upgraded in place: only
// the new migrations run, and every record keeps its cost, now a number,
// with its tokens read from its status.
func TestMigrate_upgradesADatabaseTheOldCodeMade(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	admin := connect(t, dsn)
	oldSchema(t, admin)
	for _, r := range []struct{ uid, cost, status string }{
		{"paid", "0.0123", `{"phase":"Succeeded","turn":3,"usage":{"costUSD":"0.0123","inputTokens":1200,"outputTokens":340}}`},
		{"dear", "12.5", `{"phase":"Failed","turn":20,"usage":{"costUSD":"12.5","inputTokens":98000}}`},
		{"free", "", `{"phase":"Failed","turn":0}`},
		{"odd", "n/a", `{"phase":"Succeeded","usage":{"costUSD":"n/a"}}`},
	} {
		exec(t, admin, `INSERT INTO agentrun_runs (uid, namespace, name, created_at, finished_at, turns, cost_usd, status)
			VALUES ($1, 'shop', $1, $2, $2, 1, $3, $4)`, r.uid, base, r.cost, r.status)
	}
	exec(t, admin, `INSERT INTO agentrun_memories (namespace, memory, key, text, written_at, expires_at)
		VALUES ('shop', 'refunds', 'k', 'kept', $1, $2)`, base, base.Add(time.Hour))

	v, applied, err := archive.Migrate(ctx, dsn)
	if err != nil {
		t.Fatalf("Migrate of a database the old code made: %v", err)
	}
	if diff := cmp.Diff([]string{"0004_numeric_usage.sql", "0005_evaluations.sql"}, applied); diff != "" {
		t.Errorf("applied (-want +got):\n%s", diff)
	}
	if v != newestVersion(t) {
		t.Errorf("version %d after the upgrade, want %d", v, newestVersion(t))
	}

	type row struct {
		Cost          *string
		Input, Output int64
	}
	got := map[string]row{}
	rows, err := admin.Query(ctx, `SELECT uid, cost_usd::text, input_tokens, output_tokens FROM agentrun_runs`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var uid string
		var r row
		if err := rows.Scan(&uid, &r.Cost, &r.Input, &r.Output); err != nil {
			t.Fatal(err)
		}
		got[uid] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	want := map[string]row{
		"paid": {str("0.0123"), 1200, 340},
		"dear": {str("12.5"), 98000, 0},
		"free": {nil, 0, 0},
		"odd":  {nil, 0, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the records after the upgrade (-want +got):\n%s", diff)
	}
	var sum, typ string
	if err := admin.QueryRow(ctx, `SELECT sum(cost_usd)::text, pg_typeof(cost_usd)::text FROM agentrun_runs GROUP BY 2`).Scan(&sum, &typ); err != nil {
		t.Fatal(err)
	}
	if sum != "12.5123" || typ != "numeric" {
		t.Errorf("cost_usd is %s, summing to %s; want numeric, 12.5123", typ, sum)
	}

	s, err := archive.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("Open after the upgrade: %v", err)
	}
	defer s.Close()
	found, err := s.Find(ctx, "shop", "paid")
	if err != nil || len(found) != 1 {
		t.Fatalf("Find after the upgrade: %v, %v", found, err)
	}
	if found[0].CostUSD != "0.0123" || found[0].InputTokens != 1200 || found[0].OutputTokens != 340 {
		t.Errorf("the summary after the upgrade: %+v", found[0])
	}
	n, err := s.ExpireMemories(ctx, base)
	if err != nil || n != 0 {
		t.Errorf("the memories after the upgrade: ExpireMemories deleted %d, %v; want the entry kept", n, err)
	}
	if _, applied, err := archive.Migrate(ctx, dsn); err != nil || len(applied) != 0 {
		t.Errorf("migrating the upgraded database again: applied %v, %v; want nothing", applied, err)
	}
}

// Put stores the status's cost and tokens as numbers: SQL adds them up.
// A status without a cost leaves it NULL, and the listing shows "".
func TestPut_storesCostAndTokensAsNumbers(t *testing.T) {
	s, dsn := open(t)
	ctx := context.Background()
	free := record("free", "shop", "b", base, "Completed", nil, 1)
	free.Status = json.RawMessage(`{"phase":"Succeeded","turn":1}`)
	put(t, s, record("a", "shop", "a", base, "Completed", nil, 1), record("c", "shop", "c", base, "Completed", nil, 1), free)
	var sum, tokens string
	if err := connect(t, dsn).QueryRow(ctx, `SELECT sum(cost_usd)::text, sum(input_tokens)::text FROM agentrun_runs`).Scan(&sum, &tokens); err != nil {
		t.Fatal(err)
	}
	if sum != "0.0246" || tokens != "2400" {
		t.Errorf("summed: cost %s, input tokens %s; want 0.0246, 2400", sum, tokens)
	}
	listed, err := s.List(ctx, archive.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	costs := map[string]string{}
	for _, l := range listed {
		costs[l.UID] = l.CostUSD
	}
	if diff := cmp.Diff(map[string]string{"a": "0.0123", "c": "0.0123", "free": ""}, costs); diff != "" {
		t.Errorf("listed costs (-want +got):\n%s", diff)
	}
}

func TestMigrate_errorsHideThePassword(t *testing.T) {
	_, _, err := archive.Migrate(context.Background(), "postgres://archiver:s3cret-pw@127.0.0.1:1/archive?connect_timeout=2")
	if err == nil {
		t.Fatal("Migrate of a closed port succeeded")
	}
	if strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("the error shows the password: %v", err)
	}
}

// Once an administrator migrated, an operator whose role may only read
// and write the rows starts: its Migrate finds nothing to apply and
// changes nothing, so it needs no privilege to create or alter.
func TestMigrate_anUpToDateSchemaNeedsNoPrivilegeToCreate(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	role, writerDSN := pgtest.Role(t, dsn)
	if _, _, err := archive.Migrate(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	exec(t, connect(t, dsn), `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO `+pgx.Identifier{role}.Sanitize())
	v, applied, err := archive.Migrate(ctx, writerDSN)
	if err != nil || len(applied) != 0 || v != newestVersion(t) {
		t.Fatalf("Migrate as a role that may not create: version %d, applied %v, %v; want %d, none, no error", v, applied, err, newestVersion(t))
	}
	s, err := archive.Open(ctx, writerDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put(t, s, record("uid-1", "shop", "a", base, "Completed", nil, 1))
}
