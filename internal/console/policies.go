package console

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/platform"
	"github.com/agentrun/agentrun/internal/safeterm"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// policyView is one AgentRunPolicy as the policies page shows it: which
// namespaces it selects, its required rules under the names a run's
// policy gives them, its limits, and the rest of its spec as YAML.
type policyView struct {
	Name string
	// Selects is its namespaceSelector in kubectl's syntax, or "every
	// namespace".
	Selects   string
	Suspended bool
	Rules     []policyRuleView
	Limits    []fact
	// Other is the rest of its spec (models, pricing, readOnlyTools,
	// approval, egress, ...) as YAML; "" when it sets nothing else.
	Other string
}

// policyRuleView is one of a policy's rules, named as it is in a run's
// policy (platform.RuleName).
type policyRuleView struct {
	Name, Tools, When, Decision, Reason, Match string
}

func policyViewOf(p *v1alpha1.AgentRunPolicy) policyView {
	v := policyView{Name: p.Name, Selects: "every namespace", Suspended: p.Spec.Suspend}
	if sel := p.Spec.NamespaceSelector; sel != nil {
		if s, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			// platform.Select lets a selector it cannot read govern every
			// namespace: say so.
			v.Selects = "every namespace (its namespaceSelector cannot be read: " + oneLine(err.Error()) + ")"
		} else if !s.Empty() {
			v.Selects = oneLine(s.String())
		}
	}
	for i, r := range p.Spec.Rules {
		rv := policyRuleView{Name: oneLine(platform.RuleName(p.Name, i, r.Name)), Tools: oneLine(strings.Join(r.Tools, ", ")),
			When: oneLine(r.When), Decision: string(r.Decision), Reason: oneLine(r.Reason)}
		var sels []string
		for _, m := range r.Match {
			sels = append(sels, selectorText(m))
		}
		rv.Match = oneLine(strings.Join(sels, "; or "))
		v.Rules = append(v.Rules, rv)
	}
	if l := p.Spec.Limits; l != nil {
		var fields map[string]json.RawMessage
		if raw, err := json.Marshal(l); err == nil && json.Unmarshal(raw, &fields) == nil {
			for _, k := range slices.Sorted(maps.Keys(fields)) {
				v.Limits = append(v.Limits, fact{Name: k, Value: oneLine(strings.Trim(string(fields[k]), `"`))})
			}
		}
	}
	rest := p.Spec.DeepCopy()
	rest.NamespaceSelector, rest.Rules, rest.Limits, rest.Suspend = nil, nil, nil, false
	if y, err := yaml.Marshal(rest); err == nil && strings.TrimSpace(string(y)) != "{}" {
		v.Other = safeterm.Clean(string(y))
	}
	return v
}

// selectorText is a rule's tool selector for a person: each field it
// sets, with its entries.
func selectorText(m v1alpha1.ToolSelector) string {
	var parts []string
	add := func(name string, values []string) {
		if len(values) > 0 {
			parts = append(parts, name+" "+strings.Join(values, ", "))
		}
	}
	kinds := make([]string, len(m.Kinds))
	for i, k := range m.Kinds {
		kinds[i] = string(k)
	}
	methods := make([]string, len(m.Methods))
	for i, k := range m.Methods {
		methods[i] = string(k)
	}
	add("kinds", kinds)
	add("images", m.Images)
	add("methods", methods)
	add("urls", m.URLs)
	if len(parts) == 0 {
		return "every tool"
	}
	return strings.Join(parts, "; ")
}

type policiesData struct {
	// Namespace, when set, is the namespace whose governing policies the
	// page shows; Labels are its labels, as the selectors read them.
	Namespace string
	Labels    string
	Rows      []policyView
	// Problem is why the page shows no policies, or not those of the
	// namespace: the API server's refusal, in its words.
	Problem string
}

// policies lists the AgentRunPolicies, by name. With a namespace it shows
// those that govern it, in the order the operator applies them: the
// policies the platform package selects by the namespace's labels
// (platform.Select, as the operator and the admission policies select
// them), read with the person's credentials, so a person who may not list
// AgentRunPolicies or read the namespace is told so.
func (s *Server) policies(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	ns := strings.TrimSpace(r.URL.Query().Get("namespace"))
	d := &policiesData{Namespace: ns}
	v := view{Title: "Policies", Page: "policies", Data: d}
	var list v1alpha1.AgentRunPolicyList
	if err := u.c.List(r.Context(), &list); err != nil {
		if !forbidden(err) {
			return v, err
		}
		v.Status = http.StatusForbidden
		d.Problem = "You may not list AgentRunPolicies, so the console cannot show them: " + oneLine(apiMessage(err))
		return v, nil
	}
	items := list.Items
	if ns != "" {
		nsObj := &corev1.Namespace{}
		if err := u.c.Get(r.Context(), types.NamespacedName{Name: ns}, nsObj); err != nil {
			if !forbidden(err) && !apierrors.IsNotFound(err) {
				return v, err
			}
			v.Status = int(apiStatus(err))
			d.Problem = "The console cannot read namespace " + ns + "'s labels, which the policies select by: " + oneLine(apiMessage(err))
			return v, nil
		}
		d.Labels = oneLine(labels.Set(nsObj.Labels).String())
		items = platform.Select(items, nsObj.Labels)
	} else {
		slices.SortFunc(items, func(a, b v1alpha1.AgentRunPolicy) int { return strings.Compare(a.Name, b.Name) })
	}
	for i := range items {
		d.Rows = append(d.Rows, policyViewOf(&items[i]))
	}
	return v, nil
}

// apiMessage is the API server's words for an error it gave.
func apiMessage(err error) string {
	if st := apierrors.APIStatus(nil); errors.As(err, &st) {
		return st.Status().Message
	}
	return err.Error()
}

// apiStatus is the HTTP status of an error the API server gave.
func apiStatus(err error) int32 {
	if st := apierrors.APIStatus(nil); errors.As(err, &st) && st.Status().Code >= 400 {
		return st.Status().Code
	}
	return http.StatusBadGateway
}
