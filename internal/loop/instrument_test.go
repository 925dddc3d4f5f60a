package loop

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// logObserver records the calls it sees, start and end.
type logObserver struct {
	name string
	mu   *sync.Mutex
	log  *[]string
}

func (o logObserver) add(s string) { o.mu.Lock(); *o.log = append(*o.log, o.name+" "+s); o.mu.Unlock() }

func (o logObserver) ModelCall(ctx context.Context, req *Request) (context.Context, func(*Reply, error)) {
	o.add("model " + req.Model)
	return ctx, func(r *Reply, err error) { o.add("model done") }
}

func (o logObserver) ToolCall(ctx context.Context, inv Invocation) (context.Context, func(Result)) {
	o.add("tool " + inv.CallID)
	return ctx, func(Result) { o.add("tool done " + inv.CallID) }
}

type preflighted struct{ ToolboxFunc }

func (preflighted) Preflight(context.Context) error { return errors.New("no such tool") }

func TestObserve_everyCallIsSeenInOrderAndPreflightIsKept(t *testing.T) {
	var mu sync.Mutex
	var log []string
	obs := Observers(logObserver{"a", &mu, &log}, nil, logObserver{"b", &mu, &log})
	m := ObserveModel(&Scripted{Entries: []ScriptEntry{{Content: "ok"}}}, obs)
	if _, err := m.Complete(context.Background(), &Request{Model: "m1"}); err != nil {
		t.Fatal(err)
	}
	tb := ObserveTools(preflighted{ToolboxFunc(func(context.Context, Invocation) Result { return Result{} })}, obs)
	tb.Execute(context.Background(), Invocation{CallID: "t1-c1"})
	want := []string{"a model m1", "b model m1", "b model done", "a model done", "a tool t1-c1", "b tool t1-c1", "b tool done t1-c1", "a tool done t1-c1"}
	if d := cmp.Diff(want, log); d != "" {
		t.Errorf("observed (-want +got):\n%s", d)
	}
	p, ok := tb.(Preflighter)
	if !ok || p.Preflight(context.Background()) == nil {
		t.Errorf("the observed toolbox lost its Preflight")
	}
	if _, ok := ObserveTools(ToolboxFunc(func(context.Context, Invocation) Result { return Result{} }), obs).(Preflighter); ok {
		t.Errorf("a toolbox without Preflight gained one")
	}
}

// The note of a run refused by a ceiling names the ceiling, for metrics.
func TestAdmission_refusalNoteNamesTheCeiling(t *testing.T) {
	eng, err := New(Config{Goal: "g", Budget: Budget{MaxTurns: 1}, Tools: []ToolSpec{{Name: "look"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := &State{}
	var notes []Note
	(&Runner{Engine: eng, Model: &Scripted{Entries: []ScriptEntry{{ToolCalls: []ToolCall{{Name: "look", Arguments: json.RawMessage(`{}`)}}}}},
		Tools:  ToolboxFunc(func(context.Context, Invocation) Result { return Result{Output: []byte("x")} }),
		OnStep: func(_ *State, eff Effect) { notes = append(notes, eff.Notes...) }}).Run(context.Background(), s)
	if s.Outcome != BudgetExhausted {
		t.Fatalf("outcome %s", s.Outcome)
	}
	var got []Dimension
	for _, n := range notes {
		if n.Ceiling != "" {
			got = append(got, n.Ceiling)
		}
	}
	if d := cmp.Diff([]Dimension{DimTurns}, got); d != "" {
		t.Errorf("ceilings named (-want +got):\n%s", d)
	}
}
