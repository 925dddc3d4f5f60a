package runclient_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runclient"
)

// Continue refuses, with a reason a program can tell apart, what must not
// be continued, and creates nothing then.
func TestContinue_refusesWhatCannotBeContinued(t *testing.T) {
	finished := func(r *v1alpha1.AgentRun) {
		r.Status.Phase, r.Status.Outcome, r.Status.PendingApprovals = v1alpha1.PhaseSucceeded, v1alpha1.OutcomeCompleted, nil
	}
	for _, tc := range []struct {
		name string
		edit func(*v1alpha1.AgentRun)
		o    runclient.ContinueOptions
		want runclient.Reason
	}{
		{"a run that waits", nil, runclient.ContinueOptions{Run: ref, Goal: "And now?"}, runclient.RunUnfinished},
		{"a run created again since the page showed it", finished,
			runclient.ContinueOptions{Run: ref, Goal: "And now?", UID: "uid-0"}, runclient.RunReplaced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := clientWith(t, tc.edit)
			_, err := runclient.Continue(context.Background(), c, tc.o)
			var refused *runclient.Refused
			if !errors.As(err, &refused) || refused.Reason != tc.want {
				t.Fatalf("Continue = %v, want a refusal %s", err, tc.want)
			}
			runs := &v1alpha1.AgentRunList{}
			if err := c.List(context.Background(), runs); err != nil || len(runs.Items) != 1 {
				t.Errorf("a refused continue left %d runs (%v), want 1", len(runs.Items), err)
			}
		})
	}
}

// A run made from a template is continued from the same template and
// parameters, with the follow-up's own goal: the operator resolves the
// template and takes the goal (spec.continueFrom lets a templated run set
// one).
func TestContinue_aRunMadeFromATemplateKeepsItsTemplate(t *testing.T) {
	params := []v1alpha1.ParameterValue{{Name: "ticket", Value: "T-1042"}}
	c, _ := clientWith(t, func(r *v1alpha1.AgentRun) {
		r.Status.Phase, r.Status.Outcome, r.Status.PendingApprovals = v1alpha1.PhaseSucceeded, v1alpha1.OutcomeCompleted, nil
		r.Spec.TemplateRef, r.Spec.Parameters = &v1alpha1.TemplateRef{Name: "refunds"}, params
	})
	got, err := runclient.Continue(context.Background(), c, runclient.ContinueOptions{Run: ref, Goal: "And now?", Name: "next"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.TemplateRef == nil || got.Spec.TemplateRef.Name != "refunds" || len(got.Spec.Parameters) != 1 || got.Spec.Parameters[0] != params[0] ||
		got.Spec.Goal != "And now?" || got.Spec.ContinueFrom == nil || got.Spec.ContinueFrom.Name != ref.Name {
		t.Errorf("the follow-up's spec: %+v", got.Spec)
	}
}
