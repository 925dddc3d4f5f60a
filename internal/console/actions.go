package console

import (
	"net/http"
	"net/url"

	"github.com/agentrun/agentrun/internal/runclient"
	"k8s.io/apimachinery/pkg/types"
)

// runForm reads the run a form on a run's page showed: its namespace,
// name and UID. A form without the page's token, or without the UID, gets
// a page that says what to do (refused), with what the person was doing
// (verb) in it.
func (s *Server) runForm(r *http.Request, u *user, verb string) (ref runclient.Ref, uid types.UID, refused *view) {
	if !s.checkToken(r, u) {
		return ref, "", &view{Title: "Refused", Page: "error", Status: http.StatusForbidden,
			Data: "This form is out of date or did not come from this console: reload the page and " + verb + " again."}
	}
	ref = runclient.Ref{Namespace: r.PostFormValue("namespace"), Name: r.PostFormValue("name")}
	uid = types.UID(r.PostFormValue("uid"))
	if uid == "" {
		return ref, "", &view{Title: "Refused", Page: "error", Status: http.StatusBadRequest,
			Data: "This form does not say which run it showed: reload the page and " + verb + " again."}
	}
	return ref, uid, nil
}

// runPageWith shows the page of run ref again, with what an action on it
// did or why it was refused.
func (s *Server) runPageWith(w http.ResponseWriter, r *http.Request, u *user, ref runclient.Ref, res *result, status int) (view, error) {
	v, err := s.run(w, withPath(r, ref.Namespace, ref.Name), u)
	if err == nil {
		v.Status = status
		v.Data.(*runData).Result = res
	}
	return v, err
}

// runPage is the path of a run's page.
func runPage(ns, name string) string {
	return "/runs/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
}

// rerun creates a new run with the spec of the run the form showed, as the
// user, through the same operation as `kubectl agentrun rerun`
// (runclient.Rerun, bound to the run's UID), and opens the new run's page;
// a refusal is shown on the old run's page with the API server's reason.
func (s *Server) rerun(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	ref, uid, refused := s.runForm(r, u, "re-run")
	if refused != nil {
		return *refused, nil
	}
	run, err := runclient.Rerun(r.Context(), u.c, runclient.RerunOptions{Run: ref, UID: uid})
	if err == nil {
		http.Redirect(w, r, runPage(run.Namespace, run.Name), http.StatusSeeOther)
		return view{}, nil
	}
	res, status := answerResult(nil, err)
	return s.runPageWith(w, r, u, ref, res, status)
}

// cancel sets spec.cancel on the run the form showed, as the user, through
// the same operation as `kubectl agentrun cancel` (runclient.Cancel, bound
// to the run's UID), and shows the page it came from again (the run's, or
// the runs page with its filter) with what that did, or the refusal as
// runclient or the API server gave it.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	ref, uid, refused := s.runForm(r, u, "cancel")
	if refused != nil {
		return *refused, nil
	}
	c, err := runclient.Cancel(r.Context(), u.c, runclient.CancelOptions{Run: ref, UID: uid})
	res, status := answerResult(c, err)
	if r.PostFormValue("back") == "runs" {
		q, _ := url.ParseQuery(r.PostFormValue("filter")) // the page's own query; a bad one filters nothing
		v, verr := s.runsView(r, u, filterOf(q), res)
		if verr == nil && v.Status == 0 {
			v.Status = status
		}
		return v, verr
	}
	return s.runPageWith(w, r, u, ref, res, status)
}
