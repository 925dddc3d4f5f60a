package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Evaluation is one finished AgentEvaluation, as archived: its results
// whole, so that a later evaluation's spec.baseline can compare with it
// once it is deleted.
type Evaluation struct {
	// UID is the evaluation's UID: the record's key.
	UID, Namespace, Name string
	// FinishedAt is status.completionTime.
	FinishedAt time.Time
	// Phase is status.phase: Passed, Failed or Regressed.
	Phase string
	// PassRate and CostUSD are status.totals' decimals, "" when the status
	// held none; the database keeps them as numbers.
	PassRate, CostUSD string
	// Spec and Status are the evaluation's, as JSON; a listing leaves
	// them out.
	Spec, Status json.RawMessage
}

// Evaluations is where finished evaluations are kept. PutEvaluation is
// idempotent by UID: writing the same evaluation again replaces nothing
// and is not an error.
type Evaluations interface {
	PutEvaluation(ctx context.Context, e *Evaluation) error
	// NewestEvaluation reads the newest evaluation of this name in the
	// namespace, whole; ErrNoEvaluation when there is none.
	NewestEvaluation(ctx context.Context, namespace, name string) (*Evaluation, error)
	// ListEvaluations lists the evaluations of the namespace ("" for
	// every namespace), newest first, without their spec and status;
	// limit 0 means 500.
	ListEvaluations(ctx context.Context, namespace string, limit int) ([]Evaluation, error)
}

var _ Evaluations = (*Postgres)(nil)

// ErrNoEvaluation: the archive holds no evaluation of this name.
var ErrNoEvaluation = errors.New("no such evaluation in the archive")

// totals is what PutEvaluation reads of the status.
type totals struct {
	Totals struct {
		PassRate string `json:"passRate"`
		CostUSD  string `json:"costUSD"`
	} `json:"totals"`
}

// PutEvaluation writes the evaluation unless one with its UID is there
// already: the first write wins.
func (p *Postgres) PutEvaluation(ctx context.Context, e *Evaluation) error {
	if e.UID == "" {
		return errors.New("archive: an evaluation needs its UID")
	}
	if len(e.Spec) == 0 || len(e.Status) == 0 {
		return fmt.Errorf("archive: the evaluation %s/%s needs its spec and status", e.Namespace, e.Name)
	}
	var t totals
	if err := json.Unmarshal(e.Status, &t); err != nil {
		return fmt.Errorf("archive: the status of %s/%s is not JSON: %w", e.Namespace, e.Name, err)
	}
	_, err := p.pool.Exec(ctx, `INSERT INTO agentrun_evaluations
		(uid, namespace, name, finished_at, phase, pass_rate, cost_usd, spec, status)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (uid) DO NOTHING`,
		e.UID, e.Namespace, e.Name, e.FinishedAt, e.Phase, decimalOrNil(t.Totals.PassRate), decimalOrNil(t.Totals.CostUSD),
		string(e.Spec), string(e.Status))
	if err != nil {
		return fmt.Errorf("archive: writing the evaluation %s/%s: %w", e.Namespace, e.Name, err)
	}
	return nil
}

// decimalOrNil is a numeric column's value: NULL unless s is a decimal
// (the status, kept whole, still says what it held).
func decimalOrNil(s string) any {
	if decimal.MatchString(s) {
		return s
	}
	return nil
}

const evaluationColumns = `uid, namespace, name, finished_at, phase,
	coalesce(pass_rate::text, ''), coalesce(cost_usd::text, '')`

// NewestEvaluation reads the newest evaluation of this name in the
// namespace.
func (p *Postgres) NewestEvaluation(ctx context.Context, namespace, name string) (*Evaluation, error) {
	e := &Evaluation{}
	var spec, status []byte
	err := p.pool.QueryRow(ctx, `SELECT `+evaluationColumns+`, spec, status FROM agentrun_evaluations
		WHERE namespace = $1 AND name = $2 ORDER BY finished_at DESC, uid LIMIT 1`, namespace, name).Scan(
		&e.UID, &e.Namespace, &e.Name, &e.FinishedAt, &e.Phase, &e.PassRate, &e.CostUSD, &spec, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNoEvaluation
	}
	if err != nil {
		return nil, fmt.Errorf("archive: reading the evaluation %s/%s: %w", namespace, name, err)
	}
	e.Spec, e.Status = spec, status
	return e, nil
}

// ListEvaluations lists the evaluations of the namespace, newest first.
func (p *Postgres) ListEvaluations(ctx context.Context, namespace string, limit int) ([]Evaluation, error) {
	if limit <= 0 {
		limit = defaultLimit
	}
	rows, err := p.pool.Query(ctx, `SELECT `+evaluationColumns+` FROM agentrun_evaluations
		WHERE $1 = '' OR namespace = $1 ORDER BY finished_at DESC, uid LIMIT $2`, namespace, limit)
	if err != nil {
		return nil, fmt.Errorf("archive: listing evaluations: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Evaluation, error) {
		var e Evaluation
		err := row.Scan(&e.UID, &e.Namespace, &e.Name, &e.FinishedAt, &e.Phase, &e.PassRate, &e.CostUSD)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("archive: listing evaluations: %w", err)
	}
	return out, nil
}
