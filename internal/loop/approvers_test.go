package loop

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The operator counts a person once, whatever the admission policy let
// through: an answer by an approver already counted, or by nobody known,
// leaves the call waiting with a note; a second person's approval runs
// it.
func TestTakeApproval_countsEachPersonOnce(t *testing.T) {
	c := Call{ToolCall: ToolCall{ID: "t1-c1", Name: "issue_refund"}, Needed: 2}
	var notes []Note
	for _, tc := range []struct {
		by   string
		want bool
	}{{"jane", false}, {"jane", false}, {"", false}, {"bob", true}} {
		if got := takeApproval(&c, tc.by, &notes); got != tc.want {
			t.Errorf("approval by %q: all approvals %v, want %v", tc.by, got, tc.want)
		}
	}
	if diff := cmp.Diff([]string{"jane", "bob"}, c.ApprovedBy); diff != "" {
		t.Errorf("approvers (-want +got):\n%s", diff)
	}
	var kinds []NoteKind
	for _, n := range notes {
		kinds = append(kinds, n.Kind)
	}
	if diff := cmp.Diff([]NoteKind{NoteApproval, NoteApprovalNotCounted, NoteApprovalNotCounted}, kinds); diff != "" {
		t.Errorf("notes (-want +got):\n%s", diff)
	}
}
