package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/seal"
)

// Tool is one job tool as the AgentRun declares it (spec.tools[].job).
type Tool struct {
	// Name is the tool's name, as the model calls it.
	Name            string
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// Command is required: the wrapper runs it, and cannot learn the
	// image's own entrypoint.
	Command   []string
	Args      []string
	Env       []corev1.EnvVar
	Resources corev1.ResourceRequirements
	// Egress lists where the tool's pods may connect besides DNS (see
	// Config.NoNetworkPolicy).
	Egress []EgressRule
	// MountServiceAccountToken mounts the run's service account token in
	// the tool's pod; off unless the tool asks for it.
	MountServiceAccountToken bool
	// Mutates marks a tool that changes something. Its Job is kept after
	// it finishes (no TTL) until the operator has saved the result, and a
	// resumed call of it only ever adopts its Job, never creates one.
	Mutates bool
	// Pod places the tool's pod and labels it (spec.tools[].job.pod).
	Pod Pod
}

// Pod is what a manifest may set of a tool's pod. Everything else (its
// security context, volumes, service account) stays the executor's.
type Pod struct {
	NodeSelector     map[string]string
	Tolerations      []corev1.Toleration
	Labels           map[string]string
	Annotations      map[string]string
	RuntimeClassName *string
}

// Run is what the executor needs to know of the AgentRun it works for.
type Run struct {
	// Namespace of the run, where its Jobs are created.
	Namespace string
	// ServiceAccountName the tools' pods run as; empty means "default".
	ServiceAccountName string
	// Owner is the owner reference to the AgentRun, set on every Job; its
	// UID and Name are the run's.
	Owner metav1.OwnerReference
	// Labels are added to every Job and its pod (the run's shard label,
	// so a sharded operator's cache selects the Jobs of its runs). The
	// executor's own labels win over these.
	Labels map[string]string
}

// Config is how the operator is deployed; it is the same for every run.
type Config struct {
	// Client creates, reads and deletes Jobs.
	Client client.Client
	// Pods reads the Jobs' pods; nil means Client. Give an uncached
	// reader (the manager's APIReader) rather than cache every pod.
	Pods client.Reader
	// Logs reads a result too long for the termination message.
	Logs LogReader
	// OperatorImage is the image the init container runs; it holds the
	// agentrun-entrypoint binary at EntrypointPath.
	OperatorImage string
	// EntrypointPath defaults to DefaultEntrypointPath.
	EntrypointPath string
	// TTLAfterFinished defaults to DefaultTTLAfterFinished.
	TTLAfterFinished time.Duration
	// PendingLimit is how long a pod may stay Pending before the call is
	// failed as Unavailable; defaults to DefaultPendingLimit. A call's
	// StartupGrace, when shorter, takes its place.
	PendingLimit time.Duration
	// RunAsUser is the non-root uid of both containers; defaults to
	// DefaultRunAsUser.
	RunAsUser int64
	// AssignedUser leaves the pods' runAsUser, runAsGroup and fsGroup
	// unset (RunAsUser is then unused), for platforms that assign each
	// namespace's pods a uid of their own and refuse any other, as
	// OpenShift's restricted-v2 SecurityContextConstraints do. The pods
	// still must run as non-root.
	AssignedUser bool
	// Keys seal every Job the executor makes (AnnotationSeal), and only a
	// Job whose seal opens is adopted: a Job of the call's name that a
	// tenant made first is never taken for the call's. Nil seals nothing
	// and adopts by labels alone (tests of the executor alone).
	Keys *seal.Keyring
	// PollInterval is Execute's first interval between two polls; it
	// doubles up to 4 times that. Defaults to one second. With Wakeups,
	// it applies only while the Job's pod has not started (an image that
	// cannot be pulled, a pod that cannot be scheduled show on the pod,
	// not on the Job) and while the Job is not yet in the client's cache.
	PollInterval time.Duration
	// Wakeups, when set, is fed by the operator's Job informer: Execute
	// reads a Job whose pod runs only when the Job changes, so its end
	// wakes the call at once and a running tool costs no reads.
	Wakeups *Wakeups
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
	// Resources are the tool containers' default requests and limits and
	// their caps. A nil list takes DefaultRequests, DefaultLimits or
	// DefaultMax; an empty one sets no default (or no cap).
	Resources Resources
	// NoNetworkPolicy leaves tool pods without the NetworkPolicy that
	// otherwise confines each tool's pods to DNS and its egress rules.
	NoNetworkPolicy bool
}

// Executor runs the job tools of one run.
type Executor struct {
	cfg   Config
	run   Run
	tools map[string]*Tool
}

var _ loop.Toolbox = (*Executor)(nil)

// New checks the configuration and the tools and returns an executor for
// one run.
func New(cfg Config, run Run, tools []Tool) (*Executor, error) {
	if cfg.Client == nil {
		return nil, errors.New("job executor: no client")
	}
	if cfg.OperatorImage == "" {
		return nil, errors.New("job executor: no operator image to install the entrypoint from")
	}
	if run.Namespace == "" || run.Owner.UID == "" || run.Owner.Name == "" {
		return nil, errors.New("job executor: the run needs a namespace and an owner with a name and a UID")
	}
	if cfg.Pods == nil {
		cfg.Pods = cfg.Client
	}
	if cfg.EntrypointPath == "" {
		cfg.EntrypointPath = DefaultEntrypointPath
	}
	if cfg.TTLAfterFinished <= 0 {
		cfg.TTLAfterFinished = DefaultTTLAfterFinished
	}
	if cfg.PendingLimit <= 0 {
		cfg.PendingLimit = DefaultPendingLimit
	}
	if cfg.RunAsUser <= 0 {
		cfg.RunAsUser = DefaultRunAsUser
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Resources.Requests == nil {
		cfg.Resources.Requests = DefaultRequests
	}
	if cfg.Resources.Limits == nil {
		cfg.Resources.Limits = DefaultLimits
	}
	if cfg.Resources.Max == nil {
		cfg.Resources.Max = DefaultMax
	}
	e := &Executor{cfg: cfg, run: run, tools: map[string]*Tool{}}
	for i := range tools {
		t := tools[i]
		res, err := cfg.Resources.resourcesFor(t.Name, t.Resources)
		if err != nil {
			return nil, err
		}
		t.Resources = res
		if err := checkPod(t.Name, t.Pod); err != nil {
			return nil, err
		}
		if err := checkEnv(t.Name, t.Env); err != nil {
			return nil, err
		}
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("job executor: tool %d has no name", i)
		case t.Image == "":
			return nil, fmt.Errorf("job executor: tool %q has no image", t.Name)
		case len(t.Command) == 0:
			return nil, fmt.Errorf("job executor: tool %q has no command (the entrypoint wrapper runs it and cannot read the image's own)", t.Name)
		case e.tools[t.Name] != nil:
			return nil, fmt.Errorf("job executor: tool %q is declared twice", t.Name)
		}
		e.tools[t.Name] = &t
	}
	return e, nil
}

// CallError is returned by Start for a call that can never run; the caller
// records Failure as the call's result instead of retrying.
type CallError struct {
	Failure loop.Failure
}

func (e *CallError) Error() string {
	return fmt.Sprintf("%s: %s", e.Failure.Kind, e.Failure.Detail)
}

// FailureOf returns the failure of a Start error that is final, or nil for
// an error worth retrying.
func FailureOf(err error) *loop.Failure {
	if ce, ok := errors.AsType[*CallError](err); ok {
		f := ce.Failure
		return &f
	}
	return nil
}

// ErrJobNotFound is returned by Poll when the call has no Job: it was never
// started, the client's cache has not seen it yet, or it was deleted
// (by a person, or by ttlSecondsAfterFinished before its result was read).
// The caller decides whether to poll again shortly or to record the
// call's outcome as unknown.
var ErrJobNotFound = errors.New("the call has no Job")

// Start creates the call's Job, or adopts the one an earlier attempt
// created. It returns at once. A *CallError means the call cannot run; any
// other error is worth retrying.
func (e *Executor) Start(ctx context.Context, inv loop.Invocation) error {
	tool, err := e.tool(inv)
	if err != nil {
		return err
	}
	want := e.buildJob(tool, inv, traceParent(ctx))
	if e.cfg.Keys != nil {
		want.Annotations[AnnotationSeal] = e.cfg.Keys.Seal(purposeJob, jobSealParts(want)...)
	}
	if err := e.ensureNetworkPolicy(ctx, tool); err != nil {
		return err
	}
	if inv.Resumed && tool.Mutates {
		// An earlier dispatch may have run it: adopt its Job or nothing.
		err := e.adopt(ctx, want)
		if apierrors.IsNotFound(errors.Unwrap(err)) {
			return &CallError{Failure: loop.Failure{Kind: loop.FailUnknown, Detail: loop.ClipDetail(fmt.Sprintf(
				"its Job %s is gone (deleted, or never created before the operator stopped), so it was not run again", want.Name))}}
		}
		return err
	}
	err = e.cfg.Client.Create(ctx, want)
	switch {
	case err == nil:
		return nil
	case apierrors.IsAlreadyExists(err):
		return e.adopt(ctx, want)
	case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err):
		return &CallError{Failure: loop.Failure{Kind: loop.FailUnavailable,
			Detail: loop.ClipDetail(fmt.Sprintf("the Job for tool %q could not be created: %v", tool.Name, err))}}
	default:
		return fmt.Errorf("creating Job %s/%s: %w", want.Namespace, want.Name, err)
	}
}

// adopt accepts an existing Job of the same name only if it was made for
// this run and this call.
func (e *Executor) adopt(ctx context.Context, want *batchv1.Job) error {
	var got batchv1.Job
	if err := e.cfg.Client.Get(ctx, client.ObjectKeyFromObject(want), &got); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted between our create and this read; the next Start
			// creates it again (unless the call mutates and is resumed).
			return fmt.Errorf("job %s/%s vanished while being adopted: %w", want.Namespace, want.Name, err)
		}
		return fmt.Errorf("reading Job %s/%s to adopt it: %w", want.Namespace, want.Name, err)
	}
	if got.Labels[LabelRunUID] != want.Labels[LabelRunUID] || got.Annotations[AnnotationCallID] != want.Annotations[AnnotationCallID] {
		return &CallError{Failure: loop.Failure{Kind: loop.FailUnavailable, Detail: loop.ClipDetail(fmt.Sprintf(
			"a Job named %s already exists and was not made for this call", want.Name))}}
	}
	if e.cfg.Keys != nil {
		// Labels and annotations anyone who may create Jobs can copy;
		// the seal only the operator can make.
		if err := e.cfg.Keys.Open(got.Annotations[AnnotationSeal], purposeJob, jobSealParts(&got)...); err != nil {
			return &CallError{Failure: loop.Failure{Kind: loop.FailUnavailable, Detail: loop.ClipDetail(fmt.Sprintf(
				"a Job named %s already exists and was not made by the operator for this call (%v); it was not adopted", want.Name, err))}}
		}
	}
	return nil
}

// SealKey is the id of the key that opening the seal of j, a tool Job,
// needs (seal.Keyring.Needs): "" when it carries none that is the
// operator's.
func SealKey(kr *seal.Keyring, j *batchv1.Job) string {
	return kr.Needs(j.Annotations[AnnotationSeal], purposeJob, jobSealParts(j)...)
}

// purposeJob is the purpose of a tool Job's seal.
const purposeJob = "agentrun/tool-job"

// jobSealParts is what a tool Job's seal covers: its name, the run and
// call it was made for, and what each of its containers runs (image,
// command, arguments and environment: the literal values, which hold the
// call's arguments, and the Secret keys the others are read from). None
// of these is defaulted or changed by the API server.
func jobSealParts(j *batchv1.Job) [][]byte {
	type run struct {
		Image         string
		Command, Args []string
		Env           [][2]string
	}
	var runs []run
	spec := &j.Spec.Template.Spec
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			r := run{Image: c.Image, Command: c.Command, Args: c.Args}
			for _, v := range c.Env {
				value := v.Value
				if ref := secretRef(v); ref != nil {
					// A NUL is in no literal value (no process
					// environment holds one), so this is told apart.
					value = "\x00secretKeyRef\x00" + ref.Name + "\x00" + ref.Key
				}
				r.Env = append(r.Env, [2]string{v.Name, value})
			}
			runs = append(runs, r)
		}
	}
	containers, _ := json.Marshal(runs)
	return [][]byte{[]byte(j.Name), []byte(j.Labels[LabelRunUID]), []byte(j.Annotations[AnnotationCallID]), containers}
}

// Poll reports the call's result: nil while the tool runs, a Result once
// it ended (successfully or not). An error is worth retrying; it is
// ErrJobNotFound when the Job does not exist.
func (e *Executor) Poll(ctx context.Context, inv loop.Invocation) (*loop.Result, error) {
	res, _, err := e.poll(ctx, inv)
	return res, err
}

// poll is Poll, and reports whether the Job's pod has started (the Job
// counts a ready pod): from then on only the Job's own changes matter.
func (e *Executor) poll(ctx context.Context, inv loop.Invocation) (*loop.Result, bool, error) {
	tool, err := e.tool(inv)
	if err != nil {
		if f := FailureOf(err); f != nil {
			return e.result(inv, nil, f, output{}), false, nil
		}
		return nil, false, err
	}
	var j batchv1.Job
	key := e.jobKey(inv)
	if err := e.cfg.Client.Get(ctx, key, &j); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, fmt.Errorf("job %s: %w", key, ErrJobNotFound)
		}
		return nil, false, fmt.Errorf("reading Job %s: %w", key, err)
	}
	started := ptrOr(j.Status.Ready) > 0
	o, err := e.inspect(ctx, tool, &j, inv)
	if err != nil || o == nil {
		return nil, started, err
	}
	if o.deleteJob {
		if err := e.deleteJob(ctx, &j); err != nil {
			return nil, started, err
		}
	}
	return e.result(inv, &j, o.failure, o.out), started, nil
}

func (e *Executor) jobKey(inv loop.Invocation) client.ObjectKey {
	return client.ObjectKey{Namespace: e.run.Namespace, Name: JobName(e.run.Owner.UID, inv.CallID)}
}

// Execute starts the call and waits for its result: woken by the Job's
// changes when Config.Wakeups is set (polling only while its pod has not
// started), else polling with a growing interval. The wait is bounded by the Job's deadline plus a few
// seconds; past it, or past ctx's deadline, the Job is deleted and the call
// fails with Timeout. When ctx is cancelled instead (the operator is
// stopping), the Job is left to run and the call's outcome is unknown to
// this caller: the next Execute of the same call, by a restarted operator,
// adopts the Job and reads its result. Deleting it there would kill a tool
// in the middle of its work and have the next operator run it again in a
// new Job.
func (e *Executor) Execute(ctx context.Context, inv loop.Invocation) loop.Result {
	start := e.cfg.Now()
	var changed <-chan struct{}
	if e.cfg.Wakeups != nil {
		// Subscribed before the Job exists, so that no change is missed.
		ch, done := e.cfg.Wakeups.subscribe(e.jobKey(inv))
		defer done()
		changed = ch
	}
	if err := e.startWithRetry(ctx, inv); err != nil {
		f := FailureOf(err)
		if f == nil {
			f = &loop.Failure{Kind: loop.FailUnavailable, Detail: loop.ClipDetail("the Job could not be created: " + err.Error())}
		}
		return *e.resultSince(inv, start, f)
	}
	wait := time.Duration(e.jobDeadline(inv))*time.Second + 20*time.Second
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()

	interval := e.cfg.PollInterval
	missing := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return *e.resultSince(inv, start, &loop.Failure{Kind: loop.FailUnknown,
					Detail: "the wait was cancelled; the Job was left running for the next attempt of this call to adopt"})
			}
			e.abandon(inv)
			return *e.resultSince(inv, start, &loop.Failure{Kind: loop.FailTimeout,
				Detail: fmt.Sprintf("no result within %s; the Job was deleted", wait)})
		case <-timer.C:
		case <-changed:
			if !timer.Stop() {
				select { // drain a tick that fired meanwhile
				case <-timer.C:
				default:
				}
			}
		}
		res, started, err := e.poll(ctx, inv)
		if res != nil {
			res.Duration = e.cfg.Now().Sub(start)
			return *res
		}
		if errors.Is(err, ErrJobNotFound) {
			// A cached client may not have seen the new Job yet; a Job
			// that stays missing was deleted under us.
			if missing++; missing > 5 {
				return *e.resultSince(inv, start, &loop.Failure{Kind: loop.FailUnknown,
					Detail: "the Job was deleted before its result was read"})
			}
		} else {
			missing = 0
		}
		if changed != nil && started && err == nil {
			// The pod runs: only a change of the Job (its end, its
			// deadline, its deletion) can bring the result.
			continue
		}
		timer.Reset(interval)
		interval = min(2*interval, 4*e.cfg.PollInterval)
	}
}

// startWithRetry retries Start's transient errors a few times.
func (e *Executor) startWithRetry(ctx context.Context, inv loop.Invocation) error {
	var err error
	delay := e.cfg.PollInterval
	for range 3 {
		if err = e.Start(ctx, inv); err == nil || FailureOf(err) != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay *= 2
	}
	return err
}

// abandon deletes the call's Job after Execute gave up waiting for it.
func (e *Executor) abandon(inv loop.Invocation) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: e.run.Namespace, Name: JobName(e.run.Owner.UID, inv.CallID)}}
	_ = e.deleteJob(ctx, j)
}

func (e *Executor) deleteJob(ctx context.Context, j *batchv1.Job) error {
	err := e.cfg.Client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	return nil
}

func (e *Executor) tool(inv loop.Invocation) (*Tool, error) {
	t := e.tools[inv.Tool]
	if t == nil {
		return nil, &CallError{Failure: loop.Failure{Kind: loop.FailInvalid, Detail: loop.ClipDetail(fmt.Sprintf("no job tool named %q", inv.Tool))}}
	}
	if f := checkInvocation(inv); f != nil {
		return nil, &CallError{Failure: *f}
	}
	return t, nil
}

// result builds a Result; the duration runs from the Job's creation to
// its completion when the Job tells.
func (e *Executor) result(inv loop.Invocation, j *batchv1.Job, f *loop.Failure, out output) *loop.Result {
	r := &loop.Result{CallID: inv.CallID, Failure: f, Output: out.bytes, Size: out.size, Truncated: out.truncated}
	if j != nil && !j.CreationTimestamp.IsZero() {
		end := e.cfg.Now()
		if j.Status.CompletionTime != nil {
			end = j.Status.CompletionTime.Time
		}
		r.Duration = max(0, end.Sub(j.CreationTimestamp.Time))
	}
	return r
}

func (e *Executor) resultSince(inv loop.Invocation, start time.Time, f *loop.Failure) *loop.Result {
	return &loop.Result{CallID: inv.CallID, Failure: f, Duration: e.cfg.Now().Sub(start)}
}

// DeleteSaved deletes the kept Jobs (those of mutating calls) of these
// calls of the run, once the run's status holds their results. Jobs of
// other calls, runs or tools are left alone.
func DeleteSaved(ctx context.Context, c client.Client, namespace string, runUID types.UID, callIDs []string) error {
	var errs []error
	for _, id := range callIDs {
		var j batchv1.Job
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: JobName(runUID, id)}, &j); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
			continue
		}
		if j.Labels[LabelKeep] != "true" || j.Labels[LabelRunUID] != labelValue(string(runUID)) || j.Annotations[AnnotationCallID] != id {
			continue
		}
		err := c.Delete(ctx, &j, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &j.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
