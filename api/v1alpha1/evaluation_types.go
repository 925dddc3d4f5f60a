package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// LabelEvaluation is set on every run an AgentEvaluation creates, to the
// evaluation's name; LabelCase to the name of the case the run plays;
// LabelVariant, on the runs of an evaluation with spec.variants, to the
// name of the variant.
const (
	LabelEvaluation = "agents.agentrun.dev/evaluation"
	LabelCase       = "agents.agentrun.dev/case"
	LabelVariant    = "agents.agentrun.dev/variant"
)

// AgentEvaluation runs an AgentRunTemplate (or several, its variants) on
// a set of cases, each some number of times, and scores every run against
// what its case expects: the outcome, the answer, the typed output, the
// cost and the turns. It ends Passed when every run of every case passed,
// Failed otherwise, and Regressed when it did worse than its baseline, an
// earlier evaluation. Its runs are ordinary AgentRuns, labelled with the
// evaluation, the case and the variant.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=agentevaluations,singular=agentevaluation,scope=Namespaced,shortName=aev,categories=agents
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`,description="Running, Passed (every run passed), Failed or Regressed (worse than the baseline)"
// +kubebuilder:printcolumn:name="Passed",type=integer,JSONPath=`.status.totals.passed`,description="Runs that met their case's expectations"
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.totals.runs`,description="Runs the evaluation makes: cases times repeats (times variants)"
// +kubebuilder:printcolumn:name="Pass Rate",type=string,JSONPath=`.status.totals.passRate`,description="Passed runs over scored runs, from 0.00 to 1.00"
// +kubebuilder:printcolumn:name="Cost",type=string,JSONPath=`.status.totals.costUSD`,description="US dollars the evaluation's runs spent"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Complete")].message`,priority=1
// +kubebuilder:validation:XValidation:rule=`self.metadata.name.size() <= 36`,message="the name of an AgentEvaluation is at most 36 characters: its runs are named after it, with the case's name and the repeat appended"
// +kubebuilder:validation:XValidation:rule=`!has(self.spec.variants) || self.spec.variants.all(v, self.metadata.name.size() + v.name.size() <= 35)`,message="the name of an AgentEvaluation and the name of each of its variants are together at most 35 characters: its runs are named <evaluation>-<variant>-<case>-<repeat>, at most 63 characters"
// +kubebuilder:validation:XValidation:rule=`!has(self.spec.baseline) || self.spec.baseline.evaluation != self.metadata.name`,message="spec.baseline.evaluation names an earlier evaluation to compare with: an evaluation cannot be its own baseline"
type AgentEvaluation struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what to run and what each run must show.
	// +required
	Spec AgentEvaluationSpec `json:"spec"`

	// status is how the runs scored.
	// +optional
	Status AgentEvaluationStatus `json:"status,omitempty"`
}

// AgentEvaluationList is a list of AgentEvaluations.
//
// +kubebuilder:object:root=true
type AgentEvaluationList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the AgentEvaluations.
	Items []AgentEvaluation `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentEvaluation{}, &AgentEvaluationList{})
}

// AgentEvaluationSpec is a template (or variants), the cases to run it
// on, how often and how many at once, and the baseline to compare with.
//
// +kubebuilder:validation:XValidation:rule=`self == oldSelf`,message="the spec of an AgentEvaluation cannot change once created: its runs and scores belong to it; create a new evaluation instead"
// +kubebuilder:validation:XValidation:rule=`has(self.templateRef) != has(self.variants)`,message="set exactly one of spec.templateRef (one template) and spec.variants (two to five templates to compare)"
// +kubebuilder:validation:XValidation:rule=`has(self.cases) || has(self.casesFrom)`,message="an evaluation needs cases: set spec.cases, spec.casesFrom or both"
// +kubebuilder:validation:XValidation:rule=`has(self.judge) || !has(self.cases) || self.cases.all(c, !has(c.expect.judge))`,message="a case's expect.judge changes spec.judge's rubric or minScore: set spec.judge (its model and ceilings) too"
type AgentEvaluationSpec struct {
	// templateRef names the AgentRunTemplate, in the evaluation's
	// namespace, that every run is made from. Exactly one of templateRef
	// and variants is set.
	// +optional
	TemplateRef *TemplateRef `json:"templateRef,omitempty"`

	// variants are two to five templates to compare: every case and
	// repeat runs once per variant. Variant names are unique.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=2
	// +kubebuilder:validation:MaxItems=5
	Variants []EvaluationVariant `json:"variants,omitempty"`

	// baseline names an earlier evaluation to compare with when this one
	// completes: what did worse is in status.regressions, and the
	// evaluation ends Regressed.
	// +optional
	Baseline *EvaluationBaseline `json:"baseline,omitempty"`

	// cases are the inputs to run the template on and what each must show.
	// Case names are unique. At least one case here or in casesFrom.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	Cases []EvaluationCase `json:"cases,omitempty"`

	// casesFrom reads more cases from a ConfigMap in the evaluation's
	// namespace: the key holds a YAML (or JSON) list of cases in the
	// shape of cases, which follow the inline ones. The merged list is
	// checked as cases are (unique names, at most 100); a ConfigMap that
	// is missing or does not hold such a list is the condition CasesRead
	// False, and no run is made. It is read when the evaluation starts;
	// its cases are then kept in status.casesFrom, so that a later edit
	// of the ConfigMap never changes an evaluation already running.
	// +optional
	CasesFrom *EvaluationCasesSource `json:"casesFrom,omitempty"`

	// repeats is how many runs each case gets, to see how much its result
	// varies. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Repeats int32 `json:"repeats,omitempty"`

	// concurrency is the most runs of the evaluation that may be
	// unfinished at once. Defaults to 2.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=50
	Concurrency int32 `json:"concurrency,omitempty"`

	// judge has a model score every run against a rubric, after the run
	// met every other expectation of its case: the last expectation. A
	// case's expect.judge may give its own rubric and minScore; every
	// case is judged when judge is set.
	// +optional
	Judge *EvaluationJudge `json:"judge,omitempty"`

	// budgetRef names an AgentBudget, in the evaluation's namespace, that
	// the evaluation's spend is charged to: its selector must select the
	// evaluation's runs (such as matchLabels
	// agents.agentrun.dev/evaluation: <name>), which lease from it as
	// every run it selects does, and the judge leases each call's worst
	// case from it before the call and settles what the call spent
	// after. No run is made until the budget exists and selects them
	// (condition Budgeted).
	// +optional
	BudgetRef *BudgetRef `json:"budgetRef,omitempty"`
}

// EvaluationCasesSource is where more cases are read from.
type EvaluationCasesSource struct {
	// configMapKeyRef names a key of a ConfigMap in the evaluation's
	// namespace.
	// +required
	ConfigMapKeyRef ConfigMapKeySelector `json:"configMapKeyRef"`
}

// BudgetRef names an AgentBudget.
type BudgetRef struct {
	// name is the AgentBudget's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// The judge's scale: a score is a whole number from JudgeMinScale to
// JudgeMaxScale.
const (
	JudgeMinScale = 1
	JudgeMaxScale = 5
)

// EvaluationJudge is a rubric scored by a model, with its own ceilings.
//
// The judge is asked for a JSON object {"score": 1 to 5, "rationale":
// "..."} and nothing else; a reply that is not exactly that (not JSON,
// another field, a score off the scale, an empty rationale), a refusal or
// a failed call fails the run's case, with the reason.
type EvaluationJudge struct {
	// rubric says what a good answer is, for the judge to score the run's
	// answer against, from 1 (fails the rubric) to 5 (meets all of it).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	Rubric string `json:"rubric"`

	// minScore is the lowest score that passes. Defaults to 4.
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	MinScore int32 `json:"minScore,omitempty"`

	// model is the judge's model, in the shape of a run's spec.model: any
	// provider, its key read as the namespace's default ServiceAccount
	// (scripted replays model.script: the i-th run the evaluation makes,
	// counting from 0 in the order it makes them, case by case, repeat
	// by repeat and variant by variant, is judged with entry i). One call
	// per run, bounded by model.timeout and model.maxOutputTokens; a
	// failed call is not tried again (model.retry and model.fallbacks
	// are not read).
	// +required
	Model ModelSpec `json:"model"`

	// maxCostUSD is the most the judge's calls may spend together, in US
	// dollars (model.pricing): a call that could pass it is not made, and
	// the run it was for fails its case. Unset is no cost ceiling.
	// +optional
	MaxCostUSD USD `json:"maxCostUSD,omitempty"`

	// maxTokens is the most tokens (input and output) the judge's calls
	// may use together, held as maxCostUSD is.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxTokens *int64 `json:"maxTokens,omitempty"`
}

// CaseJudge is what a case changes of spec.judge.
type CaseJudge struct {
	// rubric replaces spec.judge.rubric for the case's runs.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	Rubric string `json:"rubric,omitempty"`

	// minScore replaces spec.judge.minScore for the case's runs.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	MinScore *int32 `json:"minScore,omitempty"`
}

// EvaluationVariant is one of the templates an evaluation compares.
type EvaluationVariant struct {
	// name identifies the variant in status, in its runs' label
	// agents.agentrun.dev/variant and in their names: lower-case letters,
	// digits and '-', at most 12 characters.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// templateRef names the variant's AgentRunTemplate, in the
	// evaluation's namespace.
	// +required
	TemplateRef TemplateRef `json:"templateRef"`
}

// Fraction is a non-negative decimal string such as "0.05" or "1.5": at
// most three digits, optionally a point and at most four decimals.
//
// +kubebuilder:validation:MaxLength=8
// +kubebuilder:validation:Pattern=`^[0-9]{1,3}(\.[0-9]{1,4})?$`
type Fraction string

// EvaluationBaseline is the earlier evaluation to compare with, and how
// much worse is still not a regression.
type EvaluationBaseline struct {
	// evaluation is the name of an AgentEvaluation in this evaluation's
	// namespace, complete when this one completes. Each variant is
	// compared with the baseline's variant of the same name; an
	// evaluation with templateRef with a baseline with templateRef.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Evaluation string `json:"evaluation"`

	// maxPassRateDrop is how far the pass rate, and the verified rate,
	// may fall below the baseline's before it is a regression, as a
	// fraction (0.05 is five points of a pass rate of 0.00 to 1.00).
	// Defaults to "0.05".
	// +optional
	// +kubebuilder:default="0.05"
	MaxPassRateDrop Fraction `json:"maxPassRateDrop,omitempty"`

	// maxCostIncrease is how much more the runs may cost on average than
	// the baseline's, as a fraction of the baseline's (0.20 is 20% more).
	// Defaults to "0.20".
	// +optional
	// +kubebuilder:default="0.20"
	MaxCostIncrease Fraction `json:"maxCostIncrease,omitempty"`

	// maxTurnsIncrease is how many more turns to completion (the median)
	// the runs may take than the baseline's. Defaults to 0.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	MaxTurnsIncrease int32 `json:"maxTurnsIncrease,omitempty"`
}

// EvaluationCase is one input to the template and what its runs must show.
type EvaluationCase struct {
	// name identifies the case in status, in its runs' label
	// agents.agentrun.dev/case and in their names: lower-case letters,
	// digits and '-', at most 23 characters.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=23
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// parameters are the template's parameters for the case's runs, as a
	// run made from the template takes them.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Parameters []ParameterValue `json:"parameters,omitempty"`

	// expect is what every run of the case must show to pass. Empty
	// expects only the outcome Completed.
	// +optional
	// +kubebuilder:default={}
	Expect EvaluationExpectation `json:"expect,omitempty"`
}

// RE2Pattern is a regular expression in RE2 syntax, as Go and CEL read it.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=1024
// +kubebuilder:validation:XValidation:rule=`"".matches(self) == "".matches(self)`,message="must be a valid regular expression (RE2 syntax)"
type RE2Pattern string

// EvaluationExpectation is what a run must show to pass. A run passes
// when every expectation set holds; the first that does not is its
// failure reason. They are checked in the order of the fields.
type EvaluationExpectation struct {
	// outcome is the outcome the run must end with. Defaults to Completed.
	// +optional
	// +kubebuilder:default=Completed
	Outcome Outcome `json:"outcome,omitempty"`

	// answer are regular expressions (RE2) that status.answer must each
	// match somewhere; anchor one with ^ and $ to match the whole answer,
	// and start it with (?i) to ignore case.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Answer []RE2Pattern `json:"answer,omitempty"`

	// output checks the run's typed answer, status.output.
	// +optional
	Output *OutputExpectation `json:"output,omitempty"`

	// calls are tool calls the run must make, or must not make: each
	// counts the calls the model made to a tool (whether they ran or
	// were refused) whose arguments satisfy when, and holds that count
	// between min and max. With neither set, the tool must be called at
	// least once; max 0 forbids the call. Calls are read from the run's
	// transcript.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Calls []CallExpectation `json:"calls,omitempty"`

	// maxCostUSD is the most the run may have spent, in US dollars.
	// +optional
	MaxCostUSD USD `json:"maxCostUSD,omitempty"`

	// maxTurns is the most turns the run may have taken.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxTurns *int32 `json:"maxTurns,omitempty"`

	// judge gives the case's own rubric or minScore to spec.judge, which
	// it needs.
	// +optional
	Judge *CaseJudge `json:"judge,omitempty"`
}

// CallExpectation is how many times a run must call a tool, counting
// only the calls whose arguments satisfy when.
//
// +kubebuilder:validation:XValidation:rule=`!has(self.min) || !has(self.max) || self.min <= self.max`,message="min must not be more than max"
type CallExpectation struct {
	// tool is the name of the tool, as the model calls it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Tool string `json:"tool"`

	// when is a condition in CEL over the call's arguments, the object
	// args, as a policy rule's when (such as args.amount > 100); only the
	// calls it holds for are counted. Empty counts every call to the
	// tool.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	When string `json:"when,omitempty"`

	// min is the fewest calls the run must make. Defaults to 1 when max
	// is not set either, 0 otherwise.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Min *int32 `json:"min,omitempty"`

	// max is the most calls the run may make; 0 forbids the call.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Max *int32 `json:"max,omitempty"`
}

// OutputExpectation checks a run's typed answer (status.output). A run
// without one fails it.
//
// +kubebuilder:validation:XValidation:rule=`has(self.fields) || has(self.schema)`,message="output needs fields, schema or both: an empty output check says nothing"
type OutputExpectation struct {
	// fields are values status.output must hold, each at a path.
	// +optional
	// +listType=map
	// +listMapKey=path
	// +kubebuilder:validation:MaxItems=32
	Fields []OutputField `json:"fields,omitempty"`

	// schema is a JSON Schema (draft 2020-12 unless its $schema says
	// otherwise) that status.output must validate against; it refers to
	// nothing outside itself.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=64
	Schema *runtime.RawExtension `json:"schema,omitempty"`
}

// OutputField is one value status.output must hold.
type OutputField struct {
	// path names the field: object keys joined by '.', such as
	// refund.amount. A key holding '.' cannot be named.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[^.]+(\.[^.]+)*$`
	Path string `json:"path"`

	// equals is the JSON value the field must equal: a string, number,
	// boolean, null, list or object, compared as JSON (1 equals 1.0; the
	// order of an object's keys does not matter).
	// +required
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	Equals runtime.RawExtension `json:"equals"`
}

// AgentEvaluationStatus is how the evaluation's runs scored.
type AgentEvaluationStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is a display summary derived from the conditions: Running
	// until every run has ended and been scored, then Regressed when the
	// comparison with spec.baseline found regressions, else Passed (every
	// run of every case passed) or Failed.
	// +optional
	Phase EvaluationPhase `json:"phase,omitempty"`

	// cases are the results of each case, in the order of spec.cases,
	// for an evaluation with spec.templateRef; with spec.variants they
	// are in variants[].cases.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	Cases []EvaluationCaseStatus `json:"cases,omitempty"`

	// totals add up the cases (of every variant).
	// +optional
	Totals *EvaluationTotals `json:"totals,omitempty"`

	// casesFrom are the cases read from spec.casesFrom's ConfigMap when
	// the evaluation started, checked and with their defaults: the
	// evaluation runs spec.cases and these, whatever becomes of the
	// ConfigMap.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	CasesFrom []EvaluationCase `json:"casesFrom,omitempty"`

	// variants are the results of each variant, in the order of
	// spec.variants: its cases and its totals.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=5
	Variants []EvaluationVariantStatus `json:"variants,omitempty"`

	// regressions are what did worse than spec.baseline, by variant: at
	// most 64, the totals before the cases.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Regressions []EvaluationRegression `json:"regressions,omitempty"`

	// conditions: Running is True while a run has not ended or not been
	// created (reason Running), False once every run has been scored
	// (reason Passed, Failed or Regressed). Complete is False while runs
	// remain (reason Running), then True with reason Passed, Failed or
	// Regressed and a message that says how many runs passed.
	// BaselineCompared, with spec.baseline, is Unknown while runs remain,
	// then True (reason Regressed or NoRegressions) once compared, or
	// False when the baseline could not be compared (reason
	// BaselineNotFound, BaselineNotComplete, BaselineMismatch or
	// BaselineInvalid). Budgeted, with spec.budgetRef, is True (reason
	// BudgetSelectsRuns) or False (reason BudgetNotFound or
	// BudgetDoesNotSelectRuns).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// completionTime is when the last run was scored.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// EvaluationCaseStatus is how one case's runs scored.
type EvaluationCaseStatus struct {
	// name is the case's name.
	// +required
	// +kubebuilder:validation:MaxLength=23
	Name string `json:"name"`

	// runs is how many runs of the case have been created.
	// +optional
	Runs int32 `json:"runs,omitempty"`

	// passed is how many runs ended and met every expectation.
	// +optional
	Passed int32 `json:"passed,omitempty"`

	// failed is how many runs ended and missed an expectation.
	// +optional
	Failed int32 `json:"failed,omitempty"`

	// results are the case's runs scored so far, by repeat. A run is
	// scored once, when it ends; its result stays here when the run is
	// deleted (ttlSecondsAfterFinished), and it is not run again.
	// +optional
	// +listType=map
	// +listMapKey=repeat
	// +kubebuilder:validation:MaxItems=10
	Results []EvaluationRunResult `json:"results,omitempty"`

	// failedRun is the first run of the case that failed (the lowest
	// repeat).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	FailedRun string `json:"failedRun,omitempty"`

	// failureReason says why failedRun failed: which expectation, what
	// it expected and what the run showed.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	FailureReason string `json:"failureReason,omitempty"`
}

// EvaluationRunResult is how one run of a case scored.
type EvaluationRunResult struct {
	// repeat is which of the case's runs this is, from 1 to spec.repeats.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Repeat int32 `json:"repeat"`

	// run is the run's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Run string `json:"run"`

	// passed is true when the run met every expectation of its case.
	// +required
	Passed bool `json:"passed"`

	// costUSD is what the run spent, in US dollars.
	// +optional
	CostUSD USD `json:"costUSD,omitempty"`

	// verified is true when the run's verifier (spec.verify) accepted its
	// answer; false for a run with no verifier.
	// +optional
	Verified bool `json:"verified,omitempty"`

	// turnsToCompletion is the turns the run took, when it ended
	// Completed.
	// +optional
	TurnsToCompletion *int32 `json:"turnsToCompletion,omitempty"`

	// repeatedIntentDepth is the most times the run proposed any one call
	// signature (status.convergence.repeatedIntentDepth): 1 never
	// repeated itself.
	// +optional
	RepeatedIntentDepth int32 `json:"repeatedIntentDepth,omitempty"`

	// headroom is the smallest fraction of any of the run's ceilings it
	// left unused (status.convergence.headroom), "0.00" to "1.00", when
	// it ended Completed: near 0, it finished on its last breath.
	// +optional
	// +kubebuilder:validation:MaxLength=4
	Headroom string `json:"headroom,omitempty"`

	// judgeScore is the judge's score of the run, 1 to 5; unset when the
	// run was not judged (no spec.judge, another expectation missed, or
	// the judge gave no score: failureReason says why).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	JudgeScore *int32 `json:"judgeScore,omitempty"`

	// judgeRationale is why the judge gave its score, cut to 512 bytes.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	JudgeRationale string `json:"judgeRationale,omitempty"`

	// judgeCostUSD is what the judge's call about the run spent, in US
	// dollars.
	// +optional
	JudgeCostUSD USD `json:"judgeCostUSD,omitempty"`

	// judgeTokens are the tokens the judge's call about the run used.
	// +optional
	JudgeTokens int64 `json:"judgeTokens,omitempty"`
}

// EvaluationTotals add up an evaluation's cases.
type EvaluationTotals struct {
	// runs is how many runs the evaluation makes: cases times repeats.
	// +optional
	Runs int32 `json:"runs,omitempty"`

	// passed is how many runs passed.
	// +optional
	Passed int32 `json:"passed,omitempty"`

	// failed is how many runs failed.
	// +optional
	Failed int32 `json:"failed,omitempty"`

	// passRate is passed over the runs scored so far (passed + failed), a
	// decimal string from "0.00" to "1.00" rounded down to two places;
	// unset before the first run is scored.
	// +optional
	// +kubebuilder:validation:MaxLength=4
	PassRate string `json:"passRate,omitempty"`

	// verified is how many runs scored had their answer accepted by their
	// verifier (spec.verify).
	// +optional
	Verified int32 `json:"verified,omitempty"`

	// verifiedRate is verified over the runs scored, as passRate is
	// written; unset when no run was verified.
	// +optional
	// +kubebuilder:validation:MaxLength=4
	VerifiedRate string `json:"verifiedRate,omitempty"`

	// costUSD is what the runs that ended spent together, in US dollars.
	// +optional
	CostUSD USD `json:"costUSD,omitempty"`

	// turnsToCompletionP50 is the median of the turns the runs that ended
	// Completed took (nearest rank); unset when none did.
	// +optional
	TurnsToCompletionP50 *int32 `json:"turnsToCompletionP50,omitempty"`

	// turnsToCompletionP95 is the 95th percentile of the same (nearest
	// rank).
	// +optional
	TurnsToCompletionP95 *int32 `json:"turnsToCompletionP95,omitempty"`

	// repeatedIntentDepthMax is the deepest repeatedIntentDepth of the
	// runs scored: how often the most repetitive run proposed one call.
	// +optional
	RepeatedIntentDepthMax int32 `json:"repeatedIntentDepthMax,omitempty"`

	// headroomP50 is the median (nearest rank) of the headroom the runs
	// that ended Completed left, "0.00" to "1.00"; unset when none did.
	// +optional
	// +kubebuilder:validation:MaxLength=4
	HeadroomP50 string `json:"headroomP50,omitempty"`

	// judged is how many runs the judge scored.
	// +optional
	Judged int32 `json:"judged,omitempty"`

	// judgeMeanScore is the mean of the judge's scores, from "1.00" to
	// "5.00" rounded down to two places; unset when no run was judged.
	// +optional
	// +kubebuilder:validation:MaxLength=4
	JudgeMeanScore string `json:"judgeMeanScore,omitempty"`

	// judgeCostUSD is what the judge's calls spent, in US dollars; the
	// runs' own spend is costUSD.
	// +optional
	JudgeCostUSD USD `json:"judgeCostUSD,omitempty"`

	// judgeTokens are the tokens the judge's calls used.
	// +optional
	JudgeTokens int64 `json:"judgeTokens,omitempty"`
}

// EvaluationVariantStatus is how one variant's runs scored.
type EvaluationVariantStatus struct {
	// name is the variant's name.
	// +required
	// +kubebuilder:validation:MaxLength=12
	Name string `json:"name"`

	// cases are the results of each case of the variant, in the order of
	// spec.cases.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	Cases []EvaluationCaseStatus `json:"cases,omitempty"`

	// totals add up the variant's cases.
	// +optional
	Totals *EvaluationTotals `json:"totals,omitempty"`
}

// RegressionKind is what regressed.
// +kubebuilder:validation:Enum=PassRate;VerifiedRate;CostPerRun;TurnsToCompletionP50;Case
type RegressionKind string

// The kinds of regression.
const (
	// RegressionPassRate: the pass rate fell by more than maxPassRateDrop.
	RegressionPassRate RegressionKind = "PassRate"
	// RegressionVerifiedRate: the verified rate fell by more than
	// maxPassRateDrop.
	RegressionVerifiedRate RegressionKind = "VerifiedRate"
	// RegressionCostPerRun: the average cost of a run rose by more than
	// maxCostIncrease.
	RegressionCostPerRun RegressionKind = "CostPerRun"
	// RegressionTurns: the median turns to completion rose by more than
	// maxTurnsIncrease.
	RegressionTurns RegressionKind = "TurnsToCompletionP50"
	// RegressionCase: a case whose every run passed in the baseline has a
	// run that failed.
	RegressionCase RegressionKind = "Case"
)

// EvaluationRegression is one thing that did worse than the baseline.
type EvaluationRegression struct {
	// variant is the variant that regressed; empty for an evaluation with
	// spec.templateRef.
	// +optional
	// +kubebuilder:validation:MaxLength=12
	Variant string `json:"variant,omitempty"`

	// what regressed.
	// +required
	What RegressionKind `json:"what"`

	// case is the case that regressed, when what is Case.
	// +optional
	// +kubebuilder:validation:MaxLength=23
	Case string `json:"case,omitempty"`

	// baseline is the baseline's value.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Baseline string `json:"baseline,omitempty"`

	// value is this evaluation's value.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Value string `json:"value,omitempty"`

	// message says it in a sentence.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// EvaluationPhase is an evaluation's display summary.
// +kubebuilder:validation:Enum=Running;Passed;Failed;Regressed
type EvaluationPhase string

// The evaluation's phases.
const (
	// EvaluationRunning: a run has not been created, ended or scored.
	EvaluationRunning EvaluationPhase = "Running"
	// EvaluationPassed: every run of every case passed.
	EvaluationPassed EvaluationPhase = "Passed"
	// EvaluationFailed: every run ended and at least one failed.
	EvaluationFailed EvaluationPhase = "Failed"
	// EvaluationRegressed: every run ended and the comparison with
	// spec.baseline found regressions.
	EvaluationRegressed EvaluationPhase = "Regressed"
)

// The AgentEvaluation's condition types and reasons.
const (
	// EvaluationConditionRunning is True while a run remains to create,
	// end or score, False once none does.
	EvaluationConditionRunning = "Running"
	// EvaluationConditionComplete is True once every run has been scored.
	EvaluationConditionComplete = "Complete"
	// ReasonEvaluationRunning: runs remain (Running True, Complete False).
	ReasonEvaluationRunning = "Running"
	// ReasonEvaluationPassed: every run passed.
	ReasonEvaluationPassed = "Passed"
	// ReasonEvaluationFailed: every run ended and at least one failed.
	ReasonEvaluationFailed = "Failed"
	// ReasonEvaluationRegressed: every run ended and the comparison with
	// spec.baseline found regressions (Complete True, BaselineCompared
	// True).
	ReasonEvaluationRegressed = "Regressed"

	// EvaluationConditionBaselineCompared, with spec.baseline, is Unknown
	// while runs remain, True once the evaluation was compared with its
	// baseline, False when it could not be.
	EvaluationConditionBaselineCompared = "BaselineCompared"
	// ReasonNoRegressions: compared, and nothing did worse than the
	// baseline (BaselineCompared True).
	ReasonNoRegressions = "NoRegressions"
	// ReasonBaselineNotFound: spec.baseline.evaluation does not exist in
	// the namespace when the last run is scored (BaselineCompared False).
	ReasonBaselineNotFound = "BaselineNotFound"
	// ReasonBaselineNotComplete: the baseline had not scored all its runs
	// when this evaluation's last run was scored (BaselineCompared False).
	ReasonBaselineNotComplete = "BaselineNotComplete"
	// ReasonBaselineMismatch: no variant of the evaluation has a
	// counterpart in the baseline: variants of other names, or variants
	// against a single template (BaselineCompared False).
	ReasonBaselineMismatch = "BaselineMismatch"
	// EvaluationConditionCasesRead, with spec.casesFrom, is True once the
	// ConfigMap's cases were read into status.casesFrom, False while they
	// cannot be: no run is made until it is True.
	EvaluationConditionCasesRead = "CasesRead"
	// ReasonCasesRead: the ConfigMap's cases were read (CasesRead True).
	ReasonCasesRead = "CasesRead"
	// ReasonCasesNotFound: the ConfigMap, or its key, does not exist
	// (CasesRead False).
	ReasonCasesNotFound = "CasesNotFound"
	// ReasonCasesInvalid: the key does not hold a list of cases, or the
	// merged cases are not valid (CasesRead False).
	ReasonCasesInvalid = "CasesInvalid"

	// EvaluationConditionBudgeted, with spec.budgetRef, is True once the
	// AgentBudget exists and selects the evaluation's runs, False while it
	// does not: no run is made until it is True.
	EvaluationConditionBudgeted = "Budgeted"
	// ReasonBudgetSelectsRuns: the budget exists and selects the
	// evaluation's runs (Budgeted True).
	ReasonBudgetSelectsRuns = "BudgetSelectsRuns"
	// ReasonEvaluationBudgetNotFound: spec.budgetRef names no AgentBudget
	// in the namespace (Budgeted False).
	ReasonEvaluationBudgetNotFound = "BudgetNotFound"
	// ReasonBudgetDoesNotSelectRuns: the budget's selector does not select
	// the evaluation's runs, which it would not charge (Budgeted False).
	ReasonBudgetDoesNotSelectRuns = "BudgetDoesNotSelectRuns"

	// ReasonBaselineInvalid: spec.baseline's margins are not decimals, in
	// an evaluation the API server did not check (a local one)
	// (BaselineCompared False).
	ReasonBaselineInvalid = "BaselineInvalid"
)
