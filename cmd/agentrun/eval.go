package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/evaluation"
	"github.com/agentrun/agentrun/internal/localeval"
	"github.com/agentrun/agentrun/internal/safeterm"
	"github.com/spf13/cobra"
)

// The exit statuses of agentrun eval, for a CI job to gate on.
const (
	evalPassed = 0 // every run of every case passed
	evalFailed = 1 // a run missed an expectation, or did not run
	evalUsage  = 2 // a usage error or a manifest that cannot be read: nothing ran
)

const evalLong = `eval runs an AgentEvaluation with no cluster, as agentrun local runs an
AgentRun. The file given with -f holds the AgentEvaluation, and may hold the
AgentRunTemplate it names, v1 Secrets and v1 ConfigMaps; each -t file adds
the AgentRunTemplates, Secrets and ConfigMaps it holds (its other documents
are ignored). Every run of every case is made from the template with the
case's parameters, as the operator makes it, and checked before any runs.
The runs go at most spec.concurrency at once, job tools as local processes
in the evaluation file's directory; a call that would ask a person is
declined, as agentrun local declines it with no terminal. Each run is scored
against its case's expect as the operator scores it.

Progress goes to standard error, a line as each run ends; the report to
standard output: a table of the cases (runs, passed, failed, cost, the turns
of each Completed run, the first failure's reason) and the totals, or with
-o json the AgentEvaluation's status as the operator would write it.
--junit FILE also writes a JUnit XML report, a testcase for every case and
repeat, for a CI system to show.

Exit status:
  0  every run of every case passed
  1  a run failed its case (or was interrupted)
  2  a usage error, or a manifest that cannot be read or run: nothing ran
`

func evalCommand(code *int) *cobra.Command {
	var file, output, junit string
	var templates []string
	usage := func(format string, a ...any) error {
		return usageErr{error: fmt.Errorf(format, a...), code: evalUsage}
	}
	cmd := &cobra.Command{
		Use:   "eval -f evaluation.yaml [-t template.yaml ...] [-o json] [--junit FILE]",
		Short: "Run an AgentEvaluation with no cluster and score its runs",
		Long:  evalLong,
		Example: `  agentrun eval -f config/samples/15-evaluation.yaml -t config/samples/12-template.yaml
  agentrun eval -f evaluation.yaml --junit report.xml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := fileArgs(file, output, args, usage); err != nil {
				return err
			}
			*code = runEval(file, templates, output == "json", junit, cmd.OutOrStdout(), cmd.ErrOrStderr())
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage("%v", err) })
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the AgentEvaluation to run (required)")
	cmd.Flags().StringArrayVarP(&templates, "template", "t", nil, "a file of AgentRunTemplates (and Secrets, ConfigMaps) the evaluation uses; may be repeated")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json: print the AgentEvaluation's status, as JSON, instead of the table")
	cmd.Flags().StringVar(&junit, "junit", "", "also write a JUnit XML report to this file")
	return cmd
}

func runEval(file string, templates []string, asJSON bool, junit string, stdout, stderr io.Writer) int {
	// Models and tools write into reasons and progress: nothing they say
	// may drive the terminal.
	stdout, stderr = safeterm.Writer(stdout), safeterm.Writer(stderr)
	plan, err := localeval.Load(file, templates)
	if err != nil {
		fmt.Fprintf(stderr, "agentrun eval: %v\n", err)
		return evalUsage
	}
	ctx, stop, tp, done, err := session(stderr, "agentrun eval", "the calls")
	if err != nil {
		fmt.Fprintf(stderr, "agentrun eval: traces: %v\n", err)
		return evalUsage
	}
	defer done()
	e := plan.Evaluation
	variants := evaluation.Variants(e)
	var from []string
	for _, v := range variants {
		if v.Name == "" {
			from = append(from, "AgentRunTemplate "+v.TemplateRef.Name)
		} else {
			from = append(from, fmt.Sprintf("variant %s (AgentRunTemplate %s)", v.Name, v.TemplateRef.Name))
		}
	}
	fmt.Fprintf(stderr, "Running AgentEvaluation %s: %d runs (%d cases, repeats %d), at most %d at once, made from %s\n",
		e.Name, int32(len(variants)*len(evaluation.Cases(e)))*max(e.Spec.Repeats, 1), len(evaluation.Cases(e)), max(e.Spec.Repeats, 1), max(e.Spec.Concurrency, 1),
		strings.Join(from, ", "))
	res, err := plan.Run(ctx, localeval.Options{Progress: stderr, Stderr: stderr, TracerProvider: tp, Stop: stop})
	if err != nil {
		fmt.Fprintf(stderr, "agentrun eval: %s: %v\n", file, err)
		return evalUsage
	}
	if junit != "" {
		if err := writeJUnit(junit, res); err != nil {
			fmt.Fprintf(stderr, "agentrun eval: --junit: %v\n", err)
			return evalUsage
		}
	}
	if asJSON {
		b, _ := json.MarshalIndent(res.Evaluation.Status, "", "  ") // a status always marshals
		fmt.Fprintf(stdout, "%s\n", b)
	} else if err := evaluation.WriteTable(stdout, res.Evaluation); err != nil {
		fmt.Fprintf(stderr, "agentrun eval: %v\n", err)
	}
	if res.Evaluation.Status.Phase != v1alpha1.EvaluationPassed {
		return evalFailed
	}
	return evalPassed
}

func writeJUnit(path string, res *localeval.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := evaluation.WriteJUnit(f, res.Evaluation, res.Reasons); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
