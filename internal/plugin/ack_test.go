package plugin

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Issue 46, item 5: kubectl agentrun ack takes an escalated run, and ack
// --resolve resolves it, each with an annotation the operator records;
// a run that did not escalate, and an escalation taken or resolved
// before, are refused with a sentence that says why.
func TestAck_acknowledgesAndResolvesAnEscalatedRun(t *testing.T) {
	ns := newNamespace(t)
	kubectl := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	running := makeRun(ns, "running").create(t)
	setStatus(t, running, func(s *v1alpha1.AgentRunStatus) { s.Phase = v1alpha1.PhaseRunning })
	completed := makeRun(ns, "completed").create(t)
	setStatus(t, completed, func(s *v1alpha1.AgentRunStatus) {
		s.Phase, s.Outcome = v1alpha1.PhaseSucceeded, v1alpha1.OutcomeCompleted
	})
	esc := makeRun(ns, "nightly").create(t)
	setStatus(t, esc, func(s *v1alpha1.AgentRunStatus) {
		s.Phase, s.Outcome = v1alpha1.PhaseFailed, v1alpha1.OutcomeEscalated
		s.Escalation = &v1alpha1.EscalationStatus{Owner: "payments-oncall", Since: metav1.Now()}
	})

	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		out, inErr string
		annotation string
	}{
		{"a running run", []string{"ack", "running"}, 1, "", "error: agentrun/running has not escalated: it has not ended (phase Running)", ""},
		{"a completed run", []string{"ack", "completed", "--resolve"}, 1, "", "error: agentrun/completed has not escalated: it ended Completed", ""},
		{"a note too long", []string{"ack", "nightly", "--note", strings.Repeat("n", v1alpha1.MaxAckNote+1)}, 1, "", "a note may have at most 1024", ""},
		{"ack", []string{"ack", "nightly", "--note", " looking at it "}, 0,
			"agentrun/nightly: escalation (owner payments-oncall) acknowledged (note: \"looking at it\")\n", "", "ack:looking at it"},
		{"resolve", []string{"ack", "nightly", "--resolve"}, 0, "agentrun/nightly: escalation (owner payments-oncall) resolved\n", "", "resolve"},
	} {
		code, out, errOut := kubectl(tc.args...)
		if code != tc.code || out != tc.out || !strings.Contains(errOut, tc.inErr) || (tc.inErr == "" && errOut != "") {
			t.Errorf("%s: kubectl agentrun %.60s = %d, stdout %q, stderr %q; want %d, %q, stderr with %q",
				tc.name, strings.Join(tc.args, " "), code, out, errOut, tc.code, tc.out, tc.inErr)
		}
		if tc.annotation != "" {
			if got := get(t, esc).Annotations[v1alpha1.AnnotationAck]; got != tc.annotation {
				t.Errorf("%s: annotation %s = %q, want %q", tc.name, v1alpha1.AnnotationAck, got, tc.annotation)
			}
		}
	}
	for _, r := range []*v1alpha1.AgentRun{running, completed} {
		if got := get(t, r).Annotations; len(got) != 0 {
			t.Errorf("a refused ack set %v on %s", got, r.Name)
		}
	}

	// Taken, or resolved, before: said so, naming who.
	ctx := context.Background()
	setStatus(t, esc, func(s *v1alpha1.AgentRunStatus) {
		now := metav1.Now()
		s.Escalation.AcknowledgedBy, s.Escalation.AcknowledgedAt = "bob", &now
	})
	err := Ack(ctx, k8sClient, AckOptions{Run: Ref{Namespace: ns, Name: "nightly"}}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "was acknowledged by bob already; resolve it with --resolve") {
		t.Errorf("an ack of a taken escalation: %v, want a refusal naming bob", err)
	}
	setStatus(t, esc, func(s *v1alpha1.AgentRunStatus) {
		now := metav1.Now()
		s.Escalation.ResolvedBy, s.Escalation.ResolvedAt = "alice", &now
	})
	err = Ack(ctx, k8sClient, AckOptions{Run: Ref{Namespace: ns, Name: "nightly"}, Resolve: true}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "was resolved by alice already") {
		t.Errorf("a resolution of a resolved escalation: %v, want a refusal naming alice", err)
	}
}
