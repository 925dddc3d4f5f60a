package platform

import (
	"fmt"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
)

// Egress returns what the policies governing a run open to the requests
// the operator sends for it (their spec.egress), added up: a run may reach
// what any of them opens, on top of the operator's own egress policy. An
// entry that is not a CIDR or an address (the API server validates them,
// so a policy stored another way) is an error that names the policy.
func Egress(pols []v1alpha1.AgentRunPolicy) (egress.Grant, error) {
	var g egress.Grant
	for i := range pols {
		e := pols[i].Spec.Egress
		if e == nil {
			continue
		}
		h := egress.Grant{AllowPrivate: e.AllowPrivate}
		for j, s := range e.AllowCIDRs {
			pfx, err := egress.ParseCIDR(s)
			if err != nil {
				return egress.Grant{}, fmt.Errorf("AgentRunPolicy %s egress.allowCIDRs[%d]: %w", pols[i].Name, j, err)
			}
			h.Allow = append(h.Allow, pfx)
		}
		g = g.Add(h)
	}
	return g, nil
}
