// Package kube is the builtin tools that read the run's own namespace:
// kubernetes.get, kubernetes.list and kubernetes.events.
//
// Every request impersonates the run's ServiceAccount
// (system:serviceaccount:<namespace>:<name>), so the API server's RBAC
// decides what the agent may read, and the agent can never read what that
// account cannot. The operator's own identity needs the "impersonate" verb
// on serviceaccounts for this, and nothing more (the API server adds the
// service account's groups itself).
//
// The tools read only the run's namespace and only namespaced kinds. They
// refuse Secrets outright, whatever RBAC would allow: a Secret's data would
// land in the model's context, in the transcript and at the model
// provider. Give a tool that needs a secret's value a job tool, which can
// mount it without showing it to the model.
//
// Results are compact JSON: metadata.managedFields and the
// kubectl.kubernetes.io/last-applied-configuration annotation are dropped,
// lists are bounded (50 items by default, 500 at most) and events are cut
// to the newest 50, one short line of fields each.
package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/agentrun/agentrun/internal/kubeevent"
	"github.com/agentrun/agentrun/internal/loop"
)

// Builtin names one builtin tool, as spec.tools[].builtin spells it.
type Builtin string

// The builtin tools.
const (
	// Get reads one object: arguments {apiVersion, kind, name}.
	Get Builtin = "kubernetes.get"
	// List reads objects of a kind: arguments {apiVersion, kind,
	// labelSelector?, limit?}.
	List Builtin = "kubernetes.list"
	// Events reads the namespace's events, optionally about one object:
	// arguments {name?, kind?} of the involved object.
	Events Builtin = "kubernetes.events"
)

// Builtins lists every builtin tool.
var Builtins = []Builtin{Get, List, Events}

// ParseBuiltin checks a builtin's name.
func ParseBuiltin(s string) (Builtin, error) {
	if b := Builtin(s); slices.Contains(Builtins, b) {
		return b, nil
	}
	return "", fmt.Errorf("unknown builtin tool %q (known: kubernetes.get, kubernetes.list, kubernetes.events)", s)
}

// Description is a default description of the tool for the model.
func (b Builtin) Description() string {
	switch b {
	case Get:
		return "Read one Kubernetes object in this namespace by apiVersion, kind and name. Secrets cannot be read."
	case List:
		return "List Kubernetes objects of one kind in this namespace, optionally filtered by a label selector. Secrets cannot be read."
	case Events:
		return "Read the newest Kubernetes events in this namespace, optionally only those about one object (by name and kind)."
	}
	return ""
}

// Parameters is the JSON Schema of the tool's arguments.
func (b Builtin) Parameters() json.RawMessage {
	switch b {
	case Get:
		return json.RawMessage(`{"type":"object","properties":{` +
			`"apiVersion":{"type":"string","description":"e.g. v1, apps/v1"},` +
			`"kind":{"type":"string","description":"e.g. ConfigMap, Deployment"},` +
			`"name":{"type":"string"}},` +
			`"required":["apiVersion","kind","name"],"additionalProperties":false}`)
	case List:
		return json.RawMessage(`{"type":"object","properties":{` +
			`"apiVersion":{"type":"string","description":"e.g. v1, apps/v1"},` +
			`"kind":{"type":"string","description":"e.g. Pod, Deployment"},` +
			`"labelSelector":{"type":"string","description":"e.g. app=billing,tier!=cache"},` +
			`"limit":{"type":"integer","minimum":1,"maximum":500,"description":"at most this many items (default 50)"}},` +
			`"required":["apiVersion","kind"],"additionalProperties":false}`)
	case Events:
		return json.RawMessage(`{"type":"object","properties":{` +
			`"name":{"type":"string","description":"only events about the object of this name"},` +
			`"kind":{"type":"string","description":"only events about objects of this kind, e.g. Pod"}},` +
			`"additionalProperties":false}`)
	}
	return nil
}

// List limits and event count.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
	MaxEvents        = 50
)

// lastApplied is the annotation kubectl apply leaves: a second copy of the
// object, dropped from results.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// Config makes the builtin tools of one run.
type Config struct {
	// Base is the operator's client configuration. It is copied and set to
	// impersonate the run's service account.
	Base *rest.Config
	// Mapper resolves kinds to resources; nil builds one from discovery
	// (NewMapper). Share one between runs.
	Mapper meta.RESTMapper
	// Namespace is the run's namespace, the only one the tools read.
	Namespace string
	// ServiceAccountName is the account the tools act as; empty means
	// "default".
	ServiceAccountName string
	// Tools maps each declared tool's name to its builtin.
	Tools map[string]Builtin
}

// Toolbox runs the builtin tools of one run.
type Toolbox struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
	ns, sa string
	tools  map[string]Builtin
}

var _ loop.Toolbox = (*Toolbox)(nil)

// NewMapper is a RESTMapper over the API server's discovery, cached in
// memory and refreshed when a kind is not found.
func NewMapper(cfg *rest.Config) (meta.RESTMapper, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cached := memory.NewMemCacheClient(dc)
	return restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, nil), nil
}

// Impersonating returns a copy of cfg that acts as the service account.
func Impersonating(cfg *rest.Config, namespace, serviceAccount string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":" + serviceAccount}
	return c
}

// New returns the builtin tools of one run.
func New(cfg Config) (*Toolbox, error) {
	if cfg.Base == nil || cfg.Namespace == "" {
		return nil, errors.New("kube tools: need a client configuration and the run's namespace")
	}
	sa := cfg.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	for name, b := range cfg.Tools {
		if _, err := ParseBuiltin(string(b)); err != nil {
			return nil, fmt.Errorf("kube tools: tool %q: %w", name, err)
		}
	}
	mapper := cfg.Mapper
	if mapper == nil {
		var err error
		if mapper, err = NewMapper(cfg.Base); err != nil {
			return nil, fmt.Errorf("kube tools: %w", err)
		}
	}
	dyn, err := dynamic.NewForConfig(Impersonating(cfg.Base, cfg.Namespace, sa))
	if err != nil {
		return nil, fmt.Errorf("kube tools: %w", err)
	}
	return &Toolbox{dyn: dyn, mapper: mapper, ns: cfg.Namespace, sa: sa, tools: cfg.Tools}, nil
}

// Execute runs one call of a builtin tool.
func (t *Toolbox) Execute(ctx context.Context, inv loop.Invocation) loop.Result {
	// The engine's Config.Normalize gave every invocation its timeout and
	// result limit.
	ctx, cancel := context.WithTimeout(ctx, inv.Timeout)
	defer cancel()

	var (
		out any
		f   *loop.Failure
	)
	switch b, ok := t.tools[inv.Tool]; {
	case !ok:
		f = invalid("no builtin tool named %q", inv.Tool)
	case b == Get:
		out, f = t.get(ctx, inv.Arguments)
	case b == List:
		out, f = t.list(ctx, inv.Arguments)
	case b == Events:
		out, f = t.events(ctx, inv.Arguments)
	default:
		f = invalid("unknown builtin tool %q", b)
	}
	res := loop.Result{Failure: f}
	if f == nil {
		res.ContentType = "application/json"
		b := marshal(out)
		maxBytes := inv.MaxResultBytes
		res.Size = int64(len(b))
		if len(b) > maxBytes+1 {
			b, res.Truncated = b[:maxBytes+1], true
		}
		res.Output = b
	}
	return res
}

// inNamespace is the namespace argument every tool takes (models like to
// send it); decode refuses any but the run's.
type inNamespace struct {
	Namespace string `json:"namespace"`
}

func (a *inNamespace) namespace() string { return a.Namespace }

type getArgs struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	inNamespace
}

type listArgs struct {
	APIVersion    string `json:"apiVersion"`
	Kind          string `json:"kind"`
	LabelSelector string `json:"labelSelector"`
	Limit         int64  `json:"limit"`
	inNamespace
}

type eventsArgs struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	inNamespace
}

func (t *Toolbox) get(ctx context.Context, raw json.RawMessage) (any, *loop.Failure) {
	var a getArgs
	if f := t.decode(raw, &a); f != nil {
		return nil, f
	}
	if a.Name == "" {
		return nil, invalid("name is required")
	}
	m, f := t.resolve(a.APIVersion, a.Kind)
	if f != nil {
		return nil, f
	}
	obj, err := t.dyn.Resource(m.Resource).Namespace(t.ns).Get(ctx, a.Name, metav1.GetOptions{})
	if err != nil {
		return nil, t.apiFailure(ctx, err, "get", m.Resource.GroupResource())
	}
	return compact(obj.Object), nil
}

func (t *Toolbox) list(ctx context.Context, raw json.RawMessage) (any, *loop.Failure) {
	var a listArgs
	if f := t.decode(raw, &a); f != nil {
		return nil, f
	}
	if a.LabelSelector != "" {
		if _, err := labels.Parse(a.LabelSelector); err != nil {
			return nil, invalid("labelSelector: %v", err)
		}
	}
	switch {
	case a.Limit == 0:
		a.Limit = DefaultListLimit
	case a.Limit < 0 || a.Limit > MaxListLimit:
		return nil, invalid("limit must be between 1 and %d", MaxListLimit)
	}
	m, f := t.resolve(a.APIVersion, a.Kind)
	if f != nil {
		return nil, f
	}
	l, err := t.dyn.Resource(m.Resource).Namespace(t.ns).List(ctx, metav1.ListOptions{LabelSelector: a.LabelSelector, Limit: a.Limit})
	if err != nil {
		return nil, t.apiFailure(ctx, err, "list", m.Resource.GroupResource())
	}
	items := make([]map[string]any, 0, len(l.Items))
	for i := range l.Items {
		items = append(items, compact(l.Items[i].Object))
	}
	out := map[string]any{
		"apiVersion": m.GroupVersionKind.GroupVersion().String(),
		"kind":       m.GroupVersionKind.Kind + "List",
		"items":      items,
	}
	if l.GetContinue() != "" {
		out["more"] = true
		if n := l.GetRemainingItemCount(); n != nil {
			out["remainingItemCount"] = *n
		}
	}
	return out, nil
}

var eventsResource = schema.GroupVersionResource{Version: "v1", Resource: "events"}

// event is one line of kubernetes.events' result.
type event struct {
	Time    string `json:"time,omitempty"`
	Type    string `json:"type,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Object  string `json:"object"`
	Message string `json:"message,omitempty"`
	Count   int32  `json:"count,omitempty"`
}

func (t *Toolbox) events(ctx context.Context, raw json.RawMessage) (any, *loop.Failure) {
	var a eventsArgs
	if f := t.decode(raw, &a); f != nil {
		return nil, f
	}
	var sel []fields.Selector
	if a.Name != "" {
		sel = append(sel, fields.OneTermEqualSelector("involvedObject.name", a.Name))
	}
	if a.Kind != "" {
		sel = append(sel, fields.OneTermEqualSelector("involvedObject.kind", a.Kind))
	}
	opts := metav1.ListOptions{Limit: MaxListLimit}
	if len(sel) > 0 {
		opts.FieldSelector = fields.AndSelectors(sel...).String()
	}
	l, err := t.dyn.Resource(eventsResource).Namespace(t.ns).List(ctx, opts)
	if err != nil {
		return nil, t.apiFailure(ctx, err, "list", eventsResource.GroupResource())
	}
	type dated struct {
		at time.Time
		ev event
	}
	evs := make([]dated, 0, len(l.Items))
	for i := range l.Items {
		var e corev1.Event
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[i].Object, &e); err != nil {
			continue
		}
		at := kubeevent.LastSeen(&e)
		d := dated{at: at, ev: event{
			Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count,
			Object: e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name,
		}}
		if !at.IsZero() {
			d.ev.Time = at.UTC().Format(time.RFC3339)
		}
		evs = append(evs, d)
	}
	slices.SortStableFunc(evs, func(x, y dated) int { return x.at.Compare(y.at) })
	if len(evs) > MaxEvents {
		evs = evs[len(evs)-MaxEvents:]
	}
	out := make([]event, len(evs))
	for i := range evs {
		out[i] = evs[i].ev
	}
	return map[string]any{"events": out}, nil
}

// decode reads the arguments strictly and checks the namespace argument.
func (t *Toolbox) decode(raw json.RawMessage, into interface{ namespace() string }) *loop.Failure {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return invalid("the arguments do not match the tool's parameters: %v", err)
	}
	if ns := into.namespace(); ns != "" && ns != t.ns {
		return invalid("this tool reads only the run's namespace %q", t.ns)
	}
	return nil
}

// resolve maps apiVersion and kind to a namespaced resource, refusing
// Secrets and cluster-scoped kinds. A kind may also be given as its
// resource name or short name (configmaps, cm).
func (t *Toolbox) resolve(apiVersion, kind string) (*meta.RESTMapping, *loop.Failure) {
	if apiVersion == "" || kind == "" {
		return nil, invalid("apiVersion and kind are required")
	}
	if isSecret(kind) {
		return nil, secretRefused()
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, invalid("apiVersion %q: %v", apiVersion, err)
	}
	m, err := t.mapping(gv, kind)
	if meta.IsNoMatchError(err) {
		if r, ok := t.mapper.(meta.ResettableRESTMapper); ok {
			r.Reset() // the kind may be new since discovery was cached
			m, err = t.mapping(gv, kind)
		}
	}
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil, invalid("the cluster serves no kind %q in %s", kind, apiVersion)
		}
		return nil, &loop.Failure{Kind: loop.FailUnavailable, Detail: loop.ClipDetail("resolving " + kind + ": " + err.Error())}
	}
	if m.Resource.GroupResource() == (schema.GroupResource{Resource: "secrets"}) {
		return nil, secretRefused()
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return nil, invalid("%s is cluster-scoped; these tools read only the run's namespace %q", m.GroupVersionKind.Kind, t.ns)
	}
	return m, nil
}

func (t *Toolbox) mapping(gv schema.GroupVersion, kind string) (*meta.RESTMapping, error) {
	m, err := t.mapper.RESTMapping(gv.WithKind(kind).GroupKind(), gv.Version)
	if !meta.IsNoMatchError(err) {
		return m, err
	}
	gvk, kerr := t.mapper.KindFor(gv.WithResource(strings.ToLower(kind)))
	if kerr != nil {
		return nil, err
	}
	return t.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
}

func isSecret(kind string) bool {
	k := strings.ToLower(kind)
	return k == "secret" || k == "secrets"
}

func secretRefused() *loop.Failure {
	return invalid("Secrets cannot be read through the builtin kubernetes tools, whatever RBAC allows")
}

// apiFailure turns an API error into the call's failure.
func (t *Toolbox) apiFailure(ctx context.Context, err error, verb string, gr schema.GroupResource) *loop.Failure {
	var status apierrors.APIStatus
	switch {
	case apierrors.IsForbidden(err):
		return &loop.Failure{Kind: loop.FailHTTP, Code: 403, Detail: loop.ClipDetail(fmt.Sprintf(
			"the service account %s may not %s %s in %s", t.sa, verb, gr, t.ns))}
	case apierrors.IsNotFound(err):
		return &loop.Failure{Kind: loop.FailHTTP, Code: 404, Detail: loop.ClipDetail(apiMessage(err) + " in namespace " + t.ns)}
	case ctx.Err() != nil:
		return &loop.Failure{Kind: loop.FailTimeout, Detail: loop.ClipDetail(fmt.Sprintf("%s %s: %v", verb, gr, ctx.Err()))}
	case errors.As(err, &status) && status.Status().Code != 0:
		return &loop.Failure{Kind: loop.FailHTTP, Code: int(status.Status().Code), Detail: loop.ClipDetail(apiMessage(err))}
	}
	return &loop.Failure{Kind: loop.FailUnavailable, Detail: loop.ClipDetail(fmt.Sprintf("%s %s: %v", verb, gr, err))}
}

func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}

// compact drops what only tools need from an object: managed fields and
// the last applied configuration.
func compact(obj map[string]any) map[string]any {
	md, _ := obj["metadata"].(map[string]any)
	if md == nil {
		return obj
	}
	delete(md, "managedFields")
	if ann, ok := md["annotations"].(map[string]any); ok {
		delete(ann, lastApplied)
		if len(ann) == 0 {
			delete(md, "annotations")
		}
	}
	return obj
}

func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte(`{"error":"the result could not be encoded"}`)
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func invalid(format string, args ...any) *loop.Failure {
	return &loop.Failure{Kind: loop.FailInvalid, Detail: loop.ClipDetail(fmt.Sprintf(format, args...))}
}
