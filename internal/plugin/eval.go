package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/evaluation"
	"github.com/agentrun/agentrun/internal/safeterm"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Eval prints the report of the AgentEvaluation ref from its status, as
// agentrun eval prints the report of one it ran: the table of its cases
// (format text) or its status (json). junit, when not nil, receives the
// JUnit XML report. It returns an *ExitError with code 1 when the
// evaluation ended Failed or Regressed.
func Eval(ctx context.Context, c client.Reader, ref Ref, format string, w, junit io.Writer) error {
	if err := textOrJSON(format); err != nil {
		return err
	}
	e := &v1alpha1.AgentEvaluation{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, e); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("agentevaluation %q not found in namespace %q", ref.Name, ref.Namespace)
		}
		return err
	}
	if junit != nil {
		// Status keeps the reason of each case's first failed run.
		if err := evaluation.WriteJUnit(junit, e, nil); err != nil {
			return err
		}
	}
	if format == OutputJSON {
		b, err := json.MarshalIndent(e.Status, "", "  ")
		if err != nil {
			return err
		}
		printf(w, "%s\n", b)
	} else if err := evaluation.WriteTable(safeterm.Writer(w), e); err != nil {
		return err
	}
	if e.Status.Phase == v1alpha1.EvaluationFailed || e.Status.Phase == v1alpha1.EvaluationRegressed {
		return &ExitError{Code: 1}
	}
	return nil
}

func evalCommand(f *factory) *cobra.Command {
	output := OutputText
	var junit string
	cmd := &cobra.Command{
		Use:   "eval NAME",
		Short: "Print an AgentEvaluation's report: its cases, pass rate, cost and turns",
		Long: `eval prints the report of the AgentEvaluation NAME from its status, the same
report agentrun eval prints of an evaluation it runs with no cluster: a row a
case with its runs, how many passed and failed, what they spent, the turns of
each run that Completed, the deepest repeated intent, the median headroom
left, the judge's mean score and why the case's first failed run failed;
then the totals and how the evaluation ended:

  CASE           RUNS  PASSED  FAILED  COST     TURNS         DEPTH  HEADROOM  JUDGE  REASON
  double-charge  1     1       0       $0.0036  1             -      0.67      -
  formal-reply   1     0       1       $0.0036  1             -      0.67      -      answer[0]: expected ...
  TOTAL          2     1       1       $0.0072  p50 1, p95 1  -      0.67      -

  Failed: 1 of 2 runs passed (pass rate 0.50)

-o json prints the evaluation's status. --junit FILE also writes a JUnit XML
report, a testcase for every case and repeat (a failure's message is its
reason; status keeps the reason of each case's first failed run). eval exits
1 when the evaluation ended Failed or Regressed, so a script can gate on it.`,
		Example: `  kubectl agentrun eval refund-check
  kubectl agentrun eval refund-check --junit report.xml`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := f.clientFor(output)
			if err != nil {
				return err
			}
			var report bytes.Buffer
			var out io.Writer
			if junit != "" {
				out = &report
			}
			err = Eval(cmd.Context(), c, Ref{Namespace: ns, Name: args[0]}, output, cmd.OutOrStdout(), out)
			if report.Len() > 0 {
				if werr := os.WriteFile(junit, report.Bytes(), 0o644); werr != nil {
					return werr
				}
			}
			return err
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", output, "output format: text or json")
	cmd.Flags().StringVar(&junit, "junit", "", "also write a JUnit XML report to this file")
	return cmd
}
