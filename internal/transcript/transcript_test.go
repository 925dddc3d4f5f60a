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
	"github.com/agentrun/agentrun/internal/seal"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

var (
	c        client.Client
	testKeys = seal.Ephemeral()
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(_ *envtest.Environment, cfg *rest.Config) (func() error, error) {
		var err error
		c, err = client.New(cfg, client.Options{Scheme: testenv.Scheme})
		return nil, err
	}))
}

// newRun creates a run named name in a namespace of the test's own, so
// that the tests run again (-count) and in any order.
func newRun(t *testing.T, name string) *v1alpha1.AgentRun {
	t.Helper()
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testenv.Namespace(t, c)}, Spec: v1alpha1.AgentRunSpec{
		AgentSpec: v1alpha1.AgentSpec{
			Goal: "g", Model: v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: "scripted"}, Script: []v1alpha1.ScriptStep{{Content: "x"}}}, Budget: v1alpha1.BudgetSpec{MaxTurns: 1},
		}}}
	if err := c.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	return run
}

func TestChunksReadBackWholeAndALeftoverChunkIsReplaced(t *testing.T) {
	ctx := context.Background()
	run := newRun(t, "r")
	first := []loop.Message{{Role: loop.RoleAssistant, Turn: 1, Content: "a"}, {Role: loop.RoleTool, Turn: 1, CallID: "t1-c1", Content: "b"}}
	if err := Write(ctx, c, c, testKeys, run, 0, Chunk{Messages: first}); err != nil {
		t.Fatal(err)
	}
	// An attempt whose status write failed left chunk 1 behind with other
	// messages; the next attempt replaces it.
	if err := Write(ctx, c, c, testKeys, run, 1, Chunk{Messages: []loop.Message{{Role: loop.RoleAssistant, Turn: 2, Content: "stale"}}}); err != nil {
		t.Fatal(err)
	}
	second := []loop.Message{{Role: loop.RoleAssistant, Turn: 2, Content: "final"}}
	if err := Write(ctx, c, c, testKeys, run, 1, Chunk{Messages: second, Observations: []Observation{{CallID: "t2-c1", Content: "r", Status: "ok"}}}); err != nil {
		t.Fatal(err)
	}
	// Writing the same chunk again is a no-op.
	if err := Write(ctx, c, c, testKeys, run, 1, Chunk{Messages: second, Observations: []Observation{{CallID: "t2-c1", Content: "r", Status: "ok"}}}); err != nil {
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
	if err := Write(ctx, c, c, testKeys, run, 0, Chunk{Messages: []loop.Message{{Role: loop.RoleAssistant, Content: "kept"}}}); err != nil {
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
	err := Write(ctx, c, c, testKeys, run, 0, Chunk{Messages: []loop.Message{{Role: loop.RoleAssistant, Content: "other"}}})
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
		if err := Write(ctx, c, c, testKeys, run, i, ch); err != nil {
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
		if err := Write(ctx, c, c, testKeys, cur, n, Chunk{Messages: msg(9, "other")}); !errors.Is(err, ErrStale) {
			t.Fatalf("rewriting saved chunk %d: err = %v, want ErrStale", n, err)
		}
	}
	// The unfinished attempt's chunk is replaced by the next one.
	if err := Write(ctx, c, c, testKeys, cur, 4, Chunk{Messages: msg(4, "again"), Checkpoint: checkpoint(4)}); err != nil {
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
	run := newRun(t, "payments")
	tenant := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "payments-transcript-0000", Namespace: run.Namespace},
		Data: map[string][]byte{"key": []byte("tenant")}}
	if err := c.Create(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	if err := Write(ctx, c, c, testKeys, run, 0, Chunk{Messages: []loop.Message{{Role: loop.RoleAssistant, Content: "a"}}}); err != nil {
		t.Fatal(err)
	}
	in := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ChunkName(run.UID, 1), Namespace: run.Namespace},
		Data: map[string][]byte{"key": []byte("in the way")}}
	if err := c.Create(ctx, in); err != nil {
		t.Fatal(err)
	}
	err := Write(ctx, c, c, testKeys, run, 1, Chunk{Messages: []loop.Message{{Role: loop.RoleAssistant, Content: "b"}}})
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
	if err := Write(ctx, c, c, testKeys, run, 0, Chunk{Messages: []loop.Message{{Role: loop.RoleAssistant, Content: "a"}}}); err != nil {
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

// A chunk someone else wrote, with the run as its owner and the right
// labels and name, is refused by ReadSealed with an error naming it, and so
// is a sealed chunk whose data was replaced; ReadChunks (for showing a
// transcript) still reads it.
func TestReadSealedRefusesForgedChunks(t *testing.T) {
	ctx := context.Background()
	run := newRun(t, "sealed")
	if err := Write(ctx, c, c, testKeys, run, 0, Chunk{Messages: []loop.Message{{Role: loop.RoleUser, Content: "goal"}}}); err != nil {
		t.Fatal(err)
	}
	if chunks, err := ReadSealed(ctx, c, testKeys, run, 1); err != nil || len(chunks) != 1 {
		t.Fatalf("the operator's own chunk: %d chunks, %v", len(chunks), err)
	}
	if _, err := ReadSealed(ctx, c, seal.Ephemeral(), run, 1); !errors.Is(err, ErrForged) {
		t.Fatalf("a chunk sealed with another key: %v, want ErrForged", err)
	}
	// The next chunk, as a tenant who may create Secrets would write it:
	// a checkpoint that says the run is at turn 9 and a call approved.
	forged := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ChunkName(run.UID, 1), Namespace: run.Namespace, Labels: labels(run, 1),
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind("AgentRun"))}},
		Type: SecretType, Data: map[string][]byte{dataKey: []byte(`{"messages":[],"checkpoint":{"turn":9}}`)}}
	if err := c.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	_, err := ReadSealed(ctx, c, testKeys, run, 1)
	if !errors.Is(err, ErrForged) || !strings.Contains(err.Error(), run.Namespace+"/"+forged.Name) {
		t.Fatalf("a forged chunk after the counted ones: %v, want ErrForged naming %s/%s", err, run.Namespace, forged.Name)
	}
	if chunks, err := ReadChunks(ctx, c, run, 1); err != nil || len(chunks) != 2 {
		t.Fatalf("ReadChunks, which checks no seal: %d chunks, %v", len(chunks), err)
	}
	// A sealed chunk moved to another index (or another run) no longer opens.
	first := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: ChunkName(run.UID, 0)}, first); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, forged); err != nil {
		t.Fatal(err)
	}
	moved := forged.DeepCopy()
	moved.ResourceVersion, moved.UID = "", ""
	moved.Data = first.Data
	if err := c.Create(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSealed(ctx, c, testKeys, run, 2); !errors.Is(err, ErrForged) {
		t.Fatalf("chunk 0's data and seal copied to chunk 1: %v, want ErrForged", err)
	}
}

// ReadMarked shows every part of a transcript, each marked by whether the
// operator signed it, checked with its public keys alone: a forged chunk
// is there, and says so, between the operator's own; so is a chunk that
// keeps a good seal but carries no signature (whoever rewrites a chunk can
// leave it out), and the messages still in the checkpoint, which nothing
// signs.
func TestReadMarkedMarksWhatTheOperatorDidNotSign(t *testing.T) {
	ctx := context.Background()
	run := newRun(t, "marked")
	own := []loop.Message{{Role: loop.RoleAssistant, Turn: 1, Content: "the operator's"}}
	if err := Write(ctx, c, c, testKeys, run, 0, Chunk{Messages: own}); err != nil {
		t.Fatal(err)
	}
	forged := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ChunkName(run.UID, 1), Namespace: run.Namespace, Labels: labels(run, 1),
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind("AgentRun"))}},
		Type: SecretType, Data: map[string][]byte{dataKey: []byte(`{"messages":[{"role":"assistant","turn":2,"content":"a tenant's"}]}`)}}
	if err := c.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	unsignedData := []byte(`{"messages":[{"role":"assistant","turn":2,"content":"sealed, not signed"}]}`)
	unsigned := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ChunkName(run.UID, 2), Namespace: run.Namespace, Labels: labels(run, 2),
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind("AgentRun"))}},
		Type: SecretType, Data: map[string][]byte{dataKey: unsignedData, sealKey: []byte(sealChunk(testKeys, run, 2, unsignedData))}}
	if err := c.Create(ctx, unsigned); err != nil {
		t.Fatal(err)
	}
	tail := &loop.State{Transcript: []loop.Message{{Role: loop.RoleUser, Turn: 3, Content: "buffered"}}}
	raw, _ := encjson.Marshal(tail)
	run.Status.Transcript = &v1alpha1.TranscriptStatus{Chunks: 3, Messages: 3}
	run.Status.Checkpoint = &runtime.RawExtension{Raw: raw}
	sealed, err := SealCheckpoint(testKeys, run.UID, &run.Status)
	if err != nil {
		t.Fatal(err)
	}
	run.Status.CheckpointSeal = sealed

	type part struct {
		Source   string
		Messages []loop.Message
		Forged   bool
	}
	read := func(kr *seal.Keyring) []part {
		t.Helper()
		v, err := seal.NewVerifier(kr.PublicKeys()) // the public keys only
		if err != nil {
			t.Fatal(err)
		}
		parts, err := ReadMarked(ctx, c, v, run)
		if err != nil {
			t.Fatal(err)
		}
		var out []part
		for _, p := range parts {
			if p.Unsealed != nil && !errors.Is(p.Unsealed, ErrForged) {
				t.Errorf("%s: %v, want an ErrForged error", p.Source, p.Unsealed)
			}
			out = append(out, part{p.Source, p.Messages, p.Unsealed != nil})
		}
		return out
	}
	want := []part{
		{ChunkName(run.UID, 0), own, false},
		{forged.Name, []loop.Message{{Role: loop.RoleAssistant, Turn: 2, Content: "a tenant's"}}, true},
		{unsigned.Name, []loop.Message{{Role: loop.RoleAssistant, Turn: 2, Content: "sealed, not signed"}}, true},
		{"status.checkpoint", tail.Transcript, true},
	}
	if diff := cmp.Diff(want, read(testKeys)); diff != "" {
		t.Errorf("with the operator's keys (-want +got):\n%s", diff)
	}
	for i := range want {
		want[i].Forged = true
	}
	if diff := cmp.Diff(want, read(seal.Ephemeral())); diff != "" {
		t.Errorf("with other keys, nothing is the operator's (-want +got):\n%s", diff)
	}
	// Read, which checks no seal, gives the same messages.
	msgs, err := Read(ctx, c, run)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(append(append(append(append([]loop.Message{}, own...), want[1].Messages...), want[2].Messages...), tail.Transcript...), msgs); diff != "" {
		t.Errorf("Read (-want +got):\n%s", diff)
	}
}

// The checkpoint's seal survives the API server's re-encoding of status
// (key order, spacing, number spelling), and any change of the
// checkpoint, the counts, the sequence or the run breaks it.
func TestCheckpointSealSurvivesTheAPIServer(t *testing.T) {
	ctx := context.Background()
	run := newRun(t, "seal-status")
	st := &run.Status
	if err := OpenCheckpoint(testKeys, run.UID, st); err != nil {
		t.Fatalf("a run never saved: %v", err)
	}
	st.Checkpoint = &runtime.RawExtension{Raw: []byte(`{"turn":3,"calls":[{"id":"t3-c1","name":"refund","arguments":{"b":1.50,"a":"x<y"},"verdict":"ask"}]}`)}
	st.Transcript = &v1alpha1.TranscriptStatus{Chunks: 2, Messages: 7}
	st.CheckpointSequence = 5
	sealed, err := SealCheckpoint(testKeys, run.UID, st)
	if err != nil {
		t.Fatal(err)
	}
	st.CheckpointSeal = sealed
	if err := c.Status().Update(ctx, run); err != nil {
		t.Fatal(err)
	}
	back := &v1alpha1.AgentRun{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(run), back); err != nil {
		t.Fatal(err)
	}
	if string(back.Status.Checkpoint.Raw) == string(st.Checkpoint.Raw) {
		t.Log("the API server kept the checkpoint's bytes as written")
	}
	if err := OpenCheckpoint(testKeys, back.UID, &back.Status); err != nil {
		t.Fatalf("the seal does not open after the API server: %v", err)
	}
	for name, change := range map[string]func(*v1alpha1.AgentRunStatus){
		"answer": func(s *v1alpha1.AgentRunStatus) {
			s.Checkpoint.Raw = []byte(strings.Replace(string(s.Checkpoint.Raw), `"ask"`, `"allow"`, 1))
		},
		"counts":     func(s *v1alpha1.AgentRunStatus) { s.Transcript.Chunks = 1 },
		"sequence":   func(s *v1alpha1.AgentRunStatus) { s.CheckpointSequence = 6 },
		"unnumbered": func(s *v1alpha1.AgentRunStatus) { s.CheckpointSequence = 0 },
		"no seal":    func(s *v1alpha1.AgentRunStatus) { s.CheckpointSeal = "" },
		"no state":   func(s *v1alpha1.AgentRunStatus) { s.Checkpoint, s.Transcript = nil, nil },
		"not json":   func(s *v1alpha1.AgentRunStatus) { s.Checkpoint.Raw = []byte(`{`) },
		"other seal": func(s *v1alpha1.AgentRunStatus) { s.CheckpointSeal = testKeys.Seal("other") },
	} {
		t.Run(name, func(t *testing.T) {
			cp := back.Status.DeepCopy()
			change(cp)
			if err := OpenCheckpoint(testKeys, back.UID, cp); !errors.Is(err, ErrForged) {
				t.Fatalf("got %v, want ErrForged", err)
			}
		})
	}
	if err := OpenCheckpoint(testKeys, "another-uid", &back.Status); !errors.Is(err, ErrForged) {
		t.Fatalf("another run's status: %v, want ErrForged", err)
	}
}
