package loop

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// recording remembers the requests it was sent, then plays its model.
type recording struct {
	Model
	reqs []Request
}

func (m *recording) Complete(ctx context.Context, req *Request) (*Reply, error) {
	m.reqs = append(m.reqs, *req)
	return m.Model.Complete(ctx, req)
}

// sent is what identifies each request: its model, fallback and attempt.
func (m *recording) sent() []string {
	var out []string
	for _, r := range m.reqs {
		out = append(out, r.Model+"/"+string(rune('0'+r.Fallback))+"/"+string(rune('0'+r.Attempt)))
	}
	return out
}

// fallbackRun is a run on model "primary" (priced $1/$2 a million tokens)
// with the fallbacks "backup" ($3/$6) and "last" ($5/$10), three
// attempts each.
func fallbackRun(t *testing.T) *run {
	r := makeRun(t)
	r.cfg.Model = ModelConfig{Provider: "openai", Name: "primary", Retry: RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second},
		Pricing: Pricing{Input: MustMoney("1"), Output: MustMoney("2")}}
	r.cfg.Fallbacks = []ModelConfig{
		{Provider: "anthropic", Name: "backup", Pricing: Pricing{Input: MustMoney("3"), Output: MustMoney("6")}},
		{Provider: "openai", Name: "last", Pricing: Pricing{Input: MustMoney("5"), Output: MustMoney("10")}},
	}
	return r
}

// runModels runs the fixture with the models given and returns the state
// and the notes of the given kind.
func runModels(r *run, s *State, kind NoteKind, primary Model, fallbacks ...Model) []Note {
	var notes []Note
	(&Runner{Engine: r.engine(), Model: primary, Fallbacks: fallbacks, Tools: r.tools,
		Sleep:  func(_ context.Context, d time.Duration) { r.clock.Advance(d) },
		OnStep: func(_ *State, eff Effect) { notes = append(notes, notesOf(eff.Notes, kind)...) }}).Run(context.Background(), s)
	return notes
}

func notesOf(notes []Note, kind NoteKind) []Note {
	var out []Note
	for _, n := range notes {
		if n.Kind == kind {
			out = append(out, n)
		}
	}
	return out
}

var outage = ScriptEntry{Error: "openai: HTTP 500: internal server error", Transient: true}

func TestFallback_outageAfterRetriesGoesToTheNextModel(t *testing.T) {
	r := fallbackRun(t).readTool("lookup")
	primary := &recording{Model: &Scripted{Entries: []ScriptEntry{outage}}}
	backup := &recording{Model: &Scripted{Entries: []ScriptEntry{
		{ToolCalls: []ToolCall{call("lookup", `{}`)}, Usage: TokenUsage{InputTokens: 1000, OutputTokens: 100}},
		{Content: "done", Usage: TokenUsage{InputTokens: 2000, OutputTokens: 200}},
	}}}
	last := &recording{Model: &Scripted{}}
	s := &State{}
	notes := runModels(r, s, NoteModelFallback, primary, backup, last)
	expectOutcome(t, s, Completed)
	if diff := cmp.Diff([]string{"primary/0/1", "primary/0/2", "primary/0/3"}, primary.sent()); diff != "" {
		t.Errorf("requests to the primary (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"backup/1/1", "backup/1/1"}, backup.sent()); diff != "" {
		t.Errorf("requests to the fallback (-want +got):\n%s", diff)
	}
	if len(last.reqs) != 0 {
		t.Errorf("the second fallback was called %d times", len(last.reqs))
	}
	if len(notes) != 1 || !notes[0].Warning || notes[0].Turn != 1 ||
		!strings.Contains(notes[0].Message, "Model primary stayed unavailable after 3 attempts (last error: scripted model: openai: HTTP 500") ||
		!strings.Contains(notes[0].Message, "turn 1 goes to fallback 1 of 2, model backup") {
		t.Fatalf("fallback notes = %+v", notes)
	}
	if s.Model != 1 || s.Usage.Turns != 2 || s.Turn != 2 {
		t.Fatalf("model %d, turns %d, turn %d; want 1, 2, 2", s.Model, s.Usage.Turns, s.Turn)
	}
	// Charged once, at the fallback's prices: 3000 input tokens at $3 and
	// 300 output at $6 a million. The failed attempts charged nothing.
	if want := MustMoney("0.0108"); s.Usage.Cost != want {
		t.Fatalf("cost = %s, want %s", s.Usage.Cost, want)
	}
}

func TestFallback_reservationIsTheFallbacksOwn(t *testing.T) {
	r := fallbackRun(t)
	r.cfg.Fallbacks[0].MaxOutputTokens = 1000
	e := r.engine()
	s := &State{}
	first := e.Step(s, Input{})
	for range 3 {
		first = e.Step(s, Input{ModelErr: providerDown{}})
		if first.Kind == EffectWait {
			r.clock.Advance(first.Until.Sub(r.clock.Now()))
			first = e.Step(s, Input{})
		}
	}
	if first.Kind != EffectCallModel || first.Request.Model != "backup" || first.Request.MaxOutputTokens != 1000 {
		t.Fatalf("effect after the retries = %+v", first)
	}
	// The reservation is the backup's request at the backup's prices,
	// not added to the primary's.
	want := e.Config().modelReservation(ByteEstimator{}.EstimateInputTokens(first.Request))
	if s.Reserved.Cost != want.Cost || s.Reserved.OutputTokens != 1000 {
		t.Fatalf("reserved %+v, want cost %s and 1000 output tokens", s.Reserved, want.Cost)
	}
}

func TestFallback_notOnAnErrorTheRequestCaused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry ScriptEntry
	}{
		{"HTTP 400", ScriptEntry{Error: "openai: HTTP 400: invalid request: messages[0] is empty"}},
		{"refusal", ScriptEntry{Refusal: "I cannot help with that."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := fallbackRun(t)
			backup := &recording{Model: &Scripted{Entries: []ScriptEntry{answer("done")}}}
			s := &State{}
			notes := runModels(r, s, NoteModelFallback, &Scripted{Entries: []ScriptEntry{tc.entry}}, backup)
			if s.Outcome == Completed || s.Model != 0 || len(backup.reqs) != 0 || len(notes) != 0 {
				t.Fatalf("outcome %s (%s), model %d, fallback called %d times, notes %+v", s.Outcome, s.Reason, s.Model, len(backup.reqs), notes)
			}
		})
	}
}

func TestFallback_everyModelDownEndsToolFailureNamingTheLast(t *testing.T) {
	r := fallbackRun(t)
	down := &Scripted{Entries: []ScriptEntry{outage}}
	s := &State{}
	notes := runModels(r, s, NoteModelFallback, down, down, down)
	expectOutcome(t, s, ToolFailure)
	if len(notes) != 2 || s.Model != 2 || !strings.Contains(s.Reason, "after 3 attempts") {
		t.Fatalf("model %d, reason %q, notes %+v", s.Model, s.Reason, notes)
	}
}

func TestFallback_resumedRunStaysOnTheFallback(t *testing.T) {
	r := fallbackRun(t).readTool("lookup")
	e := r.engine()
	s := &State{}
	eff := e.Step(s, Input{})
	for eff.Request == nil || eff.Request.Model != "backup" {
		in := Input{}
		switch eff.Kind {
		case EffectCallModel:
			in.ModelErr = providerDown{}
		case EffectWait:
			r.clock.Advance(eff.Until.Sub(r.clock.Now()))
		default:
			t.Fatalf("effect = %+v", eff)
		}
		eff = e.Step(s, in)
	}
	eff = e.Step(s, Input{Reply: &Reply{ToolCalls: []ToolCall{call("lookup", `{}`)}}})
	if eff.Kind != EffectRunTools {
		t.Fatalf("effect = %+v", eff)
	}
	// The operator restarts: the state is read back by a new engine.
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	resumed := &State{}
	if err := json.Unmarshal(b, resumed); err != nil {
		t.Fatal(err)
	}
	primary := &recording{Model: &Scripted{Entries: []ScriptEntry{answer("from the primary")}}}
	backup := &recording{Model: &Scripted{Entries: []ScriptEntry{{}, answer("from the backup")}}}
	runModels(r, resumed, NoteModelFallback, primary, backup)
	expectOutcome(t, resumed, Completed)
	if resumed.Answer != "from the backup" || len(primary.reqs) != 0 {
		t.Fatalf("answer %q, primary called %d times", resumed.Answer, len(primary.reqs))
	}
	if diff := cmp.Diff([]string{"backup/1/1"}, backup.sent()); diff != "" {
		t.Errorf("requests after the restart (-want +got):\n%s", diff)
	}
}
