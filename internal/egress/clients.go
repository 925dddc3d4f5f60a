package egress

import (
	"net/http"

	"github.com/agentrun/agentrun/internal/weakcache"
)

// Clients hands out the HTTP clients of one policy with a grant added: one
// client, and so one connection pool, per distinct grant, shared by every
// run with that grant for as long as one of them holds it. A run's kit is
// built once, but the kit builder keeps its runs' SDK clients by HTTP
// client for as long as it lives, the operator's for the life of the
// process (model.Clients): a client per run would be a pool per run, never
// freed.
type Clients struct {
	policy *Policy
	// base is the client of the policy alone, for the runs no grant
	// adds to; held for the life of the Clients.
	base  *http.Client
	cache weakcache.Cache[string, http.Client]
}

// NewClients returns the clients of a copy of p.
func NewClients(p *Policy) *Clients {
	q := p.With(Grant{})
	return &Clients{policy: q, base: &http.Client{Transport: q.Transport()}}
}

// For returns the client whose connections are checked by the policy with
// g added. Grants that are equal once added up (Grant.Add) share a client;
// a grant that opens nothing gets the policy's own.
func (c *Clients) For(g Grant) *http.Client {
	g = Grant{}.Add(g)
	if g.IsZero() {
		return c.base
	}
	v, _ := c.cache.Get(g.String(), func() (*http.Client, error) {
		return &http.Client{Transport: c.policy.With(g).Transport()}, nil
	})
	return v
}
