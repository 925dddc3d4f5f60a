package loop

// Several approvers: a call whose rule asks for Approvals > 1 runs only
// once that many distinct people approved it. One denial or stop refuses
// it, as for any call.

import (
	"fmt"
	"slices"
)

// takeApproval counts by's approval of c, which needs c.Needed distinct
// approvers, and reports whether c now has them all. An approval whose
// author is unknown, or whose author approved c before, is not counted; an
// approval that leaves c short of its approvers is recorded (a NoteApproval
// note, so the caller records who gave it) and c waits on.
func takeApproval(c *Call, by string, notes *[]Note) bool {
	switch {
	case by == "":
		*notes = append(*notes, Note{Kind: NoteApprovalNotCounted, CallID: c.ID, Warning: true, Message: fmt.Sprintf(
			"An approval of %s (%s) whose author is not known does not count: it needs %d distinct people to approve it",
			c.ID, c.Name, c.Needed)})
		return false
	case slices.Contains(c.ApprovedBy, by):
		*notes = append(*notes, Note{Kind: NoteApprovalNotCounted, CallID: c.ID, Warning: true, Message: fmt.Sprintf(
			"%s approved %s (%s) before: a person counts once, and it needs %d distinct people to approve it",
			by, c.ID, c.Name, c.Needed)})
		return false
	}
	c.ApprovedBy = append(c.ApprovedBy, by)
	if len(c.ApprovedBy) >= c.Needed {
		return true
	}
	*notes = append(*notes, Note{Kind: NoteApproval, CallID: c.ID, Message: fmt.Sprintf(
		"%s approved %s (%s), %d of the %d distinct approvals it needs; it waits for %d more",
		by, c.ID, c.Name, len(c.ApprovedBy), c.Needed, c.Needed-len(c.ApprovedBy))})
	return false
}
