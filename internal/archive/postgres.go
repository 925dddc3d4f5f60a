package archive

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// defaultLimit is List's limit when the filter gives none.
const defaultLimit = 500

// Postgres is the archive in a PostgreSQL database.
type Postgres struct {
	pool *pgxpool.Pool
}

var _ Store = (*Postgres)(nil)

// Open connects to the database at dsn (a URL or key=value string, as
// libpq takes) to read and write records. It changes nothing in the
// database: a role that may only SELECT can open it and read. The schema
// must be at the version this binary knows (Migrate brings it there);
// otherwise Open says so. Its errors never hold the DSN's password: pgx
// leaves it out of its own.
func Open(ctx context.Context, dsn string) (*Postgres, error) {
	pool, err := connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	p := &Postgres{pool: pool}
	if err := p.checkSchema(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return p, nil
}

// connect opens a pool of connections to the database at dsn.
func connect(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("archive: reading the database address: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("archive: connecting: %w", err)
	}
	return pool, nil
}

// Close closes the connections.
func (p *Postgres) Close() { p.pool.Close() }

// listed is what a listing reads of the status: the columns of kubectl
// get ar.
type listed struct {
	Phase string `json:"phase"`
	Turn  int32  `json:"turn"`
	Usage struct {
		CostUSD      string `json:"costUSD"`
		InputTokens  int64  `json:"inputTokens"`
		OutputTokens int64  `json:"outputTokens"`
	} `json:"usage"`
}

// decimal is what the cost_usd column takes: status.usage.costUSD's
// form, the pattern migration 4 converted the text column with.
var decimal = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// Put writes the record unless one with its UID is there already; the
// first write wins, so an operator that archives a run again after a
// restart changes nothing.
func (p *Postgres) Put(ctx context.Context, r *Record) error {
	if r.UID == "" {
		return errors.New("archive: a record needs the run's UID")
	}
	var l listed
	if len(r.Status) > 0 {
		if err := json.Unmarshal(r.Status, &l); err != nil {
			return fmt.Errorf("archive: the status of %s/%s is not JSON: %w", r.Namespace, r.Name, err)
		}
	}
	// The column is numeric. A cost that is not a decimal (none, or a
	// status someone else wrote) is NULL, as migration 4 made it of the
	// records before it, rather than a record the run waits for in vain:
	// the status, kept whole, still says what it held.
	var cost any
	if decimal.MatchString(l.Usage.CostUSD) {
		cost = l.Usage.CostUSD
	}
	transcript, err := compress(r.Transcript)
	if err != nil {
		return err
	}
	_, err = p.pool.Exec(ctx, `INSERT INTO agentrun_runs
		(uid, namespace, name, template, labels, annotations, created_at, finished_at,
		 outcome, reason, turns, cost_usd, input_tokens, output_tokens,
		 spec, status, transcript, transcript_state, transcript_problem)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
		ON CONFLICT (uid) DO NOTHING`,
		r.UID, r.Namespace, r.Name, r.Template, stringMap(r.Labels), stringMap(r.Annotations),
		r.CreatedAt, r.FinishedAt, r.Outcome, r.Reason, l.Turn, cost, l.Usage.InputTokens, l.Usage.OutputTokens,
		jsonOrNil(r.Spec), jsonOrNil(r.Status), transcript, r.TranscriptState, r.TranscriptProblem)
	if err != nil {
		return fmt.Errorf("archive: writing %s/%s: %w", r.Namespace, r.Name, err)
	}
	return nil
}

// Get reads the whole record of the run with this UID.
func (p *Postgres) Get(ctx context.Context, uid string) (*Record, error) {
	r := &Record{}
	var spec, status, transcript []byte
	err := p.pool.QueryRow(ctx, `SELECT uid, namespace, name, template, labels, annotations,
		created_at, finished_at, outcome, reason, spec, status, transcript, transcript_state, transcript_problem
		FROM agentrun_runs WHERE uid = $1`, uid).Scan(
		&r.UID, &r.Namespace, &r.Name, &r.Template, &r.Labels, &r.Annotations,
		&r.CreatedAt, &r.FinishedAt, &r.Outcome, &r.Reason, &spec, &status, &transcript, &r.TranscriptState, &r.TranscriptProblem)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("archive: reading %s: %w", uid, err)
	}
	r.Spec, r.Status = nilIfEmpty(spec), nilIfEmpty(status)
	if r.Transcript, err = decompress(transcript); err != nil {
		return nil, fmt.Errorf("archive: the transcript of %s: %w", uid, err)
	}
	return r, nil
}

const summaryColumns = `uid, namespace, name, template, labels, created_at, finished_at,
	outcome, reason, turns, coalesce(cost_usd::text, ''), input_tokens, output_tokens,
	coalesce(status->>'phase', ''), transcript_state`

// Find returns the runs of this name in the namespace, newest first.
func (p *Postgres) Find(ctx context.Context, namespace, name string) ([]Summary, error) {
	return p.summaries(ctx, nil, `SELECT `+summaryColumns+` FROM agentrun_runs
		WHERE namespace = $1 AND name = $2 ORDER BY finished_at DESC, uid`, namespace, name)
}

// List returns the runs the filter selects, newest first. The label
// selector's = and in become jsonb containment (which the GIN index
// serves), != and notin, exists and !exists become jsonb operators; only
// gt and lt are left to Go, and then the limit is applied in Go too.
func (p *Postgres) List(ctx context.Context, f Filter) ([]Summary, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Namespace != "" {
		where = append(where, "namespace = "+arg(f.Namespace))
	}
	if f.Outcome != "" {
		where = append(where, "outcome = "+arg(f.Outcome))
	}
	if !f.Since.IsZero() {
		where = append(where, "finished_at >= "+arg(f.Since))
	}
	var sel labels.Selector
	inGo := false
	if f.Selector != "" {
		var err error
		if sel, err = labels.Parse(f.Selector); err != nil {
			return nil, fmt.Errorf("archive: the selector %q: %w", f.Selector, err)
		}
		reqs, _ := sel.Requirements()
		for _, r := range reqs {
			cond, ok := selectorSQL(r, arg)
			if !ok {
				inGo = true
				continue
			}
			where = append(where, cond)
		}
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	q := `SELECT ` + summaryColumns + ` FROM agentrun_runs`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY finished_at DESC, uid"
	if !inGo {
		q += " LIMIT " + arg(limit)
	}
	var keep func(Summary) bool
	if sel != nil {
		// Also checked where SQL applied it: a second opinion costs
		// nothing and keeps the SQL honest.
		keep = func(s Summary) bool { return sel.Matches(labels.Set(s.Labels)) }
	}
	out, err := p.summaries(ctx, keep, q, args...)
	if err != nil {
		return nil, err
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// selectorSQL is one requirement of a label selector as a condition on the
// labels column, with Kubernetes' meaning: != and notin also select runs
// without the label.
func selectorSQL(r labels.Requirement, arg func(any) string) (string, bool) {
	key := r.Key()
	values := r.Values().List()
	switch r.Operator() {
	case selection.Equals, selection.DoubleEquals:
		return "labels @> " + arg(map[string]string{key: values[0]}), true
	case selection.In:
		if len(values) == 1 {
			return "labels @> " + arg(map[string]string{key: values[0]}), true
		}
		return "labels->>" + arg(key) + " = ANY(" + arg(values) + ")", true
	case selection.NotEquals, selection.NotIn:
		k := arg(key)
		return "(labels->>" + k + " IS NULL OR labels->>" + k + " <> ALL(" + arg(values) + "))", true
	case selection.Exists:
		return "labels->>" + arg(key) + " IS NOT NULL", true
	case selection.DoesNotExist:
		return "labels->>" + arg(key) + " IS NULL", true
	}
	return "", false
}

func (p *Postgres) summaries(ctx context.Context, keep func(Summary) bool, q string, args ...any) ([]Summary, error) {
	rows, err := p.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("archive: listing: %w", err)
	}
	defer rows.Close()
	var out []Summary
	for rows.Next() {
		var s Summary
		if err := rows.Scan(&s.UID, &s.Namespace, &s.Name, &s.Template, &s.Labels, &s.CreatedAt, &s.FinishedAt,
			&s.Outcome, &s.Reason, &s.Turns, &s.CostUSD, &s.InputTokens, &s.OutputTokens, &s.Phase, &s.TranscriptState); err != nil {
			return nil, fmt.Errorf("archive: listing: %w", err)
		}
		if keep == nil || keep(s) {
			out = append(out, s)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("archive: listing: %w", err)
	}
	return out, nil
}

// Expire deletes the records of runs that finished before the time.
func (p *Postgres) Expire(ctx context.Context, before time.Time) (int, error) {
	tag, err := p.pool.Exec(ctx, `DELETE FROM agentrun_runs WHERE finished_at < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("archive: expiring: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// stringMap stores a missing map as {} (the column is NOT NULL, and a
// selector reads {} and null alike).
func stringMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// jsonOrNil passes JSON to a jsonb column as text (pgx would otherwise
// send []byte as bytea), and nothing as NULL.
func jsonOrNil(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

func nilIfEmpty(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return b
}

func compress(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func decompress(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}
