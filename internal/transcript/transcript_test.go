package transcript

import (
	"context"
	encjson "encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

var c client.Client

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(_ *envtest.Environment, cfg *rest.Config) (func() error, error) {
		var err error
		c, err = client.New(cfg, client.Options{Scheme: testenv.Scheme})
		return nil, err
	}))
}

func newRun(t *testing.T, name string) *v1alpha1.AgentRun {
	t.Helper()
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1alpha1.AgentRunSpec{
		Goal: "g", Model: v1alpha1.ModelSpec{Provider: "scripted", Script: []v1alpha1.ScriptStep{{Content: "x"}}}, Budget: v1alpha1.BudgetSpec{MaxTurns: 1}}}
	if err := c.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	return run
}

func TestChunksReadBackWholeAndALeftoverChunkIsReplaced(t *testing.T) {
	ctx := context.Background()
	run := newRun(t, "r")
	first := []loop.Message{{Role: loop.RoleAssistant, Turn: 1, Content: "a"}, {Role: loop.RoleTool, Turn: 1, CallID: "t1-c1", Content: "b"}}
	if err := Write(ctx, c, c, run, 0, Chunk{Messages: first}); err != nil {
		t.Fatal(err)
	}
	// An attempt whose status write failed left chunk 1 behind with other
	// messages; the next attempt replaces it.
	if err := Write(ctx, c, c, run, 1, Chunk{Messages: []loop.Message{{Role: loop.RoleAssistant, Turn: 2, Content: "stale"}}}); err != nil {
		t.Fatal(err)
	}
	second := []loop.Message{{Role: loop.RoleAssistant, Turn: 2, Content: "final"}}
	if err := Write(ctx, c, c, run, 1, Chunk{Messages: second, Observations: []Observation{{CallID: "t2-c1", Content: "r", Status: "ok"}}}); err != nil {
		t.Fatal(err)
	}
	// Writing the same chunk again is a no-op.
	if err := Write(ctx, c, c, run, 1, Chunk{Messages: second, Observations: []Observation{{CallID: "t2-c1", Content: "r", Status: "ok"}}}); err != nil {
		t.Fatal(err)
	}
	tail := &loop.State{Transcript: []loop.Message{{Role: loop.RoleUser, Turn: 3, Content: "buffered"}}}
	raw, _ := encjson.Marshal(tail)
	run.Status.Transcript = &v1alpha1.TranscriptStatus{Chunks: 2, Messages: 3}
	run.Status.Checkpoint = &runtime.RawExtension{Raw: raw}
	got, err := Read(ctx, c, run)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]loop.Message{}, first...), second...), tail.Transcript...)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("transcript (-want +got):\n%s", diff)
	}
	// A missing chunk is an error that names it, not a short transcript.
	run.Status.Transcript.Chunks = 3
	_, err = Read(ctx, c, run)
	if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), ChunkName(run.UID, 2)+" (3 of 3) is missing") {
		t.Fatalf("err = %v", err)
	}
}

func TestAChunkCountedByStatusIsNeverReplaced(t *testing.T) {
	ctx := context.Background()
	run := newRun(t, "counted")
	if err := Write(ctx, c, c, run, 0, Chunk{Messages: []loop.Message{{Role: loop.RoleAssistant, Content: "kept"}}}); err != nil {
		t.Fatal(err)
	}
	cur := &v1alpha1.AgentRun{}
	_ = c.Get(ctx, client.ObjectKeyFromObject(run), cur)
	cur.Status.Transcript = &v1alpha1.TranscriptStatus{Chunks: 1, Messages: 1}
	if err := c.Status().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	// A writer that read the run before chunk 0 was counted must not
	// replace it.
	err := Write(ctx, c, c, run, 0, Chunk{Messages: []loop.Message{{Role: loop.RoleAssistant, Content: "other"}}})
	if !errors.Is(err, ErrStale) {
		t.Fatalf("err = %v, want ErrStale", err)
	}
	got, err := Read(ctx, c, cur)
	if err != nil || len(got) != 1 || got[0].Content != "kept" {
		t.Fatalf("transcript = %+v, %v", got, err)
	}
}

// A save that did not write status carries the checkpoint in its last
// chunk: such chunks are read after those status counts, the newest
// checkpoint is theirs, they are never replaced, and a chunk past the last
// of them (an attempt that did not finish) is neither read nor kept.
func TestChunksSavedWithACheckpointAreReadAfterTheCountedOnesAndNeverReplaced(t *testing.T) {
	ctx := context.Background()
	run := newRun(t, "quiet")
	msg := func(turn int, content string) []loop.Message {
		return []loop.Message{{Role: loop.RoleAssistant, Turn: turn, Content: content}}
	}
	checkpoint := func(turn int) []byte {
		raw, _ := encjson.Marshal(&loop.State{Turn: turn})
		return raw
	}
	for i, ch := range []Chunk{
		{Messages: msg(1, "counted")},
		{Messages: msg(2, "saved"), Checkpoint: checkpoint(2)},
		{Messages: msg(3, "part of a save")},
		{Messages: msg(3, "saved too"), Checkpoint: checkpoint(3)},
		{Messages: msg(4, "unfinished")},
	} {
		if err := Write(ctx, c, c, run, i, ch); err != nil {
			t.Fatal(err)
		}
	}
	cur := &v1alpha1.AgentRun{}
	_ = c.Get(ctx, client.ObjectKeyFromObject(run), cur)
	cur.Status.Transcript = &v1alpha1.TranscriptStatus{Chunks: 1, Messages: 1}
	cur.Status.Checkpoint = &runtime.RawExtension{Raw: checkpoint(1)}
	if err := c.Status().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}

	chunks, err := ReadChunks(ctx, c, cur, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 4 {
		t.Fatalf("read %d chunks, want the counted one and the three saved after it", len(chunks))
	}
	if s, err := DecodeCheckpoint(Newest(cur, chunks, 1)); err != nil || s.Turn != 3 {
		t.Fatalf("newest checkpoint: turn %d, %v; want the last saved chunk's (turn 3)", s.Turn, err)
	}
	if s, _ := DecodeCheckpoint(Newest(cur, chunks[:1], 1)); s.Turn != 1 {
		t.Fatalf("with nothing saved after the counted chunks the newest checkpoint is status's, got turn %d", s.Turn)
	}
	got, err := Read(ctx, c, cur)
	if err != nil {
		t.Fatal(err)
	}
	var contents []string
	for _, m := range got {
		contents = append(contents, m.Content)
	}
	if diff := cmp.Diff([]string{"counted", "saved", "part of a save", "saved too"}, contents); diff != "" {
		t.Fatalf("transcript (-want +got):\n%s", diff)
	}

	// A writer that read the run before those saves must not replace them.
	for _, n := range []int{1, 2, 3} {
		if err := Write(ctx, c, c, cur, n, Chunk{Messages: msg(9, "other")}); !errors.Is(err, ErrStale) {
			t.Fatalf("rewriting saved chunk %d: err = %v, want ErrStale", n, err)
		}
	}
	// The unfinished attempt's chunk is replaced by the next one.
	if err := Write(ctx, c, c, cur, 4, Chunk{Messages: msg(4, "again"), Checkpoint: checkpoint(4)}); err != nil {
		t.Fatalf("replacing the unfinished chunk: %v", err)
	}
	if chunks, _ := ReadChunks(ctx, c, cur, 1); len(chunks) != 5 || chunks[4].Messages[0].Content != "again" {
		t.Fatalf("after the replacement: %d chunks", len(chunks))
	}
}

// A run named payments must never touch a tenant's Secret, whatever its
// name; a Secret in the way of a chunk is an error, not replaced.
func TestSecretsTheRunDoesNotOwnAreNeverReplaced(t *testing.T) {
	ctx := context.Background()
	tenant := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "payments-transcript-0000", Namespace: "default"},
		Data: map[string][]byte{"key": []byte("tenant")}}
	if err := c.Create(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	run := newRun(t, "payments")
	if err := Write(ctx, c, c, run, 0, Chunk{Messages: []loop.Message{{Role: loop.RoleAssistant, Content: "a"}}}); err != nil {
		t.Fatal(err)
	}
	in := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ChunkName(run.UID, 1), Namespace: "default"},
		Data: map[string][]byte{"key": []byte("in the way")}}
	if err := c.Create(ctx, in); err != nil {
		t.Fatal(err)
	}
	err := Write(ctx, c, c, run, 1, Chunk{Messages: []loop.Message{{Role: loop.RoleAssistant, Content: "b"}}})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), ChunkName(run.UID, 1)) {
		t.Fatalf("err = %v, want ErrRefused naming the Secret", err)
	}
	for _, s := range []*corev1.Secret{tenant, in} {
		got := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil || string(got.Data["key"]) != string(s.Data["key"]) {
			t.Fatalf("%s was changed: %v %v", s.Name, got.Data, err)
		}
	}
}

func TestChunkNamesAreValidForAnyRunName(t *testing.T) {
	ctx := context.Background()
	run := newRun(t, strings.Repeat("a-very-long-run-name-", 12)+"x")
	if err := Write(ctx, c, c, run, 0, Chunk{Messages: []loop.Message{{Role: loop.RoleAssistant, Content: "a"}}}); err != nil {
		t.Fatal(err)
	}
	run.Status.Transcript = &v1alpha1.TranscriptStatus{Chunks: 1, Messages: 1}
	if got, err := Read(ctx, c, run); err != nil || len(got) != 1 {
		t.Fatalf("transcript = %+v, %v", got, err)
	}
}

func TestSplitKeepsEveryChunkWithinTheBound(t *testing.T) {
	big := strings.Repeat("<", 300<<10) // escapes to six bytes each
	msgs := []loop.Message{{Role: loop.RoleAssistant, Content: "a"}, {Role: loop.RoleTool, Content: big}, {Role: loop.RoleTool, Content: "b"}}
	obs := []Observation{{CallID: "t1-c1", Content: big}}
	chunks := Split(msgs, obs, MaxChunkBytes)
	n, o := 0, 0
	for _, ch := range chunks {
		raw, _ := encjson.Marshal(ch)
		if len(raw) > MaxChunkBytes {
			t.Fatalf("a chunk holds %d bytes", len(raw))
		}
		n += len(ch.Messages)
		o += len(ch.Observations)
	}
	if n != 3 || o != 1 || len(chunks) < 2 {
		t.Fatalf("%d chunks with %d messages, %d observations", len(chunks), n, o)
	}
	if !strings.Contains(chunks[1].Messages[0].Content, "to fit the transcript]") && !strings.Contains(chunks[0].Messages[1].Content, "to fit the transcript]") {
		t.Fatalf("the cut is not marked")
	}
}
