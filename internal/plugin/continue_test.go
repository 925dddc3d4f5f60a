package plugin

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Issue 47, item 3: continue makes a follow-up of a finished run with its
// spec and a new goal; it refuses a run that has not finished.
func TestContinue_makesAFollowUpWithTheEarlierSpecAndANewGoal(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	b := makeRun(ns, "explain-double-charge")
	b.run.Spec.Instructions = "You are a billing assistant."
	b.run.Labels = map[string]string{"team": "billing", v1alpha1.LabelShard: "blue"}
	old := b.create(t)

	// Not finished: refused, nothing created.
	_, err := Continue(ctx, k8sClient, ContinueOptions{Run: Ref{Namespace: ns, Name: old.Name}, Goal: "Refund it."}, &bytes.Buffer{})
	want := "agentrun/explain-double-charge has not finished (phase Pending): a follow-up continues a finished run; " +
		"wait for its outcome (kubectl agentrun watch explain-double-charge)"
	if err == nil || err.Error() != want {
		t.Fatalf("continue of an unfinished run: %v\nwant %s", err, want)
	}
	if n := len(listRuns(t, ns)); n != 1 {
		t.Fatalf("%d runs after a refused continue, want 1", n)
	}

	setStatus(t, old, func(s *v1alpha1.AgentRunStatus) {
		s.Phase, s.Outcome, s.Reason = v1alpha1.PhaseSucceeded, v1alpha1.OutcomeCompleted, "The model gave a final answer."
	})
	old = get(t, old)
	var out bytes.Buffer
	run, err := Continue(ctx, k8sClient, ContinueOptions{Run: Ref{Namespace: ns, Name: old.Name}, Goal: "Refund the second charge."}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(run.Name, "explain-double-charge-") {
		t.Errorf("name %q, want explain-double-charge- and generated characters", run.Name)
	}
	if diff := cmp.Diff("agentrun.agents.agentrun.dev/"+run.Name+" created\n", out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	got := get(t, run)
	wantSpec := *old.Spec.DeepCopy()
	wantSpec.Goal = "Refund the second charge."
	wantSpec.ContinueFrom = &v1alpha1.ContinueFrom{Name: old.Name}
	if diff := cmp.Diff(wantSpec, got.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{v1alpha1.LabelShard: "blue"}, got.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
}

func TestMain_continue(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	old := makeRun(ns, "why-slow").create(t)
	setStatus(t, old, func(s *v1alpha1.AgentRunStatus) {
		s.Phase, s.Outcome, s.Reason = v1alpha1.PhaseSucceeded, v1alpha1.OutcomeCompleted, "The model gave a final answer."
	})
	kubectl := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	// --wait follows the follow-up to its end, as run --wait does.
	done := make(chan [3]string, 1)
	go func() {
		code, out, errOut := kubectl("continue", "why-slow", "How do I fix it?", "--name", "why-slow-fix", "--wait", "--timeout", "30s")
		done <- [3]string{string(rune('0' + code)), out, errOut}
	}()
	fix := &v1alpha1.AgentRun{}
	fix.Namespace, fix.Name = ns, "why-slow-fix"
	g.Eventually(func() error { return k8sClient.Get(context.Background(), client.ObjectKeyFromObject(fix), fix) }, 15*time.Second, 20*time.Millisecond).Should(Succeed())
	setStatus(t, fix, func(s *v1alpha1.AgentRunStatus) {
		s.Phase, s.Outcome, s.Reason = v1alpha1.PhaseSucceeded, v1alpha1.OutcomeCompleted, "The model gave a final answer."
		s.ContinuedFrom = &v1alpha1.ContinuedFromStatus{Name: "why-slow", Outcome: v1alpha1.OutcomeCompleted}
	})
	var r [3]string
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("continue --wait did not end with the run")
	}
	want := `agentrun.agents.agentrun.dev/why-slow-fix created
continued from: why-slow
goal: How do I fix it?
phase: Succeeded
outcome: Completed
reason: The model gave a final answer.
`
	if r[0] != "0" || r[2] != "" {
		t.Errorf("continue --wait = %s, stderr %q; want 0", r[0], r[2])
	}
	if diff := cmp.Diff(want, r[1]); diff != "" {
		t.Errorf("continue --wait output (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		args       []string
		code       int
		out, inErr string
	}{
		{[]string{"continue", "why-slow"}, 1, "", "error: missing GOAL: usage: kubectl agentrun continue NAME GOAL\n"},
		{[]string{"continue", "why-slow", " "}, 1, "", "error: the follow-up needs a goal"},
		{[]string{"continue", "nothing", "And now?"}, 1, "", `error: agentrun "nothing" not found in namespace "` + ns + `"`},
		{[]string{"continue", "why-slow", "And now?", "--name", "why-slow-fix"}, 1, "", `error: agentrun "why-slow-fix" already exists`},
	} {
		code, out, errOut := kubectl(tc.args...)
		if code != tc.code || out != tc.out || !strings.Contains(errOut, tc.inErr) {
			t.Errorf("kubectl agentrun %s = %d, stdout %q, stderr %q; want %d, %q, stderr with %q",
				strings.Join(tc.args, " "), code, out, errOut, tc.code, tc.out, tc.inErr)
		}
	}
}

// A follow-up's transcript names the run it continued and marks the
// messages of that run's conversation.
func TestPrintTranscript_ofAFollowUp(t *testing.T) {
	run := &v1alpha1.AgentRun{Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{Goal: "And now?"},
		ContinueFrom: &v1alpha1.ContinueFrom{Name: "why-slow"}},
		Status: v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted, Reason: "done",
			ContinuedFrom: &v1alpha1.ContinuedFromStatus{Name: "why-slow", Outcome: v1alpha1.OutcomeBudgetExhausted, Archived: true}}}
	msgs := []loop.Message{
		{Role: loop.RoleUser, Turn: -2, Content: "Why is it slow?"},
		{Role: loop.RoleAssistant, Turn: -1, Content: "The database."},
		{Role: loop.RoleUser, Content: "And now?"},
		{Role: loop.RoleAssistant, Turn: 1, Content: "Add an index."},
	}
	var out bytes.Buffer
	if err := PrintTranscript(&out, run, msgs, OutputText); err != nil {
		t.Fatal(err)
	}
	want := `continued from: why-slow (BudgetExhausted, read from the archive)
goal: And now?
[earlier] user: Why is it slow?
[earlier] assistant: The database.
[t0] user: And now?
[t1] assistant: Add an index.
outcome: Completed
reason: done
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
