package platform

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// governMemory applies the policy's memory rules to the run's spec.memory:
// a *Refusal when the policy forbids memory, else the bounds lowered to
// the policy's caps (an unset bound, which would take memtool's default,
// is lowered too when the default is above the cap). changes says what
// was lowered.
func governMemory(p *v1alpha1.AgentRunPolicy, spec *v1alpha1.AgentRunSpec) ([]string, error) {
	pm, m := p.Spec.Memory, spec.Memory
	if pm == nil || m == nil {
		return nil, nil
	}
	if pm.Allowed != nil && !*pm.Allowed {
		return nil, &Refusal{Policy: p.Name, Reason: fmt.Sprintf("runs of this namespace may not use memory (memory.allowed: false), "+
			"and this run sets spec.memory (%s)", m.Name)}
	}
	var changes []string
	note := func(field string, from, to any) {
		if from == nil {
			changes = append(changes, fmt.Sprintf("memory.%s set to %v by AgentRunPolicy %s (the run left it unset)", field, to, p.Name))
			return
		}
		changes = append(changes, fmt.Sprintf("memory.%s lowered from %v to %v by AgentRunPolicy %s", field, from, to, p.Name))
	}
	lowerInt := func(field string, cur **int32, limit *int32, unset int32) {
		if limit == nil {
			return
		}
		var from any
		v := unset
		if *cur != nil {
			v, from = **cur, **cur
		}
		if v > *limit {
			note(field, from, *limit)
			*cur = ptr(*limit)
		}
	}
	lowerInt("maxEntries", &m.MaxEntries, pm.MaxEntries, v1alpha1.DefaultMemoryMaxEntries)
	lowerInt("maxEntryBytes", &m.MaxEntryBytes, pm.MaxEntryBytes, v1alpha1.DefaultMemoryMaxEntryBytes)
	if pm.MaxTTL != nil {
		var from any
		d := v1alpha1.DefaultMemoryTTL
		if m.TTL != nil {
			d, from = m.TTL.Duration, m.TTL.Duration
		}
		if d > pm.MaxTTL.Duration {
			note("ttl", from, pm.MaxTTL.Duration)
			m.TTL = &metav1.Duration{Duration: pm.MaxTTL.Duration}
		}
	}
	return changes, nil
}
