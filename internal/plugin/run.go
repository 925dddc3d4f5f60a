package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/agentrun/agentrun/internal/template"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RunOptions says which template to run, with which parameters, under
// which name.
type RunOptions struct {
	Namespace string
	Template  string
	// Params are the -p arguments as given: NAME=VALUE, split at the
	// first '=' so that a value may contain more.
	Params []string
	// Name is the new run's name; empty makes the API server generate one
	// from the template's name.
	Name string
}

// RunTemplate creates an AgentRun from an AgentRunTemplate
// (CreateFromTemplate) and prints its name as kubectl create does. A
// required parameter left out is named with the -p that sets it.
func RunTemplate(ctx context.Context, c client.Client, o RunOptions, w io.Writer) (*v1alpha1.AgentRun, error) {
	params, err := ParseParams(o.Params)
	if err != nil {
		return nil, err
	}
	run, err := CreateFromTemplate(ctx, c, TemplateRun{Namespace: o.Namespace, Template: o.Template, Params: params, Name: o.Name})
	var te *template.Error
	switch {
	case errors.As(err, &te) && te.Required:
		return nil, fmt.Errorf("%s\nset it with -p %s=VALUE", te.Message, te.Parameter)
	case err != nil:
		// The template's failures are explained already; what is left
		// is the create's.
		return nil, explainCreate(err, o.Namespace, o.Name)
	}
	printCreated(w, run)
	return run, nil
}

// TemplateRun is a run to make from a template: the template, the
// parameter values given and, optionally, the run's name.
type TemplateRun struct {
	Namespace, Template string
	Params              []v1alpha1.ParameterValue
	// Name is the new run's name; empty makes the API server generate one
	// from the template's name.
	Name string
}

// CreateFromTemplate creates an AgentRun from an AgentRunTemplate, as
// kubectl agentrun run --template and the console's Run form do. It checks
// the parameters against the ones the template declares first, with the
// operator's own rules (template.Values: every name declared, every
// required one given, enum and pattern satisfied), so that a person reads
// what is wrong before anything is created; the operator checks them again
// when it resolves the template, and its check is the one that counts. A
// parameter at fault is a *template.Error in the operator's words; a
// refused create is the API server's error as it gave it.
func CreateFromTemplate(ctx context.Context, c client.Client, o TemplateRun) (*v1alpha1.AgentRun, error) {
	tpl := &v1alpha1.AgentRunTemplate{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: o.Namespace, Name: o.Template}, tpl); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("agentruntemplate %q not found in namespace %q: `kubectl get agentruntemplates -n %s` lists the templates there",
				o.Template, o.Namespace, o.Namespace)
		case meta.IsNoMatchError(err):
			return nil, fmt.Errorf("this cluster does not serve AgentRunTemplates (%s): install the AgentRun CRDs of this version first", v1alpha1.GroupVersion)
		}
		return nil, explain(err, Ref{Namespace: o.Namespace, Name: o.Template})
	}
	if err := TemplateReady(tpl); err != nil {
		return nil, err
	}
	if _, err := template.Values(tpl, o.Params); err != nil {
		return nil, err
	}
	run := &v1alpha1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name},
		Spec:       runclient.FromTemplate(o.Template, o.Params),
	}
	if o.Name == "" {
		run.GenerateName = runclient.GenerateName(o.Template)
	}
	if err := c.Create(ctx, run, client.FieldOwner(FieldManager)); err != nil {
		return nil, err
	}
	return run, nil
}

// ParseParams reads -p NAME=VALUE arguments. A name may be given once.
func ParseParams(args []string) ([]v1alpha1.ParameterValue, error) {
	var out []v1alpha1.ParameterValue
	seen := map[string]bool{}
	for _, a := range args {
		name, value, ok := strings.Cut(a, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("-p %q: write -p NAME=VALUE", a)
		}
		if seen[name] {
			return nil, fmt.Errorf("-p %s is given more than once", name)
		}
		seen[name] = true
		out = append(out, v1alpha1.ParameterValue{Name: name, Value: value})
	}
	return out, nil
}

// explainCreate rewrites the usual failures of creating a run.
func explainCreate(err error, ns, name string) error {
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("agentrun %q already exists in namespace %q: choose another --name, or leave it out for a generated one", name, ns)
	}
	return explain(err, Ref{Namespace: ns, Name: name})
}

// created reports the making of a run from an earlier one (Continue,
// Rerun): a refusal as runclient put it, any other failure as the
// create's (reading the earlier run was explained already), else the new
// run's name as kubectl create prints it.
func created(w io.Writer, run *v1alpha1.AgentRun, err error, ns, name string) (*v1alpha1.AgentRun, error) {
	var refused *runclient.Refused
	switch {
	case errors.As(err, &refused):
		return nil, err
	case err != nil:
		return nil, explainCreate(err, ns, name)
	}
	printCreated(w, run)
	return run, nil
}

// printCreated says what kubectl create says.
func printCreated(w io.Writer, run *v1alpha1.AgentRun) {
	printf(w, "agentrun.%s/%s created\n", v1alpha1.GroupVersion.Group, run.Name)
}

// TemplateReady refuses a template whose Ready condition, for its current
// generation, is False: every run made from it would end Error.
func TemplateReady(tpl *v1alpha1.AgentRunTemplate) error {
	c := meta.FindStatusCondition(tpl.Status.Conditions, "Ready")
	if c == nil || c.Status != metav1.ConditionFalse || c.ObservedGeneration != tpl.Generation {
		return nil
	}
	return fmt.Errorf("template %s is not ready (%s): %s", tpl.Name, c.Reason, c.Message)
}

// printJSON prints the run as kubectl get -o json does: with its
// apiVersion and kind, without managedFields, indented. Markup in its
// strings (a model's answer) is escaped (\u003c for <), as JSON for a
// web page needs.
func printJSON(w io.Writer, run *v1alpha1.AgentRun) error {
	out := run.DeepCopy()
	out.APIVersion, out.Kind = v1alpha1.GroupVersion.String(), "AgentRun"
	out.ManagedFields = nil
	b, err := json.MarshalIndent(out, "", "    ")
	if err != nil {
		return fmt.Errorf("cannot print agentrun %s as JSON: %w", run.Name, err)
	}
	printf(w, "%s\n", b)
	return nil
}
