package job

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/seal"
	"github.com/agentrun/agentrun/internal/tools/job/entrypoint"
)

const operatorImage = "ghcr.io/agentrun/agentrun:test"

var nsCounter atomic.Int32

// fixture is one test's namespace, run and executor.
type fixture struct {
	t     *testing.T
	ns    string
	run   Run
	clock *fakeClock
	logs  *fakeLogs
	ex    *Executor
}

// newFixture makes a namespace that enforces Pod Security "restricted",
// the run's service account, and an executor for the run.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	ns := fmt.Sprintf("job-%d", nsCounter.Add(1))
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		psaapi.EnforceLevelLabel: string(psaapi.LevelRestricted),
	}}})
	mustCreate(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "billing-agent", Namespace: ns}})
	f := &fixture{
		t:     t,
		ns:    ns,
		clock: &fakeClock{},
		logs:  &fakeLogs{},
		run: Run{
			Namespace:          ns,
			ServiceAccountName: "billing-agent",
			Owner: metav1.OwnerReference{
				APIVersion: "agents.agentrun.dev/v1alpha1", Kind: "AgentRun",
				Name: "explain-double-charge", UID: types.UID(uuid.NewString()),
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			},
		},
	}
	f.ex = f.executor()
	return f
}

func (f *fixture) executor() *Executor {
	ex, err := New(Config{
		Client:        k8sClient,
		Logs:          f.logs,
		OperatorImage: operatorImage,
		PollInterval:  20 * time.Millisecond,
		Now:           f.clock.Now,
	}, f.run, []Tool{refundTool()})
	if err != nil {
		f.t.Fatal(err)
	}
	return ex
}

func refundTool() Tool {
	return Tool{
		Name:    "issue_refund",
		Image:   "ghcr.io/acme/billing-tools:1.4",
		Command: []string{"refund"},
		Args:    []string{"--currency", "EUR"},
		Env:     []corev1.EnvVar{{Name: "BILLING_URL", Value: "http://billing.default.svc"}},
	}
}

func invocation(callID string) loop.Invocation {
	return loop.Invocation{
		CallID:         callID,
		Tool:           "issue_refund",
		Arguments:      json.RawMessage(`{"amount_minor":8240}`),
		IdempotencyKey: "explain-double-charge/" + callID,
		Timeout:        30 * time.Second,
		MaxResultBytes: 100,
	}
}

// start starts inv's call on the fixture's executor and returns its Job.
func (f *fixture) start(inv loop.Invocation) *batchv1.Job {
	f.t.Helper()
	if err := f.ex.Start(context.Background(), inv); err != nil {
		f.t.Fatal(err)
	}
	return f.job(inv)
}

func (f *fixture) job(inv loop.Invocation) *batchv1.Job {
	f.t.Helper()
	var j batchv1.Job
	key := client.ObjectKey{Namespace: f.ns, Name: JobName(f.run.Owner.UID, inv.CallID)}
	if err := k8sClient.Get(context.Background(), key, &j); err != nil {
		f.t.Fatal(err)
	}
	return &j
}

func (f *fixture) poll(inv loop.Invocation) *loop.Result {
	f.t.Helper()
	res, err := f.ex.Poll(context.Background(), inv)
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

// ---- the kubelet and Job controller stand-in ----

// startPod creates the Job's pod as the Job controller would: from the
// template, labelled with the Job's UID, owned by the Job.
func (f *fixture) startPod(j *batchv1.Job) *corev1.Pod {
	f.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        j.Name + "-x7k2p",
			Namespace:   j.Namespace,
			Labels:      map[string]string{batchv1.ControllerUidLabel: string(j.UID), batchv1.JobNameLabel: j.Name},
			Annotations: j.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: *j.Spec.Template.Spec.DeepCopy(),
	}
	for k, v := range j.Spec.Template.Labels {
		pod.Labels[k] = v
	}
	mustCreate(f.t, pod)
	return pod
}

// setPodStatus writes the pod's status as the kubelet would.
func (f *fixture) setPodStatus(pod *corev1.Pod, phase corev1.PodPhase, tool corev1.ContainerState, conds ...corev1.PodCondition) {
	f.t.Helper()
	pod.Status = corev1.PodStatus{
		Phase:      phase,
		Conditions: conds,
		InitContainerStatuses: []corev1.ContainerStatus{{
			Name: InstallContainer, Image: operatorImage,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}},
		}},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: ToolContainer, Image: pod.Spec.Containers[0].Image, State: tool,
		}},
	}
	if err := k8sClient.Status().Update(context.Background(), pod); err != nil {
		f.t.Fatal(err)
	}
}

// exit ends the tool's container with the wrapper's summary as the
// termination message.
func (f *fixture) exit(pod *corev1.Pod, code int32, sum entrypoint.Summary) {
	f.t.Helper()
	phase := corev1.PodSucceeded
	if code != 0 {
		phase = corev1.PodFailed
	}
	msg := entrypoint.Encode(sum, []byte(sum.Out), entrypoint.MaxMessageBytes)
	f.setPodStatus(pod, phase, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: map[bool]string{true: "Completed", false: "Error"}[code == 0], Message: string(msg),
	}})
}

// finishJob writes the Job's terminal conditions as the Job controller would.
func (f *fixture) finishJob(j *batchv1.Job, succeeded bool, reason string) {
	f.t.Helper()
	now := metav1.Now()
	j.Status.StartTime = &j.CreationTimestamp
	if succeeded {
		j.Status.Succeeded = 1
		j.Status.CompletionTime = &now
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastTransitionTime: now},
		}
	} else {
		j.Status.Failed = 1
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: reason, LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, LastTransitionTime: now},
		}
	}
	if err := k8sClient.Status().Update(context.Background(), j); err != nil {
		f.t.Fatal(err)
	}
}

// ---- tests ----

func TestStart_twiceAfterCrashAdoptsTheOneJob(t *testing.T) {
	f := newFixture(t)
	inv := invocation("t3-c1")
	f.start(inv)
	// The operator crashed before it recorded the dispatch; a new process
	// (a new executor) starts the same call again.
	if err := f.executor().Start(context.Background(), inv); err != nil {
		t.Fatalf("second Start = %v, want the existing Job adopted", err)
	}
	var jobs batchv1.JobList
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 1 {
		t.Fatalf("%d Jobs for one call, want 1", len(jobs.Items))
	}
	j := jobs.Items[0]
	if want := "ar-" + strings.ReplaceAll(string(f.run.Owner.UID), "-", "")[:8] + "-t3-c1"; j.Name != want {
		t.Errorf("Job name = %q, want %q", j.Name, want)
	}
	wantLabels := map[string]string{
		LabelRun: "explain-double-charge", LabelRunUID: string(f.run.Owner.UID), LabelCallID: "t3-c1",
		LabelTool: "issue_refund", LabelManagedBy: "agentrun",
	}
	if diff := cmp.Diff(wantLabels, j.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{f.run.Owner}, j.OwnerReferences); diff != "" {
		t.Errorf("owner references (-want +got):\n%s", diff)
	}
}

func TestStart_refusesAJobMadeForAnotherCall(t *testing.T) {
	f := newFixture(t)
	inv := invocation("t1-c1")
	j := f.start(inv)
	j.Annotations[AnnotationCallID] = "someone-else"
	if err := k8sClient.Update(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	err := f.ex.Start(context.Background(), inv)
	if fl := FailureOf(err); fl == nil || fl.Kind != loop.FailUnavailable {
		t.Errorf("Start = %v, want a final Unavailable failure", err)
	}
}

func TestJobSpec_meetsRestrictedPodSecurity(t *testing.T) {
	f := newFixture(t)
	inv := invocation("t1-c1")
	j := f.start(inv)

	// The policy package the API server's admission uses, at the latest version.
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	agg := policy.AggregateCheckResults(eval.EvaluatePod(lv, &j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec))
	if !agg.Allowed {
		t.Errorf("the pod template fails %s: %s: %s", lv, agg.ForbiddenReason(), agg.ForbiddenDetail())
	}

	// And the API server's own admission, which enforces "restricted" in
	// this namespace, admits the pod (it refuses one that is not).
	f.startPod(j)
	bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "privileged", Namespace: f.ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if err := k8sClient.Create(context.Background(), bad); !apierrors.IsForbidden(err) {
		t.Errorf("creating a non-restricted pod = %v, want Forbidden (is Pod Security admission on?)", err)
	}

	spec := j.Spec
	ps := spec.Template.Spec
	checks := []struct {
		name      string
		got, want any
	}{
		{"backoffLimit", *spec.BackoffLimit, int32(0)},
		// 30s for the tool (the wrapper's --timeout), 5m to start, 5s
		// between SIGTERM and SIGKILL, 10s of slack.
		{"activeDeadlineSeconds", *spec.ActiveDeadlineSeconds, int64(345)},
		{"ttlSecondsAfterFinished", *spec.TTLSecondsAfterFinished, int32(600)},
		{"restartPolicy", ps.RestartPolicy, corev1.RestartPolicyNever},
		{"serviceAccountName", ps.ServiceAccountName, "billing-agent"},
		{"automountServiceAccountToken", *ps.AutomountServiceAccountToken, false},
		{"runAsUser", *ps.SecurityContext.RunAsUser, int64(65532)},
		{"init image", ps.InitContainers[0].Image, operatorImage},
		{"init command", ps.InitContainers[0].Command, []string{DefaultEntrypointPath, "install", EntrypointBinary}},
		{"tool command", ps.Containers[0].Command, []string{EntrypointBinary, "--timeout=30s", "--", "refund", "--currency", "EUR"}},
		{"tool env", ps.Containers[0].Env, []corev1.EnvVar{
			{Name: entrypoint.EnvToolArgs, Value: `{"amount_minor":8240}`},
			{Name: entrypoint.EnvIdempotencyKey, Value: "explain-double-charge/t1-c1"},
			{Name: "BILLING_URL", Value: "http://billing.default.svc"},
		}},
		{"termination message path", ps.Containers[0].TerminationMessagePath, "/dev/termination-log"},
		{"termination message policy", ps.Containers[0].TerminationMessagePolicy, corev1.TerminationMessageReadFile},
	}
	for _, c := range checks {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
	for _, c := range append(ps.InitContainers, ps.Containers...) {
		if !*c.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation {
			t.Errorf("container %s: want a read-only root filesystem and no privilege escalation", c.Name)
		}
	}
}

func TestPoll_resultFromTerminationMessage(t *testing.T) {
	f := newFixture(t)
	inv := invocation("t2-c1")
	f.start(inv)
	if res := f.poll(inv); res != nil {
		t.Fatalf("Poll before the pod exists = %+v, want nil (running)", res)
	}
	j := f.job(inv)
	pod := f.startPod(j)
	f.setPodStatus(pod, corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
	if res := f.poll(inv); res != nil {
		t.Fatalf("Poll while the tool runs = %+v, want nil", res)
	}

	f.exit(pod, 0, entrypoint.Summary{Exit: 0, Out: `{"refund":"re_123"}`, Size: 19})
	f.finishJob(j, true, "")
	got := f.poll(inv)
	want := &loop.Result{CallID: "t2-c1", Output: []byte(`{"refund":"re_123"}`), Size: 19}
	if diff := cmp.Diff(want, got, cmpIgnoreDuration); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	if f.logs.calls.Load() != 0 {
		t.Errorf("read the log %d times, want none for a result that fit", f.logs.calls.Load())
	}
}

func TestPoll_longResultIsReadFromTheLog(t *testing.T) {
	f := newFixture(t)
	inv := invocation("t2-c2") // MaxResultBytes 100
	// envtest has no kubelet to serve pods/log, so the log reader is a
	// fake; NewPodLogReader is the real one over client-go's GetLogs.
	f.logs.content = strings.Repeat("y", 50000)
	j := f.start(inv)
	pod := f.startPod(j)
	f.exit(pod, 0, entrypoint.Summary{Exit: 0, OutInLog: true, Size: 50000})
	f.finishJob(j, true, "")

	got := f.poll(inv)
	want := &loop.Result{CallID: "t2-c2", Output: []byte(strings.Repeat("y", 101)), Size: 50000, Truncated: true}
	if diff := cmp.Diff(want, got, cmpIgnoreDuration); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	wantRead := logRead{namespace: f.ns, pod: pod.Name, container: ToolContainer, limit: 101}
	if diff := cmp.Diff(wantRead, f.logs.last, cmp.AllowUnexported(logRead{})); diff != "" {
		t.Errorf("log read (-want +got):\n%s", diff)
	}
}

func TestPoll_deadlineIsTimeout(t *testing.T) {
	f := newFixture(t)
	inv := invocation("t4-c1")
	j := f.start(inv)
	pod := f.startPod(j)
	// The Job controller killed the pod at the deadline; the wrapper saw
	// SIGTERM and exited 143, but the deadline is what happened.
	f.exit(pod, 143, entrypoint.Summary{Exit: 143})
	f.finishJob(j, false, batchv1.JobReasonDeadlineExceeded)

	got := f.poll(inv)
	if got == nil || got.Failure == nil || got.Failure.Kind != loop.FailTimeout {
		t.Fatalf("result = %+v, want a Timeout failure", got)
	}
	want := "the Job's deadline of 345s (the tool's 30s plus up to 5m0s to start) passed before the tool finished"
	if got.Failure.Detail != want {
		t.Errorf("detail %q, want %q", got.Failure.Detail, want)
	}
}

func TestPoll_wrapperDeadlineIsTimeout(t *testing.T) {
	f := newFixture(t)
	inv := invocation("t4-c2")
	j := f.start(inv)
	pod := f.startPod(j)
	// The wrapper stopped the tool 30s after it started (the pod took a
	// while to be scheduled, which did not count).
	f.exit(pod, 143, entrypoint.Summary{Exit: 143, TimedOut: true, StderrTail: "terminated"})
	f.finishJob(j, false, batchv1.JobReasonBackoffLimitExceeded)

	got := f.poll(inv)
	want := &loop.Failure{Kind: loop.FailTimeout, Code: 143, Detail: "the tool did not finish within 30s and was stopped"}
	if got == nil {
		t.Fatal("Poll = nil, want a result")
	}
	if diff := cmp.Diff(want, got.Failure); diff != "" {
		t.Errorf("failure (-want +got):\n%s", diff)
	}
}

func TestPoll_nonZeroExitCarriesCodeAndStderr(t *testing.T) {
	f := newFixture(t)
	inv := invocation("t5-c1")
	j := f.start(inv)
	pod := f.startPod(j)
	f.exit(pod, 3, entrypoint.Summary{Exit: 3, StderrTail: "refund rejected: account closed\n"})
	f.finishJob(j, false, batchv1.JobReasonBackoffLimitExceeded)

	got := f.poll(inv)
	want := &loop.Result{CallID: "t5-c1", Failure: &loop.Failure{Kind: loop.FailExit, Code: 3, Detail: "refund rejected: account closed"}}
	if diff := cmp.Diff(want, got, cmpIgnoreDuration); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
}

// Issue 33.1: exit 75 (EX_TEMPFAIL) says a dependency is down: an
// Unavailable failure, retried as one, and the Job goes so that the retry
// runs the tool again.
func TestPoll_exitTempFailIsUnavailableAndDeletesTheJob(t *testing.T) {
	f := newFixture(t)
	inv := invocation("t5-c2")
	j := f.start(inv)
	pod := f.startPod(j)
	f.exit(pod, 75, entrypoint.Summary{Exit: 75, StderrTail: "billing API: connection refused\n"})
	f.finishJob(j, false, batchv1.JobReasonBackoffLimitExceeded)

	got := f.poll(inv)
	want := &loop.Result{CallID: "t5-c2", Failure: &loop.Failure{Kind: loop.FailUnavailable, Code: 75,
		Detail: "the tool exited 75 (EX_TEMPFAIL: a dependency it needs is unavailable): billing API: connection refused"}}
	if diff := cmp.Diff(want, got, cmpIgnoreDuration); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	if !got.Failure.Transient() {
		t.Error("an EX_TEMPFAIL failure is not transient: it would not be retried")
	}
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(j), &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("reading the Job after the failure = %v, want NotFound", err)
	}
}

func TestPoll_imagePullFailureIsUnavailableAndDeletesTheJob(t *testing.T) {
	f := newFixture(t)
	inv := invocation("t6-c1")
	j := f.start(inv)
	pod := f.startPod(j)
	f.setPodStatus(pod, corev1.PodPending, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "ImagePullBackOff", Message: `Back-off pulling image "ghcr.io/acme/billing-tools:1.4"`,
	}})

	got := f.poll(inv)
	if got == nil || got.Failure == nil || got.Failure.Kind != loop.FailUnavailable {
		t.Fatalf("result = %+v, want Unavailable", got)
	}
	for _, s := range []string{"ghcr.io/acme/billing-tools:1.4", "could not be pulled", "ImagePullBackOff"} {
		if !strings.Contains(got.Failure.Detail, s) {
			t.Errorf("detail %q should contain %q", got.Failure.Detail, s)
		}
	}
	err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(j), &batchv1.Job{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("reading the Job after the failure = %v, want NotFound", err)
	}
}

func TestPoll_podPendingPastTheLimitIsUnavailable(t *testing.T) {
	f := newFixture(t)
	inv := invocation("t7-c1")
	inv.StartupGrace = 10 * time.Minute // longer than the limit: the limit holds
	j := f.start(inv)
	pod := f.startPod(j)
	f.setPodStatus(pod, corev1.PodPending, corev1.ContainerState{}, corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/3 nodes are available: 3 Insufficient memory.", LastTransitionTime: metav1.Now(),
	})
	f.clock.set(pod.CreationTimestamp.Add(4 * time.Minute))
	if res := f.poll(inv); res != nil {
		t.Fatalf("Poll within the pending limit = %+v, want nil", res)
	}

	f.clock.set(pod.CreationTimestamp.Add(5*time.Minute + time.Second))
	got := f.poll(inv)
	want := &loop.Failure{Kind: loop.FailUnavailable, Detail: "pod could not be scheduled: 0/3 nodes are available: 3 Insufficient memory."}
	if got == nil {
		t.Fatal("Poll past the pending limit = nil, want a result")
	}
	if diff := cmp.Diff(want, got.Failure); diff != "" {
		t.Errorf("failure (-want +got):\n%s", diff)
	}
}

func TestExecute_startsAndWaitsForTheResult(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	inv := invocation("t8-c1")

	var got loop.Result
	var wg sync.WaitGroup
	wg.Go(func() { got = f.ex.Execute(context.Background(), inv) })

	var j batchv1.Job
	key := client.ObjectKey{Namespace: f.ns, Name: JobName(f.run.Owner.UID, inv.CallID)}
	g.Eventually(func() error { return k8sClient.Get(context.Background(), key, &j) }).
		WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())
	pod := f.startPod(&j)
	f.exit(pod, 0, entrypoint.Summary{Exit: 0, Out: "ok", Size: 2})
	f.finishJob(&j, true, "")
	wg.Wait()

	want := loop.Result{CallID: "t8-c1", Output: []byte("ok"), Size: 2}
	if diff := cmp.Diff(want, got, cmpIgnoreDuration); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
}

// An operator that stops cancels its waits. The Job must survive it: the
// next operator's Execute of the same call adopts it (one Job, one run of
// the tool) and reads its result.
func TestExecute_cancelledWaitLeavesTheJobForTheNextAttemptToAdopt(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	inv := invocation("t8-c2")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var got loop.Result
	var wg sync.WaitGroup
	wg.Go(func() { got = f.ex.Execute(ctx, inv) })
	key := client.ObjectKey{Namespace: f.ns, Name: JobName(f.run.Owner.UID, inv.CallID)}
	var j batchv1.Job
	g.Eventually(func() error { return k8sClient.Get(context.Background(), key, &j) }).
		WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())
	cancel()
	wg.Wait()

	if got.Failure == nil || got.Failure.Kind != loop.FailUnknown {
		t.Errorf("result = %+v, want OutcomeUnknown", got)
	}
	var left batchv1.Job
	if err := k8sClient.Get(context.Background(), key, &left); err != nil || left.UID != j.UID || left.DeletionTimestamp != nil {
		t.Fatalf("the Job after the cancelled wait: %v (uid %s, deleting %v), want the same Job, not deleted", err, left.UID, left.DeletionTimestamp)
	}

	// The next attempt adopts it and reads the tool's result.
	wg.Go(func() { got = f.ex.Execute(context.Background(), inv) })
	pod := f.startPod(&left)
	f.exit(pod, 0, entrypoint.Summary{Exit: 0, Out: "ok", Size: 2})
	f.finishJob(&left, true, "")
	wg.Wait()
	want := loop.Result{CallID: "t8-c2", Output: []byte("ok"), Size: 2}
	if diff := cmp.Diff(want, got, cmpIgnoreDuration); diff != "" {
		t.Errorf("result of the adopting attempt (-want +got):\n%s", diff)
	}
	var after batchv1.Job
	if err := k8sClient.Get(context.Background(), key, &after); err != nil || after.UID != j.UID {
		t.Errorf("the Job after adoption: %v (uid %s), want the first one (uid %s)", err, after.UID, j.UID)
	}
}

// A wait whose context's deadline passes gives up on the Job: it is
// deleted, so a call declared timed out does not go on.
func TestExecute_waitPastItsDeadlineDeletesTheJob(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	inv := invocation("t8-c3")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	key := client.ObjectKey{Namespace: f.ns, Name: JobName(f.run.Owner.UID, inv.CallID)}
	got := f.ex.Execute(ctx, inv)
	if got.Failure == nil || got.Failure.Kind != loop.FailTimeout {
		t.Errorf("result = %+v, want Timeout", got)
	}
	g.Eventually(func() bool {
		var j batchv1.Job
		err := k8sClient.Get(context.Background(), key, &j)
		return apierrors.IsNotFound(err) || (err == nil && j.DeletionTimestamp != nil)
	}).WithTimeout(10*time.Second).WithPolling(20*time.Millisecond).Should(BeTrue(), "the Job deleted")
}

func TestPoll_unknownToolIsInvalidCall(t *testing.T) {
	f := newFixture(t)
	inv := invocation("t9-c1")
	inv.Tool = "no_such_tool"
	err := f.ex.Start(context.Background(), inv)
	if fl := FailureOf(err); fl == nil || fl.Kind != loop.FailInvalid {
		t.Errorf("Start = %v, want InvalidCall", err)
	}
}

// ---- helpers ----

var cmpIgnoreDuration = cmp.FilterPath(func(p cmp.Path) bool {
	return p.Last().String() == ".Duration"
}, cmp.Ignore())

func mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8sClient.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		return time.Now()
	}
	return c.now
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

type logRead struct {
	namespace, pod, container string
	limit                     int64
}

// fakeLogs serves content as the kubelet would serve the container's log.
type fakeLogs struct {
	content string
	calls   atomic.Int32
	last    logRead
}

func (l *fakeLogs) ReadLog(_ context.Context, namespace, pod, container string, limit int64) ([]byte, error) {
	l.calls.Add(1)
	l.last = logRead{namespace, pod, container, limit}
	b := []byte(l.content)
	if int64(len(b)) > limit {
		b = b[:limit]
	}
	return b, nil
}

// A mutating call's Job is the record that it ran: it has no TTL, a
// resumed call only adopts it, and once its result is saved it is deleted.
func TestMutatingCall_jobIsKeptAdoptedNeverRecreatedThenDeleted(t *testing.T) {
	f := newFixture(t)
	tool := refundTool()
	tool.Mutates = true
	ex, err := New(Config{Client: k8sClient, Logs: f.logs, OperatorImage: operatorImage, PollInterval: 20 * time.Millisecond, Now: f.clock.Now},
		f.run, []Tool{tool})
	if err != nil {
		t.Fatal(err)
	}
	inv := invocation("t2-c1")
	if err := ex.Start(context.Background(), inv); err != nil {
		t.Fatal(err)
	}
	j := f.job(inv)
	if j.Spec.TTLSecondsAfterFinished != nil || j.Labels[LabelKeep] != "true" {
		t.Fatalf("ttl %v, labels %v: a mutating call's Job must be kept", j.Spec.TTLSecondsAfterFinished, j.Labels)
	}
	// A restarted operator resumes the call: it adopts the Job.
	resumed := inv
	resumed.Resumed = true
	if err := ex.Start(context.Background(), resumed); err != nil {
		t.Fatalf("resumed Start = %v, want the Job adopted", err)
	}
	// Gone (deleted by a person): never created again, the outcome is unknown.
	if err := k8sClient.Delete(context.Background(), j, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	err = ex.Start(context.Background(), resumed)
	if fl := FailureOf(err); fl == nil || fl.Kind != loop.FailUnknown || !strings.Contains(fl.Detail, "not run again") {
		t.Fatalf("Start of a resumed call whose Job is gone = %v, want an unknown outcome", err)
	}
	var jobs batchv1.JobList
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(f.ns)); err != nil || len(jobs.Items) != 0 {
		t.Fatalf("a Job was created again: %d (%v)", len(jobs.Items), err)
	}

	// Saved: the kept Job goes, a read's Job (with its TTL) is left alone.
	if err := ex.Start(context.Background(), invocation("t3-c1")); err != nil {
		t.Fatal(err)
	}
	if err := f.ex.Start(context.Background(), invocation("t3-c2")); err != nil {
		t.Fatal(err)
	}
	if err := DeleteSaved(context.Background(), k8sClient, f.ns, f.run.Owner.UID, []string{"t3-c1", "t3-c2", "t9-c9"}); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() []string {
		var names []string
		var jl batchv1.JobList
		_ = k8sClient.List(context.Background(), &jl, client.InNamespace(f.ns))
		for _, j := range jl.Items {
			if j.DeletionTimestamp.IsZero() {
				names = append(names, j.Annotations[AnnotationCallID])
			}
		}
		return names
	}, 5*time.Second, 20*time.Millisecond).Should(Equal([]string{"t3-c2"}))
}

// Issue 27, finding 7: a Job of the call's name that someone else made
// first (with the run's labels and the call's annotation, which anyone
// who may create Jobs can copy) was adopted, and its pod's output read as
// the call's result. With keys, the executor seals each Job it makes and
// adopts only a Job whose seal opens.
func TestStart_neverAdoptsAJobTheOperatorDidNotMake(t *testing.T) {
	f := newFixture(t)
	keys := seal.Ephemeral()
	sealing := func() *Executor {
		ex, err := New(Config{Client: k8sClient, Logs: f.logs, OperatorImage: operatorImage, PollInterval: 20 * time.Millisecond,
			Now: f.clock.Now, Keys: keys}, f.run, []Tool{refundTool()})
		if err != nil {
			t.Fatal(err)
		}
		return ex
	}
	ctx := context.Background()

	// Its own Job, made by one executor, is adopted by the next (a
	// restart), and carries its seal.
	if err := sealing().Start(ctx, invocation("t1-c1")); err != nil {
		t.Fatal(err)
	}
	own := f.job(invocation("t1-c1"))
	if own.Annotations[AnnotationSeal] == "" {
		t.Fatal("the Job carries no seal")
	}
	if err := sealing().Start(ctx, invocation("t1-c1")); err != nil {
		t.Fatalf("the operator's own Job was not adopted: %v", err)
	}

	// A squatter's Job: the executor's own spec with other arguments,
	// labels and annotations copied, the seal of another call.
	squat := f.ex.buildJob(f.ex.tools["issue_refund"], invocation("t2-c1"), "")
	squat.Annotations[AnnotationSeal] = own.Annotations[AnnotationSeal]
	for i, v := range squat.Spec.Template.Spec.Containers[0].Env {
		if v.Name == entrypoint.EnvToolArgs {
			squat.Spec.Template.Spec.Containers[0].Env[i].Value = `{"amount_minor":99999999}`
		}
	}
	mustCreate(t, squat)
	err := sealing().Start(ctx, invocation("t2-c1"))
	if fl := FailureOf(err); fl == nil || fl.Kind != loop.FailUnavailable || !strings.Contains(fl.Detail, "was not made by the operator for this call") {
		t.Fatalf("Start over a squatted Job = %v, want a final Unavailable failure saying so", err)
	}
	// Resumed, a mutating call only adopts: the squatted Job is refused
	// the same way.
	inv := invocation("t2-c1")
	inv.Resumed = true
	if fl := FailureOf(sealing().Start(ctx, inv)); fl == nil || fl.Kind != loop.FailUnavailable {
		t.Fatalf("a resumed call adopted a squatted Job: %v", fl)
	}
}
