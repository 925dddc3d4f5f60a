package archive_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/archive/pgtest"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// open opens the archive in a fresh database of its own.
func open(t testing.TB) (*archive.Postgres, string) {
	t.Helper()
	dsn := pgtest.DSN(t)
	return pgtest.Open(t, dsn), dsn
}

// base is when the test runs finished; times are truncated to what
// PostgreSQL keeps (microseconds).
var base = time.Date(2026, 5, 20, 12, 0, 0, 0, time.UTC)

// record is a finished run with a small transcript of turns turns.
func record(uid, ns, name string, finished time.Time, outcome string, lbls map[string]string, turns int) *archive.Record {
	var msgs []loop.Message
	msgs = append(msgs, loop.Message{Role: loop.RoleUser, Content: "Refund order 1042 if it was charged twice.", Turn: 0})
	for i := 1; i <= turns; i++ {
		msgs = append(msgs,
			loop.Message{Role: loop.RoleAssistant, Turn: i, ToolCalls: []loop.ToolCall{{
				ID: fmt.Sprintf("t%d-c1", i), Name: "get_order", Arguments: json.RawMessage(`{"order_id":"1042"}`)}}},
			loop.Message{Role: loop.RoleTool, Turn: i, CallID: fmt.Sprintf("t%d-c1", i), Tool: "get_order",
				Content: `{"order_id":"1042","charges":[{"id":"ch_1","amount_minor":8240},{"id":"ch_2","amount_minor":8240}]}`})
	}
	transcript, _ := json.Marshal(msgs)
	return &archive.Record{
		UID: uid, Namespace: ns, Name: name, Template: "refund",
		Labels:      lbls,
		Annotations: map[string]string{"agentrun.dev/requested-by": "alice@example.com"},
		CreatedAt:   finished.Add(-time.Minute),
		FinishedAt:  finished,
		Outcome:     outcome,
		Reason:      "the model answered",
		Spec:        json.RawMessage(`{"goal":"Refund order 1042 if it was charged twice.","budget":{"maxTurns":20,"maxCostUSD":"1.00"}}`),
		Status: json.RawMessage(fmt.Sprintf(`{"phase":"Succeeded","outcome":%q,"turn":%d,"usage":{"costUSD":"0.0123","inputTokens":1200},`+
			`"approvals":[{"callID":"t2-c1","decision":"approved","by":"bob@example.com"}]}`, outcome, turns)),
		Transcript:      transcript,
		TranscriptState: archive.TranscriptComplete,
	}
}

func put(t *testing.T, s archive.Store, rs ...*archive.Record) {
	t.Helper()
	for _, r := range rs {
		if err := s.Put(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}

// sameJSON says whether two JSON texts hold the same value: jsonb keeps
// values, not spacing or key order.
func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

func TestPutGet_readsBackTheWholeRecord(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	want := record("uid-1", "shop", "refund-1042", base, "Completed", map[string]string{"app": "refunds"}, 3)
	put(t, s, want)
	got, err := s.Get(ctx, "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Transcript, want.Transcript) {
		t.Errorf("transcript:\n got %s\nwant %s", got.Transcript, want.Transcript)
	}
	if !sameJSON(t, got.Spec, want.Spec) || !sameJSON(t, got.Status, want.Status) {
		t.Errorf("spec or status differ:\n got %s %s\nwant %s %s", got.Spec, got.Status, want.Spec, want.Status)
	}
	if !got.CreatedAt.Equal(want.CreatedAt) || !got.FinishedAt.Equal(want.FinishedAt) {
		t.Errorf("times: got %v %v, want %v %v", got.CreatedAt, got.FinishedAt, want.CreatedAt, want.FinishedAt)
	}
	got.Spec, got.Status, got.Transcript, want.Spec, want.Status, want.Transcript = nil, nil, nil, nil, nil, nil
	got.CreatedAt, got.FinishedAt, want.CreatedAt, want.FinishedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("Get of a missing UID: %v, want ErrNotFound", err)
	}
}

func TestPut_isCompressed(t *testing.T) {
	s, dsn := open(t)
	r := record("uid-1", "shop", "big", base, "Completed", nil, 40)
	put(t, s, r)
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var stored int
	if err := conn.QueryRow(context.Background(), `SELECT octet_length(transcript) FROM agentrun_runs`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored*4 > len(r.Transcript) {
		t.Errorf("a %d-byte transcript is stored in %d bytes: not compressed", len(r.Transcript), stored)
	}
}

func TestPut_twiceKeepsTheFirstRecord(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	first := record("uid-1", "shop", "refund-1042", base, "Completed", nil, 1)
	again := record("uid-1", "shop", "refund-1042", base.Add(time.Hour), "Error", nil, 2)
	put(t, s, first, again)
	got, err := s.Get(ctx, "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome != "Completed" || !bytes.Equal(got.Transcript, first.Transcript) {
		t.Errorf("after a second Put: outcome %q, transcript %s; want the first", got.Outcome, got.Transcript)
	}
	all, err := s.List(ctx, archive.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Errorf("%d records after two Puts of one UID, want 1", len(all))
	}
}

func uids(ss []archive.Summary) []string {
	out := []string{}
	for _, s := range ss {
		out = append(out, s.UID)
	}
	return out
}

func TestFind_severalRunsOfOneNameNewestFirst(t *testing.T) {
	s, _ := open(t)
	put(t, s,
		record("old", "shop", "nightly", base, "Completed", nil, 1),
		record("new", "shop", "nightly", base.Add(48*time.Hour), "Error", nil, 1),
		record("mid", "shop", "nightly", base.Add(24*time.Hour), "Completed", nil, 1),
		record("other-ns", "billing", "nightly", base.Add(72*time.Hour), "Completed", nil, 1),
		record("other-name", "shop", "weekly", base.Add(72*time.Hour), "Completed", nil, 1))
	got, err := s.Find(context.Background(), "shop", "nightly")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"new", "mid", "old"}; !reflect.DeepEqual(uids(got), want) {
		t.Errorf("Find: %v, want %v", uids(got), want)
	}
	if got[0].Turns != 1 || got[0].CostUSD != "0.0123" || got[0].Phase != "Succeeded" || got[0].Outcome != "Error" {
		t.Errorf("the summary's columns: %+v", got[0])
	}
	none, err := s.Find(context.Background(), "shop", "never")
	if err != nil || len(none) != 0 {
		t.Errorf("Find of a name never run: %v, %v", none, err)
	}
}

func TestList_filters(t *testing.T) {
	s, _ := open(t)
	put(t, s,
		record("a", "shop", "a", base.Add(1*time.Hour), "Completed", map[string]string{"app": "refunds", "tier": "gold"}, 1),
		record("b", "shop", "b", base.Add(2*time.Hour), "Error", map[string]string{"app": "refunds", "tier": "silver"}, 1),
		record("c", "shop", "c", base.Add(3*time.Hour), "Completed", map[string]string{"app": "billing"}, 1),
		record("d", "billing", "d", base.Add(4*time.Hour), "Completed", map[string]string{"app": "refunds", "size": "7"}, 1),
		record("e", "billing", "e", base.Add(5*time.Hour), "BudgetExhausted", nil, 1))
	for _, tc := range []struct {
		f    archive.Filter
		want []string
	}{
		{archive.Filter{}, []string{"e", "d", "c", "b", "a"}},
		{archive.Filter{Namespace: "shop"}, []string{"c", "b", "a"}},
		{archive.Filter{Outcome: "Completed"}, []string{"d", "c", "a"}},
		{archive.Filter{Namespace: "shop", Outcome: "Completed"}, []string{"c", "a"}},
		{archive.Filter{Selector: "app=refunds"}, []string{"d", "b", "a"}},
		{archive.Filter{Selector: "app==refunds,tier=gold"}, []string{"a"}},
		{archive.Filter{Selector: "app in (refunds,billing)"}, []string{"d", "c", "b", "a"}},
		{archive.Filter{Selector: "tier!=gold"}, []string{"e", "d", "c", "b"}},
		{archive.Filter{Selector: "app notin (refunds)"}, []string{"e", "c"}},
		{archive.Filter{Selector: "tier"}, []string{"b", "a"}},
		{archive.Filter{Selector: "!app"}, []string{"e"}},
		{archive.Filter{Selector: "size>5"}, []string{"d"}},
		{archive.Filter{Selector: "app=refunds", Limit: 2}, []string{"d", "b"}},
		{archive.Filter{Selector: "app,size<100", Limit: 1}, []string{"d"}},
		{archive.Filter{Since: base.Add(3 * time.Hour)}, []string{"e", "d", "c"}},
		{archive.Filter{Limit: 2}, []string{"e", "d"}},
	} {
		got, err := s.List(context.Background(), tc.f)
		if err != nil {
			t.Errorf("%+v: %v", tc.f, err)
			continue
		}
		if !reflect.DeepEqual(uids(got), tc.want) {
			t.Errorf("%+v: %v, want %v", tc.f, uids(got), tc.want)
		}
	}
	if _, err := s.List(context.Background(), archive.Filter{Selector: "a b c"}); err == nil {
		t.Error("a malformed selector is accepted")
	}
}

func TestExpire_deletesOnlyOlderRecords(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	put(t, s,
		record("old", "shop", "a", base, "Completed", nil, 1),
		record("edge", "shop", "b", base.Add(time.Hour), "Completed", nil, 1),
		record("new", "shop", "c", base.Add(2*time.Hour), "Completed", nil, 1))
	n, err := s.Expire(ctx, base.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("Expire deleted %d, want 1", n)
	}
	left, err := s.List(ctx, archive.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"new", "edge"}; !reflect.DeepEqual(uids(left), want) {
		t.Errorf("left %v, want %v", uids(left), want)
	}
}

func TestOpen_errorsHideThePassword(t *testing.T) {
	_, err := archive.Open(context.Background(), "postgres://archiver:s3cret-pw@127.0.0.1:1/archive?connect_timeout=2")
	if err == nil {
		t.Fatal("Open of a closed port succeeded")
	}
	if strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("the error shows the password: %v", err)
	}
	_, err = archive.Open(context.Background(), "postgres://archiver:s3cret-pw@[bad/archive")
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("a malformed DSN: %v", err)
	}
}

// Finding 8 of issue 42: a record kept without its transcript (a chunk
// missing, or one the operator did not seal) said nothing of it. The
// record says whether its transcript is whole, and what was missing or
// unsealed; the listing shows it; a record written before the column
// existed says "" (not recorded).
func TestPut_recordsWhetherTheTranscriptIsWhole(t *testing.T) {
	s, dsn := open(t)
	ctx := context.Background()
	whole := record("whole", "shop", "a", base.Add(3*time.Hour), "Completed", nil, 1)
	lost := record("lost", "shop", "b", base.Add(2*time.Hour), "Completed", nil, 1)
	lost.Transcript, lost.TranscriptState = nil, archive.TranscriptIncomplete
	lost.TranscriptProblem = "the run's saved transcript is incomplete: transcript chunk agentrun-t-lost-1 (2 of 3) is missing"
	forged := record("forged", "shop", "c", base.Add(1*time.Hour), "Completed", nil, 1)
	forged.Transcript, forged.TranscriptState = nil, archive.TranscriptUnsealed
	forged.TranscriptProblem = "the run's saved state was not written by the operator: transcript chunk Secret shop/agentrun-t-forged-0: the seal does not open"
	put(t, s, whole, lost, forged)
	for _, want := range []*archive.Record{whole, lost, forged} {
		got, err := s.Get(ctx, want.UID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([2]string{want.TranscriptState, want.TranscriptProblem}, [2]string{got.TranscriptState, got.TranscriptProblem}); diff != "" {
			t.Errorf("%s: transcript state and problem (-want +got):\n%s", want.UID, diff)
		}
	}

	// A record of the first schema's columns only.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, `INSERT INTO agentrun_runs (uid, namespace, name, created_at, finished_at)
		VALUES ('older', 'shop', 'd', $1, $1)`, base); err != nil {
		t.Fatal(err)
	}
	listed, err := s.List(ctx, archive.Filter{Namespace: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range listed {
		got[l.UID] = l.TranscriptState
	}
	want := map[string]string{"whole": "Complete", "lost": "Incomplete", "forged": "Unsealed", "older": ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listed transcript states (-want +got):\n%s", diff)
	}
}
