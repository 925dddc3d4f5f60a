// Package console is the AgentRun web console: the runs, one run's story,
// an inbox of the calls that wait for a person, and the AgentBudgets. It is
// as safe as kubectl because it is kubectl's permissions: every read and
// every answer is made with the credentials of the person looking, never
// with credentials of the console's own.
//
// It runs in one of two ways:
//
//   - Locally (kubectl agentrun console): with the caller's kubeconfig, on
//     127.0.0.1 unless told otherwise. Only requests that name this
//     machine (Host 127.0.0.1, localhost or [::1]) are served, so a web
//     page elsewhere cannot reach it through DNS rebinding.
//   - In a cluster (the chart's console.enabled): every request carries the
//     user's bearer token, set by an authenticating proxy in the
//     Authorization header or pasted once on the sign-in page (kept in an
//     HttpOnly cookie), and is sent to the API server as that user. The
//     console's own ServiceAccount has no rights at all.
//
// What models and tools wrote is hostile: templates escape everything
// (html/template), terminal escapes are removed (safeterm), the pages load
// no script but the embedded one (Content-Security-Policy), and the
// requests that change anything need the page's token and a same-origin
// request. Pages read without JavaScript; with it, lists update live from
// server-sent events fed by watches.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentrun/agentrun/internal/kubescheme"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

//go:embed static
var static embed.FS

// Options configure a console.
type Options struct {
	// Config reaches the API server. Locally it carries the caller's
	// credentials; with PerRequestToken only its host and CA are used and
	// each request's bearer token is the credential.
	Config *rest.Config
	// PerRequestToken: every request must carry its user's bearer token
	// (in-cluster mode). Requests without one are sent to the sign-in page.
	PerRequestToken bool
	// Namespace is read when the user may not list runs in every namespace
	// nor list namespaces (the kubeconfig's namespace, locally).
	Namespace string
	// LoopbackOnly refuses requests whose Host header does not name this
	// machine (local mode on a loopback address).
	LoopbackOnly bool
	// Resync bounds how long the live pages wait for news when a watch
	// cannot be opened (default 5s).
	Resync time.Duration
}

// Server is the console's HTTP handler.
type Server struct {
	o     Options
	key   []byte // signs the pages' tokens against cross-site requests
	mux   *http.ServeMux
	local *user // the caller, in local mode

	mu    sync.Mutex
	users map[string]*user // by the SHA-256 of their token, in-cluster
}

// user is one person the console acts for.
type user struct {
	c client.WithWatch
	// id identifies the user's credentials for the page token: "local",
	// or the SHA-256 of the bearer token.
	id   string
	name string // as the API server authenticated them, when it says
	seen time.Time
}

// maxUsers bounds the clients kept for in-cluster users.
const maxUsers = 256

// New builds a console.
func New(o Options) (*Server, error) {
	if o.Config == nil {
		return nil, errors.New("console: no API server configuration")
	}
	if o.Resync <= 0 {
		o.Resync = 5 * time.Second
	}
	s := &Server{o: o, key: make([]byte, 32), users: map[string]*user{}}
	if _, err := rand.Read(s.key); err != nil {
		return nil, err
	}
	if !o.PerRequestToken {
		c, err := newClient(o.Config)
		if err != nil {
			return nil, err
		}
		s.local = &user{c: c, id: "local"}
	}
	s.routes()
	return s, nil
}

func newClient(cfg *rest.Config) (client.WithWatch, error) {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: kubescheme.Scheme, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	return c, nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	assets, _ := fs.Sub(static, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(assets)))
	m.HandleFunc("GET /{$}", s.page(s.runs))
	m.HandleFunc("GET /runs/{namespace}/{name}", s.page(s.run))
	m.HandleFunc("GET /inbox", s.page(s.inbox))
	m.HandleFunc("POST /answer", s.page(s.answer))
	m.HandleFunc("GET /budgets", s.page(s.budgets))
	m.HandleFunc("GET /events", s.events)
	m.HandleFunc("GET /login", s.login)
	m.HandleFunc("POST /login", s.login)
	m.HandleFunc("POST /logout", s.logout)
	s.mux = m
}

// ServeHTTP serves the console with its safety headers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// No script but the console's own file, no style but its own, no
	// frame, no form posting elsewhere: a model's text that escaped the
	// templates still could not run.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if s.o.LoopbackOnly && !loopbackHost(r.Host) {
		http.Error(w, "this console answers only requests to 127.0.0.1, localhost or [::1]", http.StatusMisdirectedRequest)
		return
	}
	if r.Method == http.MethodPost && !sameOrigin(r) {
		http.Error(w, "cross-site request refused", http.StatusForbidden)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// loopbackHost says whether a Host header names this machine.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin refuses a state-changing request that a browser says comes
// from another site. Requests from programs carry none of these headers;
// the page token still guards them.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		// "null" (a sandboxed or opaque origin) never equals a host.
		return strings.TrimPrefix(strings.TrimPrefix(o, "http://"), "https://") == r.Host
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	return true
}

// token is the page token of a user: forms carry it, and a request that
// changes something without it (or with another user's) is refused.
func (s *Server) token(u *user) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(u.id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (s *Server) checkToken(r *http.Request, u *user) bool {
	return hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.token(u)))
}

// errSignIn: the request carries no credentials (in-cluster mode).
var errSignIn = errors.New("sign in first")

const tokenCookie = "agentrun-console-token"

// userOf returns who the request is from.
func (s *Server) userOf(r *http.Request) (*user, error) {
	if s.local != nil {
		return s.local, nil
	}
	tok := ""
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		tok = strings.TrimSpace(a[7:])
	} else if c, err := r.Cookie(tokenCookie); err == nil {
		tok = c.Value
	}
	if tok == "" {
		return nil, errSignIn
	}
	return s.userWithToken(tok)
}

func (s *Server) userWithToken(tok string) (*user, error) {
	sum := sha256.Sum256([]byte(tok))
	id := base64.RawURLEncoding.EncodeToString(sum[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if u, ok := s.users[id]; ok {
		u.seen = time.Now()
		return u, nil
	}
	// The console's own credentials are never sent: only the host, the
	// CA and the user's token.
	cfg := rest.AnonymousClientConfig(s.o.Config)
	cfg.BearerToken = tok
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	if len(s.users) >= maxUsers {
		var oldest string
		for k, u := range s.users {
			if oldest == "" || u.seen.Before(s.users[oldest].seen) {
				oldest = k
			}
		}
		delete(s.users, oldest)
	}
	u := &user{c: c, id: id, seen: time.Now()}
	s.users[id] = u
	return u, nil
}

// forget drops an in-cluster user's client once the API server has
// refused their token: a token that was never valid, or has expired, would
// otherwise keep a client (and push out someone else's) until more
// tokens arrive.
func (s *Server) forget(u *user, err error) {
	if u == nil || u == s.local || !apierrors.IsUnauthorized(err) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users[u.id] == u {
		delete(s.users, u.id)
	}
}

// whoami asks the API server who the user is (a SelfSubjectReview), once.
func (s *Server) whoami(ctx context.Context, u *user) string {
	s.mu.Lock()
	name := u.name
	s.mu.Unlock()
	if name != "" {
		return name
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := u.c.Create(ctx, review); err != nil {
		return ""
	}
	s.mu.Lock()
	u.name = review.Status.UserInfo.Username
	s.mu.Unlock()
	return review.Status.UserInfo.Username
}

// Serve listens on address:port and serves the console until ctx ends. It
// prints the console's URL to out once it listens.
func Serve(ctx context.Context, o Options, address string, port int, out io.Writer) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(address, fmt.Sprint(port)))
	if err != nil {
		return err
	}
	if ip := net.ParseIP(address); address == "localhost" || (ip != nil && ip.IsLoopback()) {
		o.LoopbackOnly = true
	}
	s, err := New(o)
	if err != nil {
		_ = ln.Close()
		return err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	_, _ = fmt.Fprintf(out, "Console: http://%s/ (Ctrl-C stops)\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
