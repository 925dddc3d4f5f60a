package controller

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
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
// again. And so it does for an operator told to stop while the answer to
// the status write that ended the run was on its way: the write had to
// hear its answer, or the record stayed a save behind and the replay
// brought back less usage than was spent.
func TestRollback_statusWrittenBackEndsErrorWithoutRunningAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool
		blank   bool
		// stopMidWrite: the operator is stopped as the API server takes
		// the status write that ends the run, before its answer is read.
		stopMidWrite bool
	}{
		{name: "same operator"},
		{name: "operator restarted between save and replay", restart: true},
		{name: "status blanked", blank: true},
		{name: "operator stopped while its last status write was answered", restart: true, stopMidWrite: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTools()
			var wrap func(client.Client, func()) client.Client
			if tc.stopMidWrite {
				wrap = func(c client.Client, stop func()) client.Client { return &lateAnswer{Client: c, stop: stop} }
			}
			_, stop := startReconciler(t, &kits{tools: tb}, 0, wrap)
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

// lateAnswer is a client whose status write that ends a run reaches the
// API server while the operator is told to stop, its answer still on the
// way: as client-go's transport does then, a call whose context ended
// before the answer was read returns the context's error.
type lateAnswer struct {
	client.Client
	stop func()
	once sync.Once
}

func (c *lateAnswer) Status() client.SubResourceWriter {
	return lateStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type lateStatus struct {
	client.SubResourceWriter
	c *lateAnswer
}

func (s lateStatus) Update(ctx context.Context, o client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.answer(ctx, o, s.SubResourceWriter.Update(ctx, o, opts...))
}

func (s lateStatus) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.answer(ctx, o, s.SubResourceWriter.Patch(ctx, o, p, opts...))
}

func (s lateStatus) answer(ctx context.Context, o client.Object, err error) error {
	if run, ok := o.(*v1alpha1.AgentRun); ok && err == nil && run.Status.Outcome != "" {
		s.c.once.Do(s.c.stop)
		// The answer takes a second to be read; a context ended by then
		// loses it.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return err
}

// An operator's record write that lands after another operator raised the
// record (a stopped leader's, after its successor's saves) left it lower
// than the saves made: the write was unconditional. It is now made over
// the record's version as this process last saw it, and a record that
// holds a higher save is left as it is. Here the successor is the test,
// raising the sealed record while the run waits for a person.
func TestRollback_aLateRecordWriteDoesNotLowerTheRecord(t *testing.T) {
	startReconciler(t, &kits{tools: newTools()}, 0, nil)
	ns := namespace(t)
	run := refundRun(ns, "refund").answer("Refunded.").create(t)
	pending := waitPending(t, run, 1)
	key := client.ObjectKey{Namespace: ns, Name: SavesRecordName(pending.UID)}
	record := &corev1.ConfigMap{}
	NewWithT(t).Eventually(func() string {
		if err := k8sClient.Get(context.Background(), key, record); err != nil {
			return err.Error()
		}
		return record.Data[savesSequenceKey]
	}, 10*time.Second, 50*time.Millisecond).Should(Equal(strconv.FormatInt(pending.Status.CheckpointSequence, 10)))

	ahead := strconv.FormatInt(pending.Status.CheckpointSequence+10, 10)
	usage := []byte(record.Data[savesUsageKey])
	record.Data[savesSequenceKey] = ahead
	record.Data[savesSealKey] = testKeys.Seal(purposeSaves, savesParts(pending.UID, ahead, usage)...)
	if err := k8sClient.Update(context.Background(), record); err != nil {
		t.Fatal(err)
	}
	annotate(t, run, "t1-c1", "approve")
	done := waitOutcome(t, run, 20*time.Second)
	if done.Status.Outcome != v1alpha1.OutcomeCompleted || done.Status.CheckpointSequence >= pending.Status.CheckpointSequence+10 {
		t.Fatalf("outcome %s (%s) at save %d; want Completed below save %s", done.Status.Outcome, done.Status.Reason,
			done.Status.CheckpointSequence, ahead)
	}
	if err := k8sClient.Get(context.Background(), key, record); err != nil {
		t.Fatal(err)
	}
	if got := record.Data[savesSequenceKey]; got != ahead {
		t.Fatalf("the record holds save %s after the run's last save %d; want %s, the higher save another operator recorded",
			got, done.Status.CheckpointSequence, ahead)
	}
}
