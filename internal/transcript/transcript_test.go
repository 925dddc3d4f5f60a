package transcript

import (
	"context"
	encjson "encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var c client.Client

func TestMain(m *testing.M) {
	os.Exit(func() int {
		env, cfg, err := testenv.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = env.Stop() }()
		if c, err = client.New(cfg, client.Options{Scheme: testenv.Scheme}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}())
}

func TestChunksReadBackWholeAndALeftoverChunkIsReplaced(t *testing.T) {
	ctx := context.Background()
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "default"}, Spec: v1alpha1.AgentRunSpec{
		Goal: "g", Model: v1alpha1.ModelSpec{Provider: "scripted", Script: []v1alpha1.ScriptStep{{Content: "x"}}}, Budget: v1alpha1.BudgetSpec{MaxTurns: 1}}}
	if err := c.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	first := []loop.Message{{Role: loop.RoleAssistant, Turn: 1, Content: "a"}, {Role: loop.RoleTool, Turn: 1, CallID: "t1-c1", Content: "b"}}
	if err := Write(ctx, c, c, run, 0, first); err != nil {
		t.Fatal(err)
	}
	// An attempt whose status write failed left chunk 1 behind with other
	// messages; the next attempt replaces it.
	if err := Write(ctx, c, c, run, 1, []loop.Message{{Role: loop.RoleAssistant, Turn: 2, Content: "stale"}}); err != nil {
		t.Fatal(err)
	}
	second := []loop.Message{{Role: loop.RoleAssistant, Turn: 2, Content: "final"}}
	if err := Write(ctx, c, c, run, 1, second); err != nil {
		t.Fatal(err)
	}
	// Writing the same chunk again is a no-op.
	if err := Write(ctx, c, c, run, 1, second); err != nil {
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
	if _, err := Read(ctx, c, run); err == nil || err.Error() != "transcript chunk r-transcript-0002 is missing" {
		t.Fatalf("err = %v", err)
	}
}
