package runclient

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RunUnfinished: the run has no outcome yet; a follow-up continues a
// finished run.
const RunUnfinished Reason = "RunUnfinished"

// ContinueOptions names the finished run to continue, the follow-up's
// goal and, optionally, its name.
type ContinueOptions struct {
	Run  Ref
	Goal string
	// Name is the follow-up's name; empty makes the API server generate
	// one from the earlier run's name.
	Name string
	// UID, when set, is the run the person was shown (the console's
	// form): a run created again under the name since is refused
	// (RunReplaced), never continued in its place.
	UID types.UID
}

// Continue creates a follow-up of a finished run (spec.continueFrom): the
// earlier run's spec (the same model, ceilings, tools and policy, so the
// follow-up is never wider) with the new goal. It keeps the shard label
// (the user's choice of operator) and no other label or annotation: the
// operator labels the follow-up agents.agentrun.dev/continued-from. A
// follow-up of a run made from a template is made from the same template
// and parameters, with its own goal. An unfinished run is refused
// (*Refused).
func Continue(ctx context.Context, c client.Client, o ContinueOptions) (*v1alpha1.AgentRun, error) {
	if strings.TrimSpace(o.Goal) == "" {
		return nil, fmt.Errorf("the follow-up needs a goal: the next question or task, in plain words")
	}
	old, err := Get(ctx, c, o.Run)
	if err != nil {
		return nil, err
	}
	switch {
	case o.UID != "" && old.UID != o.UID:
		return nil, &Refused{Reason: RunReplaced, Run: o.Run, msg: fmt.Sprintf(
			"%s was deleted and created again since the page was read: reload it, and continue the run it shows now", o.Run)}
	case old.Status.Outcome == "":
		return nil, &Refused{Reason: RunUnfinished, Run: o.Run, msg: fmt.Sprintf(
			"%s has not finished (phase %s): a follow-up continues a finished run; wait for its outcome (kubectl agentrun watch %s)",
			o.Run, orRunning(old.Status.Phase), o.Run.Name)}
	}
	run := &v1alpha1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Run.Namespace, Name: o.Name},
		Spec:       *old.Spec.DeepCopy(),
	}
	if o.Name == "" {
		run.GenerateName = GenerateName(old.Name)
	}
	if shard, ok := old.Labels[v1alpha1.LabelShard]; ok {
		run.Labels = map[string]string{v1alpha1.LabelShard: shard}
	}
	run.Spec.Cancel = false
	run.Spec.Goal = o.Goal
	run.Spec.ContinueFrom = &v1alpha1.ContinueFrom{Name: old.Name}
	if err := c.Create(ctx, run, client.FieldOwner(FieldManager)); err != nil {
		return nil, err
	}
	return run, nil
}

func orRunning(p v1alpha1.Phase) v1alpha1.Phase {
	if p == "" {
		return "Pending"
	}
	return p
}
