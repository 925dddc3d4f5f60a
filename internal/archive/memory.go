package archive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Entry is one entry of a run's memory (spec.memory): what a run
// remembered, kept in the namespace's memory of that name.
type Entry struct {
	Namespace string
	// Memory is the memory's name (spec.memory.name).
	Memory string
	// Key identifies the entry within its memory: writing it again
	// replaces the entry.
	Key  string
	Text string
	// Run is the name of the run that wrote it.
	Run       string
	WrittenAt time.Time
	// ExpiresAt is when the entry stops being recalled or counted.
	ExpiresAt time.Time
}

// ErrMemoryFull: the memory holds its maximum of live entries, and the
// entry would add one more.
var ErrMemoryFull = errors.New("the memory is full")

// Remember writes e, replacing the entry of the same key (live or
// expired), unless that would make the memory hold more than maxEntries
// live entries (at e.WrittenAt): then the error wraps ErrMemoryFull.
// replaced says whether a live entry of the key was replaced. Writers of
// one memory are serialized (an advisory lock), so that two runs cannot
// both take its last place.
func (p *Postgres) Remember(ctx context.Context, e Entry, maxEntries int) (replaced bool, err error) {
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))`, e.Namespace, e.Memory); err != nil {
			return err
		}
		var live int
		if err := tx.QueryRow(ctx, `SELECT count(*), coalesce(bool_or(key = $3), false) FROM agentrun_memories
			WHERE namespace = $1 AND memory = $2 AND expires_at > $4`,
			e.Namespace, e.Memory, e.Key, e.WrittenAt).Scan(&live, &replaced); err != nil {
			return err
		}
		if !replaced && live >= maxEntries {
			return fmt.Errorf("%w: it holds %d entries, the most memory.maxEntries allows", ErrMemoryFull, live)
		}
		_, err := tx.Exec(ctx, `INSERT INTO agentrun_memories (namespace, memory, key, text, run, written_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (namespace, memory, key) DO UPDATE SET
				text = excluded.text, run = excluded.run, written_at = excluded.written_at, expires_at = excluded.expires_at`,
			e.Namespace, e.Memory, e.Key, e.Text, e.Run, e.WrittenAt, e.ExpiresAt)
		return err
	})
	if err != nil && !errors.Is(err, ErrMemoryFull) {
		return false, fmt.Errorf("archive: remembering: %w", err)
	}
	return replaced, err
}

// Recall returns at most limit live entries (at now) of the memory that
// match query, best first: query is read as a web search box reads it
// (websearch_to_tsquery: words, "quoted phrases", or, -excluded), and the
// entries are ranked by ts_rank, the newest first among equals.
func (p *Postgres) Recall(ctx context.Context, namespace, memory, query string, now time.Time, limit int) ([]Entry, error) {
	rows, err := p.pool.Query(ctx, `SELECT key, text, run, written_at, expires_at
		FROM agentrun_memories, websearch_to_tsquery('english', $3) AS q
		WHERE namespace = $1 AND memory = $2 AND expires_at > $4 AND search @@ q
		ORDER BY ts_rank(search, q) DESC, written_at DESC, key
		LIMIT $5`, namespace, memory, query, now, limit)
	if err != nil {
		return nil, fmt.Errorf("archive: recalling: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		e := Entry{Namespace: namespace, Memory: memory}
		err := r.Scan(&e.Key, &e.Text, &e.Run, &e.WrittenAt, &e.ExpiresAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("archive: recalling: %w", err)
	}
	return out, nil
}

// ExpireMemories deletes the entries that expired before now, and says
// how many it deleted.
func (p *Postgres) ExpireMemories(ctx context.Context, now time.Time) (int, error) {
	tag, err := p.pool.Exec(ctx, `DELETE FROM agentrun_memories WHERE expires_at <= $1`, now)
	if err != nil {
		return 0, fmt.Errorf("archive: expiring memories: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
