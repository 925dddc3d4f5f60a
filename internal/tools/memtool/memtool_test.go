package memtool_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/archive/pgtest"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/tools/memtool"
	"github.com/google/go-cmp/cmp"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func openStore(t *testing.T) *archive.Postgres {
	t.Helper()
	return pgtest.Open(t, pgtest.DSN(t))
}

var start = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

// toolbox is the memory tools "remember" and "recall" of a run in ns, over
// the support memory, with a clock the test moves.
func toolbox(t *testing.T, s memtool.Store, ns string, now *time.Time) *memtool.Toolbox {
	t.Helper()
	tb, err := memtool.New(memtool.Config{Store: s, Namespace: ns, Memory: "support", Run: "r",
		MaxEntries: 2, MaxEntryBytes: 64, TTL: time.Hour,
		Tools: map[string]memtool.Op{"remember": memtool.Remember, "recall": memtool.Recall},
		Clock: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// call runs one call and returns the observation the model reads.
func call(t *testing.T, tb *memtool.Toolbox, callID, tool, args string) (string, loop.ObsStatus) {
	t.Helper()
	r := tb.Execute(context.Background(), loop.Invocation{CallID: callID, Tool: tool, Arguments: json.RawMessage(args),
		IdempotencyKey: "run-1/" + callID})
	return loop.RenderResult(tool, loop.DefaultMaxResultBytes, r)
}

func recalled(t *testing.T, tb *memtool.Toolbox, query string) []string {
	t.Helper()
	obs, status := call(t, tb, "q", "recall", `{"query":`+quote(query)+`}`)
	if status != loop.ObsOK {
		t.Fatalf("recall failed: %s", obs)
	}
	var res struct {
		Entries []struct{ Key, Text string }
	}
	if err := json.Unmarshal([]byte(obs), &res); err != nil {
		t.Fatalf("recall's result %q: %v", obs, err)
	}
	out := []string{}
	for _, e := range res.Entries {
		out = append(out, e.Key+"="+e.Text)
	}
	return out
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestTools_rememberThenRecallWithinTheNamespaceOnly(t *testing.T) {
	s, now := openStore(t), start
	a, b := toolbox(t, s, "team-a", &now), toolbox(t, s, "team-b", &now)
	if obs, st := call(t, a, "c1", "remember", `{"key":"vpn","text":"The VPN gateway is vpn2."}`); st != loop.ObsOK || !strings.Contains(obs, `"remembered":"vpn"`) {
		t.Fatalf("remember: %s %s", st, obs)
	}
	if diff := cmp.Diff([]string{"vpn=The VPN gateway is vpn2."}, recalled(t, a, "gateway")); diff != "" {
		t.Errorf("team-a recalls (-want +got):\n%s", diff)
	}
	if got := recalled(t, b, "gateway"); len(got) != 0 {
		t.Errorf("team-b recalls %v from team-a's memory", got)
	}
}

func TestTools_boundsAreReadableObservationsNotFailuresOfTheRun(t *testing.T) {
	s, now := openStore(t), start
	tb := toolbox(t, s, "ns", &now)
	call(t, tb, "c1", "remember", `{"key":"a","text":"first"}`)
	call(t, tb, "c2", "remember", `{"key":"b","text":"second"}`)
	tests := []struct {
		name, args string
		kind       loop.FailureKind
		says       []string
	}{
		{"an entry over maxEntryBytes", `{"text":"` + strings.Repeat("x", 65) + `"}`, loop.FailInvalid,
			[]string{"65 bytes", "memory.maxEntryBytes allows at most 64"}},
		{"a new key in a full memory", `{"key":"c","text":"third"}`, loop.FailTool,
			[]string{"memory support holds 2 entries", "memory.maxEntries", "replace an entry by giving its key"}},
		{"an empty text", `{"key":"d","text":""}`, loop.FailInvalid, []string{"text is empty"}},
		{"a NUL, which PostgreSQL's text cannot hold", `{"key":"b","text":"a\u0000b"}`, loop.FailInvalid, []string{"NUL character"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tb.Execute(context.Background(), loop.Invocation{CallID: "x", Tool: "remember", Arguments: json.RawMessage(tt.args), IdempotencyKey: "k"})
			if r.Failure == nil || r.Failure.Kind != tt.kind {
				t.Fatalf("result %+v, want a %s failure", r, tt.kind)
			}
			if r.Failure.Transient() {
				t.Errorf("a bound is retried: %+v", r.Failure)
			}
			obs, _ := loop.RenderResult("remember", loop.DefaultMaxResultBytes, r)
			for _, w := range tt.says {
				if !strings.Contains(obs, w) {
					t.Errorf("the observation %q does not say %q", obs, w)
				}
			}
		})
	}
	// Replacing a key of the full memory is allowed, and says so.
	if obs, st := call(t, tb, "c3", "remember", `{"key":"b","text":"second, corrected"}`); st != loop.ObsOK || !strings.Contains(obs, `"replaced":true`) {
		t.Errorf("replacing b: %s %s", st, obs)
	}
	if diff := cmp.Diff([]string{"b=second, corrected"}, recalled(t, tb, "second")); diff != "" {
		t.Errorf("after the replacement (-want +got):\n%s", diff)
	}
}

func TestTools_aKeylessRememberRetriedWritesOneEntry(t *testing.T) {
	s, now := openStore(t), start
	tb := toolbox(t, s, "ns", &now)
	key := func(callID, text string) string {
		obs, _ := call(t, tb, callID, "remember", `{"text":`+quote(text)+`}`)
		var res struct{ Remembered string }
		if err := json.Unmarshal([]byte(obs), &res); err != nil || !strings.HasPrefix(res.Remembered, "note-") {
			t.Fatalf("remember without a key: %s (%v)", obs, err)
		}
		return res.Remembered
	}
	first := key("c1", "The deploy window is Tuesday.")
	if again := key("c1", "The deploy window is Tuesday."); again != first {
		t.Errorf("a retry of the same call wrote key %s, then %s; want the same made-up key", first, again)
	}
	if other := key("c2", "The deploy freeze starts in December."); other == first {
		t.Errorf("two calls share the key %s", other)
	}
	if got := recalled(t, tb, "deploy"); len(got) != 2 {
		t.Errorf("recalled %v, want the two entries", got)
	}
}

func TestTools_anEntryExpiresAfterItsTTL(t *testing.T) {
	s, now := openStore(t), start
	tb := toolbox(t, s, "ns", &now)
	call(t, tb, "c1", "remember", `{"key":"a","text":"a short-lived note"}`)
	now = start.Add(59 * time.Minute)
	if got := recalled(t, tb, "note"); len(got) != 1 {
		t.Fatalf("before the TTL: recalled %v", got)
	}
	now = start.Add(61 * time.Minute)
	if got := recalled(t, tb, "note"); len(got) != 0 {
		t.Errorf("after the TTL: recalled %v", got)
	}
	// Neither counted: two new keys fit in a memory of two.
	for _, k := range []string{"b", "c"} {
		if obs, st := call(t, tb, "n"+k, "remember", `{"key":"`+k+`","text":"new"}`); st != loop.ObsOK {
			t.Errorf("remember %s after the expiry: %s", k, obs)
		}
	}
}
