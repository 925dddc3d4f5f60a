package loop

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ScriptEntry is one scripted model answer, in the shape of the API's
// model.script entries.
type ScriptEntry struct {
	Content   string
	ToolCalls []ToolCall
	Usage     TokenUsage
	// Refusal makes the model refuse with this text.
	Refusal string
	// Error makes the call fail with this text: a permanent failure, or,
	// with Transient, an outage the engine retries under model.retry (the
	// same entry answers every attempt).
	Error     string
	Transient bool
	// Truncated marks the answer as cut at the output limit.
	Truncated bool
	// Delay is how long the call takes.
	Delay time.Duration
}

// Scripted is a model that plays a script: one entry per model call, in
// order. It keeps no position of its own: the position is the number of
// answers already in the request's transcript (and in earlier trials'), so it survives restarts
// and serves any number of runs.
type Scripted struct {
	Entries []ScriptEntry
}

// ErrScriptExhausted is returned for a call past the last entry.
var ErrScriptExhausted = errors.New("script exhausted")

// Complete plays the entry for this call.
func (m *Scripted) Complete(ctx context.Context, req *Request) (*Reply, error) {
	if req.Summary {
		// A summary call keeps the script's place: it is no answer.
		return &Reply{Content: fmt.Sprintf("The %d messages before this one, condensed.", len(req.Messages)-2),
			Usage: TokenUsage{InputTokens: ByteEstimator{}.EstimateInputTokens(req) / 4, OutputTokens: 16}}, nil
	}
	i := req.EarlierAnswers
	for _, msg := range req.Messages {
		// A follow-up's earlier conversation (turns before 0, see
		// Continue) was answered by the earlier run's script.
		if msg.Role == RoleAssistant && msg.Turn >= 0 {
			i++
		}
	}
	if i >= len(m.Entries) {
		return nil, fmt.Errorf("scripted model: %w (it has %d entries; this is call %d)", ErrScriptExhausted, len(m.Entries), i+1)
	}
	en := m.Entries[i]
	if en.Delay > 0 {
		t := time.NewTimer(en.Delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("scripted model: call %d: %w", i+1, ctx.Err())
		case <-t.C:
		}
	}
	if en.Error != "" {
		return nil, &scriptedError{msg: "scripted model: " + en.Error, transient: en.Transient}
	}
	r := &Reply{Content: en.Content, Refusal: en.Refusal, Truncated: en.Truncated, Usage: en.Usage}
	if len(en.ToolCalls) > 0 {
		r.ToolCalls = append([]ToolCall(nil), en.ToolCalls...)
	}
	return r, nil
}

// scriptedError is a scripted call's failure; it says whether it is
// transient (see TransientError).
type scriptedError struct {
	msg       string
	transient bool
}

func (e *scriptedError) Error() string             { return e.msg }
func (e *scriptedError) Transient() bool           { return e.transient }
func (e *scriptedError) RetryAfter() time.Duration { return 0 }
