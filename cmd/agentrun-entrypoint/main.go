// Command agentrun-entrypoint wraps a job tool's process inside its pod. See
// package internal/tools/job/entrypoint for the contract it keeps.
//
//	agentrun-entrypoint install DST                    copy this binary to DST (the init container)
//	agentrun-entrypoint [--timeout=D] -- COMMAND [ARGS] run the tool (the tool container)
//
// Build it static (CGO_ENABLED=0): it runs in images it knows nothing about.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/internal/tools/job/entrypoint"
)

const usage = `usage:
  agentrun-entrypoint install DST
  agentrun-entrypoint [--timeout=DURATION] -- COMMAND [ARGS...]
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 2 && args[0] == "install" {
		if err := entrypoint.Install(args[1]); err != nil {
			fmt.Fprintf(os.Stderr, "agentrun-entrypoint: %v\n", err)
			return 1
		}
		return 0
	}
	var timeout time.Duration
	for len(args) > 0 && args[0] != "--" {
		v, ok := strings.CutPrefix(args[0], "--timeout=")
		d, err := time.ParseDuration(v)
		if !ok || err != nil || d < 0 {
			fmt.Fprint(os.Stderr, usage)
			return 2
		}
		timeout, args = d, args[1:]
	}
	if len(args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	return entrypoint.Run(context.Background(), entrypoint.Config{
		Argv:            args[1:],
		Env:             os.Environ(),
		Stdout:          os.Stdout,
		Diagnostics:     os.Stderr,
		TerminationPath: terminationPath(),
		Signals:         sigs,
		Timeout:         timeout,
	})
}

// terminationPath lets a test or a pod with a custom terminationMessagePath
// say where the summary goes.
func terminationPath() string {
	if p := os.Getenv("AGENTRUN_TERMINATION_PATH"); p != "" {
		return p
	}
	return entrypoint.DefaultTerminationPath
}
