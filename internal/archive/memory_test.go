package archive_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/archive"
	"github.com/google/go-cmp/cmp"
)

// entry is an entry of the "support" memory of namespace ns, written at
// base and kept a day.
func entry(ns, key, text string) archive.Entry {
	return archive.Entry{Namespace: ns, Memory: "support", Key: key, Text: text, Run: "triage-1",
		WrittenAt: base, ExpiresAt: base.Add(24 * time.Hour)}
}

func remember(t *testing.T, s *archive.Postgres, e archive.Entry, maxEntries int) bool {
	t.Helper()
	replaced, err := s.Remember(context.Background(), e, maxEntries)
	if err != nil {
		t.Fatalf("remembering %s: %v", e.Key, err)
	}
	return replaced
}

// keys recalls query in ns's support memory at now and returns the keys
// found, best first.
func keys(t *testing.T, s *archive.Postgres, ns, query string, now time.Time) []string {
	t.Helper()
	es, err := s.Recall(context.Background(), ns, "support", query, now, 10)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range es {
		out = append(out, e.Key)
	}
	return out
}

func TestMemory_recallFindsByWordsRankedAndOnlyInItsNamespaceAndMemory(t *testing.T) {
	s, _ := open(t)
	remember(t, s, entry("team-a", "refunds", "Refunds above 50 EUR need the billing lead's approval."), 10)
	remember(t, s, entry("team-a", "vpn", "The VPN certificate is renewed on the first Monday; refunds are not related."), 10)
	remember(t, s, entry("team-a", "printer", "The printer on floor 2 jams with thick paper."), 10)
	remember(t, s, entry("team-b", "refunds", "Team B refunds anything."), 10)
	other := entry("team-a", "refunds-elsewhere", "Refunds in another memory.")
	other.Memory = "sales"
	remember(t, s, other, 10)

	tests := []struct {
		name, ns, query string
		want            []string
	}{
		{"stemmed word, best match first", "team-a", "refund approval", []string{"refunds"}},
		{"one word in two entries, the denser first", "team-a", "refunds", []string{"refunds", "vpn"}},
		{"excluded word", "team-a", "refunds -vpn", []string{"refunds"}},
		{"quoted phrase", "team-a", `"thick paper"`, []string{"printer"}},
		{"no match", "team-a", "kubernetes", []string{}},
		{"another namespace sees only its own", "team-b", "refunds", []string{"refunds"}},
		{"a namespace without the memory sees nothing", "team-c", "refunds", []string{}},
		{"stop words only", "team-a", "the and of", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, keys(t, s, tt.ns, tt.query, base)); diff != "" {
				t.Errorf("recall %q in %s (-want +got):\n%s", tt.query, tt.ns, diff)
			}
		})
	}
	es, err := s.Recall(context.Background(), "team-b", "support", "refunds", base, 10)
	if err != nil || len(es) != 1 || es[0].Text != "Team B refunds anything." {
		t.Errorf("team-b recalled %+v (%v), want its own entry only", es, err)
	}
}

func TestMemory_rememberingAKeyAgainReplacesItsEntry(t *testing.T) {
	s, _ := open(t)
	if remember(t, s, entry("ns", "vpn", "The VPN gateway is vpn1."), 10) {
		t.Error("a first write says it replaced an entry")
	}
	if !remember(t, s, entry("ns", "vpn", "The VPN gateway moved to vpn2."), 10) {
		t.Error("a second write of the key does not say it replaced the entry")
	}
	es, err := s.Recall(context.Background(), "ns", "support", "gateway", base, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Text != "The VPN gateway moved to vpn2." {
		t.Errorf("recalled %+v, want only the replacement", es)
	}
}

func TestMemory_aFullMemoryRefusesANewKeyButNotAReplacement(t *testing.T) {
	s, _ := open(t)
	remember(t, s, entry("ns", "a", "first note"), 2)
	remember(t, s, entry("ns", "b", "second note"), 2)
	_, err := s.Remember(context.Background(), entry("ns", "c", "third note"), 2)
	if !errors.Is(err, archive.ErrMemoryFull) {
		t.Fatalf("a third entry over maxEntries 2: err = %v, want ErrMemoryFull", err)
	}
	if !strings.Contains(err.Error(), "2 entries") {
		t.Errorf("the error %q does not say how many entries the memory holds", err)
	}
	if !remember(t, s, entry("ns", "b", "second note, corrected"), 2) {
		t.Error("replacing a key of a full memory was not a replacement")
	}
	// Another namespace's memory of the same name counts apart.
	remember(t, s, entry("other", "c", "third note"), 2)
	if got := keys(t, s, "ns", "note", base); len(got) != 2 {
		t.Errorf("ns holds %v, want 2 entries", got)
	}
}

func TestMemory_expiredEntriesAreNeitherRecalledNorCountedAndAreCleanedUp(t *testing.T) {
	s, _ := open(t)
	old := entry("ns", "old", "an old note")
	old.ExpiresAt = base.Add(time.Hour)
	remember(t, s, old, 1)
	if got := keys(t, s, "ns", "note", base.Add(59*time.Minute)); !cmp.Equal(got, []string{"old"}) {
		t.Fatalf("before it expires: recalled %v, want [old]", got)
	}
	later := base.Add(2 * time.Hour)
	if got := keys(t, s, "ns", "note", later); len(got) != 0 {
		t.Errorf("after it expired: recalled %v, want nothing", got)
	}
	fresh := entry("ns", "fresh", "a fresh note")
	fresh.WrittenAt, fresh.ExpiresAt = later, later.Add(time.Hour)
	if remember(t, s, fresh, 1) {
		t.Error("a new key said it replaced an entry")
	}
	n, err := s.ExpireMemories(context.Background(), later)
	if err != nil || n != 1 {
		t.Errorf("ExpireMemories = %d, %v; want 1 (the old entry)", n, err)
	}
	if got := keys(t, s, "ns", "note", later); !cmp.Equal(got, []string{"fresh"}) {
		t.Errorf("after the cleanup: recalled %v, want [fresh]", got)
	}
}

func TestMemory_recallIsBounded(t *testing.T) {
	s, _ := open(t)
	for _, k := range strings.Fields("a b c d e f") {
		remember(t, s, entry("ns", k, "deploy note "+k), 100)
	}
	es, err := s.Recall(context.Background(), "ns", "support", "deploy", base, 4)
	if err != nil || len(es) != 4 {
		t.Errorf("recall with limit 4 returned %d entries (%v)", len(es), err)
	}
}
