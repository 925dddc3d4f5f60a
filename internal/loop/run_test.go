package loop

import (
	"context"
	"strings"
	"testing"
	"time"
)

// An approver that never answers (a terminal nobody types on) is handed a
// context that ends at the approval deadline, and the run ends Escalated
// as the operator ends it, instead of waiting for ever.
func TestRunner_unansweredAskEscalatesAtTheApprovalDeadline(t *testing.T) {
	r := makeRun(t).tool("refund", true, false).then(calls(call("refund", `{}`)), answer("x"))
	r.cfg.ApprovalTimeout = 200 * time.Millisecond
	e, err := New(r.cfg) // the real clock: the deadline is a real one
	if err != nil {
		t.Fatal(err)
	}
	var deadline time.Time
	silent := func(ctx context.Context, _ []Call) map[string]Answer {
		deadline, _ = ctx.Deadline()
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := &State{}
	(&Runner{Engine: e, Model: &Scripted{Entries: r.script}, Tools: r.tools, Approve: silent}).Run(ctx, s)
	expectOutcome(t, s, Escalated)
	if !strings.Contains(s.Reason, "t1-c1 (refund) waited more than approvalTimeout (200ms)") {
		t.Fatalf("reason = %q", s.Reason)
	}
	if want := s.Calls[0].RequestedAt.Add(200 * time.Millisecond); !deadline.Equal(want) {
		t.Fatalf("approver's deadline = %s, want requestedAt + approvalTimeout = %s", deadline, want)
	}
	if len(r.tools.Ran()) != 0 {
		t.Fatalf("the unanswered call ran: %v", r.tools.Ran())
	}
}
