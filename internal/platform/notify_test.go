package platform

import (
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A policy's notify rule tells a run's end when the outcome is listed,
// its runSelector matches the run's labels and one of its schedules
// made the run.
func TestNotifies(t *testing.T) {
	pols := []v1alpha1.AgentRunPolicy{
		policy("billing", func(s *v1alpha1.AgentRunPolicySpec) {
			s.Notify = []v1alpha1.NotifyRule{
				{Outcomes: []v1alpha1.Outcome{v1alpha1.OutcomeBudgetExhausted, v1alpha1.OutcomeError},
					RunSelector: &v1alpha1.RunSelector{MatchLabels: map[string]v1alpha1.LabelValue{"team": "billing"}}},
				{Outcomes: []v1alpha1.Outcome{v1alpha1.OutcomeToolFailure}, Schedules: []string{"nightly-reconcile"}},
				{Outcomes: []v1alpha1.Outcome{v1alpha1.OutcomeLoopDetected},
					RunSelector: &v1alpha1.RunSelector{MatchExpressions: []v1alpha1.RunSelectorRequirement{
						{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"sandbox"}}}},
					Schedules: []string{"hourly"}},
			}
		}),
		policy("broken", func(s *v1alpha1.AgentRunPolicySpec) {
			s.Notify = []v1alpha1.NotifyRule{{Outcomes: []v1alpha1.Outcome{v1alpha1.OutcomeGuardrailStop},
				RunSelector: &v1alpha1.RunSelector{MatchExpressions: []v1alpha1.RunSelectorRequirement{{Key: "team", Operator: "Equals"}}}}}
		}),
	}
	created := metav1.NewTime(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	for i := range pols {
		pols[i].CreationTimestamp = created
	}
	ended := metav1.NewTime(created.Add(time.Hour))
	run := func(labels map[string]string) *v1alpha1.AgentRun {
		return &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Labels: labels},
			Status: v1alpha1.AgentRunStatus{CompletionTime: &ended}}
	}
	before := run(map[string]string{"team": "billing"})
	before.Status.CompletionTime = &metav1.Time{Time: created.Add(-time.Minute)}
	nightly := map[string]string{v1alpha1.LabelSchedule: "nightly-reconcile"}
	for _, tc := range []struct {
		name    string
		run     *v1alpha1.AgentRun
		outcome v1alpha1.Outcome
		want    bool
	}{
		{"a labelled run's listed outcome", run(map[string]string{"team": "billing"}), v1alpha1.OutcomeBudgetExhausted, true},
		{"a labelled run's outcome not listed", run(map[string]string{"team": "billing"}), v1alpha1.OutcomeCompleted, false},
		{"another team's run", run(map[string]string{"team": "support"}), v1alpha1.OutcomeBudgetExhausted, false},
		{"a run of the schedule", run(nightly), v1alpha1.OutcomeToolFailure, true},
		{"a run of another schedule", run(map[string]string{v1alpha1.LabelSchedule: "weekly"}), v1alpha1.OutcomeToolFailure, false},
		{"a run of no schedule", run(nil), v1alpha1.OutcomeToolFailure, false},
		{"schedule and selector both match", run(map[string]string{v1alpha1.LabelSchedule: "hourly", "tier": "gold"}), v1alpha1.OutcomeLoopDetected, true},
		{"the schedule matches, the selector does not", run(map[string]string{v1alpha1.LabelSchedule: "hourly", "tier": "sandbox"}), v1alpha1.OutcomeLoopDetected, false},
		{"a run that ended before the policy was created", before, v1alpha1.OutcomeBudgetExhausted, false},
		{"a selector that cannot be read picks every run", run(nil), v1alpha1.OutcomeGuardrailStop, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Notifies(pols, tc.run, tc.outcome); got != tc.want {
				t.Errorf("Notifies = %t, want %t", got, tc.want)
			}
		})
	}
}
