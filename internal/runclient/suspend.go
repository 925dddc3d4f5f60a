package runclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// SuspendOptions name the AgentSchedule to suspend or resume.
type SuspendOptions struct {
	Namespace, Name string
	// Suspend: true suspends the schedule (spec.suspend), false resumes it.
	Suspend bool
	// UID, when set, is the schedule the person was shown (the console's
	// button): the patch carries it as a precondition, so the API server
	// refuses it (409) when the schedule was deleted and created again
	// under its name since.
	UID types.UID
}

// Suspended is what SuspendSchedule did.
type Suspended struct {
	Namespace, Name string
	Suspend         bool
}

// String says what was done, in a sentence.
func (s *Suspended) String() string {
	if s.Suspend {
		return fmt.Sprintf("agentschedule/%s suspended: it starts no run until it is resumed", s.Name)
	}
	return fmt.Sprintf("agentschedule/%s resumed: it starts runs at its scheduled times again", s.Name)
}

// SuspendSchedule sets spec.suspend of an AgentSchedule with a merge
// patch, as the caller: one request, with no read before it, that changes
// nothing else of the spec.
func SuspendSchedule(ctx context.Context, c client.Client, o SuspendOptions) (*Suspended, error) {
	patch := map[string]any{"spec": map[string]any{"suspend": o.Suspend}}
	if o.UID != "" {
		patch["metadata"] = map[string]any{"uid": o.UID}
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	s := &v1alpha1.AgentSchedule{}
	s.Namespace, s.Name = o.Namespace, o.Name
	err = c.Patch(ctx, s, client.RawPatch(types.MergePatchType, body), client.FieldOwner(FieldManager))
	switch {
	case err == nil:
		return &Suspended{Namespace: o.Namespace, Name: o.Name, Suspend: o.Suspend}, nil
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("agentschedule %q not found in namespace %q", o.Name, o.Namespace)
	case apierrors.IsConflict(err) && o.UID != "":
		return nil, fmt.Errorf("agentschedule/%s was deleted and created again since the page was read: nothing was changed; reload it, and act on the schedule it shows now", o.Name)
	case apierrors.IsForbidden(err):
		var st apierrors.APIStatus
		if errors.As(err, &st) {
			return nil, notAllowed{err: err, msg: st.Status().Message}
		}
	}
	return nil, err
}
