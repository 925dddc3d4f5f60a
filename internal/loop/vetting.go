package loop

// Vetting: every proposed call of a turn gets its verdict before any runs.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// vetBatch gives every call of the turn its verdict before anything runs:
// the escalation tool ends the run, a call that cannot be vetted (unknown
// tool, arguments that are not an object or break the schema) is refused,
// a guardrail halts the run or blocks the call, and the policy allows,
// denies or asks. Any ask moves the run to approval; otherwise it acts.
func (e *Engine) vetBatch(ctx context.Context, s *State, calls []ToolCall, decoded []decodedArgs, now time.Time, notes *[]Note) next {
	ctx, cancel := e.vetContext(ctx)
	defer cancel()
	batch := make([]Call, len(calls))
	asks := 0
	for i, c := range calls {
		if c.Name == EscalateTool {
			return finishWith(Escalated, "the model handed the task to a person: "+escalationReason(c.Arguments))
		}
		var halt string
		batch[i], halt = e.vetCall(ctx, c, decoded[i], now, notes)
		if halt != "" {
			return finishWith(GuardrailStop, halt+" before any call of the batch ran: "+batch[i].Reason)
		}
		if batch[i].Verdict == Ask {
			asks++
		}
	}
	s.Calls = batch
	if asks > 0 {
		s.Phase = PhaseApproval
		return proceed(Effect{Kind: EffectAsk, Pending: s.PendingCalls()})
	}
	return act()
}

// vetContext bounds the vetting of one step by cfg.VetTimeout.
func (c *Config) vetContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, c.VetTimeout, errVetDeadline)
}

// noVetDeadline is the vetting context of a policy without conditions:
// guardrails and schemas take no context, so a timer would bound nothing.
func noVetDeadline(ctx context.Context) (context.Context, context.CancelFunc) { return ctx, func() {} }

// vetCall gives one proposed call its verdict and notes it. A call that
// cannot be vetted (unknown tool, arguments that are not an object or
// break the schema) is refused, a guardrail blocks it, and the policy
// allows, denies or asks. halt is set, naming the guardrail and the call,
// when a guardrail with severity halt matched: the caller ends the run.
func (e *Engine) vetCall(ctx context.Context, c ToolCall, d decodedArgs, now time.Time, notes *[]Note) (bc Call, halt string) {
	bc.ToolCall, bc.State = c, CallProposed
	tool := e.tools[c.Name]
	if tool == nil {
		refuse(&bc, rejection{rule: RuleUnknownTool, reason: fmt.Sprintf("no tool is named %q", c.Name),
			observation: fmt.Sprintf("There is no tool named %q. The tools are: %s.", c.Name, offeredNames(e.offered))}, notes)
		return bc, ""
	}
	bc.Mutates = tool.Mutates
	args, err := d.value, d.err
	if err != nil {
		refuse(&bc, rejection{rule: RuleInvalidArguments, reason: fmt.Sprintf("the arguments were refused: %v", err),
			observation: fmt.Sprintf("The arguments of %s were refused: %v. Send a JSON object that matches its parameters.", c.Name, err)}, notes)
		return bc, ""
	}
	if sch := e.schemas[c.Name]; sch != nil {
		if err := sch.Validate(args); err != nil {
			why := schemaError(err)
			refuse(&bc, rejection{rule: RuleInvalidArguments, reason: "the arguments do not match its parameters: " + why,
				observation: fmt.Sprintf("The arguments of %s do not match its parameters: %s. Fix them and call again.", c.Name, why)}, notes)
			return bc, ""
		}
	}
	v := e.vet(ctx, tool, c.Name, d.full, args)
	bc.Rule, bc.Reason = v.rule, v.reason
	switch {
	case v.halt:
		return bc, fmt.Sprintf("guardrail %s halted the run at call %s (%s)", strings.TrimPrefix(v.rule, "guardrail:"), c.ID, c.Name)
	case v.block:
		bc.reject(rejection{verdict: Blocked, rule: v.rule, reason: v.reason, status: ObsBlocked,
			observation: fmt.Sprintf("Blocked by guardrail %s: %s. This call will not run; change the arguments or take another route.",
				strings.TrimPrefix(v.rule, "guardrail:"), v.reason)})
	case v.decision == Deny:
		bc.reject(rejection{verdict: Deny, rule: v.rule, reason: v.reason, status: ObsDenied,
			observation: fmt.Sprintf("Denied by policy (%s)%s. This call will not run; choose another route.", v.rule, suffix(v.reason))})
	case tool.AsksPerson:
		// A question waits for a person whatever the policy allowed.
		bc.Verdict, bc.Rule, bc.Reason = Ask, RuleAskPerson, "the agent asks a person"
		t := now
		bc.RequestedAt = &t
	case v.decision == Ask:
		bc.Verdict = Ask
		if v.approvals > 1 {
			bc.Needed = v.approvals
		}
		t := now
		bc.RequestedAt = &t
	default:
		bc.Verdict = Allow
	}
	*notes = append(*notes, vettedNote(&bc))
	return bc, ""
}

// Rules that name why a call could not be vetted at all.
const (
	// RuleUnknownTool: the model called a tool that is not declared.
	RuleUnknownTool = "unknown-tool"
	// RuleInvalidArguments: the arguments are not a JSON object, hold a
	// number out of range, or break the tool's parameter schema.
	RuleInvalidArguments = "invalid-arguments"
)

// rejection is what a call that will not run records: its verdict, the
// rule that decided and why, and the observation the model reads.
type rejection struct {
	verdict     Decision
	rule        string
	reason      string
	status      ObsStatus
	observation string
}

// reject records r on c: the call is done without running.
func (c *Call) reject(r rejection) {
	c.Verdict, c.Rule, c.Reason = r.verdict, r.rule, r.reason
	c.State, c.ObsStatus, c.Observation = CallDone, r.status, r.observation
}

// refuse denies a call that cannot be vetted at all (an unknown tool,
// arguments that are not an object or break the tool's schema). Such a
// refusal is noted like any other verdict, so a person sees it where
// denials and approvals are (an event, a line of the local stream), not
// only in the transcript.
func refuse(c *Call, r rejection, notes *[]Note) {
	r.verdict, r.status = Deny, ObsInvalid
	c.reject(r)
	*notes = append(*notes, vettedNote(c))
}

// vettedNote records a call's verdict; anything but allow is a warning.
// (Every call has one: the message is joined, not formatted.)
func vettedNote(c *Call) Note {
	return Note{Kind: NoteCallVetted, CallID: c.ID, Warning: c.Verdict != Allow,
		Message: c.ID + " " + c.Name + ": " + string(c.Verdict) + " (" + c.Rule + ")" + suffix(c.Reason)}
}

// offeredNames lists the tools offered.
func offeredNames(offered []ToolSchema) string {
	names := make([]string, 0, len(offered))
	for _, t := range offered {
		names = append(names, t.Name)
	}
	return strings.Join(names, ", ")
}

func escalationReason(args json.RawMessage) string {
	var a struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(args, &a)
	if strings.TrimSpace(a.Reason) == "" {
		return "no reason given"
	}
	return cut(strings.TrimSpace(a.Reason), 400)
}

var englishPrinter = message.NewPrinter(language.English)

func schemaError(err error) string {
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		var leaves []string
		var walk func(*jsonschema.ValidationError)
		walk = func(v *jsonschema.ValidationError) {
			if len(v.Causes) == 0 {
				loc := "/" + strings.Join(v.InstanceLocation, "/")
				leaves = append(leaves, fmt.Sprintf("at %s: %s", loc, v.ErrorKind.LocalizedString(englishPrinter)))
			}
			for _, c := range v.Causes {
				walk(c)
			}
		}
		walk(ve)
		if len(leaves) > 0 {
			return cut(strings.Join(leaves, "; "), 400)
		}
	}
	return cut(err.Error(), 400)
}

// vet decides one call: guardrails first (block this call, or halt the
// run), then the first matching policy rule (or the default), then the
// tightening rule. Tool metadata only ever tightens a verdict. full is
// the canonical form of every argument, args the decoded object.
func (e *Engine) vet(ctx context.Context, tool *ToolSpec, name string, full []byte, args any) verdict {
	for _, g := range e.guardrails {
		if !g.watches(OnArguments) || !matchesTool(g.Tools, name) || !guardrailMatches(g.re, full, args) {
			continue
		}
		reason := g.Reason
		if reason == "" {
			reason = "the arguments match guardrail " + g.Name
		}
		v := verdict{rule: "guardrail:" + g.Name, reason: reason}
		if g.Severity == Halt {
			v.halt = true
		} else {
			v.block = true
		}
		return v
	}

	var celArgs any
	v := verdict{decision: e.cfg.Policy.Default, rule: "policy.default"}
	if v.decision == "" {
		v.decision = Allow
	}
	for i := range e.rules {
		r := &e.rules[i]
		if !matchesTool(r.Tools, name) || (r.Mutating && !tool.Mutates) {
			continue
		}
		if r.prg != nil {
			if ctx.Err() != nil {
				// The step's vetting deadline passed, or the caller gave
				// up: fail closed, without starting another evaluation.
				why := "it was interrupted: " + context.Cause(ctx).Error()
				if errors.Is(context.Cause(ctx), errVetDeadline) {
					why = fmt.Sprintf("%s, %s", errVetDeadline, e.cfg.VetTimeout)
				}
				v = verdict{decision: Ask, rule: r.label(i), reason: fmt.Sprintf(
					"the rule's condition %q was not evaluated (%s); a person must decide", cut(r.When, 200), why)}
				break
			}
			if celArgs == nil {
				celArgs = celValue(args)
			}
			out, _, err := r.prg.ContextEval(ctx, map[string]any{"args": celArgs})
			if err != nil {
				// Fail closed: a condition that cannot be evaluated sends
				// the call to a person rather than guessing.
				why := err.Error()
				switch {
				case strings.Contains(why, "cost limit exceeded"):
					why = fmt.Sprintf("it reached the cost limit of %d evaluation steps", maxRuleCost)
				case ctx.Err() != nil:
					why = "it was interrupted: " + context.Cause(ctx).Error()
				}
				v = verdict{decision: Ask, rule: r.label(i), approvals: r.Approvals,
					reason: fmt.Sprintf("the rule's condition %q could not be evaluated (%s); a person must decide", cut(r.When, 200), why)}
				break
			}
			if b, ok := out.Value().(bool); !ok || !b {
				continue
			}
		}
		v = verdict{decision: r.Decision, rule: r.label(i), reason: r.Reason, approvals: r.Approvals}
		break
	}
	if v.decision == Allow && tool.Mutates && !tool.Reversible {
		if slices.Contains(e.cfg.Policy.Grants, name) {
			v.rule, v.reason = "policy.grants", "irreversible action granted for this run"
		} else {
			v = verdict{decision: Ask, rule: "tool.irreversible",
				reason: fmt.Sprintf("%s changes something that cannot be undone; a person must approve it", name)}
		}
	}
	return v
}
