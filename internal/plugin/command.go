package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/agentrun/agentrun/internal/version"
	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Main runs kubectl-agentrun with args (without the program name) and
// returns its exit status: 0 on success, 1 on an error or, for watch and
// --wait, when the run ended with any outcome but Completed.
//
// more adds commands that live outside this package (the console), given
// kubectl's connection flags.
func Main(args []string, stdout, stderr io.Writer, more ...func(*genericclioptions.ConfigFlags) *cobra.Command) int {
	// The client logs through controller-runtime's logger; the plugin
	// reports errors itself.
	ctrllog.SetLogger(logr.Discard())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cmd := NewCommand(stdout, stderr, more...)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	var exit *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.Code
	case ctx.Err() != nil:
		return 130 // interrupted, as a shell reports it
	}
	_, _ = fmt.Fprintf(stderr, "error: %v\n", err)
	return 1
}

// NewCommand builds the kubectl-agentrun command tree. It reads kubectl's
// usual connection flags (--kubeconfig, --context, -n/--namespace ...).
func NewCommand(stdout, stderr io.Writer, more ...func(*genericclioptions.ConfigFlags) *cobra.Command) *cobra.Command {
	f := &factory{flags: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use:   "kubectl-agentrun",
		Short: "Run, answer, cancel and follow AgentRuns",
		Long: `kubectl agentrun creates AgentRuns from a template or from an earlier run,
answers the calls a run waits on, cancels a run, prints its transcript and
follows it to its end.

A call that policy marks "ask" waits in status.pendingApprovals under a call id
such as t3-c1. approve, deny and stop answer it by setting the annotation
approval.agents.agentrun.dev/<CALLID> on the AgentRun, as

  kubectl annotate agentrun NAME approval.agents.agentrun.dev/t3-c1=approve

would, after checking that the call really waits. The operator records the
answer, and who gave it, in status.approvals.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl agentrun"},
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	f.flags.AddFlags(root.PersistentFlags())

	for _, d := range []v1alpha1.ApprovalDecision{v1alpha1.ApprovalApprove, v1alpha1.ApprovalDeny, v1alpha1.ApprovalStop} {
		root.AddCommand(answerCommand(f, d))
	}
	root.AddCommand(replyCommand(f), ackCommand(f))
	root.AddCommand(runCommand(f), rerunCommand(f), continueCommand(f))
	root.AddCommand(cancelCommand(f), transcriptCommand(f), treeCommand(f), watchCommand(f), evalCommand(f), version.Command())
	for _, m := range more {
		root.AddCommand(m(f.flags))
	}
	return root
}

var answerHelp = map[v1alpha1.ApprovalDecision][2]string{
	v1alpha1.ApprovalApprove: {"Let a pending call run",
		"approve lets the call CALLID of the AgentRun NAME run."},
	v1alpha1.ApprovalDeny: {"Decline a pending call; the model may choose another route",
		`deny declines the call CALLID of the AgentRun NAME. The model sees "a person
declined this call", with the reason given by --reason, and the run goes on.`},
	v1alpha1.ApprovalStop: {"Decline a pending call and end the run as ApprovalDenied",
		"stop declines the call CALLID of the AgentRun NAME and ends the run with the\noutcome ApprovalDenied."},
}

func answerCommand(f *factory, d v1alpha1.ApprovalDecision) *cobra.Command {
	var force bool
	var reason, patch string
	var set []string
	help := answerHelp[d]
	cmd := &cobra.Command{
		Use:   string(d) + " NAME CALLID",
		Short: help[0],
		Long: help[1] + `

It sets the annotation approval.agents.agentrun.dev/CALLID=` + string(d) + ` with a merge
patch made by the field manager kubectl-agentrun. It refuses, and lists the
calls that do wait, when CALLID is not in status.pendingApprovals, and it will
not replace an answer the operator has not acted on yet; --force skips both
checks.`,
		Example: fmt.Sprintf(`  # See which calls wait, then answer one
  kubectl get agentrun explain-double-charge -o jsonpath='{.status.pendingApprovals}'
  kubectl agentrun %s explain-double-charge t3-c1`, d),
		Args: exactArgs("NAME", "CALLID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := f.client()
			if err != nil {
				return err
			}
			return Answer(cmd.Context(), c, AnswerOptions{
				Run: Ref{Namespace: ns, Name: args[0]}, CallID: args[1], Decision: d, Reason: reason, Force: force,
				Edit: patch, Set: set,
			}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "set the annotation even when the call is not waiting for approval")
	if d == v1alpha1.ApprovalApprove {
		cmd.Flags().StringArrayVar(&set, "set", nil, "approve with changes: set the argument KEY to VALUE (KEY=VALUE, repeatable), "+
			"typed as the tool's parameters type it (integer, number, boolean, string; null removes it)")
		cmd.Flags().StringVar(&patch, "patch", "", fmt.Sprintf("approve with changes: a JSON merge patch of the arguments "+
			"(at most %d characters; --set is written over it)", v1alpha1.MaxApprovalEdit))
		cmd.Long += `

With --set or --patch it approves the call with changes: the annotation
becomes edit:DIGEST:PATCH, a JSON merge patch of the arguments you were shown.
The operator vets the edited call again from the start (loop detection, the
tool's schema, guardrails, policy) before it runs; an edit a policy rule
denies does not run, and the model reads that rule's message.`
		cmd.Example += `

  # Approve with changes: refund 82.40, not 824.00
  kubectl agentrun approve explain-double-charge t3-c1 --set amount_minor=8240`
	}
	if d != v1alpha1.ApprovalApprove {
		cmd.Flags().StringVar(&reason, "reason", "", fmt.Sprintf("why, in your words (at most %d characters): recorded in status.approvals; "+
			"a denial's reason is what the model reads as the call's result", v1alpha1.MaxApprovalReason))
		cmd.Example += fmt.Sprintf(`

  # Say why: the annotation becomes %s::REASON
  kubectl agentrun %s explain-double-charge t3-c1 --reason "Refund 82.40, not 824.00"`, d, d)
	}
	return cmd
}

// replyCommand is kubectl agentrun answer: the answer to a question the
// agent asked (builtin person.ask).
func replyCommand(f *factory) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "answer NAME CALLID TEXT",
		Short: "Answer a question the agent asked; the answer is the call's result",
		Long: fmt.Sprintf(`answer gives TEXT as the answer to the question CALLID of the AgentRun NAME
(a call of a tool with builtin person.ask, shown in status.pendingApprovals
with its question and choices). The model reads it as the call's result,
quoted; the run goes on. TEXT may have at most %d characters.

It sets the annotation approval.agents.agentrun.dev/CALLID=answer:DIGEST:TEXT
with a merge patch made by the field manager kubectl-agentrun, bound to the
question shown. It refuses, and lists the calls that do wait, when CALLID is
not waiting, and when it waits for approval rather than an answer.`, v1alpha1.MaxApprovalReason),
		Example: `  # See the question, then answer it
  kubectl get agentrun explain-double-charge -o jsonpath='{.status.pendingApprovals}'
  kubectl agentrun answer explain-double-charge t1-c1 "in_9f21, the March invoice"`,
		Args: exactArgs("NAME", "CALLID", "TEXT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := f.client()
			if err != nil {
				return err
			}
			return Answer(cmd.Context(), c, AnswerOptions{
				Run: Ref{Namespace: ns, Name: args[0]}, CallID: args[1], Decision: v1alpha1.ApprovalReply, Reason: args[2], Force: force,
			}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "set the annotation even when the call is not waiting")
	return cmd
}

// ackCommand is kubectl agentrun ack: a person takes (and resolves) an
// escalated run.
func ackCommand(f *factory) *cobra.Command {
	var resolve bool
	var note string
	cmd := &cobra.Command{
		Use:   "ack NAME",
		Short: "Acknowledge (take) an escalated run, or resolve it",
		Long: fmt.Sprintf(`ack acknowledges the escalation of the AgentRun NAME, which ended Escalated: you
take it. With --resolve it resolves it (and acknowledges it, when no one had).
--note adds a note of at most %d characters.

It sets the annotation agents.agentrun.dev/ack=ack (or resolve, and :NOTE) with
a merge patch made by the field manager kubectl-agentrun; the operator records
you, as the API server authenticated you, in status.escalation. It refuses a
run that has not ended Escalated, and an escalation acknowledged (or resolved)
before. Setting the annotation needs the verb "approve" on the run.`, v1alpha1.MaxAckNote),
		Example: `  # Take the escalation, then resolve it
  kubectl agentrun ack nightly-cleanup --note "looking at it"
  kubectl agentrun ack nightly-cleanup --resolve --note "rolled back by hand"`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := f.client()
			if err != nil {
				return err
			}
			return Ack(cmd.Context(), c, AckOptions{Run: Ref{Namespace: ns, Name: args[0]}, Resolve: resolve, Note: note}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&resolve, "resolve", false, "resolve the escalation, not only acknowledge it")
	cmd.Flags().StringVar(&note, "note", "", fmt.Sprintf("a note, recorded in status.escalation.note (at most %d characters)", v1alpha1.MaxAckNote))
	return cmd
}

func cancelCommand(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel NAME",
		Short: "Stop a run at the next turn boundary (outcome ApprovalDenied)",
		Long: `cancel sets spec.cancel to true on the AgentRun NAME, with a merge patch that
touches nothing else. The operator stops the run at the next turn boundary with
the outcome ApprovalDenied. A cancelled run stays cancelled.`,
		Example: `  kubectl agentrun cancel explain-double-charge`,
		Args:    exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := f.client()
			if err != nil {
				return err
			}
			return Cancel(cmd.Context(), c, Ref{Namespace: ns, Name: args[0]}, cmd.OutOrStdout())
		},
	}
}

func transcriptCommand(f *factory) *cobra.Command {
	output := OutputText
	cmd := &cobra.Command{
		Use:   "transcript NAME",
		Short: "Print a run's whole conversation",
		Long: `transcript prints the conversation of the AgentRun NAME: the chunks saved in
the Secrets it owns, then the messages the operator still buffers in its status.

The text format prints one block per message, with the turn it belongs to:

  [t3] assistant -> issue_refund {"amount_minor":8240}
  [t3] tool t3-c1 (issue_refund, ok): {"refund_id":"rf_19"}
  [t4] assistant: The customer was charged twice ...

starting with the goal and, once the run has ended, closing with its outcome
and reason. -o json prints the list of messages as JSON. Reading the
transcript needs permission to list Secrets in the run's namespace.`,
		Example: `  kubectl agentrun transcript explain-double-charge
  kubectl agentrun transcript explain-double-charge -o json | jq '.[] | select(.role == "tool")'`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := f.clientFor(output)
			if err != nil {
				return err
			}
			return Transcript(cmd.Context(), c, Ref{Namespace: ns, Name: args[0]}, output, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", output, "output format: text or json")
	return cmd
}

func treeCommand(f *factory) *cobra.Command {
	output := OutputText
	cmd := &cobra.Command{
		Use:   "tree NAME",
		Short: "Print a run and the runs its agent tools made, as a tree",
		Long: `tree prints the AgentRun NAME and every run below it: the child runs its agent
tools' calls made, their children, and so on, each indented under its parent,
with its phase, outcome, turns, cost and the parent's call that made it:

  NAME                   PHASE      OUTCOME          TURNS  COST     CALL
  triage                 Succeeded  Completed        5      $0.0630
    triage-3f9c0a1b2d    Succeeded  Completed        2      $0.0210  t1-c1/investigate
    triage-8e21d07c44    Failed     BudgetExhausted  1      $0.0110  t1-c2/investigate

A run's turns and cost are its status.usage, which holds its children's. The
runs are found by their labels (agents.agentrun.dev/root and parent-uid) in
NAME's namespace; -o json prints the tree as JSON. NAME may be any run of a
tree: tree prints the part below it.`,
		Example: `  kubectl agentrun tree triage
  kubectl agentrun tree triage -o json | jq '.children[] | {name, outcome, costUSD}'`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := f.clientFor(output)
			if err != nil {
				return err
			}
			return Tree(cmd.Context(), c, Ref{Namespace: ns, Name: args[0]}, output, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", output, "output format: text or json")
	return cmd
}

func watchCommand(f *factory) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "watch NAME",
		Short: "Follow a run until it ends; exit 0 only if it Completed",
		Long: `watch follows the AgentRun NAME until it ends. It prints the transcript so
far and then each new message, each Event about the run, phase changes, the
answers people gave, and every call that waits for a person with the commands
that answer it. When the run ends it prints

  outcome: <Outcome>
  reason: <why>

and exits 0 if the outcome is Completed and 1 otherwise (or on an error, or
when --timeout passes first).`,
		Example: `  kubectl agentrun watch explain-double-charge
  kubectl agentrun watch explain-double-charge --timeout 10m && echo done`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := f.client()
			if err != nil {
				return err
			}
			return follow(cmd, f, c, Ref{Namespace: ns, Name: args[0]}, waitFlags{wait: true, timeout: timeout})
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (for example 10m); 0 waits for ever")
	return cmd
}

func runCommand(f *factory) *cobra.Command {
	var (
		params []string
		name   string
		w      waitFlags
	)
	cmd := &cobra.Command{
		Use:   "run TEMPLATE [-p NAME=VALUE ...]",
		Short: "Create a run from an AgentRunTemplate",
		Long: `run creates an AgentRun from the AgentRunTemplate TEMPLATE in the namespace:
spec.templateRef names the template and each -p NAME=VALUE becomes one of
spec.parameters. The operator fills the template's $(params.NAME) placeholders
with the values and runs the result.

Before creating anything, run reads the template and checks the values against
the parameters it declares: a name it does not declare, a required parameter
left out (the error shows the parameter's description), or a value outside the
parameter's enum or pattern is refused, naming the parameter. A parameter left
out that has a default takes it. The operator checks the values again.

The run is named --name, or TEMPLATE- and five random characters. run prints
the name as kubectl create does; with --wait it then follows the run as watch
does and exits 0 only if the run ends Completed. With --wait -o json, the name
and the progress go to stderr, and stdout holds only the ended AgentRun as
JSON, as kubectl get -o json prints it: its status.output is the run's typed
answer (spec.output), beside status.outcome and status.reason.`,
		Example: `  kubectl get agentruntemplates
  kubectl agentrun run refund-investigator -p ticket=T-1042 -p tone=formal
  kubectl agentrun run refund-investigator -p ticket=T-1042 --name refund-t-1042 --wait
  kubectl agentrun run refund-investigator -p ticket=T-1042 --wait -o json`,
		Args: exactArgs("TEMPLATE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return w.create(cmd, f, func(c client.Client, ns string) (*v1alpha1.AgentRun, error) {
				return RunTemplate(cmd.Context(), c, RunOptions{Namespace: ns, Template: args[0], Params: params, Name: name}, w.progress(cmd))
			})
		},
	}
	cmd.Flags().StringArrayVarP(&params, "param", "p", nil, "a parameter's value, NAME=VALUE (repeat for each; the value may contain '=' and ',')")
	cmd.Flags().StringVar(&name, "name", "", "the new run's name (default: generated from TEMPLATE)")
	w.add(cmd)
	return cmd
}

func rerunCommand(f *factory) *cobra.Command {
	var (
		name string
		w    waitFlags
	)
	cmd := &cobra.Command{
		Use:   "rerun NAME",
		Short: "Create a new run with the spec of the run NAME",
		Long: `rerun creates a new AgentRun with the spec of the AgentRun NAME (spec.cancel
left out), as an AgentRun's spec cannot change and a name cannot run twice. A
run made from a template keeps its templateRef and parameters: the operator
reads the template again, as it is now.

The new run is named --name, or NAME- and five random characters, and carries
the label agents.agentrun.dev/rerun-of=NAME (a name longer than a label value's
63 characters is cut there, and the annotation of the same key holds it whole),
so that

  kubectl get agentruns -l agents.agentrun.dev/rerun-of=NAME

lists the re-runs of NAME. It keeps NAME's labels and annotations except the
operator's (agents.agentrun.dev/..., answers to approvals), an AgentSchedule's
label, kubectl apply's last-applied-configuration and those of Flux and Argo CD:
the new run is not something a GitOps tool applied. Owner references are not
copied.

rerun prints the new name as kubectl create does; with --wait it then follows
the run as watch does and exits 0 only if the run ends Completed.`,
		Example: `  kubectl agentrun rerun explain-double-charge
  kubectl agentrun rerun explain-double-charge --wait --timeout 15m`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return w.create(cmd, f, func(c client.Client, ns string) (*v1alpha1.AgentRun, error) {
				return Rerun(cmd.Context(), c, RerunOptions{Run: Ref{Namespace: ns, Name: args[0]}, Name: name}, w.progress(cmd))
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the new run's name (default: generated from NAME)")
	w.add(cmd)
	return cmd
}

func continueCommand(f *factory) *cobra.Command {
	var (
		name string
		w    waitFlags
	)
	cmd := &cobra.Command{
		Use:   "continue NAME GOAL",
		Short: "Create a follow-up of the finished run NAME with a new goal",
		Long: `continue creates a follow-up of the finished AgentRun NAME: a new AgentRun
with NAME's spec (the same model, ceilings, tools and policy), GOAL as its goal
and spec.continueFrom naming NAME. The operator starts it from NAME's
conversation (its goal and transcript), then GOAL as a new user message; the
follow-up is bounded by its own ceilings. NAME may be deleted by then, if the
operator keeps an archive. A run that has not finished yet is refused, and so is
a run made from a template (the template decides the goal): write such a
follow-up's spec yourself, with spec.continueFrom.

The follow-up is named --name, or NAME- and five random characters; the
operator labels it agents.agentrun.dev/continued-from=NAME. continue prints the
new name as kubectl create does; with --wait it then follows the run as watch
does and exits 0 only if the run ends Completed, and --wait -o json prints the
ended run as JSON, as run does.`,
		Example: `  kubectl agentrun continue explain-double-charge "Refund the second charge."
  kubectl agentrun continue explain-double-charge "Which card was charged?" --wait -o json`,
		Args: exactArgs("NAME", "GOAL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return w.create(cmd, f, func(c client.Client, ns string) (*v1alpha1.AgentRun, error) {
				return Continue(cmd.Context(), c, ContinueOptions{Run: Ref{Namespace: ns, Name: args[0]}, Goal: args[1], Name: name}, w.progress(cmd))
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the follow-up's name (default: generated from NAME)")
	w.add(cmd)
	return cmd
}

// waitFlags are --wait, --timeout and -o of the commands that create a
// run.
type waitFlags struct {
	wait    bool
	timeout time.Duration
	output  string
}

func (w *waitFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&w.wait, "wait", false, "follow the new run until it ends, as watch does; exit 0 only if it Completed")
	cmd.Flags().DurationVar(&w.timeout, "timeout", 0, "with --wait, give up waiting after this long (for example 10m); 0 waits for ever")
	cmd.Flags().StringVarP(&w.output, "output", "o", "", "with --wait, json prints only the ended AgentRun on stdout (status.output is its typed answer); the progress goes to stderr")
}

func (w *waitFlags) check() error {
	switch {
	case w.timeout != 0 && !w.wait:
		return errors.New("--timeout applies only with --wait")
	case w.output != "" && w.output != "json":
		return fmt.Errorf("-o %q: the only output format is json", w.output)
	case w.output != "" && !w.wait:
		return errors.New("-o json applies only with --wait: it prints the run once it has ended")
	}
	return nil
}

// progress is where the name of the new run and its progress are
// printed: stdout, or stderr when stdout holds the JSON of the run.
func (w *waitFlags) progress(cmd *cobra.Command) io.Writer {
	if w.output == "json" {
		return cmd.ErrOrStderr()
	}
	return cmd.OutOrStdout()
}

// create is the body of a command that creates a run: it checks the
// flags, creates the run in the namespace of the kubeconfig (or -n) with
// newRun and, with --wait, follows it.
func (w *waitFlags) create(cmd *cobra.Command, f *factory, newRun func(c client.Client, ns string) (*v1alpha1.AgentRun, error)) error {
	if err := w.check(); err != nil {
		return err
	}
	c, ns, err := f.client()
	if err != nil {
		return err
	}
	run, err := newRun(c, ns)
	if err != nil || !w.wait {
		return err
	}
	return follow(cmd, f, c, Ref{Namespace: ns, Name: run.Name}, *w)
}

// follow watches the run until it ends, as the watch command does, and
// turns its outcome into the exit status: 0 only for Completed.
func follow(cmd *cobra.Command, f *factory, c client.WithWatch, ref Ref, w waitFlags) error {
	timeout := w.timeout
	prefix := "kubectl agentrun"
	if _, explicit, _ := f.flags.ToRawKubeConfigLoader().Namespace(); explicit {
		prefix += " -n " + ref.Namespace
	}
	ctx := cmd.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	run, err := Watch(ctx, c, WatchOptions{Run: ref, Command: prefix}, w.progress(cmd))
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && cmd.Context().Err() == nil {
			phase := "unknown"
			if run != nil && run.Status.Phase != "" {
				phase = string(run.Status.Phase)
			}
			return fmt.Errorf("timed out after %s waiting for %s to end (phase %s)", timeout, ref, phase)
		}
		return err
	}
	if w.output == "json" {
		if err := printJSON(cmd.OutOrStdout(), run); err != nil {
			return err
		}
	}
	if run.Status.Outcome != v1alpha1.OutcomeCompleted {
		return &ExitError{Code: 1}
	}
	return nil
}

// exactArgs checks the positional arguments and names the missing ones.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == len(names) {
			return nil
		}
		usage := "kubectl agentrun " + cmd.Use
		if len(args) < len(names) {
			return fmt.Errorf("missing %s: usage: %s", names[len(args)], usage)
		}
		return fmt.Errorf("too many arguments (%d): usage: %s", len(args), usage)
	}
}

// factory turns kubectl's connection flags into a client and a namespace.
type factory struct {
	flags *genericclioptions.ConfigFlags
}

// clientFor is client for a command that prints text or JSON: an -o it
// does not know is refused before anything is read.
func (f *factory) clientFor(output string) (client.WithWatch, string, error) {
	if err := textOrJSON(output); err != nil {
		return nil, "", err
	}
	return f.client()
}

func (f *factory) client() (client.WithWatch, string, error) {
	ns, _, err := f.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", err
	}
	cfg, err := f.flags.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: kubescheme.Scheme})
	if err != nil {
		return nil, "", fmt.Errorf("connecting to the cluster: %w", err)
	}
	return c, ns, nil
}
