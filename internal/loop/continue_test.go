package loop

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestContinue_theEarlierConversationThenTheNewGoal(t *testing.T) {
	lookup := ToolCall{ID: "t1-0", Name: "lookup", Arguments: json.RawMessage(`{}`)}
	pending := ToolCall{ID: "t3-0", Name: "lookup", Arguments: json.RawMessage(`{"again":true}`)}
	asked := Message{Role: RoleAssistant, Turn: 1, ToolCalls: []ToolCall{lookup}, Reasoning: []Reasoning{{Text: "think"}}}
	result := Message{Role: RoleTool, Turn: 1, CallID: "t1-0", Tool: "lookup", Content: `{"ok":true}`}
	marker := Message{Role: RoleContext, Turn: 2, Content: "Context compacted before turn 2"}
	final := Message{Role: RoleAssistant, Turn: 2, Content: "It was the cache."}
	unanswered := Message{Role: RoleAssistant, Turn: 3, ToolCalls: []ToolCall{lookup, pending}}
	partial := Message{Role: RoleTool, Turn: 3, CallID: "t1-0", Tool: "lookup", Content: "{}"}
	at := func(m Message, turn int) Message { m.Turn, m.Reasoning = turn, nil; return m }
	user := func(s string, turn int) Message { return Message{Role: RoleUser, Turn: turn, Content: s} }

	for _, tc := range []struct {
		name    string
		earlier Earlier
		want    []Message
	}{{
		name:    "a run: its goal, its messages without markers or reasoning, the new goal",
		earlier: Earlier{Goal: "Why is it slow?", Transcript: []Message{asked, result, marker, final}},
		want:    []Message{user("Why is it slow?", -3), at(asked, -2), at(result, -2), at(final, -1), user("And now?", 0)},
	}, {
		name:    "a follow-up: its transcript holds its conversation and its goal already",
		earlier: Earlier{Goal: "And now?", FollowUp: true, Transcript: []Message{user("Why?", -2), at(final, -1), user("And now?", 0), at(final, 1)}},
		want:    []Message{user("Why?", -4), at(final, -3), user("And now?", -2), at(final, -1), user("And now?", 0)},
	}, {
		name:    "a run that ended while calls waited: the unanswered batch is left out",
		earlier: Earlier{Goal: "Why is it slow?", Transcript: []Message{asked, result, final, unanswered, partial}},
		want:    []Message{user("Why is it slow?", -3), at(asked, -2), at(result, -2), at(final, -1), user("And now?", 0)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Continue(tc.earlier, "And now?")); diff != "" {
				t.Errorf("Continue (-want +got):\n%s", diff)
			}
		})
	}
}

// A follow-up's first request is the opening, the earlier conversation
// and the new goal, in that order; its ceilings count only its own turns.
func TestContinue_theFollowUpsFirstRequestCarriesTheEarlierConversation(t *testing.T) {
	first := makeRun(t).readTool("lookup").then(calls(call("lookup", `{}`)), answer("It was the cache."))
	earlier := first.go_()
	expectOutcome(t, earlier, Completed)

	next := makeRun(t).readTool("lookup").maxTurns(1).then(answer("Clear it."))
	next.cfg.Goal, next.cfg.FollowUp = "How do I fix it?", true
	s := &State{Transcript: Continue(Earlier{Goal: first.cfg.Goal, Transcript: earlier.Transcript}, next.cfg.Goal)}
	var sent [][]Message
	model := recordingModel(func(req *Request) { sent = append(sent, req.Messages) })
	(&Runner{Engine: next.engine(), Model: model, Tools: next.tools,
		Sleep: func(_ context.Context, d time.Duration) { next.clock.Advance(d) }}).Run(context.Background(), s)
	expectOutcome(t, s, Completed)

	if len(sent) != 1 {
		t.Fatalf("the follow-up made %d model calls, want 1 (maxTurns 1: the earlier run's turns do not count)", len(sent))
	}
	var got []string
	for _, m := range sent[0] {
		got = append(got, string(m.Role)+": "+m.Content)
	}
	want := []string{"user: " + followUpOpening, "user: " + first.cfg.Goal, "assistant: ", `tool: {"ok":true}`,
		"assistant: It was the cache.", "user: How do I fix it?"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the follow-up's request (-want +got):\n%s", diff)
	}
}

// recordingModel answers "Clear it." and shows each request to seen.
type recordingModel func(*Request)

func (m recordingModel) Complete(_ context.Context, req *Request) (*Reply, error) {
	m(req)
	return &Reply{Content: "Clear it.", Usage: TokenUsage{InputTokens: 10, OutputTokens: 2}}, nil
}
