package archive

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

// migrations are the schema's versions, applied in order of the number
// their file name starts with (0001_runs.sql is version 1) by goose. A
// released migration's SQL never changes: a change is a new file.
//
//go:embed migrations/*.sql
var migrations embed.FS

// VersionTable is goose's record of the migrations applied: what a role
// that reads the archive must also be able to SELECT, since Open checks
// the schema's version in it.
const VersionTable = "agentrun_schema_version"

// oldVersionTable is where the archive recorded its migrations before
// goose applied them (versions 1 to 3). Migrate copies that history into
// VersionTable once, so that a database the old code made is upgraded
// rather than created again; the old table is left as it was.
const oldVersionTable = "schema_migrations"

// migrationLock is the advisory lock key that serializes migrations: two
// operators starting at once (a rollout) must not both create the tables.
// Any fixed number works; this one is "agentrun" in ASCII, folded into 63
// bits.
const migrationLock int64 = 0x6167656e7472756e

// newProvider is goose, for the embedded migrations, over db.
func newProvider(db *sql.DB) (*goose.Provider, error) {
	files, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, err
	}
	// Waiting for another operator's migrations: checked every second,
	// for at most five minutes.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(migrationLock), lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(goose.DialectPostgres, db, files,
		goose.WithTableName(VersionTable),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
		goose.WithLogger(goose.NopLogger()))
}

// newestVersion is the newest migration this binary holds: the version
// Open requires.
func newestVersion(db *sql.DB) (int64, error) {
	p, err := newProvider(db)
	if err != nil {
		return 0, err
	}
	sources := p.ListSources()
	return sources[len(sources)-1].Version, nil
}

// Migrate brings the schema of the database at dsn to the newest version
// this binary knows, applying each migration the database has not seen in
// its own transaction, under an advisory lock (two operators starting
// together do not race). It needs a role that may create tables; the
// operator migrates at start, and `agentrun archive migrate` does it by
// hand. Migrating a database that is up to date changes nothing. It
// returns the schema's version and the migrations it applied.
func Migrate(ctx context.Context, dsn string) (version int64, applied []string, err error) {
	pool, err := connect(ctx, dsn)
	if err != nil {
		return 0, nil, err
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer func() { _ = db.Close() }()
	p, err := newProvider(db)
	if err != nil {
		return 0, nil, fmt.Errorf("archive: reading the migrations: %w", err)
	}
	if err := adoptOldHistory(ctx, db); err != nil {
		return 0, nil, fmt.Errorf("archive: reading the migrations the old archive applied: %w", err)
	}
	results, err := p.Up(ctx)
	for _, r := range results {
		applied = append(applied, r.Source.Path)
	}
	if err != nil {
		return 0, applied, fmt.Errorf("archive: migrating: %w", err)
	}
	if version, err = p.GetDBVersion(ctx); err != nil {
		return 0, applied, fmt.Errorf("archive: reading the schema's version: %w", err)
	}
	return version, applied, nil
}

// adoptOldHistory copies the versions the old code recorded in
// schema_migrations into goose's table, when there is the one and not yet
// the other. It holds the migration lock for its transaction, so that a
// second operator waits, then finds goose's table there.
func adoptOldHistory(ctx context.Context, db *sql.DB) error {
	store, err := database.NewStore(database.DialectPostgres, VersionTable)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
		return err
	}
	var gooseTable, oldTable bool
	if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
		VersionTable, oldVersionTable).Scan(&gooseTable, &oldTable); err != nil {
		return err
	}
	if gooseTable || !oldTable {
		return nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT version FROM `+oldVersionTable+` ORDER BY version`)
	if err != nil {
		return err
	}
	var versions []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			_ = rows.Close()
			return err
		}
		versions = append(versions, v)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := store.CreateVersionTable(ctx, tx); err != nil {
		return err
	}
	// Version 0 is goose's mark of a table it made.
	for _, v := range append([]int64{0}, versions...) {
		if err := store.Insert(ctx, tx, database.InsertRequest{Version: v}); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// SchemaVersion is the newest migration applied to the database (0 when
// none is): what the operator logs at start, and what Open checks. It only
// reads.
func (p *Postgres) SchemaVersion(ctx context.Context) (int64, error) {
	db := stdlib.OpenDBFromPool(p.pool)
	defer func() { _ = db.Close() }()
	return schemaVersion(ctx, db)
}

func schemaVersion(ctx context.Context, db *sql.DB) (int64, error) {
	store, err := database.NewStore(database.DialectPostgres, VersionTable)
	if err != nil {
		return 0, err
	}
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, VersionTable).Scan(&exists); err != nil {
		return 0, fmt.Errorf("archive: reading the schema's version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	v, err := store.GetLatestVersion(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("archive: reading the schema's version: %w", err)
	}
	return v, nil
}

// checkSchema says, when the database's schema is older than this binary
// reads, what to do about it, rather than failing later on a missing
// column. A newer schema is read: migrations add, and this binary reads
// what it knows.
func (p *Postgres) checkSchema(ctx context.Context) error {
	db := stdlib.OpenDBFromPool(p.pool)
	defer func() { _ = db.Close() }()
	want, err := newestVersion(db)
	if err != nil {
		return fmt.Errorf("archive: reading the migrations: %w", err)
	}
	have, err := schemaVersion(ctx, db)
	if err != nil {
		return err
	}
	switch {
	case have == 0:
		return fmt.Errorf("archive: the database holds no archive yet: a role that may create tables migrates it "+
			"(agentrun archive migrate, or the operator at start), to version %d", want)
	case have < want:
		return fmt.Errorf("archive: the archive's schema is at version %d and this binary reads version %d: "+
			"a role that may alter the tables migrates it (agentrun archive migrate, or the operator at start)", have, want)
	}
	return nil
}
