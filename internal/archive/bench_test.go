package archive_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/jackc/pgx/v5"
)

// words make the transcript's text vary as a model's and a tool's do: a
// transcript that repeats one turn forty times would compress far better
// than a real one and flatter the size per run.
var words = strings.Fields(`order refund charge customer invoice payment card duplicate
	amount currency settled pending ticket escalate approve shipment address warehouse
	carrier delayed policy limit account verified balance credit debit merchant dispute
	the a of to and was is for with on by this that it which after before twice once`)

func sentence(r *rand.Rand, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = words[r.IntN(len(words))]
	}
	return strings.Join(w, " ")
}

// realisticTranscript is a 40-turn run: each turn the model says a little
// and calls a tool, and the tool answers with a JSON document of about
// 1.5 KB (an order with its charges and notes), about 75 KB in all.
func realisticTranscript(seed uint64) json.RawMessage {
	r := rand.New(rand.NewPCG(seed, 42))
	msgs := []loop.Message{{Role: loop.RoleUser, Content: "Find out whether order 1042 was charged twice and refund the duplicate charge. " + sentence(r, 30)}}
	for turn := 1; turn <= 40; turn++ {
		id := fmt.Sprintf("t%d-c1", turn)
		args, _ := json.Marshal(map[string]any{"order_id": fmt.Sprintf("%d", 1000+r.IntN(9000)), "include": []string{"charges", "notes"}})
		msgs = append(msgs, loop.Message{Role: loop.RoleAssistant, Turn: turn, Content: sentence(r, 25),
			ToolCalls: []loop.ToolCall{{ID: id, Name: "get_order", Arguments: args}}})
		var charges []map[string]any
		for range 6 {
			charges = append(charges, map[string]any{
				"id": fmt.Sprintf("ch_%016x", r.Uint64()), "amount_minor": r.IntN(100000), "currency": "EUR",
				"created": time.Unix(1_770_000_000+r.Int64N(10_000_000), 0).UTC().Format(time.RFC3339),
				"status":  []string{"succeeded", "refunded", "pending"}[r.IntN(3)], "description": sentence(r, 8),
			})
		}
		result, _ := json.Marshal(map[string]any{"order_id": fmt.Sprintf("%d", 1000+r.IntN(9000)),
			"customer": fmt.Sprintf("cus_%012x", r.Uint64()>>16), "charges": charges, "notes": sentence(r, 40)})
		msgs = append(msgs, loop.Message{Role: loop.RoleTool, Turn: turn, CallID: id, Tool: "get_order", Content: string(result)})
	}
	msgs = append(msgs, loop.Message{Role: loop.RoleAssistant, Turn: 41, Content: sentence(r, 60)})
	b, _ := json.Marshal(msgs)
	return b
}

// BenchmarkPut writes one finished 40-turn run per iteration, as the
// operator does when a run ends, and reports records/s and the bytes a
// record takes in the database (table, TOAST and indexes, over the
// records written).
func BenchmarkPut(b *testing.B) {
	s, dsn := open(b)
	ctx := context.Background()
	recs := make([]*archive.Record, 16)
	for i := range recs {
		recs[i] = record("", "shop", "refund", base, "Completed", map[string]string{"app": "refunds", "team": "payments"}, 0)
		recs[i].Transcript = realisticTranscript(uint64(i))
		recs[i].Status = json.RawMessage(`{"phase":"Succeeded","outcome":"Completed","turn":41,` +
			`"usage":{"costUSD":"0.1840","inputTokens":184000,"outputTokens":9100,"modelCalls":41,"toolCalls":40},` +
			`"approvals":[{"callID":"t40-c1","decision":"Approved","by":"bob@example.com","at":"2026-05-20T11:59:00Z"}],` +
			`"conditions":[{"type":"Succeeded","status":"True","reason":"Completed","message":"the model answered",` +
			`"lastTransitionTime":"2026-05-20T12:00:00Z"}]}`)
	}
	raw := len(recs[0].Transcript)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		r := *recs[i%len(recs)]
		r.UID = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		r.Name = fmt.Sprintf("refund-%d", i)
		r.FinishedAt = base.Add(time.Duration(i) * time.Second)
		if err := s.Put(ctx, &r); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var total, transcripts int64
	if err := conn.QueryRow(ctx, `SELECT pg_total_relation_size('agentrun_runs'), coalesce(sum(octet_length(transcript)), 0)
		FROM agentrun_runs`).Scan(&total, &transcripts); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(total)/float64(b.N), "bytes/run")
	b.ReportMetric(float64(transcripts)/float64(b.N), "gzip-transcript-bytes/run")
	b.ReportMetric(float64(raw), "raw-transcript-bytes/run")
}
