package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// rememberingRun is a run of the "notes" memory with the memory tools named
// remember and recall.
func rememberingRun(ns, name string) *runBuilder {
	return makeRun(ns, name).with(func(s *v1alpha1.AgentRunSpec) {
		s.Memory = &v1alpha1.MemorySpec{Name: "notes"}
		s.Tools = append(s.Tools,
			v1alpha1.ToolSpec{Name: "remember", Builtin: v1alpha1.BuiltinMemoryRemember},
			v1alpha1.ToolSpec{Name: "recall", Builtin: v1alpha1.BuiltinMemoryRecall})
	})
}

// toolResult is the observation of the run's call callID, as its
// transcript keeps it.
func toolResult(t *testing.T, run *v1alpha1.AgentRun, callID string) loop.Message {
	t.Helper()
	for _, m := range readTranscript(t, run) {
		if m.Role == loop.RoleTool && m.CallID == callID {
			return m
		}
	}
	t.Fatalf("the transcript of %s has no result of %s", run.Name, callID)
	return loop.Message{}
}

// Issue 47 item 4: a second run recalls what a first run remembered,
// through the archive's PostgreSQL; a run of another namespace with the
// same memory name does not. What was remembered is in the first run's
// transcript and a Remembered event (its key, not its text), and never in
// the operator's log or metrics.
func TestRunMemory_aSecondRunRecallsWhatAFirstRememberedInItsNamespaceOnly(t *testing.T) {
	ns, other := namespace(t), namespace(t)
	store := openArchive(t)
	logs := &logLines{}
	r, _ := startWith(t, &kit.Builder{Memory: store}, managerSetup{
		options: func(o *ctrl.Options) { o.Logger = funcr.NewJSON(logs.add, funcr.Options{Verbosity: 4}) },
	})
	const text = "The VPN gateway moved to vpn2.example.net on Monday."

	first := rememberingRun(ns, "first").calls("remember", `{"key":"vpn","text":"`+text+`"}`).answer("Noted.").create(t)
	expectOutcome(t, waitOutcome(t, first, 30*time.Second), v1alpha1.OutcomeCompleted, "")
	if m := toolResult(t, first, "t1-c1"); m.Status != loop.ObsOK || !strings.Contains(m.Content, `"remembered":"vpn"`) {
		t.Fatalf("the remember call's result: %s %q", m.Status, m.Content)
	}
	NewWithT(t).Eventually(func() []string {
		return eventNotes(t, ns, "AgentRun", first.Name, corev1.EventTypeNormal, ReasonRemembered)
	}, 10*time.Second, 50*time.Millisecond).Should(ConsistOf(`call t1-c1 (remember) wrote the entry "vpn" of memory notes`))

	second := rememberingRun(ns, "second").calls("recall", `{"query":"vpn gateway"}`).answer("vpn2").create(t)
	expectOutcome(t, waitOutcome(t, second, 30*time.Second), v1alpha1.OutcomeCompleted, "")
	var got struct {
		Entries []struct{ Key, Text string }
	}
	if m := toolResult(t, second, "t1-c1"); json.Unmarshal([]byte(m.Content), &got) != nil || len(got.Entries) != 1 ||
		got.Entries[0].Key != "vpn" || got.Entries[0].Text != text {
		t.Fatalf("the second run recalled %q, want the first run's entry", m.Content)
	}

	elsewhere := rememberingRun(other, "second").calls("recall", `{"query":"vpn gateway"}`).answer("nothing").create(t)
	expectOutcome(t, waitOutcome(t, elsewhere, 30*time.Second), v1alpha1.OutcomeCompleted, "")
	if m := toolResult(t, elsewhere, "t1-c1"); m.Content != `{"entries":[]}` {
		t.Errorf("a run of another namespace recalled %q", m.Content)
	}

	logs.mu.Lock()
	logged, _ := json.Marshal(logs.lines)
	logs.mu.Unlock()
	metrics := fmt.Sprint(scrape(t, r.Metrics))
	for what, s := range map[string]string{"the operator's log": string(logged), "the operator's metrics": metrics} {
		if strings.Contains(s, "vpn2.example.net") {
			t.Errorf("%s holds what the run remembered", what)
		}
	}
}

// A run with spec.memory on an operator without an archive is refused
// before its first model call, with a reason that says how to configure
// one.
func TestRunMemory_aRunWithMemoryIsRefusedWithoutAnArchive(t *testing.T) {
	ns := namespace(t)
	startManager(t, &kit.Builder{})
	run := rememberingRun(ns, "no-archive").calls("recall", `{"query":"anything"}`).answer("x").create(t)
	done := waitOutcome(t, run, 20*time.Second)
	expectInvalid(t, done, "this operator has no archive: the platform team configures one with the operator's --archive-postgres-dsn "+
		"(AGENTRUN_ARCHIVE_DSN; chart value archive.postgres.dsnSecretRef)")
	if u := done.Status.Usage; u != nil && u.Turns != 0 {
		t.Errorf("the refused run made %d model calls", u.Turns)
	}
}

// The API server refuses a memory tool without spec.memory, and a run with
// memory where an AgentRunPolicy says memory.allowed: false or caps it.
func TestRunMemory_admission(t *testing.T) {
	ns, p := governedNamespace(t, v1alpha1.AgentRunPolicySpec{Memory: &v1alpha1.PlatformMemory{Allowed: ptr.To(false)}})
	refusedAtCreation(t, k8sClient, makeRun(namespace(t), "no-memory").answer("x").with(func(s *v1alpha1.AgentRunSpec) {
		s.Tools = []v1alpha1.ToolSpec{{Name: "recall", Builtin: v1alpha1.BuiltinMemoryRecall}}
	}).r, "the memory tools (builtin memory.remember and memory.recall) need spec.memory")
	refusedAtCreation(t, k8sClient, rememberingRun(ns, "forbidden").answer("x").r,
		"AgentRunPolicy "+p.Name+" forbids memory in "+ns+" (memory.allowed: false): remove spec.memory and the memory tools")
	if err := k8sClient.Create(context.Background(), makeRun(ns, "without").answer("x").r); err != nil {
		t.Errorf("a run without memory in the governed namespace was refused: %v", err)
	}

	capped, cp := governedNamespace(t, v1alpha1.AgentRunPolicySpec{Memory: &v1alpha1.PlatformMemory{MaxEntries: ptr.To(int32(10))}})
	refusedAtCreation(t, k8sClient, rememberingRun(capped, "big").answer("x").with(func(s *v1alpha1.AgentRunSpec) {
		s.Memory.MaxEntries = ptr.To(int32(11))
	}).r, "spec.memory asks for more than AgentRunPolicy "+cp.Name+" allows (at most 10 entries")
}
