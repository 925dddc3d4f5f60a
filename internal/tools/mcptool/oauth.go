package mcptool

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// ErrUnauthenticated marks a session the server or its token endpoint
// refused for its credentials: the server answered 401 or 403, or the
// token endpoint would not issue a token.
var ErrUnauthenticated = errors.New("not authenticated")

// ErrNoToken marks a session that did not start because the OAuth token
// endpoint issued no token (it refused the client, or could not be
// reached). It is an ErrUnauthenticated too.
var ErrNoToken = errors.New("no OAuth access token")

// tokenTransport authenticates every request with an OAuth 2 access token
// obtained with the client credentials grant. The token is cached until
// it is about to expire (oauth2.Token.Valid) or the server answers 401,
// and fetched with the context of the request that needs it, so that a
// slow token endpoint cannot outlast a call's deadline.
type tokenTransport struct {
	next   http.RoundTripper
	config clientcredentials.Config
	// fetch carries the token requests: the token endpoint is another
	// origin than the server, and must not receive the server's headers.
	fetch *http.Client

	mu    sync.Mutex
	token *oauth2.Token
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := t.current(req.Context())
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	tok.SetAuthHeader(req)
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		// Revoked or expired early: the next request asks for another.
		t.mu.Lock()
		if t.token == tok {
			t.token = nil
		}
		t.mu.Unlock()
	}
	return resp, err
}

func (t *tokenTransport) current(ctx context.Context) (*oauth2.Token, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token.Valid() {
		return t.token, nil
	}
	tok, err := t.config.Token(context.WithValue(ctx, oauth2.HTTPClient, t.fetch))
	if err != nil {
		return nil, &tokenError{url: t.config.TokenURL, err: err}
	}
	t.token = tok
	return tok, nil
}

// sent returns the access token last sent and the client secret, for
// redaction.
func (t *tokenTransport) sent() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := []string{t.config.ClientSecret}
	if t.token != nil {
		out = append(out, t.token.AccessToken)
	}
	return out
}

// tokenError is a failed token request, described without the token
// endpoint's response body.
type tokenError struct {
	url string
	err error
}

func (e *tokenError) Error() string {
	var re *oauth2.RetrieveError
	if errors.As(e.err, &re) {
		msg := fmt.Sprintf("the OAuth token endpoint %s refused the client credentials", e.url)
		if re.Response != nil {
			msg += fmt.Sprintf(" (HTTP %d)", re.Response.StatusCode)
		}
		if re.ErrorCode != "" {
			msg += ": " + re.ErrorCode
			if re.ErrorDescription != "" {
				msg += ": " + re.ErrorDescription
			}
		}
		return msg
	}
	return fmt.Sprintf("no OAuth token from %s: %s", e.url, cause(e.err))
}

func (e *tokenError) Unwrap() []error { return []error{ErrUnauthenticated, ErrNoToken, e.err} }
