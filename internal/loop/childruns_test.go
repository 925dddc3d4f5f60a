package loop

import (
	"fmt"
	"testing"
)

// State.ChildRuns keeps the newest MaxChildRuns children and counts the
// rest; a child whose use is unknown is listed with its reservation.
func TestRecordChild_keepsTheNewestAndCountsTheRest(t *testing.T) {
	s := &State{}
	for i := range MaxChildRuns + 3 {
		c := &Call{ToolCall: ToolCall{ID: fmt.Sprintf("t1-c%d", i)}}
		s.recordChild(c, Result{ChildRun: fmt.Sprintf("child-%d", i), ChildOutcome: "Completed", Child: &Usage{Turns: 2, Cost: MustMoney("0.01")}}, nil)
	}
	if len(s.ChildRuns) != MaxChildRuns || s.ChildRunsOmitted != 3 {
		t.Fatalf("%d children listed, %d omitted; want %d and 3", len(s.ChildRuns), s.ChildRunsOmitted, MaxChildRuns)
	}
	if first, last := s.ChildRuns[0].Name, s.ChildRuns[MaxChildRuns-1].Name; first != "child-3" || last != fmt.Sprintf("child-%d", MaxChildRuns+2) {
		t.Errorf("listed %s to %s, want the newest: child-3 to child-%d", first, last, MaxChildRuns+2)
	}

	c := &Call{ToolCall: ToolCall{ID: "t2-c1"}}
	s.recordChild(c, Result{ChildRun: "late", ChildOutcome: "Unfinished"}, &ChildBudget{Turns: 5, Cost: MustMoney("0.50")})
	got := s.ChildRuns[len(s.ChildRuns)-1]
	if want := (ChildRun{Name: "late", CallID: "t2-c1", Outcome: "Unfinished", Turns: 5, Cost: MustMoney("0.50")}); got != want {
		t.Errorf("an unfinished child is listed as %+v, want %+v", got, want)
	}
}
