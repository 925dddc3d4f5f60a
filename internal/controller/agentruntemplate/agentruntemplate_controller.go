// Package agentruntemplate is the AgentRunTemplate reconciler: it checks
// what the API server cannot about a template and says so in its Ready
// condition. Runs are made from templates by the AgentRun reconciler.
package agentruntemplate

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/template"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// Reasons of an AgentRunTemplate's Ready condition.
const (
	ReasonValid   = "Valid"
	ReasonInvalid = "InvalidTemplate"
)

// Reconciler checks templates: what the API server cannot
// (a placeholder that names no declared parameter, a default outside its
// pattern) it reports in the template's Ready condition, before a run
// made from it ends Error for the same reason.
type Reconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentruntemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentruntemplates/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=agentruns,verbs=create

// SetupWithManager registers the reconciler; it wakes for spec changes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.AgentRunTemplate{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("agentruntemplate").
		Complete(r)
}

// Reconcile sets the template's status from its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tpl := &v1alpha1.AgentRunTemplate{}
	if err := r.Get(ctx, req.NamespacedName, tpl); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	base := tpl.DeepCopy()
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: ReasonValid,
		Message: "runs can be made from this template", ObservedGeneration: tpl.Generation}
	if problem := checkTemplate(tpl); problem != "" {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonInvalid, problem
		// Stalled is what kstatus (and so Flux and kubectl wait) reads as
		// failed: a template no run can be made from waits for an edit.
		apimeta.SetStatusCondition(&tpl.Status.Conditions, metav1.Condition{Type: "Stalled", Status: metav1.ConditionTrue,
			Reason: ReasonInvalid, Message: problem, ObservedGeneration: tpl.Generation})
	} else {
		apimeta.RemoveStatusCondition(&tpl.Status.Conditions, "Stalled")
	}
	apimeta.SetStatusCondition(&tpl.Status.Conditions, cond)
	tpl.Status.ObservedGeneration = tpl.Generation
	tpl.Status.ParameterCount = int32(len(tpl.Spec.Parameters))
	if err := r.Status().Patch(ctx, tpl, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// checkTemplate says what makes runs of the template fail whatever their
// parameters, or "".
func checkTemplate(tpl *v1alpha1.AgentRunTemplate) string {
	undeclared, err := template.Undeclared(tpl)
	if err != nil {
		return err.Error()
	}
	if len(undeclared) > 0 {
		return fmt.Sprintf("spec.run uses $(params.%s), which spec.parameters does not declare", strings.Join(undeclared, "), $(params."))
	}
	for _, p := range tpl.Spec.Parameters {
		if p.Default == nil {
			continue
		}
		// The default alone, as a run that gives nothing would use it.
		probe := &v1alpha1.AgentRunTemplate{ObjectMeta: tpl.ObjectMeta, Spec: v1alpha1.AgentRunTemplateSpec{
			Parameters: []v1alpha1.TemplateParameter{p}}}
		if _, err := template.Values(probe, nil); err != nil {
			return "the default of " + err.Error()
		}
	}
	return ""
}
