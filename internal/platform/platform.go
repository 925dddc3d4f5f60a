// Package platform applies AgentRunPolicies, the platform's rules, to a
// run: what its author may not relax. It reads nothing: the operator lists
// the policies and the namespace's labels, and this package decides which
// policies govern the run and what the run becomes under them.
//
// The API server enforces the same rules when a run is created or
// answered (config/admission/platform-policy.yaml); the operator applies
// them again when it builds a run, for the runs created before a policy
// existed or where the admission policies are not installed. Where the
// two could differ (a maximum a run exceeds), the operator lowers rather
// than refuses, so that a policy never strands a run that was valid when
// it was created.
package platform

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/loop"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Select returns the policies that govern a namespace with these labels,
// in the order of their names. A policy whose selector cannot be read
// governs every namespace: a broken policy fails closed.
func Select(pols []v1alpha1.AgentRunPolicy, nsLabels map[string]string) []v1alpha1.AgentRunPolicy {
	var out []v1alpha1.AgentRunPolicy
	for i := range pols {
		p := &pols[i]
		if p.Spec.NamespaceSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.NamespaceSelector)
			if err == nil && !sel.Matches(labels.Set(nsLabels)) {
				continue
			}
		}
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b v1alpha1.AgentRunPolicy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Refusal is a run that a policy does not let run at all: lowering a
// ceiling cannot fix it.
type Refusal struct {
	Policy string
	Reason string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("AgentRunPolicy %s refuses it: %s", r.Policy, r.Reason)
}

// Apply returns the run as the policies govern it: a copy whose ceilings
// and timeouts are lowered to the policies' limits, whose prices are
// raised to the policies' prices, and whose policy rules follow the
// policies' required rules. changes says, for a person, what was lowered
// or raised. The error is a *Refusal when the run may not run (a
// ServiceAccount or API key the policy does not allow), or a policy's own
// error (a price that is not a number).
func Apply(run *v1alpha1.AgentRun, pols []v1alpha1.AgentRunPolicy) (*v1alpha1.AgentRun, []string, error) {
	out := run.DeepCopy()
	if len(pols) == 0 {
		return out, nil, nil
	}
	var changes []string
	spec := &out.Spec
	for i := range pols {
		p := &pols[i]
		if err := admits(p, spec); err != nil {
			return nil, nil, err
		}
		c, err := lower(p, spec)
		if err != nil {
			return nil, nil, err
		}
		changes = append(changes, c...)
		if c, err = governMemory(p, spec); err != nil {
			return nil, nil, err
		}
		changes = append(changes, c...)
		for _, m := range models(spec) {
			c, err = raisePrices(p, m.endpoint, m.field)
			if err != nil {
				return nil, nil, err
			}
			changes = append(changes, c...)
		}
		changes = append(changes, classify(p, spec)...)
		changes = append(changes, lowerDepth(p, spec)...)
		changes = append(changes, lowerInFlight(p, spec)...)
	}
	requireRules(pols, spec)
	fillEscalationOwner(pols, spec)
	return out, changes, nil
}

// fillEscalationOwner gives a run that names no escalation owner
// (spec.escalation.owner, its own or its template's) the escalationOwner
// of the first governing policy, by name, that sets one. The run's label
// agents.agentrun.dev/owner, which comes first, is the operator's to read.
func fillEscalationOwner(pols []v1alpha1.AgentRunPolicy, spec *v1alpha1.AgentRunSpec) {
	if spec.Escalation != nil && spec.Escalation.Owner != "" {
		return
	}
	for _, p := range pols {
		if o := p.Spec.EscalationOwner; o != "" {
			spec.Escalation = &v1alpha1.EscalationSpec{Owner: o}
			return
		}
	}
}

// admits checks what cannot be lowered: the ServiceAccount, where the
// API key goes, that a pinned key goes nowhere else, and declared tool
// costs.
func admits(p *v1alpha1.AgentRunPolicy, spec *v1alpha1.AgentRunSpec) error {
	sa := spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	if names := p.Spec.ServiceAccountNames; len(names) > 0 && !slices.Contains(names, sa) {
		return &Refusal{Policy: p.Name, Reason: fmt.Sprintf("runs may act only as the ServiceAccounts %s, not %s",
			strings.Join(names, ", "), sa)}
	}
	if err := pinnedElsewhere(p, spec); err != nil {
		return err
	}
	if p.Spec.RequireToolCosts {
		var undeclared []string
		for i := range spec.Tools {
			if t := &spec.Tools[i]; !DeclaresCost(t) {
				undeclared = append(undeclared, t.Name)
			}
		}
		if len(undeclared) > 0 {
			return &Refusal{Policy: p.Name, Reason: fmt.Sprintf("every tool must declare maxCostUSD (requireToolCosts; \"0\" declares a free tool), "+
				"and the tools %s do not", strings.Join(undeclared, ", "))}
		}
	}
	for _, at := range models(spec) {
		if err := keyAllowed(p, at); err != nil {
			return err
		}
	}
	return nil
}

// modelAt is one of a run's models: model itself, or one of
// model.fallbacks, each held to the same rules.
type modelAt struct {
	// field names it in messages: model, or model.fallbacks[i].
	field    string
	endpoint *v1alpha1.ModelEndpoint
}

// models are the run's model, then its fallbacks.
func models(spec *v1alpha1.AgentRunSpec) []modelAt {
	out := []modelAt{{field: "model", endpoint: &spec.Model.ModelEndpoint}}
	for i := range spec.Model.Fallbacks {
		out = append(out, modelAt{field: fmt.Sprintf("model.fallbacks[%d]", i), endpoint: &spec.Model.Fallbacks[i]})
	}
	return out
}

// keyAllowed checks where a model's API key goes against the policy's
// models[]: with the providers and to the endpoints they allow.
func keyAllowed(p *v1alpha1.AgentRunPolicy, at modelAt) error {
	e := at.endpoint
	ref := e.APIKeySecretRef
	if ref == nil {
		return nil
	}
	of := ""
	if at.field != "model" {
		of = " (spec." + at.field + ")"
	}
	for _, m := range p.Spec.Models {
		if m.APIKeySecret != ref.Name {
			continue
		}
		if !slices.Contains(m.Providers, e.Provider) {
			return &Refusal{Policy: p.Name, Reason: fmt.Sprintf("the API key in Secret %s%s may be used with the providers %s, not %s",
				ref.Name, of, joinProviders(m.Providers), e.Provider)}
		}
		if u := strings.TrimSuffix(keyEndpoint(e), "/"); u != "" && !slices.ContainsFunc(m.BaseURLs, func(b string) bool {
			return strings.TrimSuffix(b, "/") == u
		}) {
			allowed := "only to the provider's own endpoint (no " + at.field + ".baseURL)"
			if len(m.BaseURLs) > 0 {
				allowed = "to the provider's own endpoint or to " + strings.Join(m.BaseURLs, ", ")
			}
			return &Refusal{Policy: p.Name, Reason: fmt.Sprintf("the API key in Secret %s%s may be sent %s, not to %s", ref.Name, of, allowed, u)}
		}
	}
	return nil
}

// secretRef is a place in a run's spec that names a Secret.
type secretRef struct {
	// Path is the field, for example spec.tools[1].http.headers[0].valueFrom.secretKeyRef.
	Path string
	// Secret is the Secret's name.
	Secret string
}

// secretRefs lists every Secret the spec names other than the model's
// API key (model.apiKeySecretRef): the model's CA bundle, and each tool's
// headers, env, CA bundle and OAuth client, in the order of the manifest.
func secretRefs(spec *v1alpha1.AgentRunSpec) []secretRef {
	var out []secretRef
	ca := func(path string, ref *v1alpha1.CABundleRef) {
		if ref != nil && ref.SecretKeyRef != nil {
			out = append(out, secretRef{Path: path + ".caBundleRef.secretKeyRef", Secret: ref.SecretKeyRef.Name})
		}
	}
	headers := func(path string, hs []v1alpha1.HTTPHeader) {
		for j, h := range hs {
			if h.ValueFrom != nil {
				out = append(out, secretRef{Path: fmt.Sprintf("%s.headers[%d].valueFrom.secretKeyRef", path, j), Secret: h.ValueFrom.SecretKeyRef.Name})
			}
		}
	}
	for _, m := range models(spec) {
		ca("spec."+m.field, m.endpoint.CABundleRef)
	}
	for i := range spec.Tools {
		t := &spec.Tools[i]
		path := fmt.Sprintf("spec.tools[%d]", i)
		switch {
		case t.HTTP != nil:
			headers(path+".http", t.HTTP.Headers)
			ca(path+".http", t.HTTP.CABundleRef)
		case t.MCP != nil:
			headers(path+".mcp", t.MCP.Headers)
			ca(path+".mcp", t.MCP.CABundleRef)
			if o := t.MCP.OAuth; o != nil {
				out = append(out, secretRef{Path: path + ".mcp.oauth.clientSecretRef", Secret: o.ClientSecretRef.Name})
			}
		case t.Job != nil:
			for j, e := range t.Job.Env {
				if e.ValueFrom != nil {
					out = append(out, secretRef{Path: fmt.Sprintf("%s.job.env[%d].valueFrom.secretKeyRef", path, j), Secret: e.ValueFrom.SecretKeyRef.Name})
				}
			}
		}
	}
	return out
}

// pinnedElsewhere refuses a run that names a Secret the policy pins to
// the model (models[].apiKeySecret) anywhere but model.apiKeySecretRef: a
// tool's header or env would send the key wherever the tool goes.
func pinnedElsewhere(p *v1alpha1.AgentRunPolicy, spec *v1alpha1.AgentRunSpec) error {
	if len(p.Spec.Models) == 0 {
		return nil
	}
	for _, ref := range secretRefs(spec) {
		if slices.ContainsFunc(p.Spec.Models, func(m v1alpha1.ModelAllowance) bool { return m.APIKeySecret == ref.Secret }) {
			return &Refusal{Policy: p.Name, Reason: fmt.Sprintf("the API key in Secret %s may be named only as a model's apiKeySecretRef (spec.model or spec.model.fallbacks[]), not in %s",
				ref.Secret, ref.Path)}
		}
	}
	return nil
}

// keyEndpoint is where the run's API key is sent when it is not the
// provider's own endpoint: model.baseURL, or the Azure OpenAI resource
// (model.azure.endpoint), which is always the tenant's choice.
func keyEndpoint(m *v1alpha1.ModelEndpoint) string {
	if m.Provider == v1alpha1.ProviderAzure && m.Azure != nil {
		return m.Azure.Endpoint
	}
	return m.BaseURL
}

func joinProviders(ps []v1alpha1.ModelProvider) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

// lower brings the run's ceilings and timeouts down to the policy's
// limits; an unset ceiling becomes the limit.
func lower(p *v1alpha1.AgentRunPolicy, spec *v1alpha1.AgentRunSpec) ([]string, error) {
	l := p.Spec.Limits
	if l == nil {
		return nil, nil
	}
	var changes []string
	note := func(field string, from, to any) {
		if from == "unset" {
			changes = append(changes, fmt.Sprintf("%s set to %v by AgentRunPolicy %s (the run left it unset)", field, to, p.Name))
			return
		}
		changes = append(changes, fmt.Sprintf("%s lowered from %v to %v by AgentRunPolicy %s", field, from, to, p.Name))
	}
	if err := lowerCeilings(&spec.Budget, l, p.Name, note); err != nil {
		return nil, err
	}
	lowerDuration := func(field string, cur **metav1.Duration, limit *metav1.Duration, unset time.Duration) {
		if limit == nil {
			return
		}
		d := unset
		if *cur != nil {
			d = (*cur).Duration
		}
		if (d == 0 && *cur == nil) || d > limit.Duration {
			note(field, unsetOr(*cur), limit.Duration)
			*cur = &metav1.Duration{Duration: limit.Duration}
		}
	}
	lowerDuration("approvalTimeout", &spec.ApprovalTimeout, l.MaxApprovalTimeout, 0)
	for i := range spec.Tools {
		lowerDuration(fmt.Sprintf("tools[%d].timeout (%s)", i, spec.Tools[i].Name), &spec.Tools[i].Timeout, l.MaxToolTimeout, loop.DefaultToolTimeout)
	}
	return changes, nil
}

// lowerCeilings brings each of the budget's ceilings down to the limit of
// the same name, row by row of the engine's table (loop.Ceilings): the
// limits are the budget's fields under the same JSON names, so a new
// ceiling needs no code here, and TestLimits_areTheTableOfCeilings fails
// until PlatformLimits has its field.
func lowerCeilings(b *v1alpha1.BudgetSpec, l *v1alpha1.PlatformLimits, policy string, note func(field string, from, to any)) error {
	var run, lim map[string]json.RawMessage
	if err := roundTrip(b, &run); err != nil {
		return err
	}
	if err := roundTrip(l, &lim); err != nil {
		return err
	}
	changed := false
	for _, row := range loop.Ceilings() {
		to, ok := lim[row.Field]
		if !ok {
			continue
		}
		limit, err := ceiling(row, to)
		if err != nil {
			return fmt.Errorf("AgentRunPolicy %s: limits.%s: %w", policy, row.Field, err)
		}
		from, set := run[row.Field]
		if set {
			// A ceiling that cannot be read is replaced, never kept.
			if cur, err := ceiling(row, from); err == nil && cur <= limit {
				continue
			}
		}
		note("budget."+row.Field, shown(from, set), shown(to, true))
		run[row.Field], changed = to, true
	}
	if !changed {
		return nil
	}
	return roundTrip(run, b)
}

// ceiling is the limit a budget field's value sets, in the row's unit.
func ceiling(row loop.Ceiling, v json.RawMessage) (int64, error) {
	fields := map[string]json.RawMessage{"maxTurns": json.RawMessage("1"), row.Field: v}
	var spec v1alpha1.BudgetSpec
	if err := roundTrip(fields, &spec); err != nil {
		return 0, err
	}
	b, err := limits.Budget(&spec)
	if err != nil {
		return 0, err
	}
	return row.Limit(&b), nil
}

// shown prints a budget field's JSON value as the notes show it: a string
// without its quotes, or "unset".
func shown(v json.RawMessage, set bool) any {
	if !set {
		return "unset"
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

func roundTrip(from, to any) error {
	raw, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, to)
}

func ptr[T any](v T) *T { return &v }

// unsetOr prints a ceiling, or "unset".
func unsetOr[T any](v T) any {
	switch x := any(v).(type) {
	case *metav1.Duration:
		if x != nil {
			return x.Duration
		}
	case v1alpha1.USD:
		if x != "" {
			return x
		}
	}
	return "unset"
}

// raisePrices raises each of a model's prices to the policy's price for
// it (the entry named as its name, else "*"); field names the model in
// the changes (model, or model.fallbacks[i]).
func raisePrices(p *v1alpha1.AgentRunPolicy, m *v1alpha1.ModelEndpoint, field string) ([]string, error) {
	var entry *v1alpha1.ModelPrice
	for i := range p.Spec.Pricing {
		e := &p.Spec.Pricing[i]
		if e.Model == m.Name && m.Name != "" {
			entry = e
			break
		}
		if e.Model == "*" {
			entry = e
		}
	}
	if entry == nil {
		return nil, nil
	}
	if m.Pricing == nil {
		m.Pricing = &v1alpha1.ModelPricing{}
	}
	var changes []string
	for _, f := range []struct {
		name     string
		run      *v1alpha1.USD
		platform v1alpha1.USD
	}{
		{"input", &m.Pricing.Input, entry.Input},
		{"output", &m.Pricing.Output, entry.Output},
		{"cachedInput", &m.Pricing.CachedInput, entry.CachedInput},
	} {
		if f.platform == "" {
			continue
		}
		floor, err := loop.ParseMoney(string(f.platform))
		if err != nil {
			return nil, fmt.Errorf("AgentRunPolicy %s: pricing %s.%s: %w", p.Name, entry.Model, f.name, err)
		}
		cur, err := loop.ParseMoney(string(*f.run))
		if *f.run == "" || err != nil || cur < floor {
			changes = append(changes, fmt.Sprintf("%s.pricing.%s raised from %v to %s by AgentRunPolicy %s", field, f.name, unsetOr(*f.run), f.platform, p.Name))
			if *f.run == "" {
				changes[len(changes)-1] = fmt.Sprintf("%s.pricing.%s set to %s by AgentRunPolicy %s (the run left it unset)", field, f.name, f.platform, p.Name)
			}
			*f.run = f.platform
		}
	}
	return changes, nil
}

// matches reports whether the selector picks tool t: every field it sets
// matches, each by any of its entries.
func matches(sel *v1alpha1.ToolSelector, t *v1alpha1.ToolSpec) bool {
	kind := kindOf(t)
	if len(sel.Kinds) > 0 && !slices.Contains(sel.Kinds, kind) {
		return false
	}
	if len(sel.Images) > 0 && (t.Job == nil || !matchesAny(sel.Images, t.Job.Image)) {
		return false
	}
	if len(sel.Methods) > 0 {
		if t.HTTP == nil {
			return false
		}
		method := t.HTTP.Method
		if method == "" {
			method = v1alpha1.HTTPGet // the API server's default
		}
		if !slices.Contains(sel.Methods, method) {
			return false
		}
	}
	if len(sel.URLs) > 0 {
		var u string
		switch {
		case t.HTTP != nil:
			u = t.HTTP.URL
		case t.MCP != nil:
			u = t.MCP.URL
		default:
			return false
		}
		if !matchesAny(sel.URLs, u) {
			return false
		}
	}
	return true
}

// kindOf is the tool's executor, or "" for a tool with none.
func kindOf(t *v1alpha1.ToolSpec) v1alpha1.ToolKind {
	switch {
	case t.HTTP != nil:
		return v1alpha1.ToolKindHTTP
	case t.Job != nil:
		return v1alpha1.ToolKindJob
	case t.MCP != nil:
		return v1alpha1.ToolKindMCP
	case t.Builtin != "":
		return v1alpha1.ToolKindBuiltin
	case t.Agent != nil:
		return v1alpha1.ToolKindAgent
	}
	return ""
}

// matchesAny compares s with each pattern: exactly, or as a prefix when
// the pattern ends in "*".
func matchesAny(patterns []string, s string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			return strings.HasPrefix(s, prefix)
		}
		return s == p
	})
}

// classify makes mutating every tool the policy's readOnlyTools do not
// call read-only, whatever the run declares, and has the operator ask an
// MCP server about a tool the policy calls read-only only on the server's
// word (mcp.requireReadOnlyHint). An author's mutates: true is kept.
func classify(p *v1alpha1.AgentRunPolicy, spec *v1alpha1.AgentRunSpec) []string {
	if len(p.Spec.ReadOnlyTools) == 0 {
		return nil
	}
	var changes []string
	for i := range spec.Tools {
		t := &spec.Tools[i]
		readOnly, onHint := false, false
		for j := range p.Spec.ReadOnlyTools {
			e := &p.Spec.ReadOnlyTools[j]
			if !matches(&e.ToolSelector, t) {
				continue
			}
			if !e.ReadOnlyHint {
				readOnly = true
				break
			}
			if t.MCP != nil {
				onHint = true
			}
		}
		if readOnly && t.Agent != nil && t.Mutates == nil {
			// An agent tool mutates unless it says otherwise, or the
			// platform does.
			t.Mutates = ptr(false)
			changes = append(changes, fmt.Sprintf("tools[%d] (%s) is read-only by AgentRunPolicy %s (its readOnlyTools match it)", i, t.Name, p.Name))
		}
		if readOnly || (t.Mutates != nil && *t.Mutates) {
			continue
		}
		if onHint {
			if !t.MCP.RequireReadOnlyHint {
				t.MCP.RequireReadOnlyHint = true
				changes = append(changes, fmt.Sprintf("tools[%d] (%s) is read-only only if its MCP server annotates it readOnlyHint: true, by AgentRunPolicy %s",
					i, t.Name, p.Name))
			}
			continue
		}
		t.Mutates = ptr(true)
		changes = append(changes, fmt.Sprintf("tools[%d] (%s) is mutating by AgentRunPolicy %s (its readOnlyTools do not match it)", i, t.Name, p.Name))
	}
	return changes
}

// requireRules puts the policies' rules before the run's own, each named
// after its policy, and names the run's own rules after their place in
// the manifest (which the required rules shift). A rule with match
// applies to the run's tools it names that a selector picks, and is left
// out when it picks none.
func requireRules(pols []v1alpha1.AgentRunPolicy, spec *v1alpha1.AgentRunSpec) {
	var required []v1alpha1.PolicyRule
	for _, p := range pols {
		for i, pr := range p.Spec.Rules {
			r := pr.PolicyRule
			if len(pr.Match) > 0 {
				r.Tools = matching(pr, spec.Tools)
				if len(r.Tools) == 0 {
					continue
				}
			}
			r.Name = RuleName(p.Name, i, pr.Name)
			required = append(required, r)
		}
	}
	if len(required) == 0 {
		return
	}
	if spec.Policy == nil {
		spec.Policy = &v1alpha1.PolicySpec{Default: v1alpha1.PolicyAllow}
	}
	own := spec.Policy.Rules
	for i := range own {
		if own[i].Name == "" {
			own[i].Name = fmt.Sprintf("policy.rules[%d]", i)
		}
	}
	spec.Policy.Rules = append(required, own...)
}

// RuleName is the name a run's policy gives rule i of AgentRunPolicy
// policy, whose own name (rules[i].name) is own: what a denial, an ask and
// the console's policies page call it.
func RuleName(policy string, i int, own string) string {
	if own == "" {
		return fmt.Sprintf("AgentRunPolicy/%s.rules[%d]", policy, i)
	}
	return fmt.Sprintf("AgentRunPolicy/%s: %s", policy, own)
}

// matching names the tools of the run that the rule names and one of its
// selectors picks.
func matching(r v1alpha1.PlatformRule, tools []v1alpha1.ToolSpec) []string {
	var names []string
	for i := range tools {
		t := &tools[i]
		if !slices.Contains(r.Tools, "*") && !slices.Contains(r.Tools, t.Name) {
			continue
		}
		if slices.ContainsFunc(r.Match, func(sel v1alpha1.ToolSelector) bool { return matches(&sel, t) }) {
			names = append(names, t.Name)
		}
	}
	return names
}

// Approvers is what the policies governing a run say about who may
// answer its approvals.
type Approvers struct {
	// Author is who created the run, as the API server recorded it.
	Author string
	// NoSelf names the policies that refuse the author's answers.
	NoSelf []string
	// Accounts are, per governing policy, the ServiceAccount usernames it
	// allows to answer.
	Accounts map[string][]string
}

// ApproversFor reads the approval rules of the policies governing run.
func ApproversFor(run *v1alpha1.AgentRun, pols []v1alpha1.AgentRunPolicy) Approvers {
	a := Approvers{Author: run.Annotations[v1alpha1.CreatedByAnnotation], Accounts: map[string][]string{}}
	for _, p := range pols {
		var accounts []string
		if ap := p.Spec.Approval; ap != nil {
			if ap.SelfApproval == v1alpha1.SelfApprovalDeny {
				a.NoSelf = append(a.NoSelf, p.Name)
			}
			for _, s := range ap.ServiceAccounts {
				accounts = append(accounts, ServiceAccountUser(s.Namespace, s.Name))
			}
		}
		a.Accounts[p.Name] = accounts
	}
	return a
}

// ServiceAccountUser is the username a ServiceAccount authenticates as.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// Refuses says why an answer given by user does not count, or "". A
// ServiceAccount answers only where every governing policy lists it, and
// so never where no policy governs the run: every editor of its namespace
// can act as it. The author answers unless a policy says selfApproval
// Deny. An unknown user (no approved-by stamp: the admission policies are
// not installed) is not refused here.
func (a Approvers) Refuses(user string) string {
	if user == "" {
		return ""
	}
	if strings.HasPrefix(user, "system:serviceaccount:") {
		if len(a.Accounts) == 0 {
			return fmt.Sprintf("%s is a ServiceAccount, and no AgentRunPolicy allows ServiceAccounts to answer this run's approvals "+
				"(every editor of its namespace can act as it); list it in an AgentRunPolicy's approval.serviceAccounts", user)
		}
		names := make([]string, 0, len(a.Accounts))
		for name := range a.Accounts {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			if !slices.Contains(a.Accounts[name], user) {
				return fmt.Sprintf("%s is a ServiceAccount that AgentRunPolicy %s does not list in approval.serviceAccounts", user, name)
			}
		}
	}
	if len(a.NoSelf) > 0 && a.Author != "" && user == a.Author {
		return fmt.Sprintf("%s created this run, and AgentRunPolicy %s refuses self-approval (approval.selfApproval: Deny)", user, a.NoSelf[0])
	}
	return ""
}

// lowerDepth lowers every agent tool's maxDepth to the policy's
// maxAgentDepth.
func lowerDepth(p *v1alpha1.AgentRunPolicy, spec *v1alpha1.AgentRunSpec) []string {
	return lowerAgents(p, spec, p.Spec.MaxAgentDepth, "maxDepth", v1alpha1.DefaultMaxDepth,
		func(a *v1alpha1.AgentTool) **int32 { return &a.MaxDepth })
}

// lowerInFlight lowers every agent tool's maxInFlight to the policy's
// maxAgentInFlight.
func lowerInFlight(p *v1alpha1.AgentRunPolicy, spec *v1alpha1.AgentRunSpec) []string {
	return lowerAgents(p, spec, p.Spec.MaxAgentInFlight, "maxInFlight", v1alpha1.DefaultMaxInFlight,
		func(a *v1alpha1.AgentTool) **int32 { return &a.MaxInFlight })
}

// lowerAgents lowers one limit of every agent tool to most, the policy's
// (nothing when it sets none). at is where a tool keeps the limit, def
// what it is when unset, and field its name in the changes reported.
func lowerAgents(p *v1alpha1.AgentRunPolicy, spec *v1alpha1.AgentRunSpec, most *int32, field string, def int32,
	at func(*v1alpha1.AgentTool) **int32) []string {
	if most == nil {
		return nil
	}
	var changes []string
	for i := range spec.Tools {
		a := spec.Tools[i].Agent
		if a == nil {
			continue
		}
		limit := at(a)
		cur := def
		if *limit != nil {
			cur = **limit
		}
		if cur > *most {
			*limit = ptr(*most)
			changes = append(changes, fmt.Sprintf("tools[%d] (%s) agent.%s %d lowered to %d by AgentRunPolicy %s", i, spec.Tools[i].Name, field, cur, *most, p.Name))
		}
	}
	return changes
}

// DeclaresCost says whether a tool's cost is known: it declares
// maxCostUSD ("0" declares a free tool), or it is builtin, the operator's
// own read of the API server, which costs nothing, or it is an agent tool,
// whose call costs what its child may spend (its maxCostUSD, always
// bounded). The admission policy's requireToolCosts check mirrors it
// (config/admission/platform-policy.yaml).
func DeclaresCost(t *v1alpha1.ToolSpec) bool {
	return t.MaxCostUSD != "" || t.Builtin != "" || t.Agent != nil
}
