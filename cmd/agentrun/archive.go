package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/plugin"
	"github.com/agentrun/agentrun/internal/safeterm"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// dsnEnv is where the archive's address is read from when --dsn is not
// given: a password on the command line shows in ps and shell history.
const dsnEnv = "AGENTRUN_ARCHIVE_DSN"

// archiveNow is the clock of the listing's FINISHED column; tests fix it.
var archiveNow = time.Now

type archiveOptions struct {
	dsn, namespace string
}

func archiveCommand() *cobra.Command {
	o := &archiveOptions{}
	cmd := &cobra.Command{
		Use:   "archive",
		Short: "Read the archive of finished runs (PostgreSQL)",
		Long: `archive reads the records the operator keeps of finished runs in PostgreSQL
(operator flag --archive-postgres-dsn): they outlive the runs. The database's
address is --dsn or $` + dsnEnv + ` (a URL, postgres://user:password@host/db,
or key=value pairs as libpq takes them); prefer the variable for a password.

A run is named by its UID, or by its name in the namespace (-n, "default" if
not given); a name that ran several times means its newest run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError("name a command: list, show or transcript")
		},
	}
	cmd.PersistentFlags().StringVar(&o.dsn, "dsn", "", "the archive's PostgreSQL address (default $"+dsnEnv+")")
	cmd.PersistentFlags().StringVarP(&o.namespace, "namespace", "n", "", "the namespace (list: all namespaces if not given)")
	cmd.AddCommand(archiveListCommand(o), archiveShowCommand(o), archiveTranscriptCommand(o))
	return cmd
}

// open opens the archive; the errors never show the DSN.
func (o *archiveOptions) open(ctx context.Context) (*archive.Postgres, error) {
	dsn := o.dsn
	if dsn == "" {
		dsn = os.Getenv(dsnEnv)
	}
	if dsn == "" {
		return nil, usageError("no archive: give --dsn or set $%s", dsnEnv)
	}
	return archive.Open(ctx, dsn)
}

func archiveListCommand(o *archiveOptions) *cobra.Command {
	var f archive.Filter
	var since, output string
	cmd := &cobra.Command{
		Use:   "list [-n NAMESPACE] [-l SELECTOR] [--outcome OUTCOME] [--since 24h|TIME]",
		Short: "List archived runs, newest first, with kubectl get ar's columns",
		Long: `list prints the archived runs, newest first, with the columns of kubectl get ar;
FINISHED is how long ago the run ended. Without -n it lists every namespace and
shows a NAMESPACE column. -o wide adds the UID (what show and transcript take
for a name that ran several times), the template, the transcript (Complete, or
Incomplete or Unsealed for a record kept without it) and the reason.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "wide" && output != "json" {
				return usageError("unknown output format %q: use wide or json", output)
			}
			if since != "" {
				t, err := parseSince(since, archiveNow())
				if err != nil {
					return usageErr{err}
				}
				f.Since = t
			}
			f.Namespace = o.namespace
			s, err := o.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			runs, err := s.List(cmd.Context(), f)
			if err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), listJSON(runs))
			}
			if len(runs) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "No archived runs found.")
				return nil
			}
			printList(cmd.OutOrStdout(), runs, o.namespace == "", output == "wide", archiveNow())
			return nil
		},
	}
	cmd.Flags().StringVarP(&f.Selector, "selector", "l", "", "a label selector, as kubectl's (app=refunds,tier!=gold)")
	cmd.Flags().StringVar(&f.Outcome, "outcome", "", "only runs that ended so (Completed, BudgetExhausted, Error, ...)")
	cmd.Flags().StringVar(&since, "since", "", "only runs that finished since: a duration (24h, 7d) or an RFC 3339 time")
	cmd.Flags().IntVar(&f.Limit, "limit", 500, "at most this many runs")
	cmd.Flags().StringVarP(&output, "output", "o", "", "wide or json")
	return cmd
}

// parseSince reads --since: a duration back from now (Go's, plus whole
// days as 7d), or a time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q: give a duration (24h, 7d) or an RFC 3339 time (2026-05-20T12:00:00Z)", s)
}

// printList prints as kubectl's table printer does: columns three spaces
// apart, <none> for an empty cell kubectl would show so.
func printList(w io.Writer, runs []archive.Summary, namespaces, wide bool, now time.Time) {
	tw := tabwriter.NewWriter(safeterm.Writer(w), 6, 4, 3, ' ', 0)
	var head []string
	if namespaces {
		head = append(head, "NAMESPACE")
	}
	head = append(head, "NAME", "PHASE", "OUTCOME", "TURN", "COST", "FINISHED")
	if wide {
		head = append(head, "UID", "TEMPLATE", "TRANSCRIPT", "REASON")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range runs {
		var row []string
		if namespaces {
			row = append(row, r.Namespace)
		}
		row = append(row, r.Name, r.Phase, r.Outcome, strconv.Itoa(int(r.Turns)), r.CostUSD,
			duration.HumanDuration(now.Sub(r.FinishedAt)))
		if wide {
			row = append(row, r.UID, orNone(r.Template), transcriptState(r.TranscriptState), strings.Join(strings.Fields(r.Reason), " "))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
}

// transcriptState is a record's transcript state as the commands print
// it: <unknown> for a record written before the archive recorded it.
func transcriptState(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

// noteTranscript says on w when the record holds less than the run's whole
// sealed transcript, and what was missing or unsealed.
func noteTranscript(w io.Writer, r *archive.Record) {
	switch r.TranscriptState {
	case archive.TranscriptComplete:
	case "":
		fmt.Fprintf(safeterm.Writer(w), "%s/%s was archived before records said whether their transcript was complete and sealed.\n",
			r.Namespace, r.Name)
	default:
		fmt.Fprintf(safeterm.Writer(w), "%s/%s was archived without its transcript (%s): %s\n",
			r.Namespace, r.Name, r.TranscriptState, strings.Join(strings.Fields(r.TranscriptProblem), " "))
	}
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// listedRun is a listed run in -o json: the summary with kubectl's names.
type listedRun struct {
	UID        string            `json:"uid"`
	Namespace  string            `json:"namespace"`
	Name       string            `json:"name"`
	Template   string            `json:"template,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	CreatedAt  time.Time         `json:"creationTimestamp"`
	FinishedAt time.Time         `json:"completionTime"`
	Phase      string            `json:"phase,omitempty"`
	Outcome    string            `json:"outcome,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	Turn       int32             `json:"turn"`
	CostUSD    string            `json:"costUSD,omitempty"`
	// Transcript is the record's transcript state (Complete, Incomplete,
	// Unsealed), empty when it was archived before records said.
	Transcript string `json:"transcript,omitempty"`
}

func listJSON(runs []archive.Summary) []listedRun {
	out := []listedRun{}
	for _, r := range runs {
		out = append(out, listedRun{UID: r.UID, Namespace: r.Namespace, Name: r.Name, Template: r.Template,
			Labels: r.Labels, CreatedAt: r.CreatedAt.UTC(), FinishedAt: r.FinishedAt.UTC(), Phase: r.Phase,
			Outcome: r.Outcome, Reason: r.Reason, Turn: r.Turns, CostUSD: r.CostUSD, Transcript: r.TranscriptState})
	}
	return out
}

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(safeterm.Writer(w), "%s\n", b)
	return err
}

func archiveShowCommand(o *archiveOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "show NAME|UID [-n NAMESPACE] [-o yaml|json]",
		Short: "Print an archived run as kubectl get -o yaml prints a run",
		Long: `show prints an archived run as an AgentRun, as kubectl get ar NAME -o yaml
would have before it was deleted: its metadata, the spec as run (a run made
from a template shows the resolved spec) and its last status, with the usage
and the approvals with who answered them; a record kept without its transcript
says so on stderr, with what was missing or unsealed. A name means the newest
run of that name in the namespace; give the UID (list -o wide) for an older one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "yaml" && output != "json" {
				return usageError("unknown output format %q: use yaml or json", output)
			}
			r, err := o.resolve(cmd.Context(), args[0], cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			noteTranscript(cmd.ErrOrStderr(), r)
			obj := archivedRun{
				APIVersion: v1alpha1.GroupVersion.String(),
				Kind:       "AgentRun",
				Metadata: metav1.ObjectMeta{
					Name: r.Name, Namespace: r.Namespace, UID: types.UID(r.UID),
					CreationTimestamp: metav1.NewTime(r.CreatedAt.UTC()),
					Labels:            r.Labels, Annotations: r.Annotations,
				},
				Spec: r.Spec, Status: r.Status,
			}
			b, err := json.Marshal(obj)
			if err != nil {
				return err
			}
			if output == "json" {
				var v any
				if err := json.Unmarshal(b, &v); err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), v)
			}
			y, err := yaml.JSONToYAML(b)
			if err != nil {
				return err
			}
			_, err = safeterm.Writer(cmd.OutOrStdout()).Write(y)
			return err
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "yaml or json")
	return cmd
}

// archivedRun is an AgentRun rebuilt from its record. Spec and status stay
// the JSON that was archived, so that fields this binary does not know (a
// newer operator's) are shown too.
type archivedRun struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       json.RawMessage   `json:"spec,omitempty"`
	Status     json.RawMessage   `json:"status,omitempty"`
}

func archiveTranscriptCommand(o *archiveOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "transcript NAME|UID [-n NAMESPACE] [-o text|json]",
		Short: "Print an archived run's conversation, as kubectl agentrun transcript does",
		Long: `transcript prints an archived run's whole conversation exactly as kubectl
agentrun transcript prints a live run's: the goal, one block per message, then
the outcome; -o json prints the messages alone. A record kept without its
transcript (a chunk missing, or not sealed by the operator) says so on stderr,
with what was missing or unsealed. A name means the newest run of that name in
the namespace; give the UID (list -o wide) for an older one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != plugin.OutputText && output != plugin.OutputJSON {
				return usageError("unknown output format %q: use text or json", output)
			}
			r, err := o.resolve(cmd.Context(), args[0], cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			noteTranscript(cmd.ErrOrStderr(), r)
			run := &v1alpha1.AgentRun{}
			run.Name, run.Namespace = r.Name, r.Namespace
			if len(r.Spec) > 0 {
				if err := json.Unmarshal(r.Spec, &run.Spec); err != nil {
					return fmt.Errorf("the archived spec of %s/%s: %w", r.Namespace, r.Name, err)
				}
			}
			if len(r.Status) > 0 {
				if err := json.Unmarshal(r.Status, &run.Status); err != nil {
					return fmt.Errorf("the archived status of %s/%s: %w", r.Namespace, r.Name, err)
				}
			}
			var msgs []loop.Message
			if len(r.Transcript) > 0 {
				if err := json.Unmarshal(r.Transcript, &msgs); err != nil {
					return fmt.Errorf("the archived transcript of %s/%s: %w", r.Namespace, r.Name, err)
				}
			}
			return plugin.PrintTranscript(cmd.OutOrStdout(), run, msgs, output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", plugin.OutputText, "text or json")
	return cmd
}

// resolve reads the record arg names: a UID, else the newest run of that
// name in the namespace. When the name ran more than once it says which
// one it chose on stderr, so that a person knows there are others.
func (o *archiveOptions) resolve(ctx context.Context, arg string, stderr io.Writer) (*archive.Record, error) {
	s, err := o.open(ctx)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	r, err := s.Get(ctx, arg)
	if !errors.Is(err, archive.ErrNotFound) {
		return r, err
	}
	ns := o.namespace
	if ns == "" {
		ns = "default"
	}
	runs, err := s.Find(ctx, ns, arg)
	if err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("no run named %q in namespace %q, and none with that UID, in the archive", arg, ns)
	}
	if len(runs) > 1 {
		fmt.Fprintf(stderr, "%s/%s ran %d times; this is the newest (uid %s, finished %s). "+
			"agentrun archive list -n %s -o wide shows the others' UIDs.\n",
			ns, arg, len(runs), runs[0].UID, runs[0].FinishedAt.UTC().Format(time.RFC3339), ns)
	}
	return s.Get(ctx, runs[0].UID)
}
