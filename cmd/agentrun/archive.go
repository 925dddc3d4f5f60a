package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/plugin"
	"github.com/agentrun/agentrun/internal/runclient/archived"
	"github.com/agentrun/agentrun/internal/safeterm"
	"github.com/spf13/cobra"
)

// archiveNow is the clock of the listing's FINISHED column; tests fix it.
var archiveNow = time.Now

type archiveOptions struct {
	dsn, namespace string
}

func archiveCommand() *cobra.Command {
	o := &archiveOptions{}
	cmd := &cobra.Command{
		Use:   "archive",
		Short: "Read the archive of finished runs (PostgreSQL); for administrators",
		Long: `archive reads the records the operator keeps of finished runs in PostgreSQL
(operator flag --archive-postgres-dsn): they outlive the runs. The database's
address is --dsn or $` + archive.DSNEnv + ` (a URL, postgres://user:password@host/db,
or key=value pairs as libpq takes them); prefer the variable for a password.

These commands are for the archive's administrators. They read the database
directly, not through Kubernetes, so no RBAC applies: whoever holds the
database's password reads every namespace's records, transcripts included.
For people, the console's archive page (kubectl agentrun console
--archive-postgres-dsn) reads the same records under Kubernetes RBAC.
list, show and transcript need a role that may only SELECT; migrate needs one
that may create and alter the tables (the operator's).

A run is named by its UID, or by its name in the namespace (-n, "default" if
not given); a name that ran several times means its newest run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError("name a command: list, show, transcript, evaluations or migrate")
		},
	}
	cmd.PersistentFlags().StringVar(&o.dsn, "dsn", "", "the archive's PostgreSQL address (default $"+archive.DSNEnv+")")
	cmd.PersistentFlags().StringVarP(&o.namespace, "namespace", "n", "", "the namespace (list: all namespaces if not given)")
	cmd.AddCommand(archiveListCommand(o), archiveShowCommand(o), archiveTranscriptCommand(o), archiveEvaluationsCommand(o),
		archiveMigrateCommand(o))
	return cmd
}

// address is the archive's DSN, from --dsn or the environment.
func (o *archiveOptions) address() (string, error) {
	dsn := o.dsn
	if dsn == "" {
		dsn = os.Getenv(archive.DSNEnv)
	}
	if dsn == "" {
		return "", usageError("no archive: give --dsn or set $%s", archive.DSNEnv)
	}
	return dsn, nil
}

// open opens the archive to read it: it changes nothing in the database.
// The errors never show the DSN.
func (o *archiveOptions) open(ctx context.Context) (*archive.Postgres, error) {
	dsn, err := o.address()
	if err != nil {
		return nil, err
	}
	return archive.Open(ctx, dsn)
}

func archiveMigrateCommand(o *archiveOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create the archive's tables, or bring them to this version's schema",
		Long: `migrate applies the migrations of the archive's schema that the database has
not seen, each in its own transaction, and says which it applied; on a database
that is up to date it changes nothing. The operator does the same at start;
run it by hand before an upgrade whose migration would hold the operator's
start, or to set up an archive that readers open before the operator ran.
It needs a role that may create and alter the tables; list, show and
transcript never migrate, and tell you to run this when the schema is older
than they read.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dsn, err := o.address()
			if err != nil {
				return err
			}
			version, applied, err := archive.Migrate(cmd.Context(), dsn)
			for _, name := range applied {
				fmt.Fprintf(cmd.OutOrStdout(), "Applied %s.\n", name)
			}
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "The archive's schema is at version %d: nothing to apply.\n", version)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "The archive's schema is at version %d.\n", version)
			return nil
		},
	}
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
				t, err := archived.ParseSince(since, archiveNow())
				if err != nil {
					return usageErr{error: err}
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
				return archived.WriteJSON(cmd.OutOrStdout(), archived.List(runs))
			}
			if len(runs) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "No archived runs found.")
				return nil
			}
			archived.PrintList(cmd.OutOrStdout(), runs, o.namespace == "", output == "wide", archiveNow())
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

func archiveEvaluationsCommand(o *archiveOptions) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "evaluations [-n NAMESPACE] [--limit N]",
		Short: "List archived AgentEvaluations, newest first",
		Long: `evaluations prints the complete AgentEvaluations the operator archived, newest
first: phase, pass rate, cost, how long ago each finished, and its UID. Without
-n it lists every namespace and shows a NAMESPACE column.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			evals, err := s.ListEvaluations(cmd.Context(), o.namespace, limit)
			if err != nil {
				return err
			}
			if len(evals) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "No archived evaluations found.")
				return nil
			}
			archived.PrintEvaluations(cmd.OutOrStdout(), evals, o.namespace == "", archiveNow())
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 500, "at most this many evaluations")
	return cmd
}

func archiveShowCommand(o *archiveOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show NAME|UID [-n NAMESPACE] [-o yaml|json]",
		Short: "Print an archived run as kubectl get -o yaml prints a run",
		Long: `show prints an archived run as an AgentRun, as kubectl get ar NAME -o yaml
would have before it was deleted: its metadata, the spec as run (a run made
from a template shows the resolved spec) and its last status, with the usage
and the approvals with who answered them; a record kept without its transcript
says so on stderr, with what was missing or unsealed. A name means the newest
run of that name in the namespace; give the UID (list -o wide) for an older one.`,
	}
	return o.recordCommand(cmd, [2]string{"yaml", "json"}, func(w io.Writer, r *archive.Record, output string) error {
		return archived.WriteManifest(w, r, output == "json")
	})
}

func archiveTranscriptCommand(o *archiveOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "transcript NAME|UID [-n NAMESPACE] [-o text|json]",
		Short: "Print an archived run's conversation, as kubectl agentrun transcript does",
		Long: `transcript prints an archived run's whole conversation exactly as kubectl
agentrun transcript prints a live run's: the goal, one block per message, then
the outcome; -o json prints the messages alone. A record kept without its
transcript (a chunk missing, or not sealed by the operator) says so on stderr,
with what was missing or unsealed. A name means the newest run of that name in
the namespace; give the UID (list -o wide) for an older one.`,
	}
	return o.recordCommand(cmd, [2]string{plugin.OutputText, plugin.OutputJSON}, func(w io.Writer, r *archive.Record, output string) error {
		run, msgs, err := archived.Conversation(r)
		if err != nil {
			return err
		}
		return plugin.PrintTranscript(w, run, msgs, output)
	})
}

// recordCommand completes cmd, a command that prints the one archived run
// its argument (NAME|UID) names: write writes the record in the format of
// -o, one of formats (the first is the default).
func (o *archiveOptions) recordCommand(cmd *cobra.Command, formats [2]string, write func(w io.Writer, r *archive.Record, output string) error) *cobra.Command {
	var output string
	cmd.Args = cobra.ExactArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if output != formats[0] && output != formats[1] {
			return usageError("unknown output format %q: use %s or %s", output, formats[0], formats[1])
		}
		r, err := o.resolve(cmd.Context(), args[0], cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		return write(cmd.OutOrStdout(), r, output)
	}
	cmd.Flags().StringVarP(&output, "output", "o", formats[0], formats[0]+" or "+formats[1])
	return cmd
}

// resolve reads the record arg names (archived.Resolve) and says on
// stderr which run a name that ran more than once means, and when the
// record holds less than the run's whole sealed transcript.
func (o *archiveOptions) resolve(ctx context.Context, arg string, stderr io.Writer) (*archive.Record, error) {
	s, err := o.open(ctx)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	found, err := archived.Resolve(ctx, s, o.namespace, arg)
	if err != nil {
		return nil, err
	}
	for _, note := range []string{found.Note(), archived.TranscriptNote(found.Record)} {
		if note != "" {
			fmt.Fprintln(safeterm.Writer(stderr), note)
		}
	}
	return found.Record, nil
}
