package console

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/agentrun/agentrun/internal/archive"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
)

// DefaultCAFile is where a pod finds its cluster's CA.
const DefaultCAFile = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

// DefaultKeysSecret is where the chart, installed as the README shows,
// keeps the operator's seal keys (its stateKeys.secretName in namespace
// agentrun-system).
const DefaultKeysSecret = "agentrun-system/agentrun-state-keys"

// Command is `kubectl agentrun console`. flags are kubectl's connection
// flags, shared with the plugin's other commands.
func Command(flags *genericclioptions.ConfigFlags) *cobra.Command {
	var (
		address   string
		port      int
		inCluster bool
		caFile    string
		keys      string
		dsn       string
	)
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console: runs, an approval inbox, templates, policies, the archive",
		Long: `console serves the AgentRun web console on this machine: every run you may
list, updating live; one run's phase, ceilings, timeline and transcript; an
inbox of the calls that wait for a person, with Approve, Deny and Stop; the
templates, schedules, evaluations, AgentRunPolicies and AgentBudgets; and,
with --archive-postgres-dsn, the archive of runs that ended and were deleted.

It uses your kubeconfig's credentials for everything: a page shows only what
you may read, and an answer is yours (the approve verb, the admission
policies and status.approvals[].by apply as with kubectl annotate). It
listens on 127.0.0.1 unless --address says otherwise. On every address it
serves only requests that carry its access token: a random one, new at
each start, in the URL it prints (?token=...), which the browser trades
for a cookie on its first visit. It answers only requests addressed to
localhost or to the address it listens on.

--in-cluster is how the chart runs it (console.enabled): there is no
kubeconfig, and each request must carry its user's bearer token (from an
authenticating proxy's Authorization header, or pasted once on the sign-in
page); the console's own ServiceAccount has no rights.

--archive-postgres-dsn (or $` + archive.DSNEnv + `) is the operator's archive,
read with a database role that may only SELECT. The console shows an archived
record only to a person the API server allows to get AgentRuns in the run's
namespace (it asks with a SelfSubjectAccessReview, as that person).`,
		Example: `  # Serve on 127.0.0.1:8080; open the URL it prints
  kubectl agentrun console

  # Another port, runs of one namespace when you may not list them all
  kubectl agentrun console --port 9090 -n billing`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := Options{PerRequestToken: inCluster}
			var err error
			if keys != "" {
				ns, name, ok := strings.Cut(keys, "/")
				if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
					return fmt.Errorf("--state-keys-secret %q: want NAMESPACE/NAME, as the operator's flag of that name", keys)
				}
				o.Keys = types.NamespacedName{Namespace: ns, Name: name}
			}
			if inCluster {
				o.Config, err = inClusterConfig(caFile)
			} else {
				o.Config, err = flags.ToRESTConfig()
				if err == nil {
					o.Namespace, _, err = flags.ToRawKubeConfigLoader().Namespace()
				}
			}
			if err != nil {
				return err
			}
			if dsn == "" {
				dsn = os.Getenv(archive.DSNEnv)
			}
			if dsn != "" {
				// Open changes nothing in the database, and its errors
				// never show the DSN.
				a, err := archive.Open(cmd.Context(), dsn)
				if err != nil {
					return fmt.Errorf("the archive: %w", err)
				}
				defer a.Close()
				o.Archive = a
			}
			return Serve(cmd.Context(), o, address, port, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "The address to listen on.")
	cmd.Flags().IntVar(&port, "port", 8080, "The port to listen on.")
	cmd.Flags().BoolVar(&inCluster, "in-cluster", false, "Run inside the cluster: no kubeconfig; every request must carry its user's bearer token.")
	cmd.Flags().StringVar(&keys, "state-keys-secret", DefaultKeysSecret, "NAMESPACE/NAME of the Secret holding the keys the operator seals runs' saved state with, as the operator's flag of that name: the run page reads the public keys the operator publishes beside it (ConfigMap NAME-public), with your credentials, to mark transcript parts the operator did not write. Empty: signatures are not checked.")
	cmd.Flags().StringVar(&dsn, "archive-postgres-dsn", "", "The archive of finished runs the archive page reads, as the operator's flag of that name (default $"+archive.DSNEnv+"; prefer the variable for a password). A role that may only SELECT is enough; each record is shown only to a person the API server allows to get AgentRuns in its namespace. Empty: no archive page.")
	cmd.Flags().StringVar(&caFile, "api-ca-file", DefaultCAFile, "With --in-cluster: the API server's CA bundle.")
	return cmd
}

// inClusterConfig reaches the API server from a pod with the user's token
// only: the host from the environment and the CA from caFile, never the
// pod's own ServiceAccount token.
func inClusterConfig(caFile string) (*rest.Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("--in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: this is not a pod")
	}
	if _, err := os.Stat(caFile); err != nil {
		return nil, fmt.Errorf("--in-cluster: the API server's CA: %w", err)
	}
	return &rest.Config{Host: "https://" + net.JoinHostPort(host, port), TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}}, nil
}
