package controller

import (
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Issue 46, item 5: the owner's order: the label, then the spec (as the
// kit resolved and governed it), then none.
func TestEscalationOwner_labelThenSpec(t *testing.T) {
	labelled := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.LabelOwner: "refunds-team"}}}
	spec := &v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{Escalation: &v1alpha1.EscalationSpec{Owner: "spec-team"}}}
	for _, tc := range []struct {
		name string
		run  *v1alpha1.AgentRun
		spec *v1alpha1.AgentRunSpec
		want string
	}{
		{"the label first", labelled, spec, "refunds-team"},
		{"then the spec", &v1alpha1.AgentRun{}, spec, "spec-team"},
		{"else none", &v1alpha1.AgentRun{}, &v1alpha1.AgentRunSpec{}, ""},
	} {
		if got := escalationOwner(tc.run, tc.spec); got != tc.want {
			t.Errorf("%s: owner = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Issue 46, item 5: the first acknowledgement takes the escalation, a
// resolution resolves it (and acknowledges it when no one had), and
// neither happens twice.
func TestAcknowledge_eachTransitionOnce(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC))
	at := func(m int) metav1.Time { return metav1.NewTime(since.Add(time.Duration(m) * time.Minute)) }
	e := &v1alpha1.EscalationStatus{Owner: "payments-oncall", Since: since}

	steps := []struct {
		ack  v1alpha1.EscalationAck
		by   string
		at   metav1.Time
		want handoff
	}{
		{v1alpha1.EscalationAck{Note: "looking"}, "bob", at(4), handoff{acknowledged: true, firstResponse: 4 * time.Minute}},
		{v1alpha1.EscalationAck{Note: "me too"}, "carol", at(5), handoff{}},
		{v1alpha1.EscalationAck{Resolve: true, Note: "rolled back"}, "alice", at(30), handoff{resolved: true, decision: 30 * time.Minute}},
		{v1alpha1.EscalationAck{Resolve: true}, "carol", at(31), handoff{}},
	}
	for i, s := range steps {
		if diff := cmp.Diff(s.want, acknowledge(e, s.ack, s.by, s.at), cmp.AllowUnexported(handoff{})); diff != "" {
			t.Errorf("step %d (-want +got):\n%s", i, diff)
		}
	}
	a4, a30 := at(4), at(30)
	want := &v1alpha1.EscalationStatus{Owner: "payments-oncall", Since: since, AcknowledgedBy: "bob", AcknowledgedAt: &a4,
		ResolvedBy: "alice", ResolvedAt: &a30, Note: "rolled back"}
	if diff := cmp.Diff(want, e); diff != "" {
		t.Errorf("status.escalation (-want +got):\n%s", diff)
	}

	// A resolution of an escalation no one took acknowledges it too.
	fresh := &v1alpha1.EscalationStatus{Since: since}
	got := acknowledge(fresh, v1alpha1.EscalationAck{Resolve: true}, "alice", at(7))
	if want := (handoff{acknowledged: true, resolved: true, firstResponse: 7 * time.Minute, decision: 7 * time.Minute}); got != want ||
		fresh.AcknowledgedBy != "alice" || fresh.ResolvedBy != "alice" {
		t.Errorf("resolving first = %+v, %+v; want both by alice", got, fresh)
	}
}
