package job

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/tools/job/entrypoint"
)

// Labels and annotations on every Job (and so on its pod).
const (
	// LabelRun is the AgentRun's name (shortened with a hash if longer than
	// a label value may be).
	LabelRun = "agents.agentrun.dev/run"
	// LabelRunUID is the AgentRun's UID; adoption checks it.
	LabelRunUID = "agents.agentrun.dev/run-uid"
	// LabelCallID is the call id (t3-c1).
	LabelCallID = "agents.agentrun.dev/call-id"
	// LabelTool is the tool's name, made a valid label value.
	LabelTool = "agents.agentrun.dev/tool"
	// LabelKeep marks the Job of a mutating call: it has no TTL and is
	// deleted once the run's status holds its result.
	LabelKeep = "agents.agentrun.dev/keep-until-saved"
	// LabelManagedBy is app.kubernetes.io/managed-by, set to "agentrun".
	LabelManagedBy = "app.kubernetes.io/managed-by"

	// AnnotationCallID and AnnotationTool keep the exact call id and tool
	// name when the labels had to change them.
	AnnotationCallID = "agents.agentrun.dev/call-id"
	AnnotationTool   = "agents.agentrun.dev/tool"
	// AnnotationSeal seals the Job to the run, the call and what its
	// containers run (Config.Keys): a Job of the same name that someone
	// else made is never adopted.
	AnnotationSeal = "agents.agentrun.dev/job-seal"
)

// Names inside the pod.
const (
	// ToolContainer is the name of the container that runs the tool.
	ToolContainer = "tool"
	// InstallContainer is the init container that installs the wrapper.
	InstallContainer = "install-entrypoint"
	// BinDir is where the wrapper is installed in both containers.
	BinDir = "/agentrun/bin"
	// EntrypointBinary is the wrapper's path in the tool's container.
	EntrypointBinary = BinDir + "/agentrun-entrypoint"

	binVolume = "agentrun-bin"
	tmpVolume = "tmp"
)

// Defaults of Config.
const (
	DefaultTTLAfterFinished = 600 * time.Second
	DefaultPendingLimit     = 5 * time.Minute
	DefaultRunAsUser        = int64(65532)
	// DefaultEntrypointPath is where the operator's image keeps the
	// agentrun-entrypoint binary.
	DefaultEntrypointPath = "/agentrun-entrypoint"
	// MaxArgumentBytes bounds the arguments JSON: it travels in an
	// environment variable, and Linux refuses one string of 128 KiB or more
	// in a process's environment.
	MaxArgumentBytes = 64 << 10
)

// JobName is the name of the Job for one call of one run: "ar-", the first
// 8 characters of the run's UID, "-" and the call id. A call id that is not
// a DNS-1123 label as it is, or that would make the name longer than 63
// characters, is shortened and followed by a hash of it, so distinct call
// ids keep distinct names.
func JobName(runUID types.UID, callID string) string {
	uid := strings.ToLower(strings.ReplaceAll(string(runUID), "-", ""))
	if len(uid) > 8 {
		uid = uid[:8]
	}
	prefix := "ar-" + uid + "-"
	if clean := dns1123(callID); clean != "" && clean == callID && len(prefix)+len(clean) <= validation.DNS1123LabelMaxLength {
		return prefix + clean
	}
	h := shortHash(callID)
	room := validation.DNS1123LabelMaxLength - len(prefix) - len(h) - 1
	clean := strings.Trim(clip.Head(dns1123(callID), room), "-")
	if clean == "" {
		return prefix + h
	}
	return prefix + clean + "-" + h
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

func dns1123(s string) string {
	return strings.Trim(notDNS.ReplaceAllString(strings.ToLower(s), "-"), "-")
}

var notLabel = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// labelValue makes s a valid label value: unchanged when it already is
// one, otherwise cleaned, cut and followed by a hash of s.
func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	h := shortHash(s)
	clean := notLabel.ReplaceAllString(s, "-")
	clean = clip.Head(clean, validation.LabelValueMaxLength-len(h)-1)
	clean = strings.TrimFunc(clean, func(r rune) bool { return !isAlnum(r) })
	if clean == "" {
		return h
	}
	return clean + "-" + h
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:8]
}

// deadlineSlack is added to the Job's deadline beyond the tool's timeout,
// its startup allowance and its kill grace, so the wrapper's own deadline
// (which says TimedOut) fires first and the Job's is only a backstop.
const deadlineSlack = 10 * time.Second

// startupLimit is how long the pod may take to start (be scheduled, pull
// its images): the configured pending limit, or the call's startup grace
// when that is shorter (the caller's own backstop counts on it).
func (e *Executor) startupLimit(inv loop.Invocation) time.Duration {
	if inv.StartupGrace > 0 && inv.StartupGrace < e.cfg.PendingLimit {
		return inv.StartupGrace
	}
	return e.cfg.PendingLimit
}

// jobDeadline is the Job's activeDeadlineSeconds. The tool's own timeout
// is enforced by the wrapper from the moment the tool starts; the Job's
// deadline, which counts from the Job's start, adds the startup allowance,
// the kill grace and a little slack to it.
func (e *Executor) jobDeadline(inv loop.Invocation) int64 {
	d := inv.Timeout + e.startupLimit(inv) + entrypoint.DefaultKillGrace + deadlineSlack
	return max(1, int64(math.Ceil(d.Seconds())))
}

// restricted is a container security context that passes the Pod Security
// "restricted" profile on its own; a nil uid leaves the user and group to
// the platform (Config.AssignedUser).
func restricted(uid *int64) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                uid,
		RunAsGroup:               uid,
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// buildJob is the Job for one call. It is a pure function of its inputs,
// so the same call always asks for the same Job. traceParent, when set,
// is the tool call span's W3C traceparent, given to the tool as
// TRACEPARENT.
func (e *Executor) buildJob(tool *Tool, inv loop.Invocation, traceParent string) *batchv1.Job {
	owner := e.run.Owner
	labels := map[string]string{}
	for k, v := range e.run.Labels {
		labels[k] = v
	}
	for k, v := range map[string]string{
		LabelRun:       labelValue(owner.Name),
		LabelRunUID:    labelValue(string(owner.UID)),
		LabelCallID:    labelValue(inv.CallID),
		LabelTool:      labelValue(tool.Name),
		LabelManagedBy: "agentrun",
	} {
		labels[k] = v
	}
	if tool.Mutates {
		labels[LabelKeep] = "true"
	}
	annotations := map[string]string{
		AnnotationCallID: inv.CallID,
		AnnotationTool:   tool.Name,
	}
	// The pod's own labels and annotations come first, so the executor's
	// win: it finds its pods and its NetworkPolicy selects them by these.
	podLabels, podAnnotations := map[string]string{}, map[string]string{}
	maps.Copy(podLabels, tool.Pod.Labels)
	maps.Copy(podLabels, labels)
	maps.Copy(podAnnotations, tool.Pod.Annotations)
	maps.Copy(podAnnotations, annotations)
	var uid *int64
	if !e.cfg.AssignedUser {
		uid = ptr.To(e.cfg.RunAsUser)
	}

	env := []corev1.EnvVar{
		{Name: entrypoint.EnvToolArgs, Value: string(inv.Arguments)},
		{Name: entrypoint.EnvIdempotencyKey, Value: inv.IdempotencyKey},
	}
	for _, v := range tool.Env {
		// The contract's variables are the executor's to set, and so is
		// the trace's parent when there is a trace.
		if v.Name != entrypoint.EnvToolArgs && v.Name != entrypoint.EnvIdempotencyKey &&
			(traceParent == "" || v.Name != EnvTraceParent) {
			// A Secret's value stays a reference: the kubelet reads it
			// for the pod, and it is never in the Job.
			env = append(env, *v.DeepCopy())
		}
	}
	if traceParent != "" {
		env = append(env, corev1.EnvVar{Name: EnvTraceParent, Value: traceParent})
	}
	command := append([]string{EntrypointBinary, "--timeout=" + inv.Timeout.String(), "--"}, tool.Command...)
	command = append(command, tool.Args...)

	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:            JobName(owner.UID, inv.CallID),
			Namespace:       e.run.Namespace,
			Labels:          labels,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](0),
			Completions:             ptr.To[int32](1),
			Parallelism:             ptr.To[int32](1),
			ActiveDeadlineSeconds:   ptr.To(e.jobDeadline(inv)),
			TTLSecondsAfterFinished: e.ttl(tool),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnnotations},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					NodeSelector:                 maps.Clone(tool.Pod.NodeSelector),
					Tolerations:                  slices.Clone(tool.Pod.Tolerations),
					RuntimeClassName:             tool.Pod.RuntimeClassName,
					ServiceAccountName:           e.run.ServiceAccountName,
					AutomountServiceAccountToken: ptr.To(tool.MountServiceAccountToken),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      uid,
						RunAsGroup:     uid,
						FSGroup:        uid,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Volumes: []corev1.Volume{
						{Name: binVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
							SizeLimit: ptr.To(resource.MustParse("64Mi")),
						}}},
						{Name: tmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
							SizeLimit: tmpLimit(tool),
						}}},
					},
					InitContainers: []corev1.Container{{
						Name:                     InstallContainer,
						Image:                    e.cfg.OperatorImage,
						ImagePullPolicy:          corev1.PullIfNotPresent,
						Command:                  []string{e.cfg.EntrypointPath, "install", EntrypointBinary},
						VolumeMounts:             []corev1.VolumeMount{{Name: binVolume, MountPath: BinDir}},
						Resources:                installResources(),
						SecurityContext:          restricted(uid),
						TerminationMessagePath:   corev1.TerminationMessagePathDefault,
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
					}},
					Containers: []corev1.Container{{
						Name:            ToolContainer,
						Image:           tool.Image,
						ImagePullPolicy: tool.ImagePullPolicy,
						Command:         command,
						Env:             env,
						Resources:       tool.Resources,
						VolumeMounts: []corev1.VolumeMount{
							{Name: binVolume, MountPath: BinDir, ReadOnly: true},
							{Name: tmpVolume, MountPath: "/tmp"},
						},
						SecurityContext:          restricted(uid),
						TerminationMessagePath:   corev1.TerminationMessagePathDefault,
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
					}},
				},
			},
		},
	}
}

// tmpLimit bounds /tmp by the tool's ephemeral-storage limit.
func tmpLimit(tool *Tool) *resource.Quantity {
	if q, ok := tool.Resources.Limits[corev1.ResourceEphemeralStorage]; ok {
		return &q
	}
	return nil
}

// ttl is how long a finished Job stays. A mutating call's Job has none: it
// is the record that the call ran, kept until the operator has saved the
// result (DeleteSaved), so that an operator that was down for longer than
// any TTL adopts it instead of running the call again.
func (e *Executor) ttl(tool *Tool) *int32 {
	if tool.Mutates {
		return nil
	}
	return ptr.To(int32(e.cfg.TTLAfterFinished / time.Second))
}

// installResources are small and fixed: the init container copies one
// file. Both requests and limits are set so namespaces whose quota asks
// for them admit the pod.
func installResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("10m"),
			corev1.ResourceMemory: resource.MustParse("16Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
	}
}

// checkInvocation refuses calls that can never become a Job.
func checkInvocation(inv loop.Invocation) *loop.Failure {
	switch {
	case inv.CallID == "":
		return &loop.Failure{Kind: loop.FailInvalid, Detail: "the call has no id"}
	case len(inv.Arguments) > MaxArgumentBytes:
		return &loop.Failure{Kind: loop.FailInvalid, Detail: fmt.Sprintf(
			"the arguments are %d bytes; a job tool takes at most %d", len(inv.Arguments), MaxArgumentBytes)}
	}
	return nil
}
