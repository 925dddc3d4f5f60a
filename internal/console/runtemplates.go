package console

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/plugin"
	"github.com/agentrun/agentrun/internal/safeterm"
	"github.com/agentrun/agentrun/internal/template"
	"k8s.io/apimachinery/pkg/types"
)

// templateView is one AgentRunTemplate: its parameters, the goal it
// writes, and why it is not ready, when it is not (plugin.TemplateReady:
// a run made from it would be refused).
type templateView struct {
	Namespace, Name string
	Goal            string
	Params          []paramView
	NotReady        string
}

// paramView is one parameter of a template, and its box in the Run form.
type paramView struct {
	Name, Description string
	Default           string
	HasDefault        bool
	Required          bool
	Enum              []string
	// Pattern is the parameter's pattern as the template says it; Match is
	// the same rule as the box's pattern attribute, which the browser
	// anchors at both ends where Go's regexp (and so the operator) looks
	// for a match anywhere in the value.
	Pattern, Match string
	// Value is what the box holds: the default, or what the person typed.
	Value string
}

// paramField is the Run form's name of a parameter's box.
func paramField(name string) string { return "param." + name }

func templateViewOf(t *v1alpha1.AgentRunTemplate, typed url.Values) templateView {
	v := templateView{Namespace: t.Namespace, Name: t.Name, Goal: safeterm.Clean(t.Spec.Run.Goal)}
	if err := plugin.TemplateReady(t); err != nil {
		v.NotReady = safeterm.Clean(err.Error())
	}
	for _, p := range t.Spec.Parameters {
		pv := paramView{Name: p.Name, Description: safeterm.Clean(p.Description), Required: p.Required, Enum: p.Enum, Pattern: p.Pattern}
		if p.Pattern != "" {
			pv.Match = `[\s\S]*(?:` + p.Pattern + `)[\s\S]*`
		}
		if p.Default != nil {
			pv.Default, pv.HasDefault, pv.Value = *p.Default, true, *p.Default
		}
		if typed != nil {
			pv.Value = typed.Get(paramField(p.Name))
		}
		v.Params = append(v.Params, pv)
	}
	return v
}

// templates lists the AgentRunTemplates the user may list, each linking
// to its page.
func (s *Server) templates(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	return listPage(r, s, u, r.URL.Query().Get("namespace"), view{Title: "Templates", Page: "templates"},
		func() *v1alpha1.AgentRunTemplateList { return &v1alpha1.AgentRunTemplateList{} },
		func(l *v1alpha1.AgentRunTemplateList) []v1alpha1.AgentRunTemplate { return l.Items },
		func(t *v1alpha1.AgentRunTemplate) templateView { return templateViewOf(t, nil) })
}

type templateData struct {
	Template templateView
	Result   *result
}

// template shows one AgentRunTemplate with its Run form: a box for each
// parameter, holding its default.
func (s *Server) template(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	return s.templatePage(r, u, r.PathValue("namespace"), r.PathValue("name"), nil, nil)
}

func (s *Server) templatePage(r *http.Request, u *user, ns, name string, typed url.Values, res *result) (view, error) {
	v := view{Title: name, Page: "template"}
	t := &v1alpha1.AgentRunTemplate{}
	if err := u.c.Get(r.Context(), types.NamespacedName{Namespace: ns, Name: name}, t); err != nil {
		return v, err
	}
	v.Data = &templateData{Template: templateViewOf(t, typed), Result: res}
	return v, nil
}

// runTemplate creates a run from the template the form showed, with the
// values typed in its boxes, as the user, through the same operation as
// `kubectl agentrun run --template` (plugin.CreateFromTemplate: the
// parameters are checked with the operator's rules first), and opens the
// run's page. An empty box gives no value, so the parameter's default (or
// its being required) applies. A refusal is shown on the template's page,
// with what was typed still in the boxes.
func (s *Server) runTemplate(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	if !s.checkToken(r, u) {
		return view{Title: "Refused", Page: "error", Status: http.StatusForbidden,
			Data: "This form is out of date or did not come from this console: reload the page and run the template again."}, nil
	}
	ns, name := r.PostFormValue("namespace"), r.PostFormValue("template")
	t := &v1alpha1.AgentRunTemplate{}
	if err := u.c.Get(r.Context(), types.NamespacedName{Namespace: ns, Name: name}, t); err != nil {
		return view{}, err
	}
	// The boxes of the parameters the template declares now: one it no
	// longer declares is not sent on, one it has come to declare since
	// takes its default.
	var params []v1alpha1.ParameterValue
	for _, p := range t.Spec.Parameters {
		if value := r.PostFormValue(paramField(p.Name)); value != "" {
			params = append(params, v1alpha1.ParameterValue{Name: p.Name, Value: value})
		}
	}
	run, err := plugin.CreateFromTemplate(r.Context(), u.c, plugin.TemplateRun{Namespace: ns, Template: name, Params: params})
	if err == nil {
		http.Redirect(w, r, runPage(run.Namespace, run.Name), http.StatusSeeOther)
		return view{}, nil
	}
	res, status := answerResult(nil, err)
	if te := (*template.Error)(nil); errors.As(err, &te) {
		status = http.StatusUnprocessableEntity
	}
	v, verr := s.templatePage(r, u, ns, name, r.PostForm, res)
	v.Status = status
	return v, verr
}
