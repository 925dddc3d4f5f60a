package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/agentrun/agentrun/internal/transcript"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Follow-up runs (spec.continueFrom). A follow-up starts from the
// conversation of the run it continues: when its state is new (nothing
// saved yet), loadState reads that run, live or from the archive, checks
// that the follow-up is no wider than it (narrower), and seeds the state
// with its conversation (loop.Continue). The first save writes the seed
// into the follow-up's own transcript chunks, before any model call, so a
// follow-up resumes from its own saves like every run and never reads the
// earlier run again.

// errNotContinuable wraps what makes a follow-up impossible (the earlier
// run is missing, unfinished, unreadable, or narrower): the run ends
// Error (InvalidConfiguration) with it as the reason.
var errNotContinuable = errors.New("the follow-up cannot start")

// earlierRun is the run a follow-up continues, as read.
type earlierRun struct {
	status v1alpha1.ContinuedFromStatus
	// spec is the spec it ran (for a run made from a template, the
	// resolved spec).
	spec     v1alpha1.AgentRunSpec
	messages []loop.Message
}

// seedFollowUp seeds a new follow-up's state s with the conversation of
// the run it continues, and records that run in status.continuedFrom. It
// returns why the follow-up cannot start, when it cannot; an error is
// transient.
func (r *AgentRunReconciler) seedFollowUp(ctx context.Context, sc *scope, s *loop.State) (refused string, _ error) {
	ref := sc.run.Spec.ContinueFrom
	e, err := r.readEarlier(ctx, sc.run.Namespace, ref.Name)
	if errors.Is(err, errNotContinuable) {
		return err.Error(), nil
	}
	if err != nil {
		return "", err
	}
	own, _, err := r.resolved(ctx, sc.run)
	if err != nil {
		return fmt.Sprintf("%v: %v", errNotContinuable, err), nil
	}
	if why := narrower(&e.spec, &own.Spec); why != "" {
		return fmt.Sprintf("%v: it would be wider than AgentRun %s, which it continues: %s", errNotContinuable, ref.Name, why), nil
	}
	s.Transcript = loop.Continue(loop.Earlier{Goal: e.spec.Goal, FollowUp: e.spec.ContinueFrom != nil, Transcript: e.messages}, own.Spec.Goal)
	sc.run.Status.ContinuedFrom = &e.status
	return "", nil
}

// readEarlier reads the finished run a follow-up names: the AgentRun if
// it exists, else the newest record of that name in the archive. Its
// transcript is read as the operator sealed it (the chunks, or the
// archive's copy of them).
func (r *AgentRunReconciler) readEarlier(ctx context.Context, namespace, name string) (*earlierRun, error) {
	run := &v1alpha1.AgentRun{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, run)
	switch {
	case apierrors.IsNotFound(err):
		return r.readArchived(ctx, namespace, name)
	case err != nil:
		return nil, err
	}
	if run.Status.Outcome == "" {
		return nil, fmt.Errorf("%w: AgentRun %s has not finished (phase %s); a follow-up continues a finished run: create it once %s has an outcome",
			errNotContinuable, name, orUnknown(string(run.Status.Phase)), name)
	}
	// The spec the earlier run ran: for a run made from a template, the
	// copy kept when it was built, never the template as it is now.
	resolved := run
	if run.Spec.TemplateRef != nil {
		raw, rec, err := r.keptSpec(ctx, run)
		if err == nil && raw == nil {
			err = fmt.Errorf("it was never built from AgentRunTemplate %s", run.Spec.TemplateRef.Name)
		}
		if err == nil {
			resolved, _, err = withSpec(run, raw, rec)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: the spec AgentRun %s ran cannot be read: %v", errNotContinuable, name, err)
		}
	}
	msgs, err := transcript.ReadSealedMessages(ctx, r.APIReader, r.Keys, run)
	if errors.Is(err, transcript.ErrLost) || errors.Is(err, transcript.ErrForged) {
		return nil, fmt.Errorf("%w: the transcript of AgentRun %s cannot be read: %v", errNotContinuable, name, err)
	}
	if err != nil {
		return nil, err
	}
	return &earlierRun{status: v1alpha1.ContinuedFromStatus{Name: name, UID: string(run.UID), Outcome: run.Status.Outcome},
		spec: resolved.Spec, messages: msgs}, nil
}

// readArchived reads a deleted run from the archive: the newest record of
// the name in the namespace.
func (r *AgentRunReconciler) readArchived(ctx context.Context, namespace, name string) (*earlierRun, error) {
	if r.Archive == nil {
		return nil, fmt.Errorf("%w: AgentRun %s does not exist in namespace %s (and the operator has no archive to read a deleted run from)",
			errNotContinuable, name, namespace)
	}
	found, err := r.Archive.Find(ctx, namespace, name)
	if err != nil && !errors.Is(err, archive.ErrNotFound) {
		return nil, fmt.Errorf("reading the archive: %w", err)
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("%w: AgentRun %s does not exist in namespace %s, nor in the archive", errNotContinuable, name, namespace)
	}
	rec, err := r.Archive.Get(ctx, found[0].UID)
	if err != nil {
		return nil, fmt.Errorf("reading the archive: %w", err)
	}
	if rec.TranscriptState != archive.TranscriptComplete {
		return nil, fmt.Errorf("%w: the archive holds no transcript of AgentRun %s (%s): %s", errNotContinuable, name,
			orUnknown(rec.TranscriptState), rec.TranscriptProblem)
	}
	e := &earlierRun{status: v1alpha1.ContinuedFromStatus{Name: name, UID: rec.UID, Outcome: v1alpha1.Outcome(rec.Outcome), Archived: true}}
	if err := json.Unmarshal(rec.Spec, &e.spec); err != nil {
		return nil, fmt.Errorf("%w: the archived spec of AgentRun %s cannot be read: %v", errNotContinuable, name, err)
	}
	if err := json.Unmarshal(rec.Transcript, &e.messages); err != nil {
		return nil, fmt.Errorf("%w: the archived transcript of AgentRun %s cannot be read: %v", errNotContinuable, name, err)
	}
	return e, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// labelFollowUp labels a follow-up with the name of the run it continues
// (v1alpha1.LabelContinuedFrom), once, before anything else is written.
func (r *AgentRunReconciler) labelFollowUp(ctx context.Context, run *v1alpha1.AgentRun) error {
	ref := run.Spec.ContinueFrom
	if ref == nil {
		return nil
	}
	value, _ := runclient.NameLabel(ref.Name)
	if run.Labels[v1alpha1.LabelContinuedFrom] == value {
		return nil
	}
	return r.patchMetadata(ctx, run, "labels", map[string]string{v1alpha1.LabelContinuedFrom: value})
}

// narrower says how a follow-up's spec is wider than the spec of the
// run it continues, or "" when it is not (docs/api.md, "Follow-up runs"):
//   - every tool is one the earlier run declared, the same in every field;
//   - serviceAccountName is the same (the account tools act as);
//   - policy.default is the same or stricter (allow < ask < deny), and
//     policy.grants are some of the earlier run's;
//   - every earlier rule that asks or denies, its tools cut to those the
//     follow-up keeps, is there (same tools, when and mutating) with the
//     same or a stricter decision; the earlier rules kept (allow rules
//     may be dropped) are in the earlier order; a rule of its own denies,
//     or comes after every kept rule and is no looser than the earlier
//     default;
//   - every earlier guardrail, its tools cut likewise, is there with the
//     same pattern and targets and the same or a stricter severity
//     (block < halt).
func narrower(earlier, follow *v1alpha1.AgentRunSpec) string {
	tools := map[string]*v1alpha1.ToolSpec{}
	for i := range earlier.Tools {
		tools[earlier.Tools[i].Name] = &earlier.Tools[i]
	}
	kept := map[string]bool{}
	for i, t := range follow.Tools {
		e, ok := tools[t.Name]
		switch {
		case !ok:
			return fmt.Sprintf("tool %s (spec.tools[%d]) is not a tool of the earlier run", t.Name, i)
		case !equality.Semantic.DeepEqual(*e, t):
			return fmt.Sprintf("tool %s (spec.tools[%d]) differs from the earlier run's tool of that name", t.Name, i)
		}
		kept[t.Name] = true
	}
	if earlier.ServiceAccountName != follow.ServiceAccountName {
		return fmt.Sprintf("serviceAccountName %q is not the earlier run's %q", follow.ServiceAccountName, earlier.ServiceAccountName)
	}
	if why := narrowerPolicy(policyOf(earlier), policyOf(follow), kept); why != "" {
		return why
	}
	return narrowerGuardrails(earlier.Guardrails, follow.Guardrails, kept)
}

func policyOf(s *v1alpha1.AgentRunSpec) v1alpha1.PolicySpec {
	if s.Policy == nil {
		return v1alpha1.PolicySpec{}
	}
	return *s.Policy
}

// strictness orders decisions: allow < ask < deny (unset is allow, the
// default's default).
func strictness(d v1alpha1.PolicyDecision) int {
	switch d {
	case v1alpha1.PolicyAsk:
		return 1
	case v1alpha1.PolicyDeny:
		return 2
	}
	return 0
}

// cutTools is a rule's or guardrail's tools restricted to the kept ones
// ("*" stays), sorted; empty when none is left.
func cutTools(names []string, kept map[string]bool) []string {
	var out []string
	for _, n := range names {
		if n == "*" || kept[n] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func sameMatch(e, f v1alpha1.PolicyRule, kept map[string]bool) bool {
	et := cutTools(e.Tools, kept)
	return len(et) > 0 && slices.Equal(et, cutTools(f.Tools, kept)) && e.When == f.When && e.Mutating == f.Mutating
}

func ruleName(r v1alpha1.PolicyRule, i int) string {
	if r.Name != "" {
		return fmt.Sprintf("policy rule %s (policy.rules[%d], tools %s)", r.Name, i, strings.Join(r.Tools, ","))
	}
	return fmt.Sprintf("policy.rules[%d] (tools %s, %s)", i, strings.Join(r.Tools, ","), r.Decision)
}

func narrowerPolicy(earlier, follow v1alpha1.PolicySpec, kept map[string]bool) string {
	if strictness(follow.Default) < strictness(earlier.Default) {
		return fmt.Sprintf("policy.default %s is looser than the earlier run's %s", orAllow(follow.Default), orAllow(earlier.Default))
	}
	for _, g := range follow.Grants {
		if !slices.Contains(earlier.Grants, g) {
			return fmt.Sprintf("policy.grants waives the ask of tool %s, which the earlier run did not grant", g)
		}
	}
	// Match the follow-up's rules to the earlier rules in order: each
	// follow-up rule is the next earlier rule it matches (skipping earlier
	// allow rules, which may be dropped), or a rule of its own.
	next, lastKept := 0, -1
	own := map[int]bool{}
	for j, f := range follow.Rules {
		matched := false
		for i := next; i < len(earlier.Rules); i++ {
			e := earlier.Rules[i]
			if sameMatch(e, f, kept) {
				if strictness(f.Decision) < strictness(e.Decision) {
					return fmt.Sprintf("%s decides %s where the earlier run's %s decides %s", ruleName(f, j), f.Decision, ruleName(e, i), e.Decision)
				}
				next, lastKept, matched = i+1, j, true
				break
			}
			if e.Decision != v1alpha1.PolicyAllow && len(cutTools(e.Tools, kept)) > 0 {
				break // an earlier rule that must be kept comes first
			}
		}
		if !matched {
			own[j] = true
		}
	}
	for i := next; i < len(earlier.Rules); i++ {
		if e := earlier.Rules[i]; e.Decision != v1alpha1.PolicyAllow && len(cutTools(e.Tools, kept)) > 0 {
			return fmt.Sprintf("the earlier run's %s is missing, or moved after a rule it preceded", ruleName(e, i))
		}
	}
	for j, f := range follow.Rules {
		if !own[j] || f.Decision == v1alpha1.PolicyDeny {
			continue
		}
		if j < lastKept || strictness(f.Decision) < strictness(earlier.Default) {
			return fmt.Sprintf("%s is not in the earlier run's policy: a rule of a follow-up's own denies, or comes after the earlier run's rules "+
				"and is no looser than its default (%s)", ruleName(f, j), orAllow(earlier.Default))
		}
	}
	return ""
}

func orAllow(d v1alpha1.PolicyDecision) v1alpha1.PolicyDecision {
	if d == "" {
		return v1alpha1.PolicyAllow
	}
	return d
}

func narrowerGuardrails(earlier, follow []v1alpha1.GuardrailSpec, kept map[string]bool) string {
	for _, e := range earlier {
		et := cutTools(guardrailTools(e), kept)
		if len(et) == 0 {
			continue
		}
		ok := slices.ContainsFunc(follow, func(f v1alpha1.GuardrailSpec) bool {
			return f.Pattern == e.Pattern && slices.Equal(et, cutTools(guardrailTools(f), kept)) &&
				slices.Equal(sortedTargets(e.On), sortedTargets(f.On)) &&
				(f.Severity == e.Severity || f.Severity == v1alpha1.GuardrailHalt)
		})
		if !ok {
			return fmt.Sprintf("the earlier run's guardrail %s is missing or loosened (a follow-up keeps each guardrail's pattern, tools and targets, "+
				"and its severity or halt)", e.Name)
		}
	}
	return ""
}

func guardrailTools(g v1alpha1.GuardrailSpec) []string {
	if len(g.Tools) == 0 {
		return []string{"*"}
	}
	return g.Tools
}

func sortedTargets(on []v1alpha1.GuardrailTarget) []v1alpha1.GuardrailTarget {
	if len(on) == 0 {
		on = []v1alpha1.GuardrailTarget{v1alpha1.GuardrailOnArguments}
	}
	out := slices.Clone(on)
	slices.Sort(out)
	return out
}
