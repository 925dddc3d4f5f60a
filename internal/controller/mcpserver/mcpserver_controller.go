// Package mcpserver is the MCPServer reconciler: it lists an MCP server's
// tools (tools/list) into the MCPServer's status, with whether the server
// could be reached and accepted its credentials, and lists them again
// every refreshPeriod.
//
// A listing is made inside the reconcile, bounded by DiscoveryTimeout, on
// one of Workers workers of its own: a server that does not answer holds
// one worker for at most that long, and never a worker of another kind.
package mcpserver

import (
	"context"
	"errors"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/platform"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/agentrun/agentrun/internal/tools/mcptool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

const (
	// DiscoveryTimeout bounds one listing of a server's tools: the
	// connection, the MCP handshake, tools/list and its pages.
	DiscoveryTimeout = 10 * time.Second
	// DefaultWorkers is how many servers are listed at once unless
	// Config.Workers says otherwise.
	DefaultWorkers = 4
	// DefaultRefreshPeriod is the refresh period of a server whose spec
	// sets none (the API server defaults it to the same).
	DefaultRefreshPeriod = 5 * time.Minute
	// maxRetryAfterFailure is the longest wait before a failed listing is
	// tried again: a Secret or a server fixed since is found within it.
	maxRetryAfterFailure = time.Minute
)

// Connector builds how the operator reaches a server: its transport,
// credentials (read as the server's serviceAccountName) and CA bundle,
// through the egress policy with grant. kit.Builder.MCPServer is one.
type Connector func(ctx context.Context, s *v1alpha1.MCPServer, grant egress.Grant) (*mcptool.Server, error)

// Config is what a Reconciler is built from.
type Config struct {
	reconcilers.Base
	// Connect builds the connection to a server.
	Connect Connector
	// Workers is the number of servers listed at once; DefaultWorkers
	// when zero.
	Workers int
	// Timeout bounds one listing; DiscoveryTimeout when zero.
	Timeout time.Duration
}

// Reconciler lists MCP servers' tools. Build it with NewReconciler.
type Reconciler struct {
	Config
}

// NewReconciler builds the reconciler, defaults applied.
func NewReconciler(cfg Config) *Reconciler {
	cfg.Base = cfg.Defaulted()
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DiscoveryTimeout
	}
	return &Reconciler{Config: cfg}
}

// The Secrets and ConfigMaps a server names are read as its
// serviceAccountName, by impersonation (the operator's RBAC for runs); the
// AgentRunPolicies and namespaces through agentrun-platform-reader.
//
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=mcpservers,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=mcpservers/status,verbs=get;update;patch

// SetupWithManager registers the reconciler: it wakes for a new server or
// a changed spec, and then every refreshPeriod.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.MCPServer{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Workers}).
		Named("mcpserver").
		Complete(r)
}

// Reconcile lists the server's tools and writes status once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	s := &v1alpha1.MCPServer{}
	if err := r.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if s.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	before := s.DeepCopy()
	defer func() {
		if equality.Semantic.DeepEqual(before.Status, s.Status) {
			return
		}
		if err := r.Status().Patch(ctx, s, client.MergeFrom(before)); err != nil {
			retErr = errors.Join(retErr, client.IgnoreNotFound(err))
			return
		}
		r.report(before, s)
	}()
	period := refreshPeriod(s)
	tools, err := r.list(ctx, s)
	if err != nil {
		setFailed(s, err)
		return ctrl.Result{RequeueAfter: min(period, maxRetryAfterFailure)}, nil
	}
	setListed(s, tools, metav1.NewTime(r.Clock()))
	return ctrl.Result{RequeueAfter: period}, nil
}

// list connects to the server and lists its tools, within the timeout.
func (r *Reconciler) list(ctx context.Context, s *v1alpha1.MCPServer) ([]*mcp.Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	pols, err := reconcilers.PlatformPolicies(ctx, r.APIReader, s.Namespace)
	if err != nil {
		return nil, &notContacted{err: err}
	}
	grant, err := platform.Egress(pols)
	if err != nil {
		return nil, &notContacted{err: err}
	}
	srv, err := r.Connect(ctx, s, grant)
	if err != nil {
		return nil, &notContacted{err: err}
	}
	return srv.Tools(ctx)
}

// notContacted is a listing that failed before the server was contacted:
// the policies could not be read, or the connection's settings could not
// be built.
type notContacted struct{ err error }

func (e *notContacted) Error() string { return e.err.Error() }
func (e *notContacted) Unwrap() error { return e.err }

// report records an event when a condition became False, or True again
// after it was False, once the status is written.
func (r *Reconciler) report(before, after *v1alpha1.MCPServer) {
	if r.Recorder == nil {
		return
	}
	for _, t := range []string{v1alpha1.MCPServerReachable, v1alpha1.MCPServerAuthenticated} {
		was, now := apimeta.FindStatusCondition(before.Status.Conditions, t), apimeta.FindStatusCondition(after.Status.Conditions, t)
		if now == nil || (was != nil && was.Status == now.Status && was.Reason == now.Reason) {
			continue
		}
		switch {
		case now.Status == metav1.ConditionFalse:
			r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, now.Reason, "List tools", "%s", clip.Cut(now.Message, 1024, runstatus.CutMark))
		case now.Status == metav1.ConditionTrue && was != nil && was.Status == metav1.ConditionFalse:
			r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, now.Reason, "List tools", "%s", clip.Cut(now.Message, 1024, runstatus.CutMark))
		}
	}
}

// refreshPeriod is the server's refresh period, or the default.
func refreshPeriod(s *v1alpha1.MCPServer) time.Duration {
	if p := s.Spec.RefreshPeriod; p != nil && p.Duration > 0 {
		return p.Duration
	}
	return DefaultRefreshPeriod
}
