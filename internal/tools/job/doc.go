// Package job runs job tools as Kubernetes Jobs, one Job per call.
//
// # Naming and adoption
//
// A call's Job is named after the run's UID and the call id (JobName), so
// creating it again after a crash gets AlreadyExists and the executor adopts
// the Job that is there: one call never has two Jobs. A Job of that name
// that belongs to another run or call is refused, never adopted. For the
// same reason a wait that is cancelled (the operator stopping) leaves the
// Job running: the restarted operator adopts it and reads its result, and
// the tool is neither killed halfway nor run a second time.
//
// # Two phases
//
// The controller must not block a reconcile worker on a running tool, so
// the executor has two phases: Start creates (or adopts) the Job and
// returns at once; Poll reads the Job and its pod and returns the Result
// once there is one (nil while the tool runs). Execute does both and waits,
// for callers that can block.
//
// # The pod
//
// An init container from the operator's image installs the
// agentrun-entrypoint wrapper into an emptyDir; the tool's container runs
// the tool through it (see package entrypoint). Both containers pass the
// Pod Security "restricted" profile: non-root (uid 65532 by default, or
// the uid the platform assigns with Config.AssignedUser, as OpenShift's
// restricted-v2 requires),
// RuntimeDefault seccomp, no privilege escalation, every capability
// dropped, a read-only root filesystem with an emptyDir at /tmp. The
// service account token is not mounted unless the tool asks for it. The
// Job has backoffLimit 0, restartPolicy Never and ttlSecondsAfterFinished.
//
// # Deadlines
//
// The call's timeout counts from the moment the tool starts: the wrapper
// enforces it (SIGTERM, then SIGKILL), so a slow image pull or a wait for a
// node does not eat into it. Starting is bounded separately, by
// Config.PendingLimit or the call's StartupGrace when shorter. The Job's
// activeDeadlineSeconds is the backstop for both: timeout + startup limit +
// kill grace + 10s.
//
// # Outcomes
//
//   - Success: the termination message written by the wrapper carries the
//     result, or says the result did not fit, and the executor reads it from
//     the pod's log (at most MaxResultBytes+1 bytes).
//   - The tool's deadline (the wrapper's summary says TimedOut), or the
//     Job's (condition Failed or FailureTarget with reason
//     DeadlineExceeded): Failure Timeout.
//   - A non-zero exit: Failure ExitCode with the code and stderr's tail.
//   - The image cannot be pulled: Failure Unavailable, and the Job is deleted.
//   - The pod is still Pending past the startup limit (5m by default,
//     counted from the Job's creation): Failure Unavailable ("pod could not
//     be scheduled: ..."), and the Job is deleted.
//   - The tool's command cannot be run in the image (the wrapper could not
//     start it): Failure Unavailable.
//
// # A pod may run twice
//
// Kubernetes may start a Job's pod more than once even with backoffLimit
// 0: a node that disappears, a pod deleted or evicted before the Job
// controller counted it, a controller restart. A tool that changes
// anything must therefore use AGENTRUN_IDEMPOTENCY_KEY, which is the same
// for every start of the call, to make a second run harmless.
package job
