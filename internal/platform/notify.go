package platform

import (
	"slices"

	"github.com/agentrun/agentrun/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Notifies reports whether a notify rule of pols (the policies that
// govern run's namespace, as Select returns them) asks that run's end
// with outcome o be told. A policy tells of the runs that end after it
// was created, and not of the ends before it, which it would otherwise
// send all at once when it is written. A rule whose runSelector cannot be read picks every run: a
// broken rule tells too much rather than nothing.
func Notifies(pols []v1alpha1.AgentRunPolicy, run *v1alpha1.AgentRun, o v1alpha1.Outcome) bool {
	for _, p := range pols {
		if end := run.Status.CompletionTime; end != nil && end.Before(&p.CreationTimestamp) {
			continue
		}
		for _, rule := range p.Spec.Notify {
			if slices.Contains(rule.Outcomes, o) && selects(rule.RunSelector, run.Labels) && madeBy(rule.Schedules, run) {
				return true
			}
		}
	}
	return false
}

// selects reports whether sel, unset or read as metav1.LabelSelector,
// matches a run with these labels.
func selects(sel *v1alpha1.RunSelector, runLabels map[string]string) bool {
	if sel == nil {
		return true
	}
	ls := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for k, v := range sel.MatchLabels {
		ls.MatchLabels[k] = string(v)
	}
	for _, e := range sel.MatchExpressions {
		ls.MatchExpressions = append(ls.MatchExpressions, metav1.LabelSelectorRequirement{Key: e.Key, Operator: e.Operator, Values: e.Values})
	}
	s, err := metav1.LabelSelectorAsSelector(ls)
	return err != nil || s.Matches(labels.Set(runLabels))
}

// madeBy reports whether one of the AgentSchedules named in schedules
// (none: any or none) created run, by the label every run of a schedule
// has (v1alpha1.LabelSchedule), by which the schedule finds its runs too.
func madeBy(schedules []string, run *v1alpha1.AgentRun) bool {
	return len(schedules) == 0 || slices.Contains(schedules, run.Labels[v1alpha1.LabelSchedule])
}
