// Command agentrun runs AgentRuns without an operator deployment:
//
//	agentrun local -f run.yaml   one manifest, no cluster, tools as local processes
//	agentrun eval -f evaluation.yaml   an AgentEvaluation, the same way, scored
//	agentrun dev                 a local control plane with the operator (make dev)
//	agentrun demo                the same, applying config/samples and checking outcomes (make demo)
//	agentrun archive list|show|transcript   finished runs kept in PostgreSQL by the operator
//	agentrun version             what this binary was built from
//
// Its commands are built with cobra, as the kubectl plugin's are.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/internal/devenv"
	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/agentrun/agentrun/internal/localrun"
	"github.com/agentrun/agentrun/internal/version"
	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// execute runs the command line args and returns the exit status: the
// outcome's for local (see its help), 1 for a usage error.
func execute(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	code := 0
	root := newRootCommand(stdin, stdout, stderr, &code)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
		if u, ok := err.(usageErr); ok {
			fmt.Fprint(stderr, "\n"+cmd.UsageString())
			if u.code != 0 {
				return u.code
			}
		} else if !cmd.HasParent() {
			fmt.Fprintln(stderr, `Run "agentrun --help" for the commands.`)
		}
		return localrun.ExitUsage
	}
	return code
}

// newRootCommand builds the command tree; a command that finishes sets
// *code to its exit status.
func newRootCommand(stdin io.Reader, stdout, stderr io.Writer, code *int) *cobra.Command {
	root := &cobra.Command{
		Use:   "agentrun",
		Short: "Run LLM agents declared as AgentRun manifests",
		Long: `agentrun runs LLM agents declared as AgentRun manifests, without an operator
deployment: one manifest with no cluster at all (local), an AgentEvaluation
the same way (eval), or a local control
plane with the operator (dev, and demo, which applies the samples and checks
their outcomes). archive reads the records of finished runs that the operator
keeps in PostgreSQL.`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(localCommand(code), evalCommand(code), devCommand(code), demoCommand(code), archiveCommand(), version.Command())
	return root
}

// usageErr is a wrong flag or argument: the command's usage follows it.
// code is the exit status, localrun.ExitUsage when zero.
type usageErr struct {
	error
	code int
}

func usageError(format string, a ...any) error { return usageErr{error: fmt.Errorf(format, a...)} }

// fileArgs refuses, through usage, what agentrun local and agentrun eval
// cannot run: no -f, an -o other than json, or an argument.
func fileArgs(file, output string, args []string, usage func(format string, a ...any) error) error {
	switch {
	case file == "":
		return usage("-f FILE is required")
	case output != "" && output != "json":
		return usage("-o %q: the only output format is json", output)
	case len(args) > 0:
		return usage("unexpected argument %q", args[0])
	}
	return nil
}

func devCommand(code *int) *cobra.Command {
	var kubeconfig string
	var verbose bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Start etcd, kube-apiserver and the operator on this machine (make dev)",
		Long: `dev starts etcd, kube-apiserver and the AgentRun operator on this machine, with
job tools run as local processes, writes a kubeconfig, and runs until Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			*code = dev(kubeconfig, verbose, cmd.OutOrStdout(), cmd.ErrOrStderr())
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", ".dev/kubeconfig", "where to write the kubeconfig of the local control plane")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "show the operator's log")
	return cmd
}

func dev(kubeconfig string, verbose bool, stdout, stderr io.Writer) int {
	setLogger(verbose, stderr)
	fmt.Fprintln(stdout, "Starting etcd, kube-apiserver and the AgentRun operator (job tools run as local processes)...")
	env, stopEnv, ok := startControlPlane("dev", kubeconfig, stderr)
	if !ok {
		return 1
	}
	defer stopEnv()
	fmt.Fprintf(stdout, `Ready. In another terminal:

  export KUBECONFIG=%s
  kubectl apply -f config/samples/01-double-charge.yaml
  kubectl get ar -w

Press Ctrl-C to stop.
`, env.Kubeconfig)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Fprintln(stdout, "Stopping.")
	return 0
}

// startControlPlane starts the local control plane and operator of
// command's make target, or says why it could not; stop stops them, saying
// what went wrong.
func startControlPlane(command, kubeconfig string, stderr io.Writer) (env *devenv.Env, stop func(), ok bool) {
	env, err := devenv.Start(kubeconfig, "")
	if err != nil {
		fmt.Fprintf(stderr, "agentrun %s: %v\n", command, err)
		return nil, nil, false
	}
	return env, func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(stderr, "agentrun: stopping the local control plane:", err)
		}
	}, true
}

func demoCommand(code *int) *cobra.Command {
	var samples, kubeconfig string
	var timeout time.Duration
	var verbose bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Apply the samples to a fresh local control plane and check their outcomes (make demo)",
		Long: `demo starts a local control plane with the operator, applies every sample
manifest, follows the runs and checks that each ends as its manifest expects.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			*code = demo(samples, kubeconfig, timeout, verbose, cmd.OutOrStdout(), cmd.ErrOrStderr())
			return nil
		},
	}
	cmd.Flags().StringVar(&samples, "samples", "config/samples", "directory of sample manifests to apply")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", ".dev/kubeconfig", "where to write the kubeconfig of the local control plane")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long the samples may take")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "show the operator's log")
	return cmd
}

func demo(samples, kubeconfig string, timeout time.Duration, verbose bool, stdout, stderr io.Writer) int {
	setLogger(verbose, stderr)
	start := time.Now()
	env, stopEnv, ok := startControlPlane("demo", kubeconfig, stderr)
	if !ok {
		return 1
	}
	defer stopEnv()
	fmt.Fprintf(stdout, "Local control plane and operator ready in %s.\n", time.Since(start).Round(100*time.Millisecond))
	c, err := client.New(env.Config, client.Options{Scheme: kubescheme.Scheme})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	keys, err := devenv.Apply(ctx, c, samples, "default")
	if err != nil {
		fmt.Fprintln(stderr, "agentrun demo:", err)
		return 1
	}
	runs, schedules := 0, 0
	for _, k := range keys {
		switch {
		case k.Schedule:
			schedules++
		case !k.Evaluation:
			runs++
		}
	}
	fmt.Fprintf(stdout, "Applied %d AgentRuns, %d AgentSchedules and %d AgentEvaluations from %s.\n\n", runs, schedules, len(keys)-runs-schedules, samples)
	results, err := devenv.Watch(ctx, c, keys, stdout, timeout)
	if err != nil {
		fmt.Fprintln(stderr, "agentrun demo:", err)
		return 1
	}
	fmt.Fprintln(stdout)
	devenv.Print(stdout, results)
	for _, r := range results {
		if !r.OK() {
			fmt.Fprintf(stdout, "\nSome samples did not end as expected (%s).\n", time.Since(start).Round(100*time.Millisecond))
			return 1
		}
	}
	fmt.Fprintf(stdout, "\nEvery sample ended as its manifest expects (%s).\n", time.Since(start).Round(100*time.Millisecond))
	return 0
}

func setLogger(verbose bool, w io.Writer) {
	if verbose {
		ctrl.SetLogger(zap.New(zap.WriteTo(w)))
		return
	}
	ctrl.SetLogger(logr.Discard())
}
