package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// statusWriter returns a client that acts as a user who may only write
// the status of the namespace's runs (agentruns/status), as a controller
// granted that would.
func statusWriter(t *testing.T, ns string) client.Client {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "status-writer", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"agentruns/status"},
			Verbs: []string{"get", "update", "patch"}}}}
	if err := k8sClient.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "status-writer", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{userSubject("status-writer")}}); err != nil {
		t.Fatal(err)
	}
	authorized(t, ns, role.Rules, userSubject("status-writer"))
	return as(t, "status-writer")
}

// Finding 3 of issue 42: a seal bound a status to its run and content, not
// to a point in the run's history. Whoever may write agentruns/status
// kept the sealed status of a run waiting for approval, and once the
// approved refund had run, wrote it back: the operator resumed from it,
// applied the approval again and ran the refund a second time, and usage
// went back down. The operator now numbers its statuses and keeps the
// highest it saved: the written-back status ends the run Error, naming
// the rollback, with the refund run once and the usage it had. So it does
// for an operator restarted between the save and the replay (which has
// only the record to go by), and for a status blanked to start the run
// again.
func TestRollback_statusWrittenBackEndsErrorWithoutRunningAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool
		blank   bool
	}{
		{name: "same operator"},
		{name: "operator restarted between save and replay", restart: true},
		{name: "status blanked", blank: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTools()
			_, stop := startReconciler(t, &kits{tools: tb}, 0, nil)
			ns := namespace(t)
			writer := statusWriter(t, ns)
			run := refundRun(ns, "refund").answer("Refunded.").create(t)
			// The sealed status before the refund ran: it waits for a person.
			before := waitPending(t, run, 1)
			annotate(t, run, "t1-c1", "approve")
			done := waitOutcome(t, run, 20*time.Second)
			if done.Status.Outcome != v1alpha1.OutcomeCompleted || tb.counts()["t1-c1:issue_refund"] != 1 {
				t.Fatalf("outcome %s (%s), refunds %v; want Completed after one refund", done.Status.Outcome, done.Status.Reason, tb.counts())
			}
			spent := *done.Status.Usage
			if before.Status.Usage == nil || before.Status.Usage.Turns >= spent.Turns {
				t.Fatalf("the earlier status counts %+v, the later %+v: the replay would not lower usage", before.Status.Usage, spent)
			}
			if tc.restart {
				stop()
				startManager(t, &kits{tools: tb})
			}

			replay := before.DeepCopy()
			replay.ResourceVersion = done.ResourceVersion
			if tc.blank {
				replay.Status = v1alpha1.AgentRunStatus{}
			}
			if err := writer.Status().Update(context.Background(), replay); err != nil {
				t.Fatalf("a status writer writes the run's status: %v", err)
			}

			got := waitOutcome(t, run, 20*time.Second)
			want := "status.checkpoint was written back to save "
			if got.Status.Outcome != v1alpha1.OutcomeError || !strings.Contains(got.Status.Reason, want) {
				t.Fatalf("outcome %s (%s), refunds %v; want Error naming %q", got.Status.Outcome, got.Status.Reason, tb.counts(), want)
			}
			NewWithT(t).Consistently(func() int { return tb.counts()["t1-c1:issue_refund"] }, 500*time.Millisecond, 50*time.Millisecond).
				Should(Equal(1), "the refund ran again")
			u := get(t, run).Status.Usage
			if u == nil || u.Turns < spent.Turns || u.InputTokens < spent.InputTokens || u.OutputTokens < spent.OutputTokens ||
				u.ToolCalls < spent.ToolCalls {
				t.Fatalf("usage went down: %+v, it was %+v", u, spent)
			}
		})
	}
}
