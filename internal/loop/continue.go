package loop

// Follow-up runs: a run that continues an earlier, finished run starts
// from that run's conversation. The conversation is seeded into the new
// run's State.Transcript (Continue), so that the new run saves it with
// its own transcript and resumes from it as from any other state: a
// follow-up's start and resume are the same code path as every run's.

// followUpOpening is the first user message of a follow-up run
// (Config.FollowUp), where another run's goal stands: the goal of a
// follow-up is the user message that ends the conversation it starts from.
const followUpOpening = "This run continues an earlier run: its conversation follows as it was, and your goal now is " +
	"the last user message before your first reply."

// Earlier is the finished run a follow-up continues, as it was saved.
type Earlier struct {
	// Goal is the earlier run's goal: the first user message of its
	// conversation, unless FollowUp.
	Goal string
	// FollowUp: the earlier run was a follow-up itself, so its transcript
	// already starts with the conversation it continued, and its own goal
	// (Config.FollowUp) is in it.
	FollowUp bool
	// Transcript is the earlier run's transcript, as saved.
	Transcript []Message
}

// Continue is the transcript a follow-up run starts from: the earlier
// run's conversation, then goal as a new user message. The conversation
// is what the earlier run's requests were made of: its goal (unless it
// was a follow-up itself), then its transcript without the compaction
// markers (RoleContext), which no request carries, and without a last
// batch of calls that has not all of its results (a run that ended while
// calls waited), which no provider accepts. The earlier run's compactions
// are not replayed: the follow-up's own context policy compacts the
// conversation's older turns as it does its own. Reasoning is left out:
// a provider requires it only with the calls of the turn in progress.
//
// The earlier messages are numbered as turns before the follow-up's
// first (its last turn is -1, and so on back), so that the context
// policy's "newest turns" counts them as older than every turn of the
// follow-up; the new goal is turn 0, as a run's goal is.
func Continue(e Earlier, goal string) []Message {
	msgs := make([]Message, 0, len(e.Transcript)+2)
	if !e.FollowUp {
		msgs = append(msgs, Message{Role: RoleUser, Content: e.Goal})
	}
	for _, m := range e.Transcript {
		if m.Role == RoleContext {
			continue
		}
		m.Reasoning = nil
		msgs = append(msgs, m)
	}
	msgs = msgs[:answered(msgs)]
	last := 0
	for _, m := range msgs {
		last = max(last, m.Turn)
	}
	for i := range msgs {
		msgs[i].Turn -= last + 1
	}
	return append(msgs, Message{Role: RoleUser, Content: goal})
}

// answered is how many of msgs end with every proposed call answered:
// all of them, or up to the last assistant message whose calls do not
// all have a result after it.
func answered(msgs []Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != RoleAssistant {
			continue
		}
		results := map[string]bool{}
		for _, r := range msgs[i+1:] {
			if r.Role == RoleTool {
				results[r.CallID] = true
			}
		}
		for _, c := range m.ToolCalls {
			if !results[c.ID] {
				return i
			}
		}
		return len(msgs)
	}
	return len(msgs)
}
