package model

import (
	"net/http"
	"sync"
)

// ClientKey is what makes two runs' SDK clients interchangeable: the same
// provider, endpoint, retries and HTTP client. API keys are not part of
// it; they are passed with each request.
type ClientKey struct {
	Provider   string
	BaseURL    string
	MaxRetries int
	HTTPClient *http.Client
}

// Clients shares providers' SDK clients between the runs of one builder
// (kit.Builder keeps one for as long as it lives, the operator's for the
// life of the process): a thousand runs against one endpoint share one
// client and its connection pool instead of each holding its own (about
// 15 KiB a run, and a connection each kept idle between calls). Clients
// are few: one per endpoint and HTTP client. The zero value is ready.
type Clients struct {
	m sync.Map // ClientKey -> the provider's SDK client
}

// SharedClient returns the SDK client built for key in c, building it
// once. A nil c shares nothing: every call builds its own.
func SharedClient[T any](c *Clients, key ClientKey, build func() T) T {
	if c == nil {
		return build()
	}
	if v, ok := c.m.Load(key); ok {
		return v.(T)
	}
	v, _ := c.m.LoadOrStore(key, build())
	return v.(T)
}
