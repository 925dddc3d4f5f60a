package job

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/tools/job/entrypoint"
)

// jobOutcome is what Poll concluded from the Job and its pod.
type jobOutcome struct {
	failure *loop.Failure
	out     output
	// deleteJob is set when the executor gave up on a Job that would
	// otherwise go on (an image that cannot be pulled, a pod that cannot
	// be scheduled): a call declared failed must not run later.
	deleteJob bool
}

// output is the tool's result as the executor keeps it: at most
// MaxResultBytes+1 bytes, with the whole length.
type output struct {
	bytes     []byte
	size      int64
	truncated bool
}

func bounded(b []byte, size int64, maxBytes int) output {
	if len(b) > maxBytes+1 {
		b = b[:maxBytes+1]
	}
	if len(b) == 0 {
		b = nil
	}
	return output{bytes: b, size: size, truncated: int64(len(b)) < size}
}

// Waiting reasons of a container whose image cannot be pulled.
var pullFailures = map[string]bool{
	"ErrImagePull":      true,
	"ImagePullBackOff":  true,
	"InvalidImageName":  true,
	"ErrImageNeverPull": true,
}

// inspect reads the Job and its pod: nil while the tool runs.
func (e *Executor) inspect(ctx context.Context, tool *Tool, j *batchv1.Job, inv loop.Invocation) (*jobOutcome, error) {
	failed := condition(j, batchv1.JobFailed, batchv1.JobFailureTarget)
	if failed != nil && failed.Reason == batchv1.JobReasonDeadlineExceeded {
		return &jobOutcome{failure: &loop.Failure{Kind: loop.FailTimeout, Detail: fmt.Sprintf(
			"the Job's deadline of %ds (the tool's %s plus up to %s to start) passed before the tool finished",
			ptrOr(j.Spec.ActiveDeadlineSeconds), inv.Timeout, e.startupLimit(inv))}}, nil
	}
	complete := condition(j, batchv1.JobComplete, batchv1.JobSuccessCriteriaMet)

	pod, err := e.pod(ctx, j)
	if err != nil {
		return nil, err
	}
	if complete != nil || failed != nil {
		return e.finished(ctx, j, pod, failed, inv)
	}
	if j.DeletionTimestamp != nil {
		return &jobOutcome{failure: &loop.Failure{Kind: loop.FailUnavailable,
			Detail: "the Job was deleted before the tool finished"}}, nil
	}

	// Startup is counted from the Job's creation, so a pod created late
	// (a quota) does not get a second allowance.
	limit := e.startupLimit(inv)
	starting := e.cfg.Now().Sub(j.CreationTimestamp.Time)
	if pod == nil {
		if starting > limit {
			return &jobOutcome{deleteJob: true, failure: &loop.Failure{Kind: loop.FailUnavailable, Detail: loop.ClipDetail(fmt.Sprintf(
				"no pod was created for the Job within %s (a quota or an admission policy may refuse it; see the Job's events)", limit))}}, nil
		}
		return nil, nil
	}
	if f := pullFailure(tool, pod); f != nil {
		return &jobOutcome{deleteJob: true, failure: f}, nil
	}
	if pod.Status.Phase == corev1.PodPending && starting > limit {
		return &jobOutcome{deleteJob: true, failure: &loop.Failure{Kind: loop.FailUnavailable, Detail: loop.ClipDetail(pendingDetail(pod, limit))}}, nil
	}
	return nil, nil
}

// finished reads the outcome of a Job that completed or failed (for any
// reason but its deadline).
func (e *Executor) finished(ctx context.Context, j *batchv1.Job, pod *corev1.Pod, failed *batchv1.JobCondition, inv loop.Invocation) (*jobOutcome, error) {
	jobFailure := func() *jobOutcome {
		d := "the Job failed"
		if failed != nil {
			d = fmt.Sprintf("the Job failed: %s: %s", failed.Reason, failed.Message)
		}
		if pod != nil && (pod.Status.Reason != "" || pod.Status.Message != "") {
			d += fmt.Sprintf("; pod %s: %s %s", pod.Name, pod.Status.Reason, pod.Status.Message)
		}
		return &jobOutcome{failure: &loop.Failure{Kind: loop.FailUnavailable, Detail: loop.ClipDetail(d)}}
	}
	term := terminated(pod, ToolContainer)
	if term == nil {
		if failed == nil {
			return &jobOutcome{failure: &loop.Failure{Kind: loop.FailUnknown,
				Detail: "the Job succeeded but its pod is gone, and the result with it"}}, nil
		}
		return jobFailure(), nil
	}

	sum, err := entrypoint.ParseSummary(term.Message)
	if err != nil {
		// The wrapper itself was killed (OOMKilled, evicted) or never ran.
		if term.ExitCode != 0 {
			return &jobOutcome{failure: &loop.Failure{Kind: loop.FailExit, Code: int(term.ExitCode), Detail: loop.ClipDetail(fmt.Sprintf(
				"the container ended (%s, exit code %d) without a result summary", term.Reason, term.ExitCode))}}, nil
		}
		return &jobOutcome{failure: &loop.Failure{Kind: loop.FailUnknown,
			Detail: loop.ClipDetail("the tool's container exited 0 without a result summary: " + err.Error())}}, nil
	}
	maxBytes := inv.MaxResultBytes
	switch {
	case sum.TimedOut:
		return &jobOutcome{failure: &loop.Failure{Kind: loop.FailTimeout, Code: sum.Exit, Detail: fmt.Sprintf(
			"the tool did not finish within %s and was stopped", inv.Timeout)}}, nil
	case sum.Error != "":
		return &jobOutcome{failure: &loop.Failure{Kind: loop.FailUnavailable, Code: sum.Exit, Detail: loop.ClipDetail(sum.Error)}}, nil
	case sum.Exit == loop.ExitTempFail:
		// By the contract the tool changed nothing: the Job goes, so that a
		// retry runs the tool again rather than adopt this failure.
		return &jobOutcome{deleteJob: true, failure: loop.TempFail(sum.StderrTail)}, nil
	case sum.Exit != 0:
		detail := strings.TrimSpace(sum.StderrTail)
		if detail == "" {
			detail = fmt.Sprintf("the tool exited with code %d and wrote nothing to standard error", sum.Exit)
		}
		return &jobOutcome{
			failure: &loop.Failure{Kind: loop.FailExit, Code: sum.Exit, Detail: clip.CutTail(detail, loop.MaxDetailBytes, "...")},
			out:     bounded([]byte(sum.Out), sum.Size, maxBytes),
		}, nil
	case failed != nil:
		return jobFailure(), nil
	case !sum.OutInLog:
		return &jobOutcome{out: bounded([]byte(sum.Out), sum.Size, maxBytes)}, nil
	}

	if e.cfg.Logs == nil {
		return &jobOutcome{failure: &loop.Failure{Kind: loop.FailUnknown, Detail: fmt.Sprintf(
			"the result (%d bytes) is longer than the termination message and the executor has no log reader", sum.Size)}}, nil
	}
	b, err := e.cfg.Logs.ReadLog(ctx, pod.Namespace, pod.Name, ToolContainer, int64(maxBytes)+1)
	if apierrors.IsNotFound(err) {
		return &jobOutcome{failure: &loop.Failure{Kind: loop.FailUnknown, Detail: fmt.Sprintf(
			"the tool exited 0 but its result (%d bytes) could not be read: the pod's log is gone", sum.Size)}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the result of %s/%s from its log: %w", pod.Namespace, pod.Name, err)
	}
	return &jobOutcome{out: bounded(b, sum.Size, maxBytes)}, nil
}

// pod returns the Job's pod: the one whose tool container terminated, or
// else the newest. A Job may have had more than one.
func (e *Executor) pod(ctx context.Context, j *batchv1.Job) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := e.cfg.Pods.List(ctx, &pods, client.InNamespace(j.Namespace),
		client.MatchingLabels{batchv1.ControllerUidLabel: string(j.UID)}); err != nil {
		return nil, fmt.Errorf("listing the pods of Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	var best *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case best == nil:
			best = p
		case (terminated(p, ToolContainer) != nil) != (terminated(best, ToolContainer) != nil):
			if terminated(p, ToolContainer) != nil {
				best = p
			}
		case p.CreationTimestamp.After(best.CreationTimestamp.Time):
			best = p
		}
	}
	return best, nil
}

func terminated(pod *corev1.Pod, container string) *corev1.ContainerStateTerminated {
	if pod == nil {
		return nil
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == container {
			return s.State.Terminated
		}
	}
	return nil
}

func pullFailure(tool *Tool, pod *corev1.Pod) *loop.Failure {
	image := func(containers []corev1.Container, name string) string {
		for _, c := range containers {
			if c.Name == name {
				return c.Image
			}
		}
		return ""
	}
	check := func(statuses []corev1.ContainerStatus, init bool) *loop.Failure {
		for _, s := range statuses {
			w := s.State.Waiting
			if w == nil || !pullFailures[w.Reason] {
				continue
			}
			what := fmt.Sprintf("the image %q of tool %q", image(pod.Spec.Containers, s.Name), tool.Name)
			if init {
				what = fmt.Sprintf("the operator's image %q (init container %s)", image(pod.Spec.InitContainers, s.Name), s.Name)
			}
			return &loop.Failure{Kind: loop.FailUnavailable, Detail: loop.ClipDetail(fmt.Sprintf(
				"%s could not be pulled (%s): %s", what, w.Reason, w.Message))}
		}
		return nil
	}
	if f := check(pod.Status.InitContainerStatuses, true); f != nil {
		return f
	}
	return check(pod.Status.ContainerStatuses, false)
}

func pendingDetail(pod *corev1.Pod, limit time.Duration) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			why := c.Message
			if why == "" {
				why = c.Reason
			}
			if why == "" {
				why = "no node was found within " + limit.String()
			}
			return "pod could not be scheduled: " + why
		}
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, s := range statuses {
			if w := s.State.Waiting; w != nil && w.Reason != "" {
				return fmt.Sprintf("pod did not start within %s: container %s is waiting: %s: %s", limit, s.Name, w.Reason, w.Message)
			}
		}
	}
	return fmt.Sprintf("pod did not start within %s", limit)
}

func condition(j *batchv1.Job, types ...batchv1.JobConditionType) *batchv1.JobCondition {
	for _, t := range types {
		for i := range j.Status.Conditions {
			c := &j.Status.Conditions[i]
			if c.Type == t && c.Status == corev1.ConditionTrue {
				return c
			}
		}
	}
	return nil
}

func ptrOr[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
