package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/tools/job"
	"github.com/agentrun/agentrun/internal/tools/job/entrypoint"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Issue 13, item 4: a job tool's call used to poll its Job (every second,
// up to every four), so a finished tool waited for the next poll and a
// thousand running tools cost a thousand reads every few seconds. With the
// Job informer feeding the waits, the Job's end wakes its call at once:
// here the poll interval is an hour, and the run still goes on within
// seconds of the Job completing.
func TestJobTool_aFinishedJobWakesItsRunThroughTheInformer(t *testing.T) {
	ns := namespace(t)
	b := makeRun(ns, "job-wake").
		with(func(s *v1alpha1.AgentRunSpec) {
			s.Tools = append(s.Tools, v1alpha1.ToolSpec{Name: "report", Mutates: ptr.To(true), Job: &v1alpha1.JobTool{Image: "example.com/tools:1", Command: []string{"report"}}})
		}).
		calls("report", `{"month":"2026-11"}`).answer("reported")
	wakeups := job.NewWakeups()
	jk := &jobKits{model: &loop.Scripted{Entries: scriptOf(b)}, wakeups: wakeups, poll: time.Hour}
	startWith(t, jk, managerSetup{
		wrap:   func(c client.Client, _ func()) client.Client { jk.c = c; return c },
		config: func(c *Config) { c.ToolJobs = job.Jobs{Client: c.Client, Wakeups: wakeups} },
	})
	run := b.create(t)

	g := NewWithT(t)
	var jobs batchv1.JobList
	g.Eventually(func() int {
		_ = k8sClient.List(context.Background(), &jobs, client.InNamespace(ns))
		return len(jobs.Items)
	}, 20*time.Second, 20*time.Millisecond).Should(Equal(1))
	j := &jobs.Items[0]
	// The call waits on its Job (it read it once, found it running).
	g.Eventually(wakeups.Waiting, 10*time.Second, 20*time.Millisecond).Should(Equal(1))

	// The tool runs and ends, as the kubelet and the Job controller would
	// record it.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: j.Name + "-p", Namespace: ns, Labels: map[string]string{batchv1.ControllerUidLabel: string(j.UID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: ptr.To(true)}}},
		Spec: *j.Spec.Template.Spec.DeepCopy(),
	}
	if err := k8sClient.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	msg := entrypoint.Encode(entrypoint.Summary{Out: `{"rows":3}`, Size: 10}, []byte(`{"rows":3}`), entrypoint.MaxMessageBytes)
	pod.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: job.ToolContainer,
		Image: pod.Spec.Containers[0].Image, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", Message: string(msg)}}}}}
	if err := k8sClient.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	j.Status.StartTime, j.Status.CompletionTime, j.Status.Succeeded = &j.CreationTimestamp, &now, 1
	j.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastTransitionTime: now},
	}
	if err := k8sClient.Status().Update(context.Background(), j); err != nil {
		t.Fatal(err)
	}

	// Well within the hour between two polls: the informer woke it.
	done := waitOutcome(t, run, 15*time.Second)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "turn 2")
	if msgs := readTranscript(t, done); len(msgs) < 2 || !strings.Contains(msgs[1].Content, `{"rows":3}`) {
		t.Fatalf("the tool's result is not what the model read: %+v", msgs)
	}
	g.Eventually(wakeups.Waiting, 5*time.Second, 20*time.Millisecond).Should(BeZero(), "the call's wait ended")
	// The call is mutating, so its Job was kept as the record that it ran
	// until status held the result; then the reconciler released it
	// (through ToolJobs: the controller imports no executor).
	if j.Labels[job.LabelKeep] != "true" {
		t.Fatalf("the Job of a mutating call is not kept: labels %v", j.Labels)
	}
	g.Eventually(func() int {
		_ = k8sClient.List(context.Background(), &jobs, client.InNamespace(ns))
		return len(jobs.Items)
	}, 10*time.Second, 20*time.Millisecond).Should(BeZero(), "the saved call's Job is released")
}
