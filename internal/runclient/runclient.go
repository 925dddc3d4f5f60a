// Package runclient holds what the clients of AgentRuns do to a run: the
// kubectl plugin and the web console answer pending calls and cancel runs
// through it. Every operation returns what happened as a value (Answered,
// Cancelled) or says why it did nothing with a typed error (*Refused); no
// operation prints. The plugin prints those values, the console renders
// them.
//
// It imports the API types and controller-runtime's client only: a client
// links no executor, provider or controller.
package runclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentrun/agentrun/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldManager is the field manager of every write a client makes. The
// operator reads it from the run's managed fields to record who answered.
const FieldManager = "kubectl-agentrun"

// Ref names one AgentRun.
type Ref struct {
	Namespace string
	Name      string
}

// String is the kubectl spelling of the run: agentrun/NAME.
func (r Ref) String() string { return "agentrun/" + r.Name }

// Key is the run's key for a client's Get.
func (r Ref) Key() types.NamespacedName {
	return types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
}

// Get reads the run and turns the usual failures into sentences a person
// can act on.
func Get(ctx context.Context, c client.Reader, ref Ref) (*v1alpha1.AgentRun, error) {
	run := &v1alpha1.AgentRun{}
	if err := c.Get(ctx, ref.Key(), run); err != nil {
		return nil, Explain(err, ref)
	}
	return run, nil
}

// Explain rewrites API errors about the run into plain messages. A
// refusal of the API server stays one for errors.As and
// apierrors.IsForbidden.
func Explain(err error, ref Ref) error {
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
