package controller

import (
	"context"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/transcript"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func gone(obj client.Object) func() bool {
	return func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
	}
}

// Issue 31, item 1: a finished run with ttlSecondsAfterFinished is deleted
// once that time has passed since it ended. Its re-run record goes with
// it; its transcript Secrets are owned by it, for the garbage collector
// (which envtest does not run) to delete.
func TestTTL_aFinishedRunIsDeletedWithWhatWasMadeForIt(t *testing.T) {
	startManager(t, &kits{tools: newTools()})
	ns := namespace(t)
	ctx := context.Background()
	run := makeRun(ns, "short-lived").answer("done").r
	// Kept until the test has looked at what was made for it: then its
	// TTL is lowered (status.completionTime has whole seconds, so a TTL of
	// a second may pass as soon as the run ends).
	run.Spec.TTLSecondsAfterFinished = ptr.To(int32(3600))
	run.Annotations = map[string]string{v1alpha1.AnnotationGitOpsProtect: "true"} // so that it has a re-run record
	if err := k8sClient.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	done := waitOutcome(t, run, 20*time.Second)
	if done.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Fatalf("outcome %s (%s)", done.Status.Outcome, done.Status.Reason)
	}
	chunk := &corev1.Secret{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: transcript.ChunkName(done.UID, 0)}, chunk); err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(chunk); ref == nil || ref.UID != done.UID {
		t.Fatalf("the transcript Secret is not owned by the run: %+v", chunk.OwnerReferences)
	}
	record := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: recordName(run.Name)}}
	if gone(record)() {
		t.Fatal("the protected run has no re-run record")
	}
	// A second run of the namespace, without a TTL, is kept.
	kept := makeRun(ns, "kept").answer("done").create(t)
	waitOutcome(t, kept, 20*time.Second)
	NewWithT(t).Consistently(gone(run), time.Second, 100*time.Millisecond).Should(BeFalse(), "deleted before its TTL of an hour")
	cur := get(t, run)
	cur.Spec.TTLSecondsAfterFinished = ptr.To(int32(1))
	if err := k8sClient.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}

	NewWithT(t).Eventually(gone(run), 20*time.Second, 100*time.Millisecond).Should(BeTrue(), "the run was not deleted")
	NewWithT(t).Eventually(gone(record), 10*time.Second, 100*time.Millisecond).Should(BeTrue(), "its re-run record was not deleted")
	NewWithT(t).Eventually(func() []string {
		return eventNotes(t, ns, "AgentRun", run.Name, corev1.EventTypeNormal, ReasonExpired)
	}, 10*time.Second, 100*time.Millisecond).Should(ContainElement(ContainSubstring("its time to live after finishing (1s) has passed")))
	NewWithT(t).Consistently(gone(kept), 1500*time.Millisecond, 100*time.Millisecond).Should(BeFalse(), "a run without a TTL was deleted")
}

// The operator's default applies to runs that set no TTL; a run's own TTL
// wins over it, and may be changed after the run ended.
func TestTTL_theOperatorDefaultAndAChangedTTL(t *testing.T) {
	day := 24 * time.Hour
	startWith(t, &kits{tools: newTools()}, managerSetup{config: func(c *Config) { c.DefaultTTLAfterFinished = ptr.To(time.Duration(0)) }})
	ns := namespace(t)
	byDefault := makeRun(ns, "by-default").answer("done").create(t)
	NewWithT(t).Eventually(gone(byDefault), 20*time.Second, 100*time.Millisecond).Should(BeTrue(), "the operator's default TTL of 0 did not delete the run")

	own := makeRun(ns, "own").answer("done").with(func(s *v1alpha1.AgentRunSpec) {
		s.TTLSecondsAfterFinished = ptr.To(int32(day.Seconds()))
	}).create(t)
	waitOutcome(t, own, 20*time.Second)
	NewWithT(t).Consistently(gone(own), time.Second, 100*time.Millisecond).Should(BeFalse(), "the run's own TTL of a day did not win")
	cur := get(t, own)
	cur.Spec.TTLSecondsAfterFinished = ptr.To(int32(0))
	if err := k8sClient.Update(context.Background(), cur); err != nil {
		t.Fatalf("changing the TTL of a finished run: %v", err)
	}
	NewWithT(t).Eventually(gone(own), 20*time.Second, 100*time.Millisecond).Should(BeTrue(), "a TTL changed to 0 did not delete the run")
}

// The write that ends a run enqueues nothing (caughtUp): the reconcile
// that made it comes back when the TTL has passed, with nothing else to
// wake the run. BenchmarkTTL found runs of 2,000 that were never deleted.
func TestTTL_aRunIsDeletedWithNothingElseToWakeIt(t *testing.T) {
	startManager(t, &kits{tools: newTools()})
	ns := namespace(t)
	var runs []*v1alpha1.AgentRun
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		run := makeRun(ns, name).answer("done").r
		run.Spec.TTLSecondsAfterFinished = ptr.To(int32(2))
		if err := k8sClient.Create(context.Background(), run); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	for _, run := range runs {
		NewWithT(t).Eventually(gone(run), 30*time.Second, 100*time.Millisecond).Should(BeTrue(), "%s was not deleted", run.Name)
	}
}
