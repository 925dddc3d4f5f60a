package localrun

import (
	"fmt"
	"strings"

	"github.com/agentrun/agentrun/internal/loop"
)

// ExitUsage is the exit status of a usage error or a manifest that cannot
// be read or is not valid: nothing ran.
const ExitUsage = 1

// exitCodes maps each outcome to the exit status of agentrun local: 0 for
// Completed, then one distinct code per outcome, in the API's order.
var exitCodes = map[loop.Outcome]int{
	loop.Completed:       0,
	loop.BudgetExhausted: 2,
	loop.GuardrailStop:   3,
	loop.LoopDetected:    4,
	loop.ApprovalDenied:  5,
	loop.Escalated:       6,
	loop.ToolFailure:     7,
	loop.Error:           8,
}

// ExitCode is the exit status for a run that ended with outcome o.
func ExitCode(o loop.Outcome) int {
	if c, ok := exitCodes[o]; ok {
		return c
	}
	return exitCodes[loop.Error] // an outcome this table does not know is a defect
}

// ExitCodeTable is the table of exit statuses, for a command's help.
func ExitCodeTable() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-16s %d\n", "Completed", 0)
	fmt.Fprintf(&b, "  %-16s %d\n", "usage, manifest", ExitUsage)
	for _, o := range loop.Outcomes[1:] {
		fmt.Fprintf(&b, "  %-16s %d\n", o, ExitCode(o))
	}
	return b.String()
}
