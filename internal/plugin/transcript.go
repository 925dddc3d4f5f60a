package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/safeterm"
	"github.com/agentrun/agentrun/internal/transcript"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Output formats of the transcript command.
const (
	OutputText = "text"
	OutputJSON = "json"
)

// textOrJSON refuses an output format other than text and json.
func textOrJSON(format string) error {
	if format != OutputText && format != OutputJSON {
		return fmt.Errorf("unknown output format %q: use -o text or -o json", format)
	}
	return nil
}

// Transcript prints a run's whole conversation: the chunks saved in its
// Secrets, then the messages still buffered in its checkpoint. The text
// format starts with the goal and, once the run has ended, closes with its
// outcome; the json format is the list of messages alone.
func Transcript(ctx context.Context, c client.Reader, ref Ref, format string, w io.Writer) error {
	if err := textOrJSON(format); err != nil {
		return err
	}
	run, err := getRun(ctx, c, ref)
	if err != nil {
		return err
	}
	msgs, err := transcript.Read(ctx, c, run)
	if err != nil {
		return fmt.Errorf("reading the transcript of %s: %w", ref, explain(err, ref))
	}
	return PrintTranscript(w, run, msgs, format)
}

// PrintTranscript prints the messages of run as Transcript does. It is
// apart so that agentrun archive transcript prints an archived run, whose
// messages come from the archive, exactly as a live one.
func PrintTranscript(w io.Writer, run *v1alpha1.AgentRun, msgs []loop.Message, format string) error {
	if err := textOrJSON(format); err != nil {
		return err
	}
	w = safeterm.Writer(w) // what models and tools said must not drive the terminal
	if format == OutputJSON {
		if msgs == nil {
			msgs = []loop.Message{}
		}
		out, err := json.MarshalIndent(msgs, "", "  ")
		if err != nil {
			return err
		}
		printf(w, "%s\n", out)
		return nil
	}
	printGoal(w, run)
	for _, m := range msgs {
		printf(w, "%s", FormatMessage(m))
	}
	if run.Status.Outcome != "" {
		printOutcome(w, run)
	}
	return nil
}

// FormatMessage renders one message as a block of text ending in a newline:
//
//	[t3] assistant -> issue_refund {"amount_minor":8240}
//	[t3] tool t3-c1 (issue_refund, ok): {"refund_id":"r-1"}
//	[t4] assistant: The refund is issued.
//	[t9] --- Context compacted before turn 9 (clear): cleared 4 tool result(s) ... ---
//
// A follow-up's transcript starts with the conversation it continued,
// each message marked [earlier].
//
// An assistant message gives one line per proposed call after its text, if
// it has any. Lines after the first of a long text are indented.
func FormatMessage(m loop.Message) string {
	var b strings.Builder
	turn := fmt.Sprintf("[t%d]", m.Turn)
	if m.Turn < 0 {
		// The conversation a follow-up continued (loop.Continue).
		turn = "[earlier]"
	}
	switch m.Role {
	case loop.RoleAssistant:
		if m.Content != "" || len(m.ToolCalls) == 0 {
			fmt.Fprintf(&b, "%s assistant: %s\n", turn, indent(m.Content))
		}
		for _, call := range m.ToolCalls {
			fmt.Fprintf(&b, "%s assistant -> %s %s\n", turn, call.Name, CompactArguments(call.Arguments))
		}
	case loop.RoleTool:
		status := m.Status
		if status == "" {
			status = "ok"
		}
		if m.Arguments != nil {
			// Approved with changes: what ran, beside the proposal above.
			fmt.Fprintf(&b, "%s edited %s by %s: %s\n", turn, m.CallID, orUnknown(m.EditedBy), m.Arguments)
		}
		fmt.Fprintf(&b, "%s tool %s (%s, %s): %s\n", turn, m.CallID, m.Tool, status, indent(m.Content))
	case loop.RoleContext:
		// Not a message any request held: where the context policy
		// compacted the older turns (the requests after it carried
		// markers or a summary instead of them).
		fmt.Fprintf(&b, "%s --- %s ---\n", turn, indent(m.Content))
	default:
		fmt.Fprintf(&b, "%s %s: %s\n", turn, m.Role, indent(m.Content))
	}
	return b.String()
}

// CompactArguments prints JSON arguments on one line, as the model sent them when
// they are not valid JSON.
func CompactArguments(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// indent keeps a multi-line text inside its block.
func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return strings.ReplaceAll(s, "\n", "\n    ")
}

func printOutcome(w io.Writer, run *v1alpha1.AgentRun) {
	printf(w, "outcome: %s\n", run.Status.Outcome)
	printf(w, "reason: %s\n", indent(run.Status.Reason))
	if m := run.Status.Model; m != nil && m.Fallbacks > 0 {
		printf(w, "model: %s (fallback %d of spec.model.fallbacks)\n", m.Active, m.Fallbacks)
	}
	switch st := run.Status; {
	case st.Output != nil && len(st.Output.Raw) > 0:
		printf(w, "output: %s\n", CompactArguments(st.Output.Raw))
	case st.OutputDigest != "" && run.Status.Outcome == v1alpha1.OutcomeCompleted:
		printf(w, "output: %d bytes, %s (too large for status: the last answer above)\n", st.OutputBytes, st.OutputDigest)
	}
}

// orUnknown is who, or "a person" when nobody was recorded.
func orUnknown(who string) string {
	if who == "" {
		return "a person"
	}
	return who
}
