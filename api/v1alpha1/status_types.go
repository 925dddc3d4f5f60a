package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ApprovalAnnotationPrefix starts the annotation a person sets to answer a
// pending call: approval.agents.agentrun.dev/<callID> with the value
// approve, deny or stop, optionally followed by ":" and the call's
// argumentsDigest (ApprovalAnswer reads and writes it).
const ApprovalAnnotationPrefix = "approval.agents.agentrun.dev/"

// AttributedOutcomeAnnotation records the outcome a reviewer thinks a
// finished run deserved, one of the eight; the metric
// agentrun_outcome_attributions counts it against the outcome the run
// emitted. Setting it needs the verb "approve", as answering does.
const AttributedOutcomeAnnotation = "agents.agentrun.dev/attributed-outcome"

// ApprovedByAnnotationPrefix starts the annotation the API server's
// admission (config/admission/approver-identity.yaml) writes when an
// approval annotation is set: approved-by.agents.agentrun.dev/<callID> holds
// the authenticated username of who set it.
const ApprovedByAnnotationPrefix = "approved-by.agents.agentrun.dev/"

// Condition types of an AgentRun.
const (
	// ConditionSucceeded is the run's one monotonic end condition: Unknown
	// while the run has not ended (reason Pending, Running or
	// AwaitingApproval), then True with reason Completed, or False with the
	// outcome as reason, for good.
	ConditionSucceeded = "Succeeded"

	// ConditionAwaitingApproval is True (reason ApprovalRequested) while at
	// least one call waits for a person, and False (reason NoApprovalPending)
	// otherwise.
	ConditionAwaitingApproval = "AwaitingApproval"

	// ConditionSaved is False (reason PersistFailed) while the operator
	// cannot save the run's transcript or status and retries; nothing is
	// dispatched or charged meanwhile. It is removed by the next save that
	// succeeds, so a healthy run does not carry it.
	ConditionSaved = "Saved"

	// ConditionArchived is True (reason Archived) once a finished run's
	// record is in the archive, False (reason ArchiveUnavailable) while
	// the operator cannot write it and retries. Only with an archive
	// configured; the run cannot be deleted before it is True.
	ConditionArchived = "Archived"

	// ReasonArchived and ReasonArchiveUnavailable are the reasons of the
	// Archived condition (of a run and of an AgentEvaluation) and of the
	// events that go with it.
	ReasonArchived           = "Archived"
	ReasonArchiveUnavailable = "ArchiveUnavailable"

	// FinalizerArchive holds a run that has not been archived yet: the
	// operator removes it once the run's record is in the archive.
	FinalizerArchive = "agents.agentrun.dev/archive"

	// ConditionReady is True (reason Completed) only once the run has
	// completed. It is False otherwise: with the outcome as reason once the
	// run has ended any other way, and reason Pending, Running or
	// AwaitingApproval before. Generic tools (kstatus, Flux, Argo CD) read a
	// completed run as healthy from it.
	ConditionReady = "Ready"

	// ConditionReconciling is True while the run has not ended (reason
	// Pending, Running or AwaitingApproval: waiting for a person is still
	// work in progress), and False with the outcome as reason once it has.
	// It follows the kstatus convention: True means the object is not yet
	// in its final state.
	ConditionReconciling = "Reconciling"

	// ConditionStalled is True, with the outcome as reason, once the run
	// has ended with any outcome but Completed: it will make no further
	// progress by itself. It is False otherwise (reason Completed, or
	// Pending, Running or AwaitingApproval while the run works). kstatus
	// reads Stalled=True as Failed.
	ConditionStalled = "Stalled"
)

// Condition reasons that are not outcomes. Once a run has ended, the
// reason of ConditionSucceeded is its Outcome, except for a run that ended
// Error because of its own manifest or namespace, whose reason is
// ReasonInvalidConfiguration.
const (
	// ReasonPending is the reason of Succeeded=Unknown before the first
	// turn is admitted.
	ReasonPending = "Pending"
	// ReasonRunning is the reason of Succeeded=Unknown while the run works.
	ReasonRunning = "Running"
	// ReasonAwaitingApproval is the reason of Succeeded=Unknown while the
	// run waits for a person.
	ReasonAwaitingApproval = "AwaitingApproval"
	// ReasonApprovalRequested is the reason of AwaitingApproval=True, and
	// of the Normal event recorded for each call that starts waiting.
	ReasonApprovalRequested = "ApprovalRequested"
	// ReasonNoApprovalPending is the reason of AwaitingApproval=False.
	ReasonNoApprovalPending = "NoApprovalPending"
	// ReasonPersistFailed is the reason of Saved=False.
	ReasonPersistFailed = "PersistFailed"
	// ReasonInvalidConfiguration is the reason of Succeeded=False (and of
	// the summary conditions) for a run that ended Error before its first
	// turn because of what its author or its namespace gave it (a CEL
	// condition that does not compile, a Secret its ServiceAccount may not
	// read, a manifest the platform's policies refuse), not because of a
	// defect of the operator: alerts for defects leave it out.
	ReasonInvalidConfiguration = "InvalidConfiguration"
)

// Phase is a display summary of where a run stands, derived from its
// conditions and outcome. Read conditions, not the phase, to make decisions.
// +kubebuilder:validation:Enum=Pending;Running;AwaitingApproval;Succeeded;Failed
type Phase string

// The phases of a run.
const (
	// PhasePending: accepted, the first turn not yet admitted.
	PhasePending Phase = "Pending"
	// PhaseRunning: turns are being made.
	PhaseRunning Phase = "Running"
	// PhaseAwaitingApproval: a call waits for a person's answer.
	PhaseAwaitingApproval Phase = "AwaitingApproval"
	// PhaseSucceeded: ended with the outcome Completed.
	PhaseSucceeded Phase = "Succeeded"
	// PhaseFailed: ended with any other outcome.
	PhaseFailed Phase = "Failed"
)

// Outcome is the single named reason a run ended. A finished run carries
// exactly one, with a human-readable status.reason.
// +kubebuilder:validation:Enum=Completed;BudgetExhausted;GuardrailStop;LoopDetected;ApprovalDenied;Escalated;ToolFailure;Error
type Outcome string

// The eight outcomes. Each is also the reason of the Succeeded condition
// once the run has ended.
const (
	// OutcomeCompleted is set when the model gave a final answer that was
	// not truncated and, with spec.verify, the verifier verified it.
	// Succeeded is True.
	OutcomeCompleted Outcome = "Completed"
	// OutcomeBudgetExhausted is set when admitting the next step would pass
	// a hard ceiling: turns, tokens, wall clock, cost, tool calls or a
	// per-tool limit. The reason names the first rejecting ceiling and the
	// projection.
	OutcomeBudgetExhausted Outcome = "BudgetExhausted"
	// OutcomeGuardrailStop is set when a guardrail with severity halt fired,
	// or the model refused.
	OutcomeGuardrailStop Outcome = "GuardrailStop"
	// OutcomeLoopDetected is set when the same canonical call signature
	// reached loopDetection.threshold within the window, or a cycle of
	// period 2 to maxPeriod did. It is checked before the turn ceiling.
	OutcomeLoopDetected Outcome = "LoopDetected"
	// OutcomeApprovalDenied is set when a person ended the run: spec.cancel
	// was set to true, or a pending call was answered stop.
	OutcomeApprovalDenied Outcome = "ApprovalDenied"
	// OutcomeEscalated is set when a call waited longer than
	// approvalTimeout, the model asked to hand over to a person, or the
	// verifier verified no answer within verify.maxTrials (or its score
	// stalled for verify.stallTrials).
	OutcomeEscalated Outcome = "Escalated"
	// OutcomeToolFailure is set when a tool, the verifier or the model
	// provider stayed unavailable after its retries.
	OutcomeToolFailure Outcome = "ToolFailure"
	// OutcomeError is set on a defect in the operator itself: an unexpected
	// condition it cannot recover from. It is also set when the model
	// provider reported usage far above what its call reserved (the usage is
	// charged, and the run stops rather than spend past its reservations).
	OutcomeError Outcome = "Error"
)

// ApprovalDecision is a person's answer to a pending call.
// +kubebuilder:validation:Enum=approve;deny;stop;answer
type ApprovalDecision string

// The answers a person can give.
const (
	// ApprovalApprove lets the call run.
	ApprovalApprove ApprovalDecision = "approve"
	// ApprovalDeny refuses the call; the model sees "a person declined this
	// call", with the person's reason when they gave one, and may choose
	// another route.
	ApprovalDeny ApprovalDecision = "deny"
	// ApprovalStop refuses the call and ends the run as ApprovalDenied.
	ApprovalStop ApprovalDecision = "stop"
	// ApprovalReply answers a question the agent asked (builtin
	// person.ask): its text, given as the reason (answer::TEXT), is the
	// call's result.
	ApprovalReply ApprovalDecision = "answer"
)

// AgentRunStatus is what the operator observed and decided.
//
// It is atomic for server-side apply and managed fields: only the operator
// writes it, always as a whole, so the API server tracks one field
// (f:status) for it rather than every counter, condition and checkpoint
// key, which were half the object's bytes and changed on every write.
// +structType=atomic
type AgentRunStatus struct {
	// phase is a display summary: Pending, Running, AwaitingApproval,
	// Succeeded or Failed. It is derived from the conditions and outcome.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// outcome is empty until the run ends, then exactly one of Completed,
	// BudgetExhausted, GuardrailStop, LoopDetected, ApprovalDenied,
	// Escalated, ToolFailure or Error.
	// +optional
	Outcome Outcome `json:"outcome,omitempty"`

	// reason says, for people, why the run ended or what it waits for. It
	// names the ceiling, tool, rule or call signature involved.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	Reason string `json:"reason,omitempty"`

	// answer is the model's final answer, cut at 32 KiB (the cut is marked).
	// +optional
	// +kubebuilder:validation:MaxLength=36864
	Answer string `json:"answer,omitempty"`

	// output is the run's typed final answer (spec.output): the JSON object
	// that validated against spec.output.schema, set when the run ends
	// Completed. It is left out when its text is larger than 16 KiB
	// (outputBytes says how large); the transcript keeps the whole answer,
	// and outputDigest identifies it.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Output *runtime.RawExtension `json:"output,omitempty"`

	// outputDigest is "sha256:" followed by the hex SHA-256 of the typed
	// answer's text: the run's last assistant message in the transcript,
	// without the white space around it. Set with output, and also when
	// output is left out for its size.
	// +optional
	// +kubebuilder:validation:MaxLength=71
	OutputDigest string `json:"outputDigest,omitempty"`

	// outputBytes is the size of the typed answer's text, in bytes; output
	// is left out when it is above 16384.
	// +optional
	OutputBytes int64 `json:"outputBytes,omitempty"`

	// turn is the turn in progress, or the last one finished.
	// +optional
	Turn int32 `json:"turn,omitempty"`

	// model is the model the run calls, once it has started.
	// +optional
	Model *ModelStatus `json:"model,omitempty"`

	// usage is what the run has consumed so far.
	// +optional
	Usage *UsageStatus `json:"usage,omitempty"`

	// childUsage is the part of usage that the run's child runs used
	// (agent tools), charged as each ended. Each child is a run of its
	// own, which an AgentBudget counts once, as itself.
	// +optional
	ChildUsage *UsageStatus `json:"childUsage,omitempty"`

	// children are the run's child runs (agent tools) whose calls have
	// ended, oldest first: the newest 32. Each is also an AgentRun of its
	// own, labelled agents.agentrun.dev/parent.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Children []ChildRunStatus `json:"children,omitempty"`

	// childrenOmitted counts the older children that children leaves out.
	// +optional
	ChildrenOmitted int32 `json:"childrenOmitted,omitempty"`

	// reserved is the outstanding reservation: what the step being taken may
	// still consume at most. It has the same shape as usage.
	// +optional
	Reserved *UsageStatus `json:"reserved,omitempty"`

	// pendingApprovals are the calls waiting for a person's answer. Nothing
	// of their turn's batch runs until every one is answered.
	// +optional
	// +listType=map
	// +listMapKey=callID
	// +kubebuilder:validation:MaxItems=128
	PendingApprovals []PendingApproval `json:"pendingApprovals,omitempty"`

	// pendingApprovalCount is the number of pendingApprovals, for the
	// kubectl get -o wide column.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PendingApprovalCount int32 `json:"pendingApprovalCount,omitempty"`

	// approvals records the answers people gave, oldest first (the most
	// recent 64 are kept).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Approvals []ApprovalRecord `json:"approvals,omitempty"`

	// convergence describes how the run is progressing towards an answer.
	// +optional
	Convergence *ConvergenceStatus `json:"convergence,omitempty"`

	// verification is the verifier's record, for runs with spec.verify:
	// trials used, the last verdict and score, and the score history. What
	// the verifier said (its feedback and the reflections built from it)
	// is in the transcript, not here.
	// +optional
	Verification *VerificationStatus `json:"verification,omitempty"`

	// context is what the context policy did: compactions, the turn of the
	// last one, and the last request's input tokens against the limit.
	// +optional
	Context *ContextStatus `json:"context,omitempty"`

	// transcript says how much of the conversation has been saved. The
	// transcript itself lives in Secrets the AgentRun owns (tool results may hold customer data); read it with
	// kubectl agentrun transcript.
	// +optional
	Transcript *TranscriptStatus `json:"transcript,omitempty"`

	// checkpoint is the loop engine's resumable state. It is internal to the
	// operator, not a stable interface: do not read or write it.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Checkpoint *runtime.RawExtension `json:"checkpoint,omitempty"`

	// checkpointSeal authenticates checkpoint and the transcript counts:
	// an HMAC with a key only the operator holds. A checkpoint whose seal
	// does not match is never resumed; the run ends Error instead.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	CheckpointSeal string `json:"checkpointSeal,omitempty"`

	// checkpointSequence numbers the operator's status writes of the run,
	// one higher each time, and is sealed with checkpoint: it places the
	// status in the run's history. The operator keeps the highest it wrote
	// (in the run's ConfigMap agentrun-<uid>-saves, sealed) and ends the
	// run Error, running nothing, when status is written back to an
	// earlier number.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CheckpointSequence int64 `json:"checkpointSequence,omitempty"`

	// conditions are Succeeded (the run's end, monotonic), AwaitingApproval,
	// and for generic tools (kstatus) Ready, Reconciling and Stalled;
	// Saved=False appears only while the operator cannot save the run and
	// retries.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation of the spec the status was
	// computed from. It is kept current on finished runs too (setting
	// spec.cancel on an ended run bumps the generation).
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// startTime is when the first turn was admitted.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the run ended.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// traceParent is the W3C traceparent of the run's trace: its trace id
	// and the span id of its invoke_agent span. The operator sets it on the
	// first reconcile; every model and tool call span of the run, in any
	// reconcile or operator process, is a child of that span, which is
	// exported when the run ends (see docs/observability.md). Search your
	// tracing backend for the trace id (the second field).
	// +optional
	// +kubebuilder:validation:MaxLength=55
	TraceParent string `json:"traceParent,omitempty"`

	// agentBudgets names the AgentBudgets with a hard limit that the run
	// holds a lease in. A budget named here that no longer exists refuses
	// the run's next step (a shared hard limit fails closed); a budget
	// whose every limit is soft is not named, and never stops a run.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	AgentBudgets []string `json:"agentBudgets,omitempty"`

	// template records the AgentRunTemplate the run was made from, as the
	// operator resolved it before the run started: its name, its
	// resourceVersion then, and the digest of the resolved spec kept with
	// the run (a Secret the run owns). Empty for a run that names no
	// template.
	// +optional
	Template *TemplateStatus `json:"template,omitempty"`

	// limits are the limits the operator admits the run's steps by: its
	// budget and approval timeout after its template is resolved, the
	// platform's policies have capped or filled them, and the defaults are
	// applied. The operator writes them once, when it first builds the run;
	// headroom, the overdue-run alert, the console's ceiling bars and
	// `kubectl get -o wide` read them rather than spec.budget, which a run
	// made from a template leaves empty.
	// +optional
	Limits *LimitsStatus `json:"limits,omitempty"`

	// continuedFrom is the run a follow-up (spec.continueFrom) continued,
	// as the operator read it when the follow-up started: its name, UID
	// and outcome, and whether it was read from the archive.
	// +optional
	ContinuedFrom *ContinuedFromStatus `json:"continuedFrom,omitempty"`

	// escalation is the hand-off of a run that ended Escalated: its owner,
	// since when it waits for a person, and who acknowledged and resolved
	// it (the annotation agents.agentrun.dev/ack). Set in the status write
	// that ends the run Escalated; absent for any other outcome.
	// +optional
	Escalation *EscalationStatus `json:"escalation,omitempty"`

	// judgement is the score a judge gave the run after it ended, when
	// its template's spec.judge sampled it: written once, and never
	// again.
	// +optional
	Judgement *JudgementStatus `json:"judgement,omitempty"`
}

// JudgementStatus is what the judge of a run's template made of the run.
type JudgementStatus struct {
	// score is the judge's score, from 1 to 5; absent when the judge gave
	// none (failure says why).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	Score *int32 `json:"score,omitempty"`

	// minScore is the lowest score that passes, as the template said when
	// the run was judged.
	// +optional
	MinScore int32 `json:"minScore,omitempty"`

	// rationale is why, as the judge said it, cut to 512 bytes.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Rationale string `json:"rationale,omitempty"`

	// agreed says whether the score agrees with the outcome the run
	// emitted: true for a Completed run scored at or above minScore and
	// for any other outcome scored below it. Absent when the judge gave
	// no score.
	// +optional
	Agreed *bool `json:"agreed,omitempty"`

	// failure says why the judge gave no score: a reply that is not the
	// verdict asked for, a refusal, a failed call, a call that could pass
	// the judge's ceilings, or a model that cannot be built.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Failure string `json:"failure,omitempty"`

	// costUSD and tokens are what the judge's call spent and used.
	// +optional
	CostUSD USD `json:"costUSD,omitempty"`
	// +optional
	Tokens int64 `json:"tokens,omitempty"`

	// judgedAt is when the operator judged the run.
	// +required
	JudgedAt metav1.Time `json:"judgedAt"`
}

// ContinuedFromStatus is the earlier run of a follow-up, as read.
type ContinuedFromStatus struct {
	// name is the earlier run's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// uid is the earlier run's UID (the key of its archive record).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid,omitempty"`
	// outcome is how the earlier run ended.
	// +optional
	Outcome Outcome `json:"outcome,omitempty"`
	// archived is true when the earlier run was read from the archive
	// (it had been deleted).
	// +optional
	Archived bool `json:"archived,omitempty"`
}

// PendingApproval is one call waiting for a person's answer.
type PendingApproval struct {
	// callID identifies the call, t<turn>-c<index> (t3-c1). Answer it with
	// the annotation approval.agents.agentrun.dev/<callID>.
	// +required
	// +kubebuilder:validation:MaxLength=64
	CallID string `json:"callID"`

	// tool is the name of the tool the model wants to call.
	// +required
	// +kubebuilder:validation:MaxLength=256
	Tool string `json:"tool"`

	// arguments are the call's arguments, as a JSON object, cut at 16 KiB
	// (the cut is marked).
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Arguments string `json:"arguments,omitempty"`

	// argumentsDigest identifies the exact arguments: sha256: and the hex
	// SHA-256 of their canonical JSON (keys sorted, no spaces, numbers
	// normalised), over the whole arguments even when arguments is cut. An
	// approval applies only to a call with these arguments: before the call
	// runs, the operator checks them against the model's proposal as saved
	// in the run's transcript Secrets when the person was asked.
	// +optional
	// +kubebuilder:validation:MaxLength=80
	ArgumentsDigest string `json:"argumentsDigest,omitempty"`

	// rule names what asked: a policy rule (policy.rules[0]),
	// policy.default, or tool.irreversible.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Rule string `json:"rule,omitempty"`

	// reason says why a person must decide.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Reason string `json:"reason,omitempty"`

	// question is what the agent asks, when the call is a question (a
	// tool with builtin person.ask): answer it with answer::TEXT. Empty
	// for a call that waits for approval.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Question string `json:"question,omitempty"`

	// choices are the answers the agent offers with its question, if any;
	// a person may answer otherwise.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=256
	Choices []string `json:"choices,omitempty"`

	// approvals is how many distinct people must approve the call (the
	// rule's approvals), when more than one; approvedBy are those who have
	// approved it so far. A person in approvedBy may not approve it again.
	// +optional
	Approvals int32 `json:"approvals,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=512
	ApprovedBy []string `json:"approvedBy,omitempty"`

	// requestedAt is when the call started waiting; approvalTimeout counts
	// from here.
	// +optional
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`
}

// ApprovalRecord is one answer a person gave.
type ApprovalRecord struct {
	// callID is the call that was answered.
	// +required
	// +kubebuilder:validation:MaxLength=64
	CallID string `json:"callID"`

	// decision is the answer: approve, deny or stop.
	// +required
	Decision ApprovalDecision `json:"decision"`

	// at is when the operator saw the answer.
	// +optional
	At *metav1.Time `json:"at,omitempty"`

	// by is who answered: the username the API server authenticated when
	// the approval annotation was set, as the admission policy
	// agentrun-approver-identity stamped it into
	// approved-by.agents.agentrun.dev/<callID> (no client can choose it).
	// Empty when that policy is not installed.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	By string `json:"by,omitempty"`

	// reason is why the person answered so, as they gave it after the
	// digest in the approval annotation (deny:sha256:<hex>:REASON, or
	// deny::REASON). The reason of a denial is what the model read as the
	// call's result. At most 1024 characters
	// (v1alpha1.MaxApprovalReason).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// edit is set for an approval with changes (edit:DIGEST:PATCH): the
	// changes the person made, and what became of them.
	// +optional
	Edit *ApprovalEdit `json:"edit,omitempty"`

	// stale marks an answer for a call that was not pending (already
	// answered, timed out, or never asked). It is recorded, never applied.
	// +optional
	Stale bool `json:"stale,omitempty"`
}

// ApprovalEdit is the change a person made to a call's arguments when they
// approved it.
type ApprovalEdit struct {
	// patch is the JSON merge patch the person gave, applied to the
	// arguments the model proposed. At most 4096 characters
	// (v1alpha1.MaxApprovalEdit).
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Patch string `json:"patch"`

	// proposedDigest is the argumentsDigest of the arguments the model
	// proposed, which the person was shown.
	// +optional
	// +kubebuilder:validation:MaxLength=80
	ProposedDigest string `json:"proposedDigest,omitempty"`

	// argumentsDigest is the argumentsDigest of the edited arguments: the
	// approval is bound to them, and the call runs with them.
	// +optional
	// +kubebuilder:validation:MaxLength=80
	ArgumentsDigest string `json:"argumentsDigest,omitempty"`

	// refused says why the edited call does not run: vetting them again
	// from the start, a policy rule denied them, a guardrail blocked them
	// or the tool's schema refused them (the rule and its message). The
	// call then ends as that rule decides; the model reads its message.
	// Empty when the edited call went on to run.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Refused string `json:"refused,omitempty"`
}

// ConvergenceStatus describes how a run is progressing towards an answer.
type ConvergenceStatus struct {
	// turnsToCompletion is the number of turns the run took to complete;
	// set only when the outcome is Completed.
	// +optional
	TurnsToCompletion *int32 `json:"turnsToCompletion,omitempty"`

	// repeatedIntentDepth is the most times any one call signature was
	// proposed during the run. 1 means the model never repeated itself.
	// +optional
	RepeatedIntentDepth int32 `json:"repeatedIntentDepth,omitempty"`

	// headroom is the fraction of each ceiling still unused, keyed by the
	// ceiling's name as budget.soft writes it, as decimal strings from
	// "0.00" to "1.00".
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	Headroom map[string]string `json:"headroom,omitempty"`
}

// TranscriptStatus says how much of the conversation has been saved to the
// AgentRun's transcript Secrets.
type TranscriptStatus struct {
	// chunks is the number of transcript Secrets written.
	// +optional
	Chunks int32 `json:"chunks,omitempty"`

	// messages is the number of messages saved across all chunks.
	// +optional
	Messages int32 `json:"messages,omitempty"`
}

// Verdict is the verifier's judgement of one final answer.
// +kubebuilder:validation:Enum=Verified;NotVerified
type Verdict string

// The verdicts.
const (
	// VerdictVerified: the verifier exited 0; the run ended Completed.
	VerdictVerified Verdict = "Verified"
	// VerdictNotVerified: the verifier exited non-zero; another trial
	// starts, or the run ended Escalated.
	VerdictNotVerified Verdict = "NotVerified"
)

// VerificationStatus is the verifier's record of a run.
type VerificationStatus struct {
	// trialsUsed is the trial in progress, or the last one: how many of
	// verify.maxTrials the run has used.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TrialsUsed int32 `json:"trialsUsed,omitempty"`

	// lastVerdict is the verifier's newest verdict: Verified or NotVerified.
	// +optional
	LastVerdict Verdict `json:"lastVerdict,omitempty"`

	// lastScore is the score the verifier gave with its newest verdict, as a
	// decimal string from "0.00" to "1.00"; empty when it gave none.
	// +optional
	// +kubebuilder:validation:MaxLength=8
	LastScore string `json:"lastScore,omitempty"`

	// scores are the scores the verifier gave, oldest first (at most 10,
	// one per trial that had one).
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=8
	Scores []string `json:"scores,omitempty"`

	// trialsToVerify is the trial whose answer was verified: how many
	// trials the run needed. Set only once an answer is verified.
	// +optional
	TrialsToVerify *int32 `json:"trialsToVerify,omitempty"`
}

// ContextStatus is what the context policy did.
type ContextStatus struct {
	// maxInputTokens is the limit that applied, and source where it came
	// from: spec (spec.context.maxInputTokens), model (the model's
	// context window, from the provider adapter's table) or default.
	// +optional
	MaxInputTokens int64 `json:"maxInputTokens,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Source string `json:"source,omitempty"`
	// strategy is the compaction strategy that applied.
	// +optional
	Strategy ContextStrategy `json:"strategy,omitempty"`
	// compactions counts the compactions made.
	// +optional
	Compactions int32 `json:"compactions,omitempty"`
	// lastCompactionTurn is the turn whose request the last compaction
	// shrank.
	// +optional
	LastCompactionTurn int32 `json:"lastCompactionTurn,omitempty"`
	// lastInputTokens is the last request's input tokens: the provider's
	// count once its reply is read, the operator's estimate before.
	// +optional
	LastInputTokens int64 `json:"lastInputTokens,omitempty"`
}

// ModelStatus is the model a run calls.
type ModelStatus struct {
	// active is the name of the model the run calls: model.name, or the
	// name of the fallback it moved to.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Active string `json:"active,omitempty"`

	// fallbacks is how many times the run moved down its models: 0
	// while it calls model.name, i once it calls model.fallbacks[i-1].
	// Each move is also an event: ModelFallback after an outage,
	// ModelRouted when a request did not fit (model.routeOnBudget).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3
	Fallbacks int32 `json:"fallbacks,omitempty"`
}

// ChildRunStatus is one child run of a run, as the run knew it when the
// call that made it got its result.
type ChildRunStatus struct {
	// name is the child AgentRun's name, in the run's namespace.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// callID is the call of the run that made the child.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	CallID string `json:"callID,omitempty"`

	// outcome is how the child ended (Unfinished: it did not end in time
	// and was charged its whole reservation).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Outcome string `json:"outcome,omitempty"`

	// turns is the model calls the child made.
	// +optional
	Turns int32 `json:"turns,omitempty"`

	// costUSD is what the child cost, charged to the run, as a decimal
	// string.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	CostUSD string `json:"costUSD,omitempty"`
}
