// Package localrun runs one AgentRun manifest with no cluster: the file's
// AgentRun is built by internal/kit exactly as the operator builds it (job
// tools run as local processes, Secrets come from the same file) and driven
// by loop.Runner, the same engine the operator steps one reconcile at a
// time. Progress streams to the terminal, an ASK is asked there, and the
// outcome becomes the exit status. It backs `agentrun local`.
package localrun

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/safeterm"
	"github.com/agentrun/agentrun/internal/telemetry"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Options configure one local run.
type Options struct {
	// JSON prints only the final status, as JSON, instead of the stream.
	JSON bool
	// Interactive asks each ASK on the terminal, reading answers from
	// Stdin. Otherwise every ASK is declined (the answer deny) and Stderr
	// says so.
	Interactive bool
	Stdin       io.Reader
	Stdout      io.Writer
	Stderr      io.Writer
	// TracerProvider receives the run's spans, the same as the operator
	// sends (telemetry.Setup builds it from the OTEL_* environment); nil
	// sends none.
	TracerProvider trace.TracerProvider
	// Stop, once closed, ends the run at the next boundary as
	// ApprovalDenied (the first Ctrl-C). Cancelling the context stops
	// model and tool calls in flight as well (the second Ctrl-C).
	Stop <-chan struct{}
	// Transcript, when set, receives the run's transcript once it has
	// ended (agentrun eval reads the calls the model made from it).
	Transcript func([]loop.Message)
}

// interruptedReason replaces the engine's cancel reason, which speaks of
// spec.cancel, when the person at the terminal stopped the run.
const (
	interruptedReason = "the run was interrupted (Ctrl-C or SIGTERM) and stopped at the next boundary"
	abortedReason     = "the run was interrupted (Ctrl-C or SIGTERM) and stopped with a call in flight"
)

// Run runs the manifest at path to its end and returns the exit status:
// ExitCode of the outcome, or ExitUsage when the manifest cannot be read.
func Run(ctx context.Context, path string, o Options) int {
	if o.Stdin == nil {
		o.Stdin = strings.NewReader("")
	}
	// Models and tools write into the stream: nothing they say may drive
	// the terminal.
	o.Stdout, o.Stderr = safeterm.Writer(o.Stdout), safeterm.Writer(o.Stderr)
	m, err := ReadManifest(path)
	if err != nil {
		fmt.Fprintf(o.Stderr, "agentrun local: %s: %v\n", path, err)
		return ExitUsage
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		fmt.Fprintf(o.Stderr, "agentrun local: %v\n", err)
		return ExitUsage
	}
	st, err := RunManifest(ctx, m, dir, o)
	if err != nil {
		fmt.Fprintf(o.Stderr, "agentrun local: %s: %v\n", path, err)
		return ExitUsage
	}
	if o.JSON {
		writeJSON(o.Stdout, st)
	}
	return ExitCode(loop.Outcome(st.Outcome))
}

// RunManifest runs m's AgentRun (checked and resolved, as ParseManifest
// and Checker.WithRun leave it) to its end, job tools in dir, and returns
// its status as the operator would write it. The stream goes to
// o.Stdout, and a summary after it unless o.JSON; the caller prints the
// status. An error is a run that cannot be built here (a tool the
// manifest gets wrong): nothing ran. A declared tool that is not
// available is a run that ended ToolFailure, as the operator ends it.
func RunManifest(ctx context.Context, m *Manifest, dir string, o Options) (v1alpha1.AgentRunStatus, error) {
	if o.Stdin == nil {
		o.Stdin = strings.NewReader("")
	}
	run := m.Run
	run.Namespace = "default"
	run.UID = types.UID("local-" + randomHex(6))

	out := o.Stdout
	prompts := o.Stdout
	if o.JSON {
		out, prompts = io.Discard, o.Stderr
	}
	b := &kit.Builder{LocalJobs: true, AnyCloudIdentity: true, Secrets: m.SecretReader(), ConfigMaps: m.ConfigMapReader(), LocalDir: dir}
	kids := &children{builder: b, out: out, mcpServers: m.mcpServer}
	b.Agents = kids.config(templates(m.Templates))
	k, err := b.Build(ctx, run, egress.Grant{})
	if errors.Is(err, kit.ErrUnavailable) {
		fmt.Fprintf(o.Stderr, "agentrun local: AgentRun %q cannot run here: %v\n", run.Name, err)
		return FailedStatus(loop.ToolFailure, err.Error(), time.Now()), nil
	}
	if err != nil {
		return v1alpha1.AgentRunStatus{}, fmt.Errorf("AgentRun %q: %w", run.Name, err)
	}

	tools := fmt.Sprintf("%d tools", len(run.Spec.Tools))
	if len(run.Spec.Tools) == 1 {
		tools = "1 tool"
	}
	fmt.Fprintf(out, "Running AgentRun %s (model %s, %s; job tools run as local processes in %s)\n",
		run.Name, run.Spec.Model.Provider, tools, dir)

	cfg := k.Engine.Config()
	fmt.Fprintln(out, contextLine(cfg.Context))

	p := &printer{w: out}
	interrupted := false
	trc := telemetry.StartRun(o.TracerProvider, "")
	obs := trc.Observer(cfg.Model.Provider, cfg.Model.Name)
	runner := &loop.Runner{Engine: k.Engine, Model: loop.ObserveModel(k.Model, obs), Tools: loop.ObserveTools(k.Tools, obs),
		Fallbacks: observedFallbacks(k, trc),
		OnStep: func(s *loop.State, eff loop.Effect) {
			p.step(s, eff)
			trc.Compactions(ctx, string(cfg.Context.Strategy), eff.Notes, time.Now())
		},
		CancelReason: interruptedReason,
		Interrupt:    o.Stop,
		Cancelled: func() bool {
			select {
			case <-o.Stop:
				interrupted = true
			default:
			}
			return interrupted
		},
	}
	if o.Interactive {
		a := &asker{in: o.Stdin, w: prompts, stop: o.Stop}
		runner.Approve = a.approve
		p.interactive, p.by = true, "agentrun local (terminal)"
	} else {
		runner.Approve = decliner(o.Stderr)
		p.by = "agentrun local (no terminal: declined)"
	}

	kids.approve = runner.Approve
	s := &loop.State{}
	runner.Run(trc.Context(ctx), s)
	info := telemetry.Info(run.Name, cfg, s, time.Now())
	info.Namespace, info.UID = run.Namespace, string(run.UID)
	trc.End(context.WithoutCancel(ctx), info)
	if s.Outcome == loop.ApprovalDenied && s.Reason == interruptedReason && ctx.Err() != nil {
		s.Reason = abortedReason
	}

	if !o.JSON {
		summary(out, s, k.Engine.Convergence(s).Context)
	}
	st := Status(s, k.Engine.Convergence(s), time.Now())
	st.Approvals = p.approvals
	if o.Transcript != nil {
		o.Transcript(s.Transcript)
	}
	return st, nil
}

// contextLine says which context policy applies, and where its limit
// came from.
func contextLine(p loop.ContextPolicy) string {
	from := map[string]string{loop.ContextFromSpec: "spec.context.maxInputTokens",
		loop.ContextFromModel: "the model's context window", loop.ContextFromDefault: "the default for a model whose window is not known"}[p.Source]
	return fmt.Sprintf("Context: at most %d input tokens a request (%s); older turns compacted by %s, the newest %d kept",
		p.MaxInputTokens, from, p.Strategy, p.KeepRecentTurns)
}

func writeJSON(w io.Writer, st v1alpha1.AgentRunStatus) {
	b, _ := json.MarshalIndent(st, "", "  ") // a status always marshals
	fmt.Fprintf(w, "%s\n", b)
}

func summary(w io.Writer, s *loop.State, c loop.ContextFigures) {
	u := s.Usage
	fmt.Fprintf(w, "outcome: %s\n", s.Outcome)
	fmt.Fprintf(w, "reason: %s\n", s.Reason)
	// Wall clock as status.usage.wallClockSeconds counts it (whole seconds,
	// rounded up), then as measured.
	fmt.Fprintf(w, "usage: %d turns, %d input and %d output tokens, $%s, %d tool calls, %ds of wall clock (%s)\n",
		u.Turns, u.InputTokens, u.OutputTokens, u.Cost, u.ToolCalls, limits.WallClockSeconds(u.WallClock), u.WallClock.Round(time.Millisecond))
	if c.Compactions > 0 {
		fmt.Fprintf(w, "context: %d compactions (%s), the last before turn %d; last request %d of %d input tokens\n",
			c.Compactions, c.Strategy, c.LastCompactionTurn, c.LastInputTokens, c.MaxInputTokens)
	}
	if s.Outcome == loop.Completed {
		answer := strings.TrimSpace(s.Answer)
		if !strings.Contains(answer, "\n") {
			fmt.Fprintf(w, "answer: %s\n", answer)
			return
		}
		fmt.Fprintf(w, "answer:\n  %s\n", strings.ReplaceAll(answer, "\n", "\n  "))
	}
}

// printer streams the notes of every step, one line per event.
type printer struct {
	w io.Writer
	// interactive says ASKs are asked on the terminal; by names who
	// answered them, for status.approvals.
	interactive bool
	by          string
	approvals   []v1alpha1.ApprovalRecord
}

func (p *printer) step(s *loop.State, eff loop.Effect) {
	for _, n := range eff.Notes {
		c := call(s, n.CallID)
		switch n.Kind {
		case loop.NoteTurnStarted:
			fmt.Fprintln(p.w, n.Message)
		case loop.NoteModelAnswered:
			fmt.Fprintf(p.w, "  %s\n", n.Message)
			if m := lastAssistant(s); m != nil && len(m.ToolCalls) > 0 && strings.TrimSpace(m.Content) != "" {
				fmt.Fprintf(p.w, "  model says: %s\n", oneLine(m.Content, 200))
			}
		case loop.NoteCallVetted:
			if c == nil {
				// The batch ended while it was vetted (a guardrail halted
				// it): the call is in the model's answer, not in s.Calls.
				if tc := proposed(s, n.CallID); tc != nil {
					fmt.Fprintf(p.w, "  %s %s %s -> %s\n", tc.ID, tc.Name, oneLine(string(tc.Arguments), 160),
						strings.TrimPrefix(n.Message, tc.ID+" "+tc.Name+": "))
					continue
				}
				fmt.Fprintf(p.w, "  %s\n", n.Message)
				continue
			}
			verdict := string(c.Verdict)
			if c.Verdict == loop.Ask && !p.interactive {
				// Nobody is asked: the next line says it is declined.
				verdict = "needs a person"
			}
			line := fmt.Sprintf("  %s %s %s -> %s (%s)", c.ID, c.Name, oneLine(string(c.Arguments), 160), verdict, c.Rule)
			if c.Reason != "" {
				line += ": " + oneLine(c.Reason, 200)
			}
			fmt.Fprintln(p.w, line)
		case loop.NoteCallFinished:
			line := "  " + n.Message
			if c != nil && c.Observation != "" {
				line += " -> " + oneLine(c.Observation, 200)
			} else if m := recorded(s, n.CallID); m != nil && m.Content != "" {
				// A plan's step is in the transcript once its wave ended.
				line += " -> " + oneLine(m.Content, 200)
			}
			fmt.Fprintln(p.w, line)
		case loop.NoteApproval:
			if !p.interactive && c != nil {
				fmt.Fprintf(p.w, "  %s %s: declined, no terminal to ask on (the model is told a person declined it)\n", c.ID, c.Name)
			} else {
				fmt.Fprintf(p.w, "  %s\n", n.Message)
			}
			if c != nil {
				at := metav1.Now()
				p.approvals = append(p.approvals, v1alpha1.ApprovalRecord{CallID: c.ID,
					Decision: v1alpha1.ApprovalDecision(c.Answer), At: &at, By: p.by})
			}
		case loop.NotePlanSubmitted, loop.NoteStepStarted, loop.NoteSolving:
			fmt.Fprintf(p.w, "  %s\n", n.Message)
		case loop.NoteStepFinished:
			// A step that ran is printed with its result (CallFinished);
			// one that did not run says why.
			if n.Warning {
				fmt.Fprintf(p.w, "  warning: %s\n", n.Message)
			}
		case loop.NoteContextCompacted:
			if n.Warning {
				fmt.Fprintf(p.w, "  warning: %s\n", n.Message)
			} else {
				fmt.Fprintf(p.w, "  %s\n", n.Message)
			}
		case loop.NoteFinished:
			// The summary says how the run ended.
		default:
			fmt.Fprintf(p.w, "  warning: %s\n", n.Message)
		}
	}
}

func call(s *loop.State, id string) *loop.Call {
	if id == "" {
		return nil
	}
	for i := range s.Calls {
		if s.Calls[i].ID == id {
			return &s.Calls[i]
		}
	}
	return nil
}

// proposed is call id as the model proposed it in the current turn's
// answer, or nil.
func proposed(s *loop.State, id string) *loop.ToolCall {
	if m := lastAssistant(s); m != nil && id != "" {
		for i := range m.ToolCalls {
			if m.ToolCalls[i].ID == id {
				return &m.ToolCalls[i]
			}
		}
	}
	return nil
}

// recorded is the tool message of call id among the current turn's
// messages, or nil.
func recorded(s *loop.State, id string) *loop.Message {
	for i := len(s.Transcript) - 1; i >= 0 && s.Transcript[i].Turn == s.Turn; i-- {
		if m := &s.Transcript[i]; m.Role == loop.RoleTool && m.CallID == id {
			return m
		}
	}
	return nil
}

func lastAssistant(s *loop.State) *loop.Message {
	for i := len(s.Transcript) - 1; i >= 0; i-- {
		if m := &s.Transcript[i]; m.Role == loop.RoleAssistant {
			if m.Turn != s.Turn {
				return nil
			}
			return m
		}
	}
	return nil
}

// oneLine folds s onto one line and cuts it after n bytes of text.
func oneLine(s string, n int) string {
	return clip.Cut(strings.Join(strings.Fields(s), " "), n+len("…"), "…")
}

// compactJSON drops the whitespace between JSON tokens and nothing else
// (the text inside strings is kept exactly); text that is not JSON is
// returned as it is.
func compactJSON(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func describe(c loop.Call) string {
	why := c.Rule
	if c.Reason != "" {
		why += ": " + c.Reason
	}
	return fmt.Sprintf("%s (%s), which asks a person (%s)", c.ID, c.Name, why)
}

// decliner answers deny to every ASK: with no terminal there is no one to
// ask. The model sees "a person declined this call" and may route around.
func decliner(stderr io.Writer) loop.Approver {
	return func(_ context.Context, pending []loop.Call) map[string]loop.Answer {
		answers := map[string]loop.Answer{}
		for _, c := range pending {
			fmt.Fprintf(stderr, "agentrun local: no terminal to ask on: declining %s\n", describe(c))
			answers[c.ID] = loop.DenyAnswer
		}
		return answers
	}
}

// asker asks each pending call on the terminal.
type asker struct {
	in    io.Reader
	w     io.Writer
	stop  <-chan struct{}
	lines chan string
	eof   bool
}

func (a *asker) approve(ctx context.Context, pending []loop.Call) map[string]loop.Answer {
	answers := map[string]loop.Answer{}
	for _, c := range pending {
		fmt.Fprintf(a.w, "  ? %s %s asks a person\n", c.ID, c.Name)
		// The arguments whole, as they will run: a person approves exactly these.
		fmt.Fprintf(a.w, "    arguments (%s): %s\n", loop.ArgumentsDigest(c.Arguments), compactJSON(c.Arguments))
		fmt.Fprintf(a.w, "    rule: %s\n", c.Rule)
		if c.Reason != "" {
			fmt.Fprintf(a.w, "    reason: %s\n", c.Reason)
		}
		for answers[c.ID] == "" {
			if a.eof {
				fmt.Fprintf(a.w, "    no more input: declining %s\n", c.ID)
				answers[c.ID] = loop.DenyAnswer
				break
			}
			fmt.Fprint(a.w, "    approve / deny / stop? ")
			line, ok := a.readLine(ctx)
			if !ok && !a.eof {
				fmt.Fprintln(a.w)
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					fmt.Fprintf(a.w, "    no answer within approvalTimeout: the run escalates\n")
				}
				// Interrupted or timed out: the run stops at this boundary.
				return answers
			}
			switch strings.ToLower(strings.TrimSpace(line)) {
			case "approve", "a", "yes", "y":
				answers[c.ID] = loop.Approve
			case "deny", "d", "no", "n":
				answers[c.ID] = loop.DenyAnswer
			case "stop", "s":
				answers[c.ID] = loop.Stop
				return answers // the run ends; the other calls need no answer
			default:
				if !a.eof {
					fmt.Fprintln(a.w, "    answer approve, deny (the model may try another route) or stop (end the run)")
				}
			}
		}
	}
	return answers
}

// readLine returns the next line of input, or false at the end of input
// (a.eof is then set), on Stop or when ctx is done.
func (a *asker) readLine(ctx context.Context) (string, bool) {
	if a.lines == nil {
		a.lines = make(chan string)
		go func() {
			sc := bufio.NewScanner(a.in)
			for sc.Scan() {
				a.lines <- sc.Text()
			}
			close(a.lines)
		}()
	}
	select {
	case l, ok := <-a.lines:
		if !ok {
			a.eof = true
		}
		return l, ok
	case <-a.stop:
	case <-ctx.Done():
	}
	return "", false
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// observedFallbacks are the run's fallback models, each traced as
// itself.
func observedFallbacks(k *kit.Kit, trc *telemetry.Run) []loop.Model {
	var out []loop.Model
	for i, m := range k.Fallbacks {
		f := k.Engine.Config().Fallbacks[i]
		out = append(out, loop.ObserveModel(m, trc.Observer(f.Provider, f.Name)))
	}
	return out
}
