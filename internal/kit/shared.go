package kit

import (
	"net/http"
	"sync"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/tools/httptool"
	"github.com/agentrun/agentrun/internal/weakcache"
)

// shared is what a Builder keeps for the runs it builds, for as long as it
// lives (the operator builds one for the process): clients, identities and
// compiled definitions that runs share instead of each holding its own.
// Nothing in it is a run's own: a run's secrets are read at call time, and
// every shared value is read-only or safe for concurrent use. The zero
// value is ready.
type shared struct {
	// cloud is the process's cloud identities (cloud.go).
	cloud cloudIdentities
	// trusted shares a client between the runs that name the same CA
	// bundle over the same base, so that they share its connections, and
	// so that the SDK clients (models, kept by HTTP client) number one per
	// bundle rather than one per run.
	trusted weakcache.Cache[trustKey, http.Client]
	// models shares the providers' SDK clients (model.Clients).
	models model.Clients
	// schemas shares the tools' compiled parameter schemas between the
	// runs' engines (loop.Schemas).
	schemas loop.Schemas
	// templates shares HTTP tools' parsed templates (httptool.Templates).
	templates httptool.Templates

	defaultClient sync.Once
	// model is the client of model calls when the builder names none
	// and has no egress policy (model.NewHTTPClient), made at the first
	// such run.
	model *http.Client
}

// modelClient is the builder's default client of model calls.
func (s *shared) modelClient() *http.Client {
	s.defaultClient.Do(func() { s.model = model.NewHTTPClient() })
	return s.model
}
