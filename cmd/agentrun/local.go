package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/internal/localrun"
	"github.com/agentrun/agentrun/internal/telemetry"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/term"
)

const localLong = `local runs one AgentRun manifest with no cluster, with the operator's loop
engine. The manifest is checked with the AgentRun CRD's own schema and CEL
rules, so it is refused here exactly when the API server would refuse it.
Job tools run their command and args as local processes in the manifest's
directory (the image is not used); builtin kubernetes tools need a cluster
and are refused. The file may also hold v1 Secret documents, which
model.apiKeySecretRef and header valueFrom.secretKeyRef resolve against
(namespaces are ignored), and AgentRunTemplate documents, against which a
run's spec.templateRef is resolved.

Progress streams to standard output, one line per event. A call that asks
a person is asked on the terminal (approve / deny / stop); when standard
input is not a terminal, every such call is declined. Ctrl-C stops the run
at the next boundary (ApprovalDenied); a second Ctrl-C also stops the model
or tool call in flight.

Exit status, by outcome:
`

// stdinIsTerminal reports whether ASKs can be asked on stdin; tests
// replace it.
var stdinIsTerminal = func(stdin io.Reader) bool {
	f, ok := stdin.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func localCommand(code *int) *cobra.Command {
	var file, output string
	cmd := &cobra.Command{
		Use:   "local -f run.yaml [-o json]",
		Short: "Run one AgentRun manifest with no cluster",
		Long:  localLong + localrun.ExitCodeTable(),
		Example: `  agentrun local -f examples/local/double-charge.yaml
  agentrun local -f examples/local/double-charge.yaml -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := fileArgs(file, output, args, usageError); err != nil {
				return err
			}
			*code = runLocal(file, output == "json", cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError("%v", err) })
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the manifest to run (required)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json: print only the final status, as JSON, in the shape of the AgentRun's status, instead of the stream")
	return cmd
}

func runLocal(file string, asJSON bool, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop, tp, done, err := session(stderr, "agentrun local", "the call")
	if err != nil {
		fmt.Fprintf(stderr, "agentrun local: traces: %v\n", err)
		return localrun.ExitUsage
	}
	defer done()
	return localrun.Run(ctx, file, localrun.Options{
		TracerProvider: tp,
		JSON:           asJSON,
		Interactive:    stdinIsTerminal(stdin),
		Stdin:          stdin,
		Stdout:         stdout,
		Stderr:         stderr,
		Stop:           stop,
	})
}

// session is what agentrun local and agentrun eval run in: a context that
// a second interrupt (or SIGTERM) cancels, a channel the first closes (stop
// at the next boundary, start nothing more), and the tracer provider. done
// sends the spans, for at most a few seconds, and releases the signals.
// name is the command, for its messages; inFlight what a second interrupt
// stops.
func session(stderr io.Writer, name, inFlight string) (ctx context.Context, stop <-chan struct{}, tp trace.TracerProvider, done func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	stopping := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		for n := 0; ; n++ {
			select {
			case <-sigs:
			case <-ctx.Done():
				return
			}
			if n == 0 {
				fmt.Fprintf(stderr, "\n%s: stopping at the next boundary (interrupt again to stop %s in flight)\n", name, inFlight)
				close(stopping)
				continue
			}
			cancel()
			return
		}
	}()
	release := func() {
		signal.Stop(sigs)
		cancel()
	}
	tp, shutdown, err := telemetry.Setup(ctx, "agentrun")
	if err != nil {
		release()
		return nil, nil, nil, nil, err
	}
	done = func() {
		sctx, end := context.WithTimeout(context.Background(), 5*time.Second)
		defer end()
		if err := shutdown(sctx); err != nil {
			fmt.Fprintf(stderr, "%s: sending traces: %v\n", name, err)
		}
		release()
	}
	return ctx, stopping, tp, done, nil
}
