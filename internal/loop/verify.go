package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The trial loop (Reflexion): with a verifier configured, a final answer
// does not end the run by itself. The verifier, a declared tool that the
// model is not offered, judges it: exit 0 (or an HTTP 2xx) means verified
// and the run is Completed; a non-zero exit means not verified, and its
// output becomes a reflection that the next trial reads before it starts.
// A trial is a fresh trajectory: the model sees the goal, the reflections
// kept in memory and that trial's own messages, never an earlier trial's.
// The transcript keeps everything; the state keeps only where each trial
// and reflection is in it, so no feedback is copied into status.

// Defaults and bounds of Verify (part of the API contract, documented on
// spec.verify).
const (
	DefaultMaxTrials   = 3
	MaxTrialsLimit     = 10
	DefaultMemory      = 3
	DefaultStallTrials = 2
)

// verifyRule is the Rule recorded on a verifier call: it is the harness's
// call, not vetted by policy, guardrails or approvals.
const verifyRule = "spec.verify"

// Bounds of what one reflection line quotes.
const (
	reflectionAnswerBytes   = 300
	reflectionFeedbackBytes = 1000
)

func (v Verify) normalize() Verify {
	if v.MaxTrials <= 0 {
		v.MaxTrials = DefaultMaxTrials
	}
	if v.Memory <= 0 {
		v.Memory = DefaultMemory
	}
	if v.StallTrials <= 0 {
		v.StallTrials = DefaultStallTrials
	}
	return v
}

// FormatScore writes a score as the API shows it: a decimal string with
// two decimals ("0.75").
func FormatScore(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }

// verifier judges a run's final answers (the trial loop): the verifier
// tool, the bounds of Verify, and what it needs of the engine.
type verifier struct {
	cfg  Verify
	tool *ToolSpec
	goal string
	// vet vets the verifier's call like any (Engine.vet).
	vet   func(ctx context.Context, tool *ToolSpec, name string, full []byte, args any) verdict
	clock func() time.Time
}

// newVerifier checks the verifier against the declared tools, or returns
// nil without one. The engine takes it out of the tools offered to the
// model: the evaluator must be something the model did not write, and a
// model that cannot see the grader cannot probe it. (A model that names
// it anyway is vetted like any call.)
func newVerifier(cfg *Config, tools map[string]*ToolSpec, vet func(context.Context, *ToolSpec, string, []byte, any) verdict, clock func() time.Time) (*verifier, error) {
	v := cfg.Verify
	if v == nil {
		return nil, nil
	}
	switch {
	case strings.TrimSpace(v.Tool) == "":
		return nil, errors.New("verify.tool is empty: name the declared tool that judges an answer")
	case tools[v.Tool] == nil:
		return nil, fmt.Errorf("verify.tool names %q, which is not declared in tools", v.Tool)
	case tools[v.Tool].Mutates && !tools[v.Tool].Reversible:
		// A verifier runs at every final answer, on arguments the model
		// wrote, and no person is asked first: it must not be able to
		// change what cannot be undone.
		return nil, fmt.Errorf("verify.tool names %q, which changes something that cannot be undone (mutates and not reversible); "+
			"a verifier runs at every final answer without a person's approval: use a read-only or reversible tool", v.Tool)
	case v.MaxTrials > MaxTrialsLimit:
		return nil, fmt.Errorf("verify.maxTrials is %d; at most %d trials are allowed", v.MaxTrials, MaxTrialsLimit)
	case v.Memory > MaxTrialsLimit:
		return nil, fmt.Errorf("verify.memory is %d; at most %d reflections are kept", v.Memory, MaxTrialsLimit)
	case v.StallTrials > MaxTrialsLimit:
		return nil, fmt.Errorf("verify.stallTrials is %d; at most %d is allowed", v.StallTrials, MaxTrialsLimit)
	}
	return &verifier{cfg: *v, tool: tools[v.Tool], goal: cfg.Goal, vet: vet, clock: clock}, nil
}

// trialStart is the transcript index of the current trial's first message.
func (s *State) trialStart() int {
	if s.Verify == nil {
		return 0
	}
	return min(max(s.Verify.Start, 0), len(s.Transcript))
}

// answersBefore counts the model's answers in the transcript before i.
func (s *State) answersBefore(i int) int {
	n := 0
	for _, m := range s.Transcript[:i] {
		if m.Role == RoleAssistant {
			n++
		}
	}
	return n
}

// verifierCall is the verifier's call when the current batch is one.
func (s *State) verifierCall() *Call {
	if len(s.Calls) == 1 && s.Calls[0].Rule == verifyRule {
		return &s.Calls[0]
	}
	return nil
}

// propose hands a trial's final answer to the verifier: one call,
// reserved and charged like any other. Its arguments hold the model's
// answer, so the call is vetted like one the model proposed: guardrails
// (block or halt end the run GuardrailStop: the answer cannot be judged)
// and policy (deny ends the run Error; ask waits for a person).
func (vf *verifier) propose(ctx context.Context, s *State, notes *[]Note) next {
	if s.Verify == nil {
		s.Verify = &Verification{Trial: 1}
	}
	v, t := s.Verify, vf.tool
	tc, ok := vf.call(s)
	if !ok {
		return finishWith(Error, "the verifier's call cannot be made: no final answer in the transcript")
	}
	c := Call{ToolCall: tc,
		Verdict: Allow, Rule: verifyRule, Reason: fmt.Sprintf("judges the answer of trial %d", v.Trial), Mutates: t.Mutates, State: CallProposed}
	d := decodeArgs(tc.Arguments, nil)
	if d.err == nil {
		switch vd := vf.vet(ctx, t, t.Name, d.full, d.value); {
		case vd.halt || vd.block:
			return finishWith(GuardrailStop, fmt.Sprintf("the answer of trial %d cannot be judged: %s matched the verifier's call (%s)", v.Trial, vd.rule, vd.reason))
		case vd.decision == Deny:
			return finishWith(Error, fmt.Sprintf("the answer of trial %d cannot be judged: %s denies the verifier's call%s", v.Trial, vd.rule, suffix(vd.reason)))
		case vd.decision == Ask:
			c.Verdict, c.Reason = Ask, fmt.Sprintf("judges the answer of trial %d; %s asks a person first%s", v.Trial, vd.rule, suffix(vd.reason))
			now := vf.clock()
			c.RequestedAt = &now
		}
	}
	s.Calls = []Call{c}
	*notes = append(*notes, Note{Kind: NoteVerifying, CallID: c.ID, Message: fmt.Sprintf(
		"Trial %d of %d ended with a final answer on turn %d; verifier %s judges it (%s)", v.Trial, vf.cfg.MaxTrials, s.Turn, t.Name, c.ID)})
	if c.Verdict == Ask {
		s.Phase = PhaseApproval
		return proceed(Effect{Kind: EffectAsk, Pending: s.PendingCalls()})
	}
	return act()
}

// call is the call that judges the current trial, rebuilt from the final
// answer in the transcript (the turn's last message from the model); ok
// is false without a final answer (see Engine.VerifierCall).
func (vf *verifier) call(s *State) (ToolCall, bool) {
	if len(s.Transcript) == 0 {
		return ToolCall{}, false
	}
	var answer *Message
	for i := len(s.Transcript) - 1; i >= s.trialStart(); i-- {
		if m := &s.Transcript[i]; m.Role == RoleAssistant {
			answer = m
			break
		}
	}
	if answer == nil || answer.Turn != s.Turn || len(answer.ToolCalls) > 0 {
		return ToolCall{}, false
	}
	trial := 1
	if s.Verify != nil {
		trial = s.Verify.Trial
	}
	args, err := json.Marshal(struct {
		Answer string `json:"answer"`
		Trial  int    `json:"trial"`
		Goal   string `json:"goal"`
	}{cut(answer.Content, maxAnswerBytes), trial, vf.goal})
	if err != nil {
		return ToolCall{}, false
	}
	return ToolCall{ID: fmt.Sprintf("t%d-verify", s.Turn), Name: vf.tool.Name, Arguments: args}, true
}

// takeVerdict reads the verifier's result, once its call is done: the
// verdict goes into the state, and what the verifier said (evidence or
// feedback) becomes the call's observation, which the transcript keeps.
// A verifier that could not judge (its call was invalid, or its outcome
// is unknown) leaves no verdict; judge ends the run then. A verifier that
// stayed unavailable after its retries ends the run ToolFailure (n, what
// applyResults returned): the reason is made to say it was the verifier.
func (vf *verifier) takeVerdict(s *State, results []Result, n *next) {
	c := s.verifierCall()
	if c == nil || s.Verify == nil {
		return
	}
	if n.ends() {
		if n.outcome == ToolFailure {
			n.reason = "the verifier could not run: " + n.reason
		}
		return
	}
	if c.State != CallDone {
		return
	}
	if l := s.Verify.LastVerdict(); l != nil && l.Trial == s.Verify.Trial {
		return
	}
	for _, r := range results {
		if r.CallID != c.ID {
			continue
		}
		d, ok := readVerdict(r)
		if !ok {
			return
		}
		d.Trial = s.Verify.Trial
		s.Verify.Verdicts = append(s.Verify.Verdicts, d)
		if n := len(s.Verify.Verdicts); n > MaxTrialsLimit {
			s.Verify.Verdicts = s.Verify.Verdicts[n-MaxTrialsLimit:]
		}
		c.Observation = vf.verdictText(d, r)
	}
}

// readVerdict classifies a verifier's result: no failure is verified; a
// non-zero exit, a tool error or an HTTP 4xx is not verified; anything
// else (an invalid call, an unknown outcome) is no verdict at all.
func readVerdict(r Result) (Verdict, bool) {
	d := Verdict{Verified: r.Failure == nil}
	if f := r.Failure; f != nil {
		switch {
		case f.Kind == FailExit, f.Kind == FailTool, f.Kind == FailHTTP && f.Code >= 400 && f.Code < 500:
		default:
			return d, false
		}
	}
	if rep, ok := report(r.Output); ok {
		d.Score = rep.Score
	}
	return d, true
}

// verifierReport is the JSON object a verifier may print.
type verifierReport struct {
	Score    *float64 `json:"score"`
	Feedback string   `json:"feedback"`
}

// report reads the verifier's JSON report from its output, if it printed
// one; a score outside 0..1 is ignored.
func report(out []byte) (verifierReport, bool) {
	var rep verifierReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return verifierReport{}, false
	}
	if rep.Score != nil && (*rep.Score < 0 || *rep.Score > 1) {
		rep.Score = nil
	}
	return rep, true
}

// verdictText is what the transcript records of a verdict: the verdict,
// its score, and what the verifier said (its feedback field, or else its
// output, or else the tail of its standard error), bounded like any
// observation.
func (vf *verifier) verdictText(d Verdict, r Result) string {
	tool := vf.tool.Name
	said := strings.TrimSpace(strings.ToValidUTF8(string(r.Output), "\uFFFD"))
	if rep, ok := report(r.Output); ok && strings.TrimSpace(rep.Feedback) != "" {
		said = strings.TrimSpace(rep.Feedback)
	}
	if said == "" && r.Failure != nil {
		said = strings.TrimSpace(r.Failure.Detail)
	}
	if said == "" {
		said = "(it said nothing)"
	}
	head := "Verified by " + tool
	var how []string
	if !d.Verified {
		head = "Not verified by " + tool
		if f := r.Failure; f.Kind == FailExit {
			how = append(how, fmt.Sprintf("exit code %d", f.Code))
		} else if f.Kind == FailHTTP {
			how = append(how, fmt.Sprintf("HTTP %d", f.Code))
		}
	}
	if d.Score != nil {
		how = append(how, "score "+FormatScore(*d.Score))
	}
	if len(how) > 0 {
		head += " (" + strings.Join(how, ", ") + ")"
	}
	return bound(head+": "+said, vf.tool.MaxResultBytes, len(head)+2+len(said), false)
}

// judge ends a trial once the verifier's call is done: verified ends the
// run Completed; not verified keeps a reflection and starts the next
// trial, unless the trials are used up or the score has stalled
// (Escalated). A verifier that gave no verdict ends the run ToolFailure.
func (vf *verifier) judge(s *State, c *Call, notes *[]Note) next {
	v, cfg := s.Verify, &vf.cfg
	s.Transcript = append(s.Transcript, c.message(s.Turn))
	d := v.LastVerdict()
	if d == nil || d.Trial != v.Trial {
		return finishWith(ToolFailure, fmt.Sprintf("the verifier %s could not judge the answer of trial %d: %s", c.Name, v.Trial, cut(c.Observation, 400)))
	}
	said := cut(c.Observation, 400)
	if d.Verified {
		// The observation opens with "Verified by <tool>"; the reason says
		// that already, so it keeps only what the verifier said.
		evidence := said
		if head, rest, ok := strings.Cut(said, ": "); ok && strings.HasPrefix(head, "Verified by ") {
			evidence = rest
			if i := strings.Index(head, " ("); i >= 0 {
				evidence = head[i+1:] + " " + rest // keep the score: "(score 0.90) ..."
			}
		}
		return finishWith(Completed, fmt.Sprintf("the final answer of trial %d (turn %d) was verified by %s: %s", v.Trial, s.Turn, c.Name, evidence))
	}
	*notes = append(*notes, Note{Kind: NoteVerdict, CallID: c.ID, Warning: true, Message: fmt.Sprintf("Trial %d: %s", v.Trial, said)})
	if v.Trial >= cfg.MaxTrials {
		return finishWith(Escalated, fmt.Sprintf("handed to a person, still open: verifier %s did not verify any answer in %s (verify.maxTrials); last feedback: %s",
			c.Name, plural(v.Trial, "trial"), said))
	}
	if scores, ok := stalled(v.Verdicts, cfg.StallTrials); ok {
		return finishWith(Escalated, fmt.Sprintf("handed to a person, still open: the score of verifier %s has not improved for %s (verify.stallTrials; scores %s); last feedback: %s",
			c.Name, plural(cfg.StallTrials, "trial"), scores, said))
	}
	v.Memory = append(v.Memory, Reflection{Trial: v.Trial, At: len(s.Transcript) - 1})
	if n := len(v.Memory); n > cfg.Memory {
		v.Memory = v.Memory[n-cfg.Memory:]
	}
	v.Trial++
	if s.Plan != nil {
		s.Plan.next() // a new trial plans afresh
	}
	s.Transcript = append(s.Transcript, Message{Role: RoleUser, Turn: s.Turn, Content: vf.reflections(s)})
	v.Start = len(s.Transcript) - 1
	*notes = append(*notes, Note{Kind: NoteVerifying, Message: fmt.Sprintf(
		"Trial %d of %d starts from the goal with %s", v.Trial, cfg.MaxTrials, plural(len(v.Memory), "reflection"))})
	return turnOver()
}

// stalled reports whether the newest n scores did not improve on the best
// score before them, and lists the scores.
func stalled(verdicts []Verdict, n int) (string, bool) {
	var scores []float64
	for _, d := range verdicts {
		if d.Score != nil {
			scores = append(scores, *d.Score)
		}
	}
	if n <= 0 || len(scores) <= n {
		return "", false
	}
	best := scores[0]
	for _, f := range scores[:len(scores)-n] {
		best = max(best, f)
	}
	for _, f := range scores[len(scores)-n:] {
		if f > best {
			return "", false
		}
	}
	out := make([]string, len(scores))
	for i, f := range scores {
		out[i] = FormatScore(f)
	}
	return strings.Join(out, ", "), true
}

// reflections is the message a new trial starts with: the reflections in
// memory, each the answer a trial gave and what the verifier said of it.
func (vf *verifier) reflections(s *State) string {
	v := s.Verify
	var b strings.Builder
	fmt.Fprintf(&b, "Your earlier answers were checked by a verifier and not accepted. This is trial %d of at most %d: "+
		"work on the goal again from the start, using what the verifier said.\n\nPrevious attempt reflections:\n", v.Trial, vf.cfg.MaxTrials)
	for _, r := range v.Memory {
		answer, said := "", ""
		if r.At > 0 && r.At < len(s.Transcript) {
			answer, said = s.Transcript[r.At-1].Content, s.Transcript[r.At].Content
		}
		fmt.Fprintf(&b, "- Trial %d answered %q. %s\n", r.Trial, cut(strings.TrimSpace(answer), reflectionAnswerBytes), cut(said, reflectionFeedbackBytes))
	}
	return strings.TrimRight(b.String(), "\n")
}
