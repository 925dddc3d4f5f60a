package controller

import (
	"slices"
	"time"

	v1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/budget"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
)

// change is what one reconcile's save changed of a run, worked out once
// after the save and handed to each reporter: the log (logTransitions),
// the events (emit), the metrics (Metrics.record) and the trace (endTrace).
// No reporter compares the stored and the saved status again on its own.
type change struct {
	// run is the run as saved, with the spec it ran from (asBuilt: a
	// template's resolved spec where it came from one).
	run *v1alpha1.AgentRun
	// state is the engine's state as saved; nil when the run never built
	// one (it failed before).
	state *loop.State
	// notes are what the steps reported, in order.
	notes []loop.Note
	// answers are the approvals this save applied, by call id, with who
	// gave each.
	answers map[string]runstatus.Answer
	// owner is the run's escalation owner (escalationOwner), whether or
	// not it escalated: the time-to-human metrics label waits by it.
	owner string
	// waits are the first responses and decisions of waiting calls this
	// save recorded (status.approvals), for the time-to-human metrics.
	waits []humanWait

	// started: the run's first turn began (status.startTime was set).
	started bool
	// asked are the calls that began to wait for a person.
	asked []v1alpha1.PendingApproval
	// refused: the run was refused as a GitOps re-run.
	refused bool
	// ended: the run got its outcome.
	ended bool
	// inputTokens, outputTokens and spent are what the save charged: the
	// usage it wrote less the usage it read, so a step counts once.
	inputTokens, outputTokens int64
	spent                     loop.Money
}

// changeOf compares the run as the reconcile found it (base: as last
// saved, the stored object or our saves' status over it) with the run as
// saved now.
func changeOf(base, run *v1alpha1.AgentRun, s *loop.State, notes []loop.Note) change {
	before, after := &base.Status, &run.Status
	c := change{run: run, state: s, notes: notes,
		started: before.StartTime == nil && after.StartTime != nil,
		refused: refused(after) && !refused(before),
		ended:   before.Outcome == "" && after.Outcome != "",
	}
	was := map[string]bool{}
	for _, p := range before.PendingApprovals {
		was[p.CallID] = true
	}
	for _, p := range after.PendingApprovals {
		if !was[p.CallID] {
			c.asked = append(c.asked, p)
		}
	}
	c.waits = humanWaits(before, after)
	from, to := usageOf(base), usageOf(run)
	c.inputTokens = max(to.InputTokens-from.InputTokens, 0)
	c.outputTokens = max(to.OutputTokens-from.OutputTokens, 0)
	c.spent = max(costOf(to)-costOf(from), 0)
	return c
}

// changeOfScope is the change of a reconcile that saved.
func changeOfScope(sc *scope) change {
	c := changeOf(sc.stored.run(), asBuilt(sc), sc.state, sc.notes)
	c.answers = sc.answers
	c.owner = ownerOf(sc)
	return c
}

// Kinds of a person's wait, the kind label of the time-to-human metrics.
const (
	waitApproval   = "approval"
	waitQuestion   = "question"
	waitEscalation = "escalation"
)

// humanWait is one wait for a person that ended: the first response
// (decision false) or the decision (true), of kind waitApproval,
// waitQuestion or waitEscalation, after took.
type humanWait struct {
	kind     string
	decision bool
	took     time.Duration
}

// humanWaits are the waits for a person that the save from before to
// after ended, each read from status alone: a call that waited in before
// and has answers in after that before lacks (status.approvals, each with
// when the operator saw it) got its first response when it had none
// before (for a call that needs several approvers, the first approver),
// and its decision when it no longer waits. A call that stopped waiting
// with no answer (its timeout, a cancel) got neither. A save that is
// written again, or an operator that restarts, finds the answers in
// before: each wait is counted once.
func humanWaits(before, after *v1alpha1.AgentRunStatus) []humanWait {
	var out []humanWait
	for _, p := range before.PendingApprovals {
		if p.RequestedAt == nil {
			continue
		}
		var fresh []v1alpha1.ApprovalRecord
		for _, a := range after.Approvals {
			if a.CallID == p.CallID && !a.Stale && a.At != nil && !slices.ContainsFunc(before.Approvals, func(b v1alpha1.ApprovalRecord) bool {
				return b.CallID == a.CallID && b.By == a.By && b.Decision == a.Decision && b.At.Equal(a.At)
			}) {
				fresh = append(fresh, a)
			}
		}
		if len(fresh) == 0 {
			continue
		}
		kind := waitApproval
		if p.Question != "" {
			kind = waitQuestion
		}
		if len(p.ApprovedBy) == 0 {
			out = append(out, humanWait{kind: kind, took: fresh[0].At.Sub(p.RequestedAt.Time)})
		}
		if !slices.ContainsFunc(after.PendingApprovals, func(q v1alpha1.PendingApproval) bool { return q.CallID == p.CallID }) {
			out = append(out, humanWait{kind: kind, decision: true, took: fresh[len(fresh)-1].At.Sub(p.RequestedAt.Time)})
		}
	}
	return out
}

func usageOf(run *v1alpha1.AgentRun) v1alpha1.UsageStatus {
	if run.Status.Usage == nil {
		return v1alpha1.UsageStatus{}
	}
	return *run.Status.Usage
}

func costOf(u v1alpha1.UsageStatus) loop.Money { return budget.Money(v1alpha1.USD(u.CostUSD)) }

func refused(st *v1alpha1.AgentRunStatus) bool {
	c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSucceeded)
	return c != nil && c.Reason == v1alpha1.ReasonRerunRefused
}
