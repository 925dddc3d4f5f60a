// Package plugin is the kubectl plugin kubectl-agentrun: commands that
// create a run from a template or from an earlier run, answer pending
// calls, cancel a run, print its transcript or its tree of child runs,
// follow it to its end, and print an AgentEvaluation's report.
//
// Every command works over the same annotations and fields a person could
// set with kubectl itself (see "Approving a step" in the API contract); the
// plugin adds the checks and the reading that make them pleasant: it refuses
// to answer a call that is not waiting, and it reassembles the transcript
// from the run's chunk Secrets and its checkpoint.
//
// What a command does to a run (answer, cancel) is package runclient's,
// which the web console shares and which returns what happened as values;
// the functions here print those values. They take a controller-runtime
// client and an io.Writer so they can be tested against a real API server;
// NewCommand wires them to cobra and kubectl's usual connection flags.
package plugin

import (
	"context"
	"fmt"
	"io"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runclient"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldManager is the field manager of every write the plugin makes.
const FieldManager = runclient.FieldManager

// Ref names one AgentRun.
type Ref = runclient.Ref

// ExitError carries the exit status a command wants without an error
// message of its own (watch ends 1 when a run did not complete).
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// getRun and explain are runclient's, for the commands that read runs.
func getRun(ctx context.Context, c client.Reader, ref Ref) (*v1alpha1.AgentRun, error) {
	return runclient.Get(ctx, c, ref)
}

func explain(err error, ref Ref) error { return runclient.Explain(err, ref) }

// printGoal starts what transcript and watch print: the goal. A follow-up
// first names the run it continues (with that run's outcome, once the
// operator has read it: status.continuedFrom). A run made from a template
// names the template and the parameters given, then the goal the operator
// resolved from them (status.template.goal), once it has. It reports
// whether it printed the goal.
func printGoal(w io.Writer, run *v1alpha1.AgentRun) bool {
	if ref := run.Spec.ContinueFrom; ref != nil {
		printf(w, "continued from: %s", ref.Name)
		if c := run.Status.ContinuedFrom; c != nil && c.Name == ref.Name {
			archived := ""
			if c.Archived {
				archived = ", read from the archive"
			}
			printf(w, " (%s%s)", c.Outcome, archived)
		}
		printf(w, "\n")
	}
	if ref := run.Spec.TemplateRef; ref != nil {
		printf(w, "template: %s", ref.Name)
		for _, p := range run.Spec.Parameters {
			printf(w, " %s=%q", p.Name, p.Value)
		}
		printf(w, "\n")
	}
	goal := run.Goal()
	if goal == "" && run.Spec.TemplateRef != nil {
		return false
	}
	printf(w, "goal: %s\n", indent(goal))
	return true
}

// printf writes to w; output errors of a terminal are not worth failing for.
func printf(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format, args...)
}
