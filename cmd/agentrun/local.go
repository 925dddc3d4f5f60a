package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/internal/localrun"
	"github.com/agentrun/agentrun/internal/telemetry"
	"golang.org/x/term"
)

const localUsage = `Usage: agentrun local -f run.yaml [-o json]

Runs one AgentRun manifest with no cluster, with the operator's loop
engine. Job tools run their command and args as local processes in the
manifest's directory (the image is not used); builtin kubernetes tools
need a cluster and are refused. The file may also hold v1 Secret documents,
which model.apiKeySecretRef and header valueFrom.secretKeyRef resolve
against (namespaces are ignored).

Progress streams to standard output, one line per event. A call that asks
a person is asked on the terminal (approve / deny / stop); when standard
input is not a terminal, every such call is declined. Ctrl-C stops the run
at the next boundary (ApprovalDenied); a second Ctrl-C also stops the model
or tool call in flight.

Flags:
  -f FILE   the manifest to run (required)
  -o json   print only the final status, as JSON, in the shape of the
            AgentRun's status, instead of the stream

Exit status, by outcome:
`

// stdinIsTerminal reports whether ASKs can be asked on stdin; tests
// replace it.
var stdinIsTerminal = func(stdin io.Reader) bool {
	f, ok := stdin.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// localCmd is `agentrun local`. It returns the exit status.
func localCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("local", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, localUsage+localrun.ExitCodeTable()) }
	file := fs.String("f", "", "the manifest to run")
	output := fs.String("o", "", "output format: json, or empty for the stream")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return localrun.ExitUsage
	}
	switch {
	case *file == "":
		fmt.Fprintln(stderr, "agentrun local: -f FILE is required")
	case *output != "" && *output != "json":
		fmt.Fprintf(stderr, "agentrun local: -o %q: the only output format is json\n", *output)
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "agentrun local: unexpected argument %q\n", fs.Arg(0))
	default:
		return runLocal(*file, *output == "json", stdin, stdout, stderr)
	}
	fs.Usage()
	return localrun.ExitUsage
}

func runLocal(file string, asJSON bool, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		// The first signal stops the run at the next boundary; the second
		// also stops what is in flight.
		for n := 0; ; n++ {
			select {
			case <-sigs:
			case <-ctx.Done():
				return
			}
			if n == 0 {
				fmt.Fprintln(stderr, "\nagentrun local: stopping at the next boundary (interrupt again to stop the call in flight)")
				close(stop)
				continue
			}
			cancel()
			return
		}
	}()
	tp, shutdown, err := telemetry.Setup(ctx, "agentrun")
	if err != nil {
		fmt.Fprintf(stderr, "agentrun local: traces: %v\n", err)
		return localrun.ExitUsage
	}
	defer func() {
		// Send the run's spans before exiting, for at most a few seconds.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			fmt.Fprintf(stderr, "agentrun local: sending traces: %v\n", err)
		}
	}()
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
