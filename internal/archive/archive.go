// Package archive keeps the record of finished runs after the runs are
// deleted: who ran what, with which spec, how it ended, what it spent,
// who approved which call, and the whole transcript. The operator writes
// a run's record when the run ends, before it lets the run be deleted
// (a finalizer), keyed by the run's UID so that writing it twice keeps
// one record; the agentrun CLI reads it back.
package archive

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// DSNEnv is where the commands that read the archive (agentrun archive,
// kubectl agentrun console) find its address when no flag gives it: a
// password on the command line shows in ps and shell history.
const DSNEnv = "AGENTRUN_ARCHIVE_DSN"

// Record is one finished run, as archived.
type Record struct {
	// UID is the run's UID: the record's key.
	UID       string
	Namespace string
	Name      string
	// Template is the AgentRunTemplate the run was made from, if any.
	Template    string
	Labels      map[string]string
	Annotations map[string]string
	CreatedAt   time.Time
	// FinishedAt is status.completionTime.
	FinishedAt time.Time
	Outcome    string
	Reason     string
	// Spec is the spec as run (for a run made from a template, the
	// resolved spec), as JSON.
	Spec json.RawMessage
	// Status is the run's status when it ended, as JSON (it holds the
	// usage, the approvals with who answered, the verification trials).
	Status json.RawMessage
	// Transcript is the run's messages, as JSON (a list of loop.Message).
	Transcript json.RawMessage
	// TranscriptState says whether Transcript is the whole transcript the
	// operator sealed (TranscriptComplete) or why the record holds none;
	// "" in a record written before the archive recorded it.
	TranscriptState string
	// TranscriptProblem is what was missing or unsealed (it names the
	// chunk's Secret), when TranscriptState is not TranscriptComplete.
	TranscriptProblem string
}

// The transcript states of a record.
const (
	// TranscriptComplete: every chunk was there and sealed by the operator.
	TranscriptComplete = "Complete"
	// TranscriptIncomplete: a chunk the run's status counts was missing or
	// unreadable; the record holds no transcript.
	TranscriptIncomplete = "Incomplete"
	// TranscriptUnsealed: a chunk was not sealed by the operator (someone
	// else wrote it); the record holds no transcript.
	TranscriptUnsealed = "Unsealed"
)

// Summary is a record without its spec, status and transcript: what a
// listing shows.
type Summary struct {
	UID, Namespace, Name, Template string
	Labels                         map[string]string
	CreatedAt, FinishedAt          time.Time
	Outcome, Reason                string
	// Turns, CostUSD and the tokens are read from the status when the
	// record is written; the database keeps them as numbers. CostUSD is
	// the decimal as the status gave it, "" when the status held none.
	Turns                     int32
	CostUSD                   string
	InputTokens, OutputTokens int64
	// Phase is status.phase: kubectl get ar shows it, so the archive's
	// listing does too.
	Phase string
	// TranscriptState is the record's (Record.TranscriptState).
	TranscriptState string
}

// Filter selects records in List. Zero fields select everything.
type Filter struct {
	Namespace string
	// Selector is a label selector in kubectl's syntax (app=x,tier!=y).
	Selector string
	Outcome  string
	// Since keeps the records of runs that finished at or after it.
	Since time.Time
	// Limit bounds the number of records (newest first); 0 means 500.
	Limit int
}

// Store is where records are kept. Put is idempotent by UID: writing the
// same run again replaces nothing and is not an error.
type Store interface {
	Put(ctx context.Context, r *Record) error
	Get(ctx context.Context, uid string) (*Record, error)
	// Find returns the records of runs of this name in the namespace,
	// newest first (a name may have run several times).
	Find(ctx context.Context, namespace, name string) ([]Summary, error)
	List(ctx context.Context, f Filter) ([]Summary, error)
	// Expire deletes the records of runs that finished before the time,
	// and says how many it deleted.
	Expire(ctx context.Context, before time.Time) (int, error)
	Close()
}

// ErrNotFound: no record has this UID (or name).
var ErrNotFound = errors.New("no such run in the archive")

// DefaultRetry is how soon the operator tries a failed archive write
// again (a run's record, an evaluation's).
const DefaultRetry = 30 * time.Second
