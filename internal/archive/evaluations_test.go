package archive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/archive/pgtest"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// evaluation is a finished evaluation with this pass rate and cost.
func evaluation(uid, ns, name string, finished time.Time, phase, passRate, cost string) *archive.Evaluation {
	return &archive.Evaluation{UID: uid, Namespace: ns, Name: name, FinishedAt: finished, Phase: phase,
		Spec: json.RawMessage(`{"templateRef":{"name":"refund"},"cases":[{"name":"double-charge"}]}`),
		Status: json.RawMessage(fmt.Sprintf(`{"phase":%q,"totals":{"runs":2,"passed":1,"passRate":%q,"costUSD":%q},`+
			`"cases":[{"name":"double-charge","runs":2,"passed":1,"failed":1}]}`, phase, passRate, cost))}
}

// Issue 48, item 2: whole results go to the archive. An evaluation is
// written once (the first write wins, as a run's record), read back whole
// as the newest of its name, and listed with its pass rate and cost as
// the database's numbers.
func TestEvaluations_putOnceReadNewestAndList(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	old := evaluation("uid-1", "shop", "refund-eval", base, "Passed", "1", "0.0200")
	newer := evaluation("uid-2", "shop", "refund-eval", base.Add(time.Hour), "Regressed", "0.5", "0.0450")
	other := evaluation("uid-3", "billing", "nightly-eval", base.Add(2*time.Hour), "Failed", "", "")
	for _, e := range []*archive.Evaluation{old, newer, other} {
		if err := s.PutEvaluation(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	again := evaluation("uid-2", "shop", "refund-eval", base.Add(3*time.Hour), "Passed", "1", "0.0100")
	if err := s.PutEvaluation(ctx, again); err != nil {
		t.Fatalf("writing an evaluation again: %v, want no error", err)
	}

	got, err := s.NewestEvaluation(ctx, "shop", "refund-eval")
	if err != nil {
		t.Fatal(err)
	}
	if got.UID != "uid-2" || got.Phase != "Regressed" || !got.FinishedAt.Equal(newer.FinishedAt) {
		t.Errorf("newest: %s %s %s, want the first write of uid-2 (Regressed, %s)", got.UID, got.Phase, got.FinishedAt, newer.FinishedAt)
	}
	if !sameJSON(t, newer.Status, got.Status) || !sameJSON(t, newer.Spec, got.Spec) {
		t.Errorf("read back spec %s, status %s; want %s, %s", got.Spec, got.Status, newer.Spec, newer.Status)
	}
	if _, err := s.NewestEvaluation(ctx, "shop", "nightly-eval"); !errors.Is(err, archive.ErrNoEvaluation) {
		t.Errorf("an evaluation of another namespace: %v, want ErrNoEvaluation", err)
	}

	listed, err := s.ListEvaluations(ctx, "shop", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []archive.Evaluation{
		{UID: "uid-2", Namespace: "shop", Name: "refund-eval", FinishedAt: newer.FinishedAt, Phase: "Regressed", PassRate: "0.5", CostUSD: "0.0450"},
		{UID: "uid-1", Namespace: "shop", Name: "refund-eval", FinishedAt: old.FinishedAt, Phase: "Passed", PassRate: "1", CostUSD: "0.0200"},
	}
	if diff := cmp.Diff(want, listed, cmpopts.EquateApproxTime(0)); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}
	all, err := s.ListEvaluations(ctx, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].UID != "uid-3" || all[0].PassRate != "" || all[1].UID != "uid-2" {
		t.Errorf("listed everywhere, limit 2: %+v, want uid-3 (no pass rate) then uid-2", all)
	}
}

// A role that may only SELECT reads the evaluations, and cannot write
// one.
func TestEvaluations_aReadOnlyRoleReadsThem(t *testing.T) {
	ctx := context.Background()
	s, dsn := open(t)
	if err := s.PutEvaluation(ctx, evaluation("uid-1", "shop", "refund-eval", base, "Passed", "1", "0.02")); err != nil {
		t.Fatal(err)
	}
	role, readerDSN := pgtest.Role(t, dsn)
	exec(t, connect(t, dsn), `GRANT SELECT ON ALL TABLES IN SCHEMA public TO `+pgx.Identifier{role}.Sanitize())
	reader, err := archive.Open(ctx, readerDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	got, err := reader.NewestEvaluation(ctx, "shop", "refund-eval")
	if err != nil || got.UID != "uid-1" {
		t.Fatalf("a read-only role's NewestEvaluation: %+v, %v", got, err)
	}
	if listed, err := reader.ListEvaluations(ctx, "", 0); err != nil || len(listed) != 1 {
		t.Errorf("a read-only role's ListEvaluations: %+v, %v", listed, err)
	}
	var pgErr *pgconn.PgError
	if err := reader.PutEvaluation(ctx, evaluation("uid-2", "shop", "x", base, "Passed", "1", "0")); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("a read-only role's PutEvaluation: %v, want permission denied (42501)", err)
	}
}
