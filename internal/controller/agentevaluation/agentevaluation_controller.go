// Package agentevaluation is the AgentEvaluation reconciler: it runs an
// AgentRunTemplate (or each of the evaluation's variants) on an
// evaluation's cases, a few runs at a time, scores each run as it ends
// against what its case expects, and compares the whole with a baseline.
package agentevaluation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/config/crd"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/budget"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/crdcheck"
	"github.com/agentrun/agentrun/internal/evaluation"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/agentrun/agentrun/internal/seal"
	"github.com/agentrun/agentrun/internal/transcript"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// ReasonRunCreated is the reason of the event that says the evaluation
// created a run; its end is told with the Complete condition's reasons.
const ReasonRunCreated = "RunCreated"

// Config is what a Reconciler is built from.
type Config struct {
	reconcilers.Base
	// Keys open the seals of the runs' transcripts, read to score a case
	// that expects calls (expect.calls): a transcript chunk the operator
	// did not seal is never read as the run's.
	Keys *seal.Keyring
	// Judges builds the model of an evaluation's judge (spec.judge.model)
	// in its namespace: kit.Builder.Judge. Nil fails every run a judge
	// would score, saying the operator has none.
	Judges func(ctx context.Context, namespace string, spec *v1alpha1.ModelSpec) (loop.Model, loop.Pricing, error)
	// Ledgers is the operator's book of AgentBudget writes, which the
	// judge's leases go through as runs' leases do; nil is a book of the
	// reconciler's own.
	Ledgers *budget.Ledgers
	// Validator checks AgentEvaluations as the API server does, for the
	// cases read from spec.casesFrom; nil is one of the CRD built with
	// the binary.
	Validator *crdcheck.Validator
	// Archive, when set, keeps every complete evaluation, and is where
	// spec.baseline is looked for when no live evaluation has its name.
	Archive archive.Evaluations
	// ArchiveRetry is how soon a failed archive write is tried again;
	// zero means archive.DefaultRetry.
	ArchiveRetry time.Duration
}

// casesRetry is how often an evaluation whose casesFrom cannot be read
// looks again.
const casesRetry = 30 * time.Second

// Reconciler runs evaluations. Build it with NewReconciler.
type Reconciler struct {
	Config
}

// NewReconciler builds the reconciler, defaults applied.
func NewReconciler(cfg Config) *Reconciler {
	cfg.Base = cfg.Defaulted()
	if cfg.Ledgers == nil {
		cfg.Ledgers = budget.NewLedgers()
	}
	if cfg.Validator == nil {
		v, err := crdcheck.New(crd.AgentEvaluations, v1alpha1.GroupVersion.Version)
		if err != nil {
			panic("the AgentEvaluation CRD built with the binary: " + err.Error()) // a broken build, not an input
		}
		cfg.Validator = v
	}
	return &Reconciler{Config: cfg}
}

// A run's owner reference blocks the evaluation's deletion until the run
// is gone, which needs update on agentevaluations/finalizers where the
// API server enforces owner reference permissions.
//
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentevaluations,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentevaluations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentevaluations/finalizers,verbs=update
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentruns,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentbudgets,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentbudgets/status,verbs=get;update

// SetupWithManager registers the reconciler: it wakes for a new
// evaluation and for its runs being created, deleted or ending.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.AgentEvaluation{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&v1alpha1.AgentRun{}, builder.WithPredicates(reconcilers.RunStartedOrEnded())).
		Named("agentevaluation").
		Complete(r)
}

// scope is what one reconcile of an evaluation has read and done.
type scope struct {
	// eval is the evaluation, its status being computed; read by Reconcile.
	eval *v1alpha1.AgentEvaluation
	// runs are the evaluation's runs by name, as the API server has them
	// now (uncached: a run just created is never missed, so concurrency
	// holds); set by listRuns, nil when they could not be read.
	runs map[string]*v1alpha1.AgentRun
	// pending counts, by evaluation.PendingKey (variant and case), the
	// runs that exist and are not scored; set by scoreEnded, added to by
	// createDue.
	pending map[string]int32
	// baseline is the evaluation spec.baseline names, nil without one or
	// when it does not exist; set by readBaseline once every run has
	// been scored, read by the status computation.
	baseline *v1alpha1.AgentEvaluation
	// baselineFrom says which baseline was compared with (live or
	// archived), or where it was looked for when none was found; set by
	// readBaseline.
	baselineFrom string
	// created are the runs createDue created, for events after the write.
	created []string
	// judge is the evaluation's judge; set by judge on first use in
	// scoreEnded, nil until then and without spec.judge.
	judge *evaluation.Judge
	// budgeted is what readBudget found of spec.budgetRef's budget, nil
	// without one; read by createDue (no run is made unless ok) and by
	// the status computation (the Budgeted condition).
	budgeted *condition
	// casesRead is what readCases found of spec.casesFrom's ConfigMap,
	// nil without one or once its cases are in status; read by Reconcile
	// (nothing is scored or made unless ok) and by the status
	// computation (the CasesRead condition).
	casesRead *condition
}

// Reconcile brings one evaluation up to date: it scores the runs that
// have ended, creates those now due, and writes status once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	e := &v1alpha1.AgentEvaluation{}
	if err := r.Get(ctx, req.NamespacedName, e); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if e.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	if evaluation.Complete(e) {
		// A complete evaluation is a record: its runs may be deleted
		// (ttlSecondsAfterFinished), and none is made again. It goes to
		// the archive, if it is not there yet: read again past the
		// cache, which may not have the Archived condition a reconcile
		// wrote a moment ago.
		if r.Archive == nil || apimeta.IsStatusConditionTrue(e.Status.Conditions, v1alpha1.ConditionArchived) {
			return ctrl.Result{}, nil
		}
		if err := r.APIReader.Get(ctx, req.NamespacedName, e); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		return r.archiveEvaluation(ctx, e)
	}
	before := e.DeepCopy()
	s := &scope{eval: e, pending: map[string]int32{}}
	defer func() {
		if s.runs == nil {
			return // the runs could not be read: nothing was learnt
		}
		now := metav1.NewTime(r.Clock())
		evaluation.SetStatusAgainstFrom(e, s.baseline, s.baselineFrom, s.pending, now)
		if c := s.casesRead; c != nil {
			evaluation.SetCondition(e, v1alpha1.EvaluationConditionCasesRead, c.ok, c.reason, c.message, now)
		}
		if b := s.budgeted; b != nil {
			evaluation.SetCondition(e, v1alpha1.EvaluationConditionBudgeted, b.ok, b.reason, b.message, now)
		}
		if equality.Semantic.DeepEqual(before.Status, e.Status) {
			return
		}
		// Optimistic: a status computed from an older read is never
		// written over a newer one (which may hold results whose runs
		// are gone); it is computed again.
		err := r.Status().Patch(ctx, e, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		switch {
		case apierrors.IsConflict(err):
			result = ctrl.Result{RequeueAfter: 100 * time.Millisecond}
			return
		case err != nil:
			retErr = errors.Join(retErr, client.IgnoreNotFound(err))
			return
		}
		r.report(e, before, s.created)
		if evaluation.Complete(e) {
			// Status changes wake no reconcile (the predicate): the
			// evaluation that just completed is archived now.
			archived, err := r.archiveEvaluation(ctx, e)
			retErr = errors.Join(retErr, err)
			if !archived.IsZero() {
				result = archived
			}
		}
	}()
	if err := r.listRuns(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.readCases(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if c := s.casesRead; c != nil && !c.ok {
		return ctrl.Result{RequeueAfter: casesRetry}, nil // the CasesRead condition says why
	}
	if err := r.readBudget(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	scoreErr := r.scoreEnded(ctx, s)
	if result, err := r.createDue(ctx, s); err != nil || !result.IsZero() {
		return result, errors.Join(scoreErr, err)
	}
	if scoreErr != nil {
		return ctrl.Result{}, scoreErr
	}
	return ctrl.Result{}, r.readBaseline(ctx, s)
}

// readBaseline reads the evaluation spec.baseline names, once every run
// has been scored: the comparison is made as the evaluation completes.
func (r *Reconciler) readBaseline(ctx context.Context, s *scope) error {
	e := s.eval
	if e.Spec.Baseline == nil || !allScored(e) {
		return nil
	}
	name := e.Spec.Baseline.Evaluation
	b := &v1alpha1.AgentEvaluation{}
	err := r.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: name}, b)
	switch {
	case apierrors.IsNotFound(err) && r.Archive != nil:
		archived, rec, err := r.archivedBaseline(ctx, e, name)
		if err != nil {
			s.runs = nil // nothing is written from a half-read: the comparison is made once
			return fmt.Errorf("reading the baseline %s of %s from the archive: %w", name, e.Name, err)
		}
		if archived == nil {
			s.baselineFrom = "in namespace " + e.Namespace + " or in the archive"
			return nil // the status says so
		}
		s.baseline = archived
		s.baselineFrom = fmt.Sprintf("archived evaluation %s finished at %s (UID %s)", name, rec.FinishedAt.UTC().Format(time.RFC3339), rec.UID)
		return nil
	case apierrors.IsNotFound(err):
		return nil // the status says so
	case err != nil:
		s.runs = nil // nothing is written from a half-read: the comparison is made once
		return fmt.Errorf("reading the baseline %s of %s: %w", name, e.Name, err)
	}
	s.baseline = b
	if r.Archive != nil {
		s.baselineFrom = "live evaluation " + name
	}
	return nil
}

// allScored reports whether every run of every variant and case has a
// result.
func allScored(e *v1alpha1.AgentEvaluation) bool {
	for _, v := range evaluation.Variants(e) {
		for _, c := range evaluation.Cases(e) {
			cs := evaluation.VariantCaseStatus(&e.Status, v.Name, c.Name)
			for rep := int32(1); rep <= max(e.Spec.Repeats, 1); rep++ {
				if !evaluation.Scored(cs, rep) {
					return false
				}
			}
		}
	}
	return true
}

// listRuns reads the evaluation's runs: those it controls, by name.
func (r *Reconciler) listRuns(ctx context.Context, s *scope) error {
	var all v1alpha1.AgentRunList
	if err := r.APIReader.List(ctx, &all, client.InNamespace(s.eval.Namespace), client.MatchingLabels{v1alpha1.LabelEvaluation: s.eval.Name}); err != nil {
		return fmt.Errorf("listing the runs of %s: %w", s.eval.Name, err)
	}
	s.runs = map[string]*v1alpha1.AgentRun{}
	for i := range all.Items {
		if run := &all.Items[i]; metav1.IsControlledBy(run, s.eval) {
			s.runs[run.Name] = run
		}
	}
	return nil
}

// scoreEnded scores every run that has ended and is not scored yet, and
// counts the others as pending. A run whose transcript cannot be read
// now (the API server failed) stays pending, and the error is returned
// to try again; one whose transcript is lost or forged fails its case.
func (r *Reconciler) scoreEnded(ctx context.Context, s *scope) error {
	e := s.eval
	var errs []error
	for _, v := range evaluation.Variants(e) {
		cases := evaluation.Cases(e)
		for i := range cases {
			c := &cases[i]
			cs := evaluation.VariantCaseStatus(&e.Status, v.Name, c.Name)
			for rep := int32(1); rep <= max(e.Spec.Repeats, 1); rep++ {
				run := s.runs[evaluation.RunName(e.Name, v.Name, c.Name, rep)]
				if run == nil || evaluation.Scored(cs, rep) {
					continue
				}
				if !runstatus.Finished(run) {
					s.pending[evaluation.PendingKey(v.Name, c.Name)]++
					continue
				}
				why, err := r.score(ctx, &c.Expect, run)
				if err != nil {
					s.pending[evaluation.PendingKey(v.Name, c.Name)]++
					errs = append(errs, err)
					continue
				}
				// Judged once: the result is recorded with the score, and
				// a scored run is never scored again. (A status write that
				// loses a conflict is computed again, the judge called
				// again with it.)
				res := evaluation.ResultOf(rep, run, why)
				why, err = r.judge(ctx, s).JudgeResult(ctx, e, c, run, evaluation.RunIndex(e, v.Name, i, rep), &res, why)
				if err != nil {
					s.pending[evaluation.PendingKey(v.Name, c.Name)]++
					errs = append(errs, err)
					continue
				}
				evaluation.Record(cs, res, why)
			}
		}
	}
	return errors.Join(errs...)
}

// judge is the evaluation's judge, built on first use in the reconcile;
// nil without spec.judge.
func (r *Reconciler) judge(ctx context.Context, s *scope) *evaluation.Judge {
	spec := s.eval.Spec.Judge
	if spec == nil || s.judge != nil {
		return s.judge
	}
	s.judge = &evaluation.Judge{Spec: spec}
	if s.eval.Spec.BudgetRef != nil {
		s.judge.Lease = r.judgeLease(s.eval)
	}
	if r.Judges == nil {
		s.judge.Unavailable = "this operator calls no judges"
		return s.judge
	}
	var err error
	if s.judge.Model, s.judge.Pricing, err = r.Judges(ctx, s.eval.Namespace, &spec.Model); err != nil {
		s.judge.Unavailable = err.Error()
	}
	return s.judge
}

// score scores an ended run, reading its calls from its transcript when
// the case expects calls. An error is a read to try again.
func (r *Reconciler) score(ctx context.Context, exp *v1alpha1.EvaluationExpectation, run *v1alpha1.AgentRun) (string, error) {
	if !evaluation.NeedsCalls(exp) {
		return evaluation.Score(exp, run), nil
	}
	if r.Keys == nil {
		return "calls: the operator has no keys to read the run's transcript with", nil
	}
	msgs, err := transcript.ReadSealedMessages(ctx, r.APIReader, r.Keys, run)
	switch {
	case errors.Is(err, transcript.ErrLost) || errors.Is(err, transcript.ErrForged):
		return clip.Cut("calls: the run's transcript cannot be read: "+err.Error(), 400, runstatus.CutMark), nil
	case err != nil:
		return "", fmt.Errorf("reading the transcript of %s: %w", run.Name, err)
	}
	return evaluation.ScoreWithCalls(exp, run, evaluation.CallsOf(msgs)), nil
}

// createDue creates the runs not made yet, in the order of the cases and
// their repeats, each repeat once per variant, while fewer than
// spec.concurrency are unfinished.
func (r *Reconciler) createDue(ctx context.Context, s *scope) (ctrl.Result, error) {
	e := s.eval
	if b := s.budgeted; b != nil && !b.ok {
		return ctrl.Result{RequeueAfter: budgetRetry}, nil // the Budgeted condition says why
	}
	unfinished := int32(0)
	for _, run := range s.runs {
		if !runstatus.Finished(run) {
			unfinished++
		}
	}
	variants := evaluation.Variants(e)
	cases := evaluation.Cases(e)
	for i := range cases {
		c := &cases[i]
		for rep := int32(1); rep <= max(e.Spec.Repeats, 1); rep++ {
			for _, v := range variants {
				cs := evaluation.VariantCaseStatus(&e.Status, v.Name, c.Name)
				name := evaluation.RunName(e.Name, v.Name, c.Name, rep)
				if s.runs[name] != nil || evaluation.Scored(cs, rep) {
					continue
				}
				if unfinished >= max(e.Spec.Concurrency, 1) {
					return ctrl.Result{}, nil // a run's end wakes us
				}
				run, err := runFor(r.Scheme(), e, v, c, name)
				if err == nil {
					err = r.Create(ctx, run)
				}
				switch {
				case apierrors.IsAlreadyExists(err):
					taken, ours := r.takenBy(ctx, e, name)
					if !ours {
						evaluation.Record(cs, v1alpha1.EvaluationRunResult{Repeat: rep, Run: name}, taken)
						continue
					}
					// Created a moment ago by us (a reconcile that raced
					// this one): it holds a place, and the next reconcile
					// lists it before making another.
					s.pending[evaluation.PendingKey(v.Name, c.Name)]++
					return ctrl.Result{RequeueAfter: time.Second}, nil
				case err != nil:
					return ctrl.Result{}, fmt.Errorf("creating run %s of case %s: %w", name, c.Name, err)
				}
				unfinished++
				s.pending[evaluation.PendingKey(v.Name, c.Name)]++
				what := fmt.Sprintf("%s for case %s (repeat %d)", name, c.Name, rep)
				if v.Name != "" {
					what = fmt.Sprintf("%s for variant %s, case %s (repeat %d)", name, v.Name, c.Name, rep)
				}
				s.created = append(s.created, what)
			}
		}
	}
	return ctrl.Result{}, nil
}

// takenBy reads the run that holds name: ours reports whether the
// evaluation controls it; otherwise taken says, for the case's failure
// reason, that another object has the name.
func (r *Reconciler) takenBy(ctx context.Context, e *v1alpha1.AgentEvaluation, name string) (taken string, ours bool) {
	run := &v1alpha1.AgentRun{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: name}, run); err != nil {
		return "", true // gone again, or unreadable: tried again on the next reconcile
	}
	if metav1.IsControlledBy(run, e) {
		return "", true
	}
	return fmt.Sprintf("run %s already exists and does not belong to this evaluation: delete it, or name the evaluation or the case differently", name), false
}

// runFor is the run of case c of variant v named name: made from the
// variant's template with the case's parameters, labelled with the
// evaluation, the case and the variant (unless "", spec.templateRef's),
// and controlled by the evaluation. The evaluation's author, as
// the API server recorded it, is the run's, so that a policy refusing
// self-approval refuses it for the evaluation's runs too; without one
// (an evaluation created before the admission policies), the API server
// records the operator.
func runFor(sc *runtime.Scheme, e *v1alpha1.AgentEvaluation, v v1alpha1.EvaluationVariant, c *v1alpha1.EvaluationCase, name string) (*v1alpha1.AgentRun, error) {
	run := &v1alpha1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.Namespace, Labels: runLabels(e, v, c)},
		Spec:       runclient.FromTemplate(v.TemplateRef.Name, c.Parameters),
	}
	if author := e.Annotations[v1alpha1.CreatedByAnnotation]; author != "" {
		run.Annotations = map[string]string{v1alpha1.CreatedByAnnotation: author}
	}
	if err := controllerutil.SetControllerReference(e, run, sc); err != nil {
		return nil, err
	}
	return run, nil
}

// runLabels are the labels of the runs of case c of variant v: the
// evaluation, the case and the variant (unless "", spec.templateRef's).
func runLabels(e *v1alpha1.AgentEvaluation, v v1alpha1.EvaluationVariant, c *v1alpha1.EvaluationCase) map[string]string {
	l := map[string]string{v1alpha1.LabelEvaluation: e.Name, v1alpha1.LabelCase: c.Name}
	if v.Name != "" {
		l[v1alpha1.LabelVariant] = v.Name
	}
	return l
}

// report tells, after the status write, what changed: the runs created
// and the evaluation's end.
func (r *Reconciler) report(e, before *v1alpha1.AgentEvaluation, created []string) {
	if r.Recorder == nil {
		return
	}
	for _, c := range created {
		r.Recorder.Eventf(e, nil, corev1.EventTypeNormal, ReasonRunCreated, "Create", "Created run %s", c)
	}
	if evaluation.Complete(e) && !evaluation.Complete(before) {
		typ := corev1.EventTypeNormal
		if e.Status.Phase == v1alpha1.EvaluationFailed || e.Status.Phase == v1alpha1.EvaluationRegressed {
			typ = corev1.EventTypeWarning
		}
		msg := ""
		for _, c := range e.Status.Conditions {
			if c.Type == v1alpha1.EvaluationConditionComplete {
				msg = c.Message
			}
		}
		r.Recorder.Eventf(e, nil, typ, string(e.Status.Phase), "Score", "%s", clip.Cut(msg, 1024, runstatus.CutMark))
	}
}
