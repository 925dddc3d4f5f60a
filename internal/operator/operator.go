// Package operator wires the AgentRun operator: the manager, the
// reconciler and the kit builder. cmd/manager runs it in a cluster; `make
// dev` and `make demo` run the same wiring against a local control plane
// with job tools as local processes.
package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/budget"
	"github.com/agentrun/agentrun/internal/controller"
	"github.com/agentrun/agentrun/internal/controller/agentbudget"
	"github.com/agentrun/agentrun/internal/controller/agentevaluation"
	"github.com/agentrun/agentrun/internal/controller/agentruntemplate"
	"github.com/agentrun/agentrun/internal/controller/agentschedule"
	"github.com/agentrun/agentrun/internal/controller/mcpserver"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/agentrun/agentrun/internal/notify"
	"github.com/agentrun/agentrun/internal/seal"
	"github.com/agentrun/agentrun/internal/telemetry"
	"github.com/agentrun/agentrun/internal/tools/agent"
	"github.com/agentrun/agentrun/internal/tools/job"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Options configure the operator.
type Options struct {
	MetricsAddr, ProbeAddr string
	// MetricsSecure serves metrics over HTTPS, and only to callers the API
	// server authenticates (TokenReview) and authorizes (SubjectAccessReview:
	// get on the non-resource URL /metrics). The certificate is read from
	// MetricsCertDir (tls.crt, tls.key) when set, else self-signed.
	MetricsSecure  bool
	MetricsCertDir string
	LeaderElect    bool
	// LocalTools runs job tools as local processes (development only: set
	// by internal/devenv; cmd/manager has no flag for it).
	LocalTools bool
	// WatchNamespaces restricts the operator (its cache, so its watches
	// and the runs it drives) to these namespaces; empty means all. The
	// chart's watchNamespaces grants it Roles in exactly these.
	WatchNamespaces []string
	// EventVerbosity says which of a run's notes become events
	// (controller.EventsPerTurn when empty).
	EventVerbosity controller.EventVerbosity
	// StatusInterval is how far a run's status may fall behind its saved
	// progress (controller.Config's StatusInterval; zero or less writes
	// status at every save); controller.DefaultStatusInterval when nil.
	StatusInterval *time.Duration
	// ModelMaxReplyBytes bounds every response body a model provider
	// reads (kit.Builder's MaxReplyBytes): a run's model.baseURL is its
	// author's choice, and a larger body ends that run rather than the
	// operator. Zero means model.DefaultMaxReplyBytes.
	ModelMaxReplyBytes int64
	// CloudIdentity names the providers whose runs may call as the
	// operator's own cloud identity (kit.Builder's CloudIdentity).
	CloudIdentity []v1alpha1.ModelProvider
	// LocalDir is where local job tools run.
	LocalDir string
	// OperatorImage holds the agentrun-entrypoint binary tool Jobs copy in.
	OperatorImage string
	// AgainInProcess lets this process start the operator more than once
	// (controller-runtime refuses a second controller of the same name by
	// default): the dev environment, which tests start several times.
	AgainInProcess bool
	// Workers sizes the reconcile worker pool. Model and tool calls never
	// run on a worker, so a few serve many runs.
	Workers int
	// ToolResources are tool pods' default requests and limits and their
	// caps (nil lists take the job package's defaults).
	ToolResources job.Resources
	// NoToolNetworkPolicy leaves tool pods without their NetworkPolicy.
	NoToolNetworkPolicy bool
	// ToolRunAsUser is the uid of tool pods (job.DefaultRunAsUser when
	// zero); ToolAssignedUser leaves it to the platform (job.Config's
	// AssignedUser), as OpenShift requires.
	ToolRunAsUser    int64
	ToolAssignedUser bool
	// QPS and Burst limit the client. QPS 0 adapts the limit to the runs
	// in flight (DefaultQPSPerRun each, between DefaultMinQPS and
	// DefaultMaxQPS); a negative QPS sets no client-side limit, leaving
	// the API server's priority and fairness to pace the operator. Burst 0
	// is twice the rate. agentrun_client_throttle_seconds shows the waits.
	QPS   float32
	Burst int
	// KeysSecret is the Secret ("namespace/name") holding the keys that
	// seal runs' saved state (--state-keys-secret); empty means
	// DefaultKeysSecret in the operator's namespace (KeysSecret).
	KeysSecret string
	// EgressAllow are the destinations the operator's own requests for
	// the runs of every namespace (model calls, HTTP and MCP tools) may
	// reach although the egress policy refuses their kind
	// (--egress-allow-cidrs; see internal/egress): loopback, link-local,
	// private ranges. The cloud metadata addresses and the API server are
	// opened only by an entry of exactly their address. An AgentRunPolicy's
	// spec.egress adds to it for the namespaces it selects.
	EgressAllow []netip.Prefix
	// EgressAllowPrivate lets those requests reach the private ranges
	// (--egress-allow-private), for every namespace; the metadata
	// addresses stay refused.
	EgressAllowPrivate bool
	// DefaultTTLAfterFinished deletes finished runs that set no
	// spec.ttlSecondsAfterFinished this long after they ended
	// (--default-ttl-seconds-after-finished); nil keeps them.
	DefaultTTLAfterFinished *time.Duration
	// AcceptUnstampedAnswers applies approval answers whose author the API
	// server did not record (--accept-unstamped-answers; see
	// controller.Config).
	AcceptUnstampedAnswers bool
	// Shard is the shard this operator drives (--shard): only AgentRuns
	// labelled v1alpha1.LabelShard=Shard, and the Jobs made for them, are in
	// its cache. Empty means the runs without the label. Each shard elects
	// its own leader (LeaderElectionID).
	Shard string
	// ArchiveDSN is the PostgreSQL database that keeps the record of every
	// finished run (--archive-postgres-dsn, or AGENTRUN_ARCHIVE_DSN); empty
	// archives nothing. It may hold a password: it is never logged.
	ArchiveDSN string
	// ArchiveTTL deletes archived records this long after their run ended
	// (--archive-ttl); zero keeps them.
	ArchiveTTL time.Duration
	// NotificationWebhook is the Secret key holding the webhook URL that
	// is told when a call waits for approval and when a run ends Escalated
	// (--notification-webhook-secret, NAMESPACE/NAME[/KEY]); empty sends
	// none, unless NamespaceNotifications.
	NotificationWebhook string
	// NamespaceNotifications reads each run's namespace's own
	// agentrun-notifications Secret (key webhookURL) first
	// (--namespace-notifications): a namespace may send its runs'
	// messages elsewhere, or nowhere. Those URLs go through the egress
	// policy of model and tool calls.
	NamespaceNotifications bool
	// ConsoleURL is the console's base URL that each message links to
	// (its inbox); empty leaves the link out.
	ConsoleURL string
}

// ValidateShard checks a shard's name: a DNS-1123 label (lowercase
// letters, digits and '-', at most 63), so it is a label value, part of
// the Lease's name and of the chart's Deployment's.
func ValidateShard(shard string) error {
	if shard == "" {
		return nil
	}
	if errs := validation.IsDNS1123Label(shard); len(errs) > 0 {
		return fmt.Errorf("shard %q: %s", shard, strings.Join(errs, "; "))
	}
	return nil
}

// LeaderElectionID is the Lease the replicas of one shard elect their
// leader with: replicas of different shards never wait on each other.
func LeaderElectionID(shard string) string {
	if shard == "" {
		return "agentrun.agents.agentrun.dev"
	}
	return "agentrun-shard-" + shard + ".agents.agentrun.dev"
}

// Run runs the operator until ctx ends. A stop asked for while it starts
// (ctx ended during a read it makes first) is a stop, not a failure, as
// it is for the manager once started.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	err := run(ctx, cfg, o)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

func run(ctx context.Context, cfg *rest.Config, o Options) error {
	if !o.LocalTools && o.OperatorImage == "" {
		return fmt.Errorf("an operator image is required unless job tools run locally")
	}
	if err := ValidateShard(o.Shard); err != nil {
		return err
	}
	cfg = rest.CopyConfig(cfg)
	// Every client built from cfg (the manager's, the clientset, the
	// impersonating ones) shares this one limit.
	clientObserved := newClientMetrics()
	limiter := newClientLimiter(o.QPS, o.Burst, clientObserved)
	if limiter != nil {
		cfg.RateLimiter = limiter
	} else {
		cfg.QPS, cfg.RateLimiter = -1, nil
	}
	if o.ProbeAddr == "" {
		o.ProbeAddr = "0"
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = "0"
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 kubescheme.Scheme,
		Metrics:                metricsOptions(o),
		HealthProbeBindAddress: o.ProbeAddr,
		LeaderElection:         o.LeaderElect,
		LeaderElectionID:       LeaderElectionID(o.Shard),
		// A replica that loses its lease exits at once (the manager's
		// default), so two replicas of a shard never drive a run together.
		Cache: cacheOptions(o.WatchNamespaces, o.Shard),
		// Controller names are unique per process for their metrics; a
		// process that starts the operator again (the dev environment's
		// tests) says so.
		Controller: config.Controller{SkipNameValidation: ptr.To(o.AgainInProcess)},
	})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	keysAt, err := KeysSecret(o.KeysSecret)
	if err != nil {
		return err
	}
	direct, err := client.New(cfg, client.Options{Scheme: kubescheme.Scheme})
	if err != nil {
		return err
	}
	keys, err := LoadKeys(ctx, direct, keysAt)
	if err != nil {
		return err
	}
	if err := PublishKeys(ctx, direct, keysAt, keys); err != nil {
		// The operator's own checks need only the keys: without the
		// public keys, the console tells people who may not read the
		// keys that it could not check transcripts.
		ctrl.Log.Error(err, "The console cannot check which transcript chunks the operator wrote")
	}
	recorder := mgr.GetEventRecorder("agentrun")
	secrets := NewRunSecrets(cfg)
	wakeups := job.NewWakeups()
	// The agent tools' calls wait on their child runs as job tools' calls
	// wait on their Jobs: the AgentRun informer wakes them.
	children := job.NewWakeups()
	// Runs' requests go through the operator's egress policy with what the
	// AgentRunPolicies selecting their namespace add (kit.Builder.Build);
	// notifications through the operator's alone.
	egressClients := egress.NewClients(egressPolicy(ctx, cfg.Host, o))
	egressed := egressClients.For(egress.Grant{})
	builder := &kit.Builder{
		Egress:       egressClients,
		LocalJobs:    o.LocalTools,
		LocalDir:     o.LocalDir,
		SecretsAs:    secrets.As,
		ConfigMapsAs: secrets.ConfigMapsAs,
		CheckSecret:  secrets.Check,
		Jobs: job.Config{Client: mgr.GetClient(), Pods: mgr.GetAPIReader(), Logs: job.NewPodLogReader(cs),
			OperatorImage: o.OperatorImage, Resources: o.ToolResources, NoNetworkPolicy: o.NoToolNetworkPolicy,
			RunAsUser: o.ToolRunAsUser, AssignedUser: o.ToolAssignedUser, Wakeups: wakeups, Keys: keys},
		Agents:        agent.Config{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Wakeups: children, InFlight: agent.NewInFlight()},
		Kube:          cfg,
		MaxReplyBytes: o.ModelMaxReplyBytes,
		CloudIdentity: o.CloudIdentity,
	}
	tp, shutdown, err := telemetry.Setup(ctx, "agentrun-operator")
	if err != nil {
		return err
	}
	defer func() {
		// Send the last spans, for at most a few seconds.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			ctrl.Log.Error(err, "Sending the last spans")
		}
	}()
	var store archive.Store
	var evaluations archive.Evaluations
	if o.ArchiveDSN != "" {
		// The operator writes, so it migrates the schema first (a reader
		// never does). A migration that rewrites a large table can take
		// minutes: an administrator can run agentrun archive migrate
		// before the upgrade instead.
		mctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		version, applied, err := archive.Migrate(mctx, o.ArchiveDSN)
		cancel()
		if err != nil {
			return fmt.Errorf("migrating the archive: %w", err)
		}
		ctrl.Log.Info("The archive's schema is up to date", "version", version, "applied", applied)
		octx, cancel := context.WithTimeout(ctx, time.Minute)
		pg, err := archive.Open(octx, o.ArchiveDSN)
		cancel()
		if err != nil {
			return fmt.Errorf("opening the archive: %w", err)
		}
		defer pg.Close()
		store, evaluations = pg, pg
		// Runs' memories (spec.memory) are kept in the same database.
		builder.Memory = pg
		if err := mgr.Add(memoryExpiry(pg)); err != nil {
			return err
		}
		if o.ArchiveTTL > 0 {
			if err := mgr.Add(archiveExpiry(pg, o.ArchiveTTL)); err != nil {
				return err
			}
		}
	}
	domain, budgetMetrics := controller.NewMetrics(), agentbudget.NewMetrics()
	scheduleMetrics := agentschedule.NewMetrics(domain.NamespaceLabel)
	// One book of AgentBudget writes for both reconcilers, so that each
	// reads the other's last write instead of conflicting with it.
	ledgers := budget.NewLedgers()
	notifier, err := notifierFor(o, mgr.GetAPIReader(), mgr.GetClient(), keys, egressed)
	if err != nil {
		return err
	}
	// The operator's metrics, served with controller-runtime's own until
	// this operator stops: unregistered then, so that the process can
	// start the operator again (AgainInProcess).
	unregister, err := register(metrics.Registry, served(clientObserved, domain, ledgers, budgetMetrics, scheduleMetrics, notifier))
	if err != nil {
		return err
	}
	defer unregister()
	if notifier != nil {
		if err := mgr.Add(notifier); err != nil {
			return err
		}
	}
	r := controller.NewAgentRunReconciler(controller.Config{Notifier: notifier, Archive: store, Ledgers: ledgers, Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder,
		Kits: builder, MaxConcurrentReconciles: o.Workers, TracerProvider: tp, Shard: o.Shard, Namespaces: o.WatchNamespaces,
		EventVerbosity: o.EventVerbosity, ToolJobs: job.Jobs{Client: mgr.GetClient(), Wakeups: wakeups}, ChildRuns: children, StatusInterval: statusInterval(o.StatusInterval), Keys: keys,
		AcceptUnstampedAnswers: o.AcceptUnstampedAnswers, DefaultTTLAfterFinished: o.DefaultTTLAfterFinished, Metrics: domain, Judges: builder.Judge})
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	if limiter != nil {
		limiter.setActive(r.ActiveRuns)
	}
	base := reconcilers.Base{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder}
	budgets := agentbudget.NewReconciler(agentbudget.Config{Base: base, Ledgers: ledgers, Metrics: budgetMetrics})
	if err := budgets.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&agentruntemplate.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	// Schedules are kept by the unsharded manager only: a sharded one sees
	// only its shard's runs, so it would miss a schedule's runs in other
	// shards, and two managers would both act on every scheduled time.
	if o.Shard == "" {
		schedules := agentschedule.NewReconciler(agentschedule.Config{Base: base, Metrics: scheduleMetrics})
		if err := schedules.SetupWithManager(mgr); err != nil {
			return err
		}
		// Evaluations too, for the same reason: an evaluation counts its
		// runs in every shard.
		if err := agentevaluation.NewReconciler(agentevaluation.Config{Base: base, Keys: keys, Judges: builder.Judge, Ledgers: ledgers,
			Archive: evaluations}).SetupWithManager(mgr); err != nil {
			return err
		}
		// MCP servers too: one listing of each server is enough.
		// Listings are bounded (mcpserver.DiscoveryTimeout) on workers of
		// their own, and read Secrets as each server's ServiceAccount.
		if err := mcpserver.NewReconciler(mcpserver.Config{Base: base, Connect: builder.MCPServer}).SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	ctrl.Log.Info("Starting the AgentRun operator", "shard", o.Shard, "stateKeys", keysAt.String(), "sealingKey", keys.Current(), "localTools", o.LocalTools, "workers", o.Workers, "traces", telemetry.Enabled(os.Getenv),
		"metricsSecure", o.MetricsSecure)
	return mgr.Start(ctx)
}

// notifierFor builds the notifier o asks for, or nil when it asks for
// none.
func notifierFor(o Options, reader client.Reader, cached client.Client, keys *seal.Keyring, egressed *http.Client) (*notify.Notifier, error) {
	def, err := notify.ParseSecretKey(o.NotificationWebhook)
	if err != nil {
		return nil, fmt.Errorf("--notification-webhook-secret: %w", err)
	}
	if def.Name == "" && !o.NamespaceNotifications {
		return nil, nil
	}
	res := &notify.SecretResolver{Reader: reader, Default: def, Namespaced: o.NamespaceNotifications,
		Client: &http.Client{}, TenantClient: egressed}
	n := notify.New(res.Resolve)
	n.ConsoleURL = strings.TrimSuffix(o.ConsoleURL, "/")
	// What is due and not delivered is kept on the runs themselves, so
	// that a restart loses nothing: listed from the cache at start and
	// every rescan (a template's resolved spec read live, as the
	// reconciler reads it), recorded on the run once a webhook accepted it.
	n.Pending, n.Delivered = controller.PendingNotifications(cached, reader, keys), controller.RecordDelivered(cached)
	n.Log = ctrl.Log.WithName("notifications")
	return n, nil
}

// egressPolicy is the policy of the requests the operator sends for runs:
// o's allowances, with the API server's addresses (cfg's host and the
// in-cluster Service) refused.
func egressPolicy(ctx context.Context, host string, o Options) *egress.Policy {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	api, err := egress.APIServer(lctx, host, os.Getenv)
	if err != nil {
		ctrl.Log.Error(err, "Some of the API server's addresses are unknown to the egress policy")
	}
	p := &egress.Policy{Allow: o.EgressAllow, AllowPrivate: o.EgressAllowPrivate, Protected: api}
	ctrl.Log.Info("Egress policy of model and tool calls", "allowCIDRs", fmt.Sprint(p.Allow), "allowPrivate", p.AllowPrivate,
		"apiServer", fmt.Sprint(p.Protected))
	return p
}

// cacheOptions limits the cache to the watched namespaces, if any, and
// the runs and Jobs to the shard's. Objects are cached without their
// managed fields: nothing in the operator reads them (the approver's name
// comes from the annotation the admission policy stamps), and for a run
// they are the field set of its whole spec again, a few KiB each.
func cacheOptions(namespaces []string, shard string) cache.Options {
	o := cache.Options{ByObject: controller.ShardCache(shard), DefaultTransform: cache.TransformStripManagedFields()}
	if len(namespaces) == 0 {
		return o
	}
	o.DefaultNamespaces = map[string]cache.Config{}
	for _, ns := range namespaces {
		o.DefaultNamespaces[ns] = cache.Config{}
	}
	return o
}

// metricsOptions serves metrics on o.MetricsAddr: over HTTPS behind
// authentication and authorization when o.MetricsSecure, else plain HTTP.
func metricsOptions(o Options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.MetricsSecure {
		m.SecureServing = true
		m.FilterProvider = filters.WithAuthenticationAndAuthorization
		if o.MetricsCertDir != "" {
			m.CertDir, m.CertName, m.KeyName = o.MetricsCertDir, "tls.crt", "tls.key"
		}
	}
	return m
}

// statusInterval is the reconciler's StatusInterval for the option's.
func statusInterval(d *time.Duration) time.Duration {
	if d == nil {
		return controller.DefaultStatusInterval
	}
	return max(*d, 0)
}

// memoryExpiry deletes the memories' expired entries (which are already
// neither recalled nor counted), hourly, on the leader only. It logs how
// many, never what they said.
func memoryExpiry(store *archive.Postgres) manager.Runnable {
	return hourly("memory entries", func(ctx context.Context, now time.Time) (int, error) {
		return store.ExpireMemories(ctx, now)
	})
}

// archiveExpiry deletes archived records older than ttl, hourly, on the
// leader only (one replica's deletes are enough).
func archiveExpiry(store archive.Store, ttl time.Duration) manager.Runnable {
	return hourly("archived runs", func(ctx context.Context, now time.Time) (int, error) {
		return store.Expire(ctx, now.Add(-ttl))
	})
}

// hourly runs expire at once and then every hour until the manager stops,
// logging its error or how many of what it deleted.
func hourly(what string, expire func(ctx context.Context, now time.Time) (int, error)) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		t := time.NewTicker(time.Hour)
		defer t.Stop()
		for {
			n, err := expire(ctx, time.Now())
			if err != nil {
				ctrl.Log.Error(err, "Expiring "+what)
			} else if n > 0 {
				ctrl.Log.Info("Expired "+what, "count", n)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
}
