package console

import (
	"net/http"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
)

type loginData struct {
	Then    string
	Problem string
}

// login is the in-cluster sign-in page: a person pastes a bearer token
// once (kubectl create token, or their OIDC id token); the console checks
// it with the API server (a SelfSubjectReview) and keeps it in an HttpOnly,
// SameSite=Strict cookie. Behind an authenticating proxy that sets the
// Authorization header, nobody sees this page. Locally there is nothing to
// sign in to.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	then := localPath(r.FormValue("then"))
	if s.local != nil {
		http.Redirect(w, r, then, http.StatusSeeOther)
		return
	}
	d := &loginData{Then: then}
	v := view{Title: "Sign in", Page: "login", Data: d}
	if r.Method == http.MethodPost {
		tok := strings.TrimSpace(r.PostFormValue("token"))
		u, err := s.userWithToken(tok)
		if err == nil && tok != "" {
			review := &authenticationv1.SelfSubjectReview{}
			if err = u.c.Create(r.Context(), review); err == nil {
				http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: tok, Path: "/", HttpOnly: true,
					Secure: overTLS(r), SameSite: http.SameSiteStrictMode})
				http.Redirect(w, r, then, http.StatusSeeOther)
				return
			}
			s.forget(u, err)
		}
		d.Problem = "The API server did not accept this token."
		if err != nil {
			d.Problem += " " + err.Error()
		}
		v.Status = http.StatusUnauthorized
	}
	s.render(w, r, nil, v)
}

// logout forgets the token cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
