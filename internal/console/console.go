// Package console is the AgentRun web console: the runs, one run's story
// (with Continue, Re-run and Cancel), an inbox of the calls that wait for
// a person, the AgentRunTemplates (each with a Run form), the
// AgentSchedules (each with Suspend and Resume), the AgentRunPolicies (what
// applies to a namespace), and the AgentBudgets. It is
// as safe as kubectl because it is kubectl's permissions: every read and
// every answer is made with the credentials of the person looking, never
// with credentials of the console's own.
//
// It runs in one of two ways:
//
//   - Locally (kubectl agentrun console): with the caller's kubeconfig, on
//     127.0.0.1 unless told otherwise. Every request must carry the
//     console's random access token (printed once in its URL, then kept in
//     a cookie), on loopback as on any other address, and must name the
//     console in its Host (localhost, or the address it came in on), so a
//     web page elsewhere cannot reach it through DNS rebinding.
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
// request (http.CrossOriginProtection). Pages read without JavaScript; with it, lists update live from
// server-sent events fed by watches.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentrun/agentrun/internal/kubescheme"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
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
	// AccessToken, in local mode, is the secret every request must carry:
	// once in the URL (?token=), which the console trades for a cookie,
	// then in that cookie. Serve always makes a random one; a local console
	// built without one (as tests do) serves whoever reaches it.
	AccessToken string
	// Keys, when set, is where the operator keeps the keys that seal runs'
	// saved state (its --state-keys-secret). The run page never reads that
	// Secret: it reads the public keys the operator publishes beside it
	// (the ConfigMap seal.PublicKeysName), with the person's credentials,
	// to check each transcript chunk's signature.
	Keys types.NamespacedName
	// Archive, when set, is the archive of finished runs the archive page
	// reads, with the console's own database role: every record is shown
	// only to a person the API server allows to get AgentRuns in its
	// namespace (a SelfSubjectAccessReview, as that person).
	Archive Archive
	// Resync bounds how long the live pages wait for news when a watch
	// cannot be opened (default 5s).
	Resync time.Duration
}

// Server is the console's HTTP handler.
type Server struct {
	o   Options
	key []byte // signs the pages' tokens against cross-site requests
	// access is the cookie a browser gets for the access token: random,
	// so that the cookie does not hold the token itself.
	access string
	mux    *http.ServeMux
	// crossOrigin refuses requests that change something when a browser
	// says they come from another site (Sec-Fetch-Site, else Origin
	// against Host).
	crossOrigin *http.CrossOriginProtection
	local       *user // the caller, in local mode

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
	s := &Server{o: o, key: make([]byte, 32), users: map[string]*user{}, crossOrigin: http.NewCrossOriginProtection()}
	_, _ = rand.Read(s.key) // crypto/rand.Read never fails (Go 1.24+)
	if o.AccessToken != "" {
		s.access = randomText()
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

// randomText is 32 random bytes, as URL-safe text.
func randomText() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
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
	m.HandleFunc("POST /continue", s.page(s.continueRun))
	m.HandleFunc("POST /ack", s.page(s.ack))
	m.HandleFunc("POST /rerun", s.page(s.rerun))
	m.HandleFunc("POST /cancel", s.page(s.cancel))
	m.HandleFunc("GET /templates", s.page(s.templates))
	m.HandleFunc("GET /templates/{namespace}/{name}", s.page(s.template))
	m.HandleFunc("POST /run", s.page(s.runTemplate))
	m.HandleFunc("GET /evaluations", s.page(s.evaluations))
	m.HandleFunc("GET /evaluations/{namespace}/{name}", s.page(s.evaluation))
	m.HandleFunc("GET /schedules", s.page(s.schedules))
	m.HandleFunc("GET /schedules/{namespace}/{name}", s.page(s.schedule))
	m.HandleFunc("POST /suspend", s.page(s.suspendSchedule))
	m.HandleFunc("GET /policies", s.page(s.policies))
	m.HandleFunc("GET /budgets", s.page(s.budgets))
	m.HandleFunc("GET /archive", s.page(s.archiveList))
	m.HandleFunc("GET /archive/{uid}", s.page(s.archiveRecord))
	m.HandleFunc("POST /archive/rerun", s.page(s.rerunArchived))
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
	if s.local != nil && !servedHost(r) {
		s.refuse(w, r, http.StatusMisdirectedRequest, "This console answers only requests addressed to it: "+
			"localhost, 127.0.0.1, [::1], or the address and port it listens on. A web page elsewhere cannot reach it "+
			"through a name of its own (DNS rebinding).")
		return
	}
	if err := s.crossOrigin.Check(r); err != nil {
		s.refuse(w, r, http.StatusForbidden, "Cross-site request refused: a request that changes something must come from this console's own pages.")
		return
	}
	if s.o.AccessToken != "" && !strings.HasPrefix(r.URL.Path, "/static/") && !s.admitted(w, r) {
		return
	}
	s.mux.ServeHTTP(w, r)
}

// refuse answers a request the console will not serve with a page that
// says why.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, why string) {
	s.render(w, r, nil, view{Title: "Refused", Page: "error", Status: status, Data: why})
}

// servedHost says whether a request names the console in its Host header:
// a loopback name or address (on any port: ssh -L, kubectl port-forward
// and a container's published port reach it under another), or the address
// and port the connection came in on. A name that is neither is refused: it
// may be a web page's own name, rebound to this machine.
func servedHost(r *http.Request) bool {
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		host, port = r.Host, ""
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	at, err := netip.ParseAddrPort(local.String())
	if err != nil {
		return false
	}
	if port == "" {
		port = "80"
	}
	return ip.Unmap() == at.Addr().Unmap() && port == strconv.Itoa(int(at.Port()))
}

// admitted lets through a request that carries the console's access token:
// in its URL (the one Serve printed), which is traded for an HttpOnly,
// SameSite=Strict cookie and taken out of the URL by a redirect, or in that
// cookie. Other requests get a page that says how to get in.
func (s *Server) admitted(w http.ResponseWriter, r *http.Request) bool {
	name := accessCookie(r)
	if q := r.URL.Query(); q.Has("token") {
		if !equalSecret(q.Get("token"), s.o.AccessToken) {
			s.refuse(w, r, http.StatusForbidden, "This is not this console's access token. Open the URL that kubectl agentrun console printed when it started; a console that was started again has a new token.")
			return false
		}
		http.SetCookie(w, &http.Cookie{Name: name, Value: s.access, Path: "/", HttpOnly: true,
			Secure: overTLS(r), SameSite: http.SameSiteStrictMode})
		q.Del("token")
		http.Redirect(w, r, localPath((&url.URL{Path: r.URL.Path, RawQuery: q.Encode()}).String()), http.StatusSeeOther)
		return false
	}
	if c, err := r.Cookie(name); err == nil && equalSecret(c.Value, s.access) {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Cookie realm="agentrun-console"`)
	s.render(w, r, nil, view{Title: "Access token needed", Page: "access", Status: http.StatusUnauthorized,
		Data: localPath(r.URL.RequestURI())})
	return false
}

// accessCookie names the access cookie after the port the console listens
// on: cookies do not tell ports apart, and two consoles on one machine keep
// one cookie each.
func accessCookie(r *http.Request) string {
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if _, port, err := net.SplitHostPort(local.String()); err == nil {
			return "agentrun-console-" + port
		}
	}
	return "agentrun-console"
}

func equalSecret(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// overTLS says whether the browser reached the console over TLS (directly,
// or through a proxy that says so), so that a cookie is marked Secure.
func overTLS(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

// localPath is then when it is a path on this console, and "/" otherwise:
// never another host ("//evil.example", "https://evil.example"), nor a
// path a browser might read as one ("/\evil.example", or control
// characters it strips, as in "/\t/evil.example").
func localPath(then string) string {
	if strings.ContainsFunc(then, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return "/"
	}
	u, err := url.Parse(then)
	if err != nil || u.Scheme != "" || u.Opaque != "" || u.User != nil || u.Host != "" ||
		!strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	return (&url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}).String()
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
// prints the console's URL to out once it listens. A local console (with
// the caller's kubeconfig) gets a random access token, on every address:
// the URL printed carries it, and a request without it is refused, so that
// neither another user of this machine nor anyone on its network acts with
// the caller's credentials. In-cluster, each request carries its user's
// own token instead.
func Serve(ctx context.Context, o Options, address string, port int, out io.Writer) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(address, fmt.Sprint(port)))
	if err != nil {
		return err
	}
	if !o.PerRequestToken {
		o.AccessToken = randomText()
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
	at := ln.Addr().(*net.TCPAddr)
	host := at.IP
	if host.IsUnspecified() {
		host = net.IPv4(127, 0, 0, 1)
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(host.String(), strconv.Itoa(at.Port)), Path: "/"}
	if o.AccessToken != "" {
		u.RawQuery = url.Values{"token": {o.AccessToken}}.Encode()
	}
	_, _ = fmt.Fprintf(out, "Console: %s (Ctrl-C stops)\n", &u)
	if at.IP.IsUnspecified() {
		_, _ = fmt.Fprintf(out, "It also answers on port %d of this machine's other addresses, with the same token.\n", at.Port)
	}
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
