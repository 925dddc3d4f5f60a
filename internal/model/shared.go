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

var clients sync.Map // ClientKey -> the provider's SDK client

// SharedClient returns the SDK client built for key, building it once:
// a thousand runs against one endpoint share one client and its
// connection pool instead of each holding its own (about 15 KiB a run,
// and a connection each kept idle between calls). Clients are few (one
// per endpoint and HTTP client) and live as long as the process.
func SharedClient[T any](key ClientKey, build func() T) T {
	if c, ok := clients.Load(key); ok {
		return c.(T)
	}
	c, _ := clients.LoadOrStore(key, build())
	return c.(T)
}
