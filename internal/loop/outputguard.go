package loop

// Guardrails on what comes back: tool results and the final answer are
// screened before the model, the status or the transcript holds them.

import (
	"fmt"
	"strings"
)

// guardrailSet is a run's compiled guardrails, in the order declared.
type guardrailSet []compiledGuardrail

// redactionMark replaces every match of a guardrail that fired on a
// result or an answer.
func redactionMark(name string) string { return "[redacted by guardrail " + name + "]" }

// screenOutput applies the guardrails that watch target to text: a tool's
// result (tool names it) or the final answer (tool is empty; a guardrail's
// tools do not limit it there). Every match of each guardrail that fires
// is replaced by its redaction mark; fired names those guardrails, and
// halt the first of them with severity halt.
func (gs guardrailSet) screenOutput(target GuardrailTarget, tool, text string) (out string, fired []string, halt string) {
	out = text
	for _, g := range gs {
		if !g.watches(target) || (tool != "" && !matchesTool(g.Tools, tool)) || !g.re.MatchString(out) {
			continue
		}
		out = g.re.ReplaceAllLiteralString(out, redactionMark(g.Name))
		fired = append(fired, g.Name)
		if g.Severity == Halt && halt == "" {
			halt = g.Name
		}
	}
	return out, fired, halt
}

// screenResult screens call c's observation and notes what fired. It
// returns the halting guardrail's name, if one fired.
func (gs guardrailSet) screenResult(c *Call, notes *[]Note) (halt string) {
	obs, fired, halt := gs.screenOutput(OnResults, c.Name, c.Observation)
	if len(fired) == 0 {
		return ""
	}
	c.Observation = obs
	*notes = append(*notes, Note{Kind: NoteOutputScreened, CallID: c.ID, Warning: true, Message: fmt.Sprintf(
		"The result of %s (%s) matched guardrail %s; the matches were redacted", c.ID, c.Name, strings.Join(fired, ", "))})
	return halt
}

// screenAnswer screens the final answer and notes what fired.
func (gs guardrailSet) screenAnswer(s *State, content string, notes *[]Note) (out, halt string) {
	out, fired, halt := gs.screenOutput(OnAnswer, "", content)
	if len(fired) > 0 {
		*notes = append(*notes, Note{Kind: NoteOutputScreened, Turn: s.Turn, Warning: true, Message: fmt.Sprintf(
			"The final answer of turn %d matched guardrail %s; the matches were redacted", s.Turn, strings.Join(fired, ", "))})
	}
	return out, halt
}
