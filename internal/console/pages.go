package console

import (
	"bytes"
	"embed"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/safeterm"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

//go:embed templates
var templateFiles embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"clean": safeterm.Clean,
	"answerOf": func(c pendingCall, token, back, filter string) answerForm {
		return answerForm{Call: c, Token: token, Back: back, Filter: filter, MaxReason: v1alpha1.MaxApprovalReason}
	},
	"ackOf": func(e escalation, token string) ackForm { return ackForm{E: e, Token: token} },
	"refOf": func(d *runData, token string) runRef { return runRef{Run: d, Token: token} },
}).ParseFS(templateFiles, "templates/*.html"))

// answerForm is the Approve, Deny and Stop buttons of one call, and the
// box for the reason of a Deny or a Stop.
type answerForm struct {
	Call                pendingCall
	Token, Back, Filter string
	MaxReason           int
}

// ackForm is the Acknowledge and Resolve buttons of one escalation, and the
// box for the note.
type ackForm struct {
	E     escalation
	Token string
}

// runRef is what a form on a run's page says of the run it acts on: the
// page's token, and the run's namespace, name and UID.
type runRef struct {
	Run   *runData
	Token string
}

// view is what a handler gives back: which template shows it, with what.
type view struct {
	Title  string
	Page   string // the template defining the page's "<page>" and "<page>-live"
	Status int
	Data   any
	// Live is the URL of the page's live part (the page's own URL with
	// fragment=1); Events the server-sent events that say when to fetch
	// it again. Empty: the page does not update by itself.
	Live, Events string
}

// frame is what the layout shows around every page.
type frame struct {
	view
	User    string
	Token   string
	SignOut bool
	Nav     string
}

type handler func(w http.ResponseWriter, r *http.Request, u *user) (view, error)

// page wraps a handler: it finds the user, renders the view in the layout,
// or only its live part when fragment=1 asks for it, and turns errors into
// a page of their own.
func (s *Server) page(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u, err := s.userOf(r)
		if errors.Is(err, errSignIn) {
			http.Redirect(w, r, "/login?then="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if err != nil {
			s.fail(w, r, nil, err)
			return
		}
		v, err := h(w, r, u)
		if err != nil {
			s.fail(w, r, u, err)
			return
		}
		if v.Page == "" { // the handler answered itself
			return
		}
		s.render(w, r, u, v)
	}
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, u *user, v view) {
	name, data := "layout", any(nil)
	f := frame{view: v, SignOut: s.local == nil, Nav: v.Page}
	if u != nil {
		f.Token = s.token(u)
		f.User = s.whoami(r.Context(), u)
	}
	data = f
	if r.URL.Query().Get("fragment") == "1" && v.Live != "" {
		name = v.Page + "-live"
	}
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		http.Error(w, "rendering the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if v.Status != 0 {
		w.WriteHeader(v.Status)
	}
	_, _ = w.Write(b.Bytes())
}

// fail shows an error as a page: the API server's words where it refused.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, u *user, err error) {
	s.forget(u, err)
	status := http.StatusInternalServerError
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		status = int(st.Status().Code)
		err = errors.New(st.Status().Message)
	}
	if status < 400 {
		status = http.StatusBadGateway
	}
	s.render(w, r, u, view{Title: "Error", Page: "error", Status: status, Data: err.Error()})
}

// forbidden says whether the API server refused a request for lack of
// rights.
func forbidden(err error) bool { return apierrors.IsForbidden(err) }

// oneLine is s cleaned and on one line, for titles and table cells.
func oneLine(s string) string {
	return strings.Join(strings.Fields(safeterm.Clean(s)), " ")
}
