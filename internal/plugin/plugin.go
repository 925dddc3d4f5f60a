// Package plugin is the kubectl plugin kubectl-agentrun: commands that
// create a run from a template or from an earlier run, answer pending
// calls, cancel a run, print its transcript and follow it to its end.
//
// Every command works over the same annotations and fields a person could
// set with kubectl itself (see "Approving a step" in the API contract); the
// plugin adds the checks and the reading that make them pleasant: it refuses
// to answer a call that is not waiting, and it reassembles the transcript
// from the run's chunk Secrets and its checkpoint.
//
// The functions here take a controller-runtime client and an io.Writer so
// they can be tested against a real API server; NewCommand wires them to
// cobra and kubectl's usual connection flags.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/agentrun/agentrun/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldManager is the field manager of every write the plugin makes. The
// operator reads it from the run's managed fields to record who answered.
const FieldManager = "kubectl-agentrun"

// Ref names one AgentRun.
type Ref struct {
	Namespace string
	Name      string
}

// String is the kubectl spelling of the run: agentrun/NAME.
func (r Ref) String() string { return "agentrun/" + r.Name }

func (r Ref) key() types.NamespacedName {
	return types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
}

// ExitError carries the exit status a command wants without an error
// message of its own (watch ends 1 when a run did not complete).
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// getRun reads the run and turns the usual failures into sentences a person
// can act on.
func getRun(ctx context.Context, c client.Reader, ref Ref) (*v1alpha1.AgentRun, error) {
	run := &v1alpha1.AgentRun{}
	if err := c.Get(ctx, ref.key(), run); err != nil {
		return nil, explain(err, ref)
	}
	return run, nil
}

// explain rewrites API errors about the run into plain messages.
func explain(err error, ref Ref) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("agentrun %q not found in namespace %q", ref.Name, ref.Namespace)
	case meta.IsNoMatchError(err):
		return fmt.Errorf("this cluster does not serve AgentRuns (%s): install the AgentRun CRD first", v1alpha1.GroupVersion)
	case apierrors.IsForbidden(err):
		var st apierrors.APIStatus
		if errors.As(err, &st) {
			return notAllowed{err: err, msg: st.Status().Message}
		}
	}
	return err
}

// notAllowed is the API server's refusal in a sentence, keeping the
// refusal itself for callers that tell errors apart (apierrors.IsForbidden).
type notAllowed struct {
	err error
	msg string
}

func (e notAllowed) Error() string { return "not allowed: " + e.msg }
func (e notAllowed) Unwrap() error { return e.err }

// printGoal starts what transcript and watch print: the goal. A run made
// from a template has none in its spec (the operator keeps the resolved
// one with the run), so the template and the parameters given stand in.
func printGoal(w io.Writer, run *v1alpha1.AgentRun) {
	if run.Spec.Goal == "" && run.Spec.TemplateRef != nil {
		printf(w, "template: %s", run.Spec.TemplateRef.Name)
		for _, p := range run.Spec.Parameters {
			printf(w, " %s=%q", p.Name, p.Value)
		}
		printf(w, "\n")
		return
	}
	printf(w, "goal: %s\n", indent(run.Spec.Goal))
}

// printf writes to w; output errors of a terminal are not worth failing for.
func printf(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format, args...)
}
