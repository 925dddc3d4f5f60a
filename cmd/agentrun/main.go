// Command agentrun runs AgentRuns without an operator deployment:
//
//	agentrun local -f run.yaml   one manifest, no cluster, tools as local processes
//	agentrun dev                 a local control plane with the operator (make dev)
//	agentrun demo                the same, applying config/samples and checking outcomes (make demo)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/internal/devenv"
	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

const usage = `agentrun runs LLM agents declared as AgentRun manifests.

Usage:
  agentrun local -f run.yaml [-o json]   run one manifest with no cluster
  agentrun dev [--kubeconfig .dev/kubeconfig]
                                         start a local control plane and the operator
  agentrun demo [--samples config/samples] [--timeout 2m]
                                         run the samples and check their outcomes

Run "agentrun <command> -h" for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(1)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "local":
		os.Exit(localCmd(args, os.Stdin, os.Stdout, os.Stderr))
	case "dev":
		os.Exit(devCmd(args, os.Stdout, os.Stderr))
	case "demo":
		os.Exit(demoCmd(args, os.Stdout, os.Stderr))
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "agentrun: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(1)
	}
}

func devCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", ".dev/kubeconfig", "Where to write the kubeconfig of the local control plane.")
	verbose := fs.Bool("v", false, "Show the operator's log.")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	setLogger(*verbose, stderr)
	fmt.Fprintln(stdout, "Starting etcd, kube-apiserver and the AgentRun operator (job tools run as local processes)...")
	env, err := devenv.Start(*kubeconfig, "")
	if err != nil {
		fmt.Fprintln(stderr, "agentrun dev:", err)
		return 1
	}
	defer env.Stop()
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

func demoCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	samples := fs.String("samples", "config/samples", "Directory of sample manifests to apply.")
	kubeconfig := fs.String("kubeconfig", ".dev/kubeconfig", "Where to write the kubeconfig of the local control plane.")
	timeout := fs.Duration("timeout", 2*time.Minute, "How long the samples may take.")
	verbose := fs.Bool("v", false, "Show the operator's log.")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	setLogger(*verbose, stderr)
	start := time.Now()
	env, err := devenv.Start(*kubeconfig, "")
	if err != nil {
		fmt.Fprintln(stderr, "agentrun demo:", err)
		return 1
	}
	defer env.Stop()
	fmt.Fprintf(stdout, "Local control plane and operator ready in %s.\n", time.Since(start).Round(100*time.Millisecond))
	c, err := client.New(env.Config, client.Options{Scheme: kubescheme.Scheme})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	keys, err := devenv.Apply(ctx, c, *samples, "default")
	if err != nil {
		fmt.Fprintln(stderr, "agentrun demo:", err)
		return 1
	}
	fmt.Fprintf(stdout, "Applied %d AgentRuns from %s.\n\n", len(keys), *samples)
	results, err := devenv.Watch(ctx, c, keys, stdout, *timeout)
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
