// Package memtool is the builtin tools over a run's memory (spec.memory):
// memory.remember writes an entry, memory.recall finds the entries that
// best match a query. The entries are kept by a Store (the archive's
// PostgreSQL, internal/archive), one memory per namespace and name, so a
// run reads and writes only its own namespace's memory.
//
// The bounds (an entry's size, the memory's number of entries) are checked
// at each write: a call over one fails with an observation that names the
// bound and what to do, and the run goes on. Nothing here logs or counts
// what an entry says: it is in the run's transcript, as every tool's
// arguments and results are, and nowhere else.
package memtool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/loop"
)

// Op is one memory tool, as spec.tools[].builtin spells it.
type Op string

// The memory tools.
const (
	// Remember writes an entry: arguments {key?, text}.
	Remember Op = "memory.remember"
	// Recall finds entries: arguments {query}.
	Recall Op = "memory.recall"
)

// The defaults of spec.memory's bounds, which the API defines.
const (
	DefaultMaxEntries    = v1alpha1.DefaultMemoryMaxEntries
	DefaultMaxEntryBytes = v1alpha1.DefaultMemoryMaxEntryBytes
	DefaultTTL           = v1alpha1.DefaultMemoryTTL
)

// Bounds of the calls' arguments and results.
const (
	// RecallLimit is the most entries one recall returns.
	RecallLimit = 10
	// MaxKeyBytes bounds an entry's key.
	MaxKeyBytes = 256
	// MaxQueryBytes bounds a recall's query.
	MaxQueryBytes = 1024
)

// Parse checks a memory tool's name; ok is false for any other builtin.
func Parse(s string) (Op, bool) {
	switch op := Op(s); op {
	case Remember, Recall:
		return op, true
	}
	return "", false
}

// Mutates says whether the tool changes something outside the run:
// memory.remember does, whatever its spec says.
func (op Op) Mutates() bool { return op == Remember }

// Description is a default description of the tool for the model.
func (op Op) Description() string {
	switch op {
	case Remember:
		return "Remember a note for later runs of this agent (they can recall it). Give a key to replace the note kept under that key."
	case Recall:
		return "Recall notes that earlier runs of this agent remembered, by a search query (words, \"a phrase\", -excluded)."
	}
	return ""
}

// Parameters is the JSON Schema of the tool's arguments.
func (op Op) Parameters() json.RawMessage {
	switch op {
	case Remember:
		return json.RawMessage(`{"type":"object","properties":{` +
			`"key":{"type":"string","maxLength":256,"description":"names the note; remembering the same key again replaces it"},` +
			`"text":{"type":"string","minLength":1,"description":"what to remember"}},` +
			`"required":["text"],"additionalProperties":false}`)
	case Recall:
		return json.RawMessage(`{"type":"object","properties":{` +
			`"query":{"type":"string","minLength":1,"maxLength":1024,"description":"what to look for"}},` +
			`"required":["query"],"additionalProperties":false}`)
	}
	return nil
}

// Store keeps the memories: *archive.Postgres.
type Store interface {
	Remember(ctx context.Context, e archive.Entry, maxEntries int) (replaced bool, err error)
	Recall(ctx context.Context, namespace, memory, query string, now time.Time, limit int) ([]archive.Entry, error)
}

// Config makes the memory tools of one run.
type Config struct {
	Store Store
	// Namespace and Memory name the memory (the run's namespace and
	// spec.memory.name); Run is the run's name, kept with what it wrote.
	Namespace, Memory, Run string
	// MaxEntries, MaxEntryBytes and TTL are spec.memory's bounds, as the
	// platform's policies left them.
	MaxEntries, MaxEntryBytes int
	TTL                       time.Duration
	// Tools maps each declared tool's name to its memory tool.
	Tools map[string]Op
	// Clock is time.Now unless set.
	Clock func() time.Time
}

// Toolbox runs the memory tools of one run.
type Toolbox struct{ cfg Config }

// New checks cfg and returns its toolbox.
func New(cfg Config) (*Toolbox, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("memory tools need a store")
	case cfg.Namespace == "" || cfg.Memory == "":
		return nil, errors.New("memory tools need a namespace and a memory name")
	case cfg.MaxEntries < 1 || cfg.MaxEntryBytes < 1 || cfg.TTL <= 0:
		return nil, fmt.Errorf("memory %s: maxEntries, maxEntryBytes and ttl must be positive", cfg.Memory)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Toolbox{cfg: cfg}, nil
}

// Execute runs one call.
func (t *Toolbox) Execute(ctx context.Context, inv loop.Invocation) loop.Result {
	switch t.cfg.Tools[inv.Tool] {
	case Remember:
		return t.remember(ctx, inv)
	case Recall:
		return t.recall(ctx, inv)
	}
	return invalid(fmt.Sprintf("%q is not a memory tool", inv.Tool))
}

func (t *Toolbox) remember(ctx context.Context, inv loop.Invocation) loop.Result {
	var args struct {
		Key  string `json:"key"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(inv.Arguments, &args); err != nil {
		return invalid("the arguments are not an object {key?, text}: " + err.Error())
	}
	switch {
	case args.Text == "":
		return invalid("text is empty: say what to remember")
	case len(args.Text) > t.cfg.MaxEntryBytes:
		return invalid(fmt.Sprintf("not remembered: the text is %d bytes, and memory.maxEntryBytes allows at most %d; remember a shorter summary",
			len(args.Text), t.cfg.MaxEntryBytes))
	case len(args.Key) > MaxKeyBytes:
		return invalid(fmt.Sprintf("not remembered: the key is %d bytes, at most %d are allowed", len(args.Key), MaxKeyBytes))
	case strings.ContainsRune(args.Text+args.Key, 0):
		// PostgreSQL's text cannot hold it; refused here, it is the
		// model's to fix, not an unavailable store.
		return invalid("not remembered: the text or key holds a NUL character (\\u0000)")
	}
	key := args.Key
	if key == "" {
		// Made from the call's idempotency key, so that a retry of the
		// call writes the same entry again instead of a second one.
		sum := sha256.Sum256([]byte(inv.IdempotencyKey))
		key = "note-" + hex.EncodeToString(sum[:6])
	}
	now := t.cfg.Clock()
	replaced, err := t.cfg.Store.Remember(ctx, archive.Entry{Namespace: t.cfg.Namespace, Memory: t.cfg.Memory, Key: key,
		Text: args.Text, Run: t.cfg.Run, WrittenAt: now, ExpiresAt: now.Add(t.cfg.TTL)}, t.cfg.MaxEntries)
	if errors.Is(err, archive.ErrMemoryFull) {
		return loop.Failed(loop.FailTool, 0, fmt.Sprintf(
			"not remembered: memory %s holds %d entries, the most memory.maxEntries allows; replace an entry by giving its key instead",
			t.cfg.Memory, t.cfg.MaxEntries))
	}
	if err != nil {
		return loop.Failed(loop.FailUnavailable, 0, err.Error())
	}
	out, _ := json.Marshal(struct {
		Remembered string `json:"remembered"`
		Replaced   bool   `json:"replaced,omitempty"`
		Expires    string `json:"expires"`
	}{key, replaced, now.Add(t.cfg.TTL).UTC().Format(time.RFC3339)})
	return loop.Result{Output: out, ContentType: "application/json"}
}

func (t *Toolbox) recall(ctx context.Context, inv loop.Invocation) loop.Result {
	var args struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(inv.Arguments, &args); err != nil {
		return invalid("the arguments are not an object {query}: " + err.Error())
	}
	switch {
	case args.Query == "":
		return invalid("query is empty: say what to look for")
	case len(args.Query) > MaxQueryBytes:
		return invalid(fmt.Sprintf("the query is %d bytes, at most %d are allowed", len(args.Query), MaxQueryBytes))
	case strings.ContainsRune(args.Query, 0):
		return invalid("the query holds a NUL character (\\u0000)")
	}
	entries, err := t.cfg.Store.Recall(ctx, t.cfg.Namespace, t.cfg.Memory, args.Query, t.cfg.Clock(), RecallLimit)
	if err != nil {
		return loop.Failed(loop.FailUnavailable, 0, err.Error())
	}
	type entry struct {
		Key     string `json:"key"`
		Text    string `json:"text"`
		Written string `json:"written"`
	}
	res := struct {
		Entries []entry `json:"entries"`
	}{Entries: []entry{}}
	for _, e := range entries {
		res.Entries = append(res.Entries, entry{e.Key, e.Text, e.WrittenAt.UTC().Format(time.RFC3339)})
	}
	out, _ := json.Marshal(res)
	return loop.Result{Output: out, ContentType: "application/json"}
}

func invalid(detail string) loop.Result {
	return loop.Failed(loop.FailInvalid, 0, detail)
}
