package archived_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/runclient/archived"
	"github.com/google/go-cmp/cmp"
)

// The archive command's reading against PostgreSQL, and what it prints, is
// tested in cmd/agentrun; here are the values it prints.

var now = time.Date(2026, 5, 20, 12, 0, 0, 0, time.UTC)

func TestParseSince(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Time
		wantErr string
	}{
		{"24h", now.Add(-24 * time.Hour), ""},
		{"7d", now.AddDate(0, 0, -7), ""},
		{"0d", now, ""},
		{"2026-05-01T08:00:00Z", time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC), ""},
		{"-1h", time.Time{}, `--since "-1h": give a duration (24h, 7d) or an RFC 3339 time (2026-05-20T12:00:00Z)`},
		{"yesterday", time.Time{}, `--since "yesterday": give a duration (24h, 7d) or an RFC 3339 time (2026-05-20T12:00:00Z)`},
	} {
		got, err := archived.ParseSince(tc.in, now)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("ParseSince(%q) = %v, %v; want the error %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("ParseSince(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// records is an archive in memory: refund-1042 in shop ran twice.
type records []archive.Record

func (rs records) Get(_ context.Context, uid string) (*archive.Record, error) {
	for i := range rs {
		if rs[i].UID == uid {
			return &rs[i], nil
		}
	}
	return nil, archive.ErrNotFound
}

func (rs records) Find(_ context.Context, ns, name string) ([]archive.Summary, error) {
	var out []archive.Summary
	for _, r := range rs {
		if r.Namespace == ns && r.Name == name {
			out = append(out, archive.Summary{UID: r.UID, Namespace: r.Namespace, Name: r.Name, FinishedAt: r.FinishedAt})
		}
	}
	return out, nil
}

var archiveOf = records{
	{UID: "uid-2", Namespace: "shop", Name: "refund-1042", FinishedAt: now.Add(-2 * time.Hour)},
	{UID: "uid-1", Namespace: "shop", Name: "refund-1042", FinishedAt: now.Add(-48 * time.Hour)},
	{UID: "uid-3", Namespace: "default", Name: "nightly", FinishedAt: now},
}

func TestResolve_aUIDOrTheNewestRunOfAName(t *testing.T) {
	for _, tc := range []struct {
		namespace, arg string
		wantUID        string
		wantRuns       int
		wantNote       string
		wantErr        string
	}{
		{"", "uid-1", "uid-1", 0, "", ""},
		{"shop", "refund-1042", "uid-2", 2, "shop/refund-1042 ran 2 times; this is the newest (uid uid-2, finished 2026-05-20T10:00:00Z). " +
			"agentrun archive list -n shop -o wide shows the others' UIDs.", ""},
		{"", "nightly", "uid-3", 1, "", ""},
		{"", "refund-1042", "", 0, "", `no run named "refund-1042" in namespace "default", and none with that UID, in the archive`},
	} {
		t.Run(tc.namespace+"/"+tc.arg, func(t *testing.T) {
			found, err := archived.Resolve(context.Background(), archiveOf, tc.namespace, tc.arg)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Resolve = %+v, %v; want the error %q", found, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if found.Record.UID != tc.wantUID || found.Runs != tc.wantRuns {
				t.Errorf("found %s of %d runs, want %s of %d", found.Record.UID, found.Runs, tc.wantUID, tc.wantRuns)
			}
			if diff := cmp.Diff(tc.wantNote, found.Note()); diff != "" {
				t.Errorf("note (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTranscriptNote_saysWhatARecordLacks(t *testing.T) {
	r := func(state, problem string) *archive.Record {
		return &archive.Record{Namespace: "shop", Name: "r", TranscriptState: state, TranscriptProblem: problem}
	}
	for _, tc := range []struct {
		r    *archive.Record
		want string
	}{
		{r(archive.TranscriptComplete, ""), ""},
		{r("", ""), "shop/r was archived before records said whether their transcript was complete and sealed."},
		{r("Incomplete", "chunk 2\n  is missing"), "shop/r was archived without its transcript (Incomplete): chunk 2 is missing"},
	} {
		if got := archived.TranscriptNote(tc.r); got != tc.want {
			t.Errorf("TranscriptNote(%s) = %q, want %q", tc.r.TranscriptState, got, tc.want)
		}
	}
}

func TestConversation_namesWhatDoesNotDecode(t *testing.T) {
	r := &archive.Record{Namespace: "shop", Name: "r", Spec: []byte(`{"goal":"why"}`), Transcript: []byte(`{`)}
	_, _, err := archived.Conversation(r)
	if err == nil || !strings.HasPrefix(err.Error(), "the archived transcript of shop/r: ") {
		t.Errorf("Conversation = %v, want an error naming the transcript", err)
	}
	r.Transcript = []byte(`[{"role":"assistant","turn":1,"content":"because"}]`)
	run, msgs, err := archived.Conversation(r)
	if err != nil || run.Spec.Goal != "why" || run.Name != "r" || len(msgs) != 1 || msgs[0].Content != "because" {
		t.Errorf("Conversation = %+v, %+v, %v", run, msgs, err)
	}
}
