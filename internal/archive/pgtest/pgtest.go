// Package pgtest starts a throwaway PostgreSQL server for a package's
// tests: a fresh data directory in a temporary directory, listening on a
// Unix socket only (no TCP port to collide with anything), one database
// per test, and the whole server removed when the tests end. The archive
// is tested against a real server, never a mock: its SQL (jsonb
// operators, ON CONFLICT, advisory locks) is most of what could be wrong.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
//
// and pgtest.DSN(t) in each test. Where PostgreSQL is not installed the
// tests are skipped with a loud message, except under CI=true, where they
// fail: .ci/run installs it.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/archive"
	"github.com/jackc/pgx/v5"
)

// startTimeout bounds initdb plus the server's start: about two seconds on
// a quiet machine, more with a CI run compiling beside it.
const startTimeout = 60 * time.Second

var (
	mu        sync.Mutex
	server    *Server
	missing   string // why there is no server, when there is none
	databases atomic.Int64
)

// Server is a running PostgreSQL.
type Server struct {
	dir    string // removed at Stop
	socket string // the directory of the Unix socket
	cmd    *exec.Cmd
	// exited is closed when the server has exited, with its error in
	// waitErr.
	exited  chan struct{}
	waitErr error
}

// Run starts the server, runs the tests and stops the server. Its result
// is the tests' exit status, for os.Exit.
func Run(m *testing.M) int {
	s, err := Start()
	mu.Lock()
	if err != nil {
		missing = err.Error()
		if os.Getenv("CI") != "true" {
			fmt.Fprintf(os.Stderr, "\n*** pgtest: %s: the tests that need PostgreSQL are SKIPPED ***\n\n", missing)
		}
	}
	server = s
	mu.Unlock()
	code := m.Run()
	if s != nil {
		if err := s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	return code
}

// DSN creates a database of its own for the test and returns its address.
// Without a server it skips the test, or fails it under CI=true.
func DSN(t testing.TB) string {
	t.Helper()
	mu.Lock()
	s, why := server, missing
	mu.Unlock()
	if s == nil {
		if why == "" {
			why = "pgtest.Run did not start a server (is it called from TestMain?)"
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgtest: %s (CI=true: PostgreSQL must be installed; .ci/run installs it)", why)
		}
		t.Skipf("*** SKIPPED: no PostgreSQL: %s ***", why)
	}
	name := fmt.Sprintf("t%d_%s", databases.Add(1), dbName.ReplaceAllString(strings.ToLower(t.Name()), "_"))
	if len(name) > 63 {
		name = name[:63]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	return s.DSN(name)
}

var dbName = regexp.MustCompile(`[^a-z0-9_]+`)

// DSN is the address of a database of the server.
func (s *Server) DSN(database string) string {
	return fmt.Sprintf("host=%s user=postgres dbname=%s sslmode=disable", s.socket, database)
}

// Start makes a data directory and starts a server on it. As root it runs
// PostgreSQL as the postgres user (or nobody), since the server refuses
// to run as root.
func Start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, uid, gid, err := credential()
	if err != nil {
		return nil, err
	}
	// A short path: a Unix socket's path must fit in 107 bytes.
	base := os.TempDir()
	if len(base) > 40 {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "pgtest")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, socket: filepath.Join(dir, "s"), exited: make(chan struct{})}
	data := filepath.Join(dir, "data")
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := os.Mkdir(s.socket, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, p := range []string{dir, s.socket} {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, err
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	// No TCP (listen_addresses empty), the socket in our directory, and
	// durability off: the data is thrown away.
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", s.socket, "-h", "",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=100")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }()
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting postgres: %w", err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(ctx); err != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
		log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
		return nil, fmt.Errorf("%w\npostgres.log:\n%s", err, log)
	}
	ok = true
	return s, nil
}

// waitReady polls until a connection succeeds, the server exits or the
// context ends.
func (s *Server) waitReady(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err == nil {
			return c.Close(ctx)
		}
		last = err
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited while starting: %v", s.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("postgres did not accept connections within %s: %v", startTimeout, last)
		case <-tick.C:
		}
	}
}

// Stop shuts the server down (fast shutdown: connections are cut) and
// removes its directory.
func (s *Server) Stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	return os.RemoveAll(s.dir)
}

// binDir finds the directory of initdb and postgres: where initdb on PATH
// really is (Debian puts only wrappers, or nothing, on PATH), else the
// newest /usr/lib/postgresql/*/bin.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			if dir := filepath.Dir(real); exists(filepath.Join(dir, "postgres")) {
				return dir, nil
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if exists(filepath.Join(d, "initdb")) && exists(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin; " +
		"apt-get install postgresql)")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// credential is who PostgreSQL runs as: nil (this process's user) unless
// this process is root.
func credential() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, 0, 0, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid, nil
	}
	return nil, 0, 0, errors.New("running as root, and there is no postgres or nobody user to run PostgreSQL as")
}

// Own starts a server for this test alone and returns the address of its
// postgres database; the server is stopped when the test ends. It is for
// packages whose TestMain belongs to something else (the controller's
// envtest suite). Without PostgreSQL it skips the test, or fails it under
// CI=true.
func Own(t testing.TB) string {
	t.Helper()
	s, err := Start()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgtest: %v (CI=true: PostgreSQL must be installed; .ci/run installs it)", err)
		}
		t.Skipf("*** SKIPPED: no PostgreSQL: %v ***", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s.DSN("postgres")
}

// Role creates a role of the server that may log in to the database at
// dsn (one of DSN's) and do nothing else: no privilege on any table, and
// not CREATE in the schema public, which PostgreSQL 15 and later refuse
// everyone by default and earlier versions allow. It returns the role's
// name, for the test's GRANTs, and the database's address as that role.
func Role(t testing.TB, dsn string) (name, roleDSN string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	// Roles belong to the server, not the database: the database's name,
	// unique, makes the role's.
	var db string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	name = db[:min(len(db), 56)] + "_reader"
	for _, sql := range []string{
		`CREATE ROLE ` + pgx.Identifier{name}.Sanitize() + ` LOGIN`,
		`REVOKE CREATE ON SCHEMA public FROM PUBLIC`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("pgtest: %s: %v", sql, err)
		}
	}
	// In libpq's key=value form, a later key replaces an earlier one.
	return name, dsn + " user=" + name
}

// Archive is a database of the test's own (Own), migrated, and the
// archive opened on it (closed when the test ends), with the owner's DSN.
func Archive(t testing.TB) (*archive.Postgres, string) {
	t.Helper()
	dsn := Own(t)
	return Open(t, dsn), dsn
}

// Open migrates the database at dsn and opens the archive on it, closed
// when the test ends.
func Open(t testing.TB, dsn string) *archive.Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := archive.Migrate(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	store, err := archive.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return store
}
