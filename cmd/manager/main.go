// Command manager is the AgentRun operator.
//
// It has no way to run job tools as local processes: that development
// mode (`make dev`, `agentrun dev`) wires the operator in-process
// (internal/devenv), so a production manager cannot be switched into it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/operator"
	"github.com/agentrun/agentrun/internal/tools/job"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func main() {
	o, zo, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	} else if err != nil {
		os.Exit(2) // the flag package has printed the error and usage
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(zo)))

	cfg, err := ctrl.GetConfig()
	if err == nil {
		err = operator.Run(ctrl.SetupSignalHandler(), cfg, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
}

// parseFlags reads the manager's command line. There is deliberately no
// flag that runs job tools as local processes.
func parseFlags(args []string) (operator.Options, *zap.Options, error) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	var o operator.Options
	var qps float64
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "Address the metrics endpoint binds to; 0 disables it.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", true, "Serve metrics over HTTPS to authenticated and authorized callers only (get on /metrics); false serves plain HTTP to anyone.")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "Directory with tls.crt and tls.key for the metrics endpoint; empty means a self-signed certificate.")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "Address the health probes bind to.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "Elect a leader, so that only one replica (of the shard) drives runs.")
	fs.Func("default-ttl-seconds-after-finished", "Delete a finished AgentRun that sets no spec.ttlSecondsAfterFinished this many seconds after it ended, with its transcript Secrets and the objects made for it (0: as soon as it ends). Unset: keep finished runs.",
		func(v string) error {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 0 {
				return fmt.Errorf("want a whole number of seconds, 0 or more, not %q", v)
			}
			d := time.Duration(n) * time.Second
			o.DefaultTTLAfterFinished = &d
			return nil
		})
	fs.StringVar(&o.ArchiveDSN, "archive-postgres-dsn", os.Getenv("AGENTRUN_ARCHIVE_DSN"), "PostgreSQL database (URL or key=value DSN) that keeps the record of every finished run (a run is deleted only once its record is written) and the runs' memories (spec.memory). Empty: no archive, and runs that set spec.memory are refused. Prefer the AGENTRUN_ARCHIVE_DSN environment variable, which this defaults to: a flag shows in the process list.")
	fs.DurationVar(&o.ArchiveTTL, "archive-ttl", 0, "Delete archived records this long after their run ended (for example 2160h); 0 keeps them.")
	fs.StringVar(&o.NotificationWebhook, "notification-webhook-secret", "", "NAMESPACE/NAME[/KEY] of the Secret key (default key url) holding the webhook URL told when a call waits for approval and when a run ends Escalated; empty sends none. The URL is never logged.")
	fs.BoolVar(&o.NamespaceNotifications, "namespace-notifications", false, "Read each run's namespace's own Secret agentrun-notifications (key webhookURL; empty sends nothing) before --notification-webhook-secret; those URLs go through the egress policy of model and tool calls.")
	fs.StringVar(&o.ConsoleURL, "console-url", "http://127.0.0.1:8080", "Base URL of the console that notifications link to (its inbox); empty leaves the link out.")
	fs.BoolVar(&o.AcceptUnstampedAnswers, "accept-unstamped-answers", false, "Apply approval answers that carry no approved-by stamp, whose author the API server did not record (the admission policy agentrun-approver-identity is not installed). Off, such an answer is not applied and the run gets a Warning event.")
	fs.StringVar(&o.KeysSecret, "state-keys-secret", "", "NAMESPACE/NAME of the Secret holding the keys that seal runs' saved state (created with a fresh key when missing); empty means "+operator.DefaultKeysSecret+" in the operator's namespace (POD_NAMESPACE).")
	fs.StringVar(&o.Shard, "shard", "", "Drive only the AgentRuns labelled "+v1alpha1.LabelShard+"=SHARD (and their Jobs), electing a leader per shard; empty drives the runs without the label.")
	fs.StringVar(&o.OperatorImage, "operator-image", os.Getenv("AGENTRUN_OPERATOR_IMAGE"), "Image whose agentrun-entrypoint binary tool Jobs copy in.")
	fs.Func("event-verbosity", "Which of a run's notes become events: turn (one per turn, the model's answer, plus warnings, approvals, plans and the outcome) or call (also each turn's start and every call's verdict and result).",
		func(s string) error {
			v, err := controller.ParseEventVerbosity(s)
			o.EventVerbosity = v
			return err
		})
	fs.IntVar(&o.Workers, "max-concurrent-reconciles", 8, "Reconcile workers (model and tool calls never run on one; one waits at most 20 ms for tools that end at once).")
	fs.Float64Var(&qps, "kube-api-qps", 0, fmt.Sprintf("Queries per second to the API server; 0 adapts to the runs in flight (%d per run, between %d and %d), a negative value sets no client-side limit.",
		operator.DefaultQPSPerRun, operator.DefaultMinQPS, operator.DefaultMaxQPS))
	fs.IntVar(&o.Burst, "kube-api-burst", 0, "Burst of queries to the API server; 0 means twice the rate.")
	fs.Func("watch-namespaces", "Comma-separated namespaces the operator watches and acts in (its cache holds only those); empty means all.",
		func(s string) error {
			for ns := range strings.SplitSeq(s, ",") {
				if ns = strings.TrimSpace(ns); ns != "" {
					o.WatchNamespaces = append(o.WatchNamespaces, ns)
				}
			}
			return nil
		})
	resources := func(name string, into *corev1.ResourceList, def corev1.ResourceList, what string) {
		fs.Func(name, what+", as name=quantity pairs (default "+format(def)+"); an empty value sets none.", func(s string) error {
			l, err := job.ParseResourceList(s)
			*into = l
			return err
		})
	}
	resources("tool-default-requests", &o.ToolResources.Requests, job.DefaultRequests, "Requests of a tool container that its manifest leaves out")
	resources("tool-default-limits", &o.ToolResources.Limits, job.DefaultLimits, "Limits of a tool container that its manifest leaves out")
	resources("tool-max-resources", &o.ToolResources.Max, job.DefaultMax, "Caps on every request and limit of a tool container; a tool asking more is refused")
	o.StatusInterval = fs.Duration("status-interval", controller.DefaultStatusInterval, "How far a run's status may fall behind its saved progress: a save that changes only the turn, usage and checkpoint keeps the checkpoint in the run's transcript Secret, and status is written within this interval (a change of phase, condition, approvals or outcome at once); 0 writes status at every save.")
	fs.Func("cloud-identity", "Comma-separated providers (bedrock, vertex, azure, gemini) whose runs may call as the operator's own cloud identity (IRSA or EKS Pod Identity, GKE Workload Identity, Azure Workload Identity) when they name no API key; empty lends it to none, and such a run fails to start.",
		func(s string) error {
			o.CloudIdentity = nil
			for _, p := range strings.Split(s, ",") {
				switch p = strings.TrimSpace(p); v1alpha1.ModelProvider(p) {
				case "":
				case v1alpha1.ProviderBedrock, v1alpha1.ProviderVertex, v1alpha1.ProviderAzure, v1alpha1.ProviderGemini:
					o.CloudIdentity = append(o.CloudIdentity, v1alpha1.ModelProvider(p))
				default:
					return fmt.Errorf("%q is not a provider with a cloud identity (bedrock, vertex, azure, gemini)", p)
				}
			}
			return nil
		})
	o.ModelMaxReplyBytes = model.DefaultMaxReplyBytes
	fs.Func("model-max-reply-bytes", fmt.Sprintf("The largest response body a model provider's call reads, in bytes or as a quantity such as 8Mi (default %s): a run's model.baseURL is its author's choice, and a larger reply or error body ends that run (ToolFailure, not retried) instead of filling the operator's memory.",
		resource.NewQuantity(model.DefaultMaxReplyBytes, resource.BinarySI)),
		func(s string) error {
			q, err := resource.ParseQuantity(s)
			if err != nil {
				return err
			}
			n, ok := q.AsInt64()
			if !ok || n <= 0 {
				return fmt.Errorf("%s is not a positive whole number of bytes", s)
			}
			o.ModelMaxReplyBytes = n
			return nil
		})
	fs.Func("egress-allow-cidrs", "Comma-separated CIDRs or addresses that the model calls and HTTP and MCP tools of every namespace's runs may reach although the egress policy refuses their kind (loopback, link-local, private); the cloud metadata addresses and the API server only by an entry of exactly their address (169.254.169.254/32). An AgentRunPolicy's spec.egress adds to it for the namespaces it selects.",
		func(s string) error {
			p, err := egress.ParseCIDRs(s)
			o.EgressAllow = append(o.EgressAllow, p...)
			return err
		})
	fs.BoolVar(&o.EgressAllowPrivate, "egress-allow-private", false, "Let the model calls and HTTP and MCP tools of every namespace's runs reach private addresses (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fc00::/7); the cloud metadata addresses stay refused.")
	fs.Func("tool-run-as-user", "The uid tool pods run as (default 65532), or \"assigned\" to leave runAsUser, runAsGroup and fsGroup unset for the platform to assign, as OpenShift's restricted-v2 SecurityContextConstraints require.",
		func(s string) error {
			if s == "assigned" {
				o.ToolRunAsUser, o.ToolAssignedUser = 0, true
				return nil
			}
			uid, err := strconv.ParseInt(s, 10, 64)
			if err != nil || uid < 1 {
				return fmt.Errorf("%q is neither a non-root uid (1 or more) nor \"assigned\"", s)
			}
			o.ToolRunAsUser, o.ToolAssignedUser = uid, false
			return nil
		})
	networkPolicy := fs.Bool("tool-network-policy", true, "Confine each job tool's pods with a NetworkPolicy: no ingress, egress only to DNS and the tool's egress list.")
	zo := &zap.Options{}
	zo.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, nil, err
	}
	if err := operator.ValidateShard(o.Shard); err != nil {
		fmt.Fprintln(fs.Output(), "manager: --shard:", err)
		return o, nil, err
	}
	o.QPS = float32(qps)
	o.NoToolNetworkPolicy = !*networkPolicy
	return o, zo, nil
}

func format(l corev1.ResourceList) string {
	var parts []string
	for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		if q, ok := l[n]; ok {
			parts = append(parts, string(n)+"="+q.String())
		}
	}
	return strings.Join(parts, ",")
}
