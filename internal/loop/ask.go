package loop

// Questions: a tool that AsksPerson is the agent asking a person. Its
// call waits as an ASK does (counted against ApprovalTimeout), and the
// person's AnswerReply is its result.

import (
	"encoding/json"
	"fmt"
)

// RuleAskPerson is the rule of a question's ASK: the tool asks a person.
const RuleAskPerson = "tool.askPerson"

// AskPersonSchema is the parameters of a tool that asks a person, for a
// caller that declares one without its own: a new copy each time.
func AskPersonSchema() json.RawMessage { return json.RawMessage(askPersonSchema) }

const askPersonSchema = `{"type":"object","properties":{` +
	`"question":{"type":"string","minLength":1,"maxLength":2000,"description":"What you need a person to tell you, in one or two sentences."},` +
	`"choices":{"type":"array","maxItems":10,"items":{"type":"string","maxLength":200},"description":"The answers you expect, if there are a few; the person may answer otherwise."}},` +
	`"required":["question"],"additionalProperties":false}`

// AskPersonDescription is the description of a tool that asks a person,
// for a caller that declares one without its own.
const AskPersonDescription = "Ask a person a question and wait for the answer, when you need a fact or a choice only a person can give. " +
	"The run waits until they answer."

// Question is what a question call asks, read from its arguments: the
// question and the choices offered. ok is false for a call that is not a
// question.
func Question(c *Call) (question string, choices []string, ok bool) {
	if c.Rule != RuleAskPerson {
		return "", nil, false
	}
	var a struct {
		Question string   `json:"question"`
		Choices  []string `json:"choices"`
	}
	_ = json.Unmarshal(c.Arguments, &a) // vetting held them to the schema
	return a.Question, a.Choices, true
}

// Misfit says why the waiting call c does not take the answer a (edited:
// an approval with changes), or "" when it does. A question takes an
// AnswerReply, a call waiting for approval takes approve (with changes
// only when one person approves it: changes would change what the others
// approve); both take deny and stop. An answer that does not fit is not
// applied, and the call waits on. The operator says why with a warning;
// the engine checks again.
func Misfit(c *Call, a Answer, edited bool) string {
	question := c.Rule == RuleAskPerson
	switch {
	case a == DenyAnswer || a == Stop:
		return ""
	case question && a != AnswerReply:
		return "it is a question the agent asks: answer it with answer::TEXT (kubectl agentrun answer), or deny or stop it"
	case !question && a == AnswerReply:
		return "it waits for approval, not for an answer to a question: approve, deny or stop it"
	case c.Needed > 1 && edited:
		return fmt.Sprintf("it needs %d people to approve it, and changes would change what the others approve: approve it as it is, "+
			"or deny it with a reason", c.Needed)
	}
	return ""
}

// answeredText is what the model reads as the result of its question: the
// person's answer, quoted and escaped on one line, cut at maxBytes.
func answeredText(text string, maxBytes int) string {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxResultBytes
	}
	return fmt.Sprintf("A person answered your question: %s", quotedReason(text, maxBytes))
}
