// Package agent runs agent tools (spec.tools[].agent): each call makes a
// child AgentRun from an AgentRunTemplate, waits for it to end without
// holding a reconcile worker, and returns what it ended with as the
// call's result.
//
// # Naming and adoption
//
// A call's child is named after the parent's name, its UID and the call
// id (ChildName), so dispatching the call again after a crash gets
// AlreadyExists and the executor adopts the child that is there: one call
// never makes two children. A run of that name that another run or call
// made is refused, never adopted.
//
// # Budget
//
// The child's five ceilings are what the parent reserved for the call
// (loop.Invocation.Child): the tool's budget, capped by the template's and
// by what the parent had left. What the child used is returned in
// loop.Result.Child, which the engine charges to the parent instead of
// the reservation.
package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/agentrun/agentrun/internal/telemetry"
	"github.com/agentrun/agentrun/internal/template"
	"github.com/agentrun/agentrun/internal/tools/job"
)

const (
	// StartGrace is a call's allowance, besides its child's wall clock,
	// for the child to be made and to start (a queue, a shared budget's
	// slot): the call's startup grace.
	StartGrace = 30 * time.Second
	// StopGrace is the time a child that passed its call's deadline has
	// to end once cancelled: the call's kill grace.
	StopGrace = 15 * time.Second
	// DefaultMaxInFlight is how many children one run may have in flight
	// at once (Config.MaxInFlight).
	DefaultMaxInFlight = v1alpha1.DefaultMaxInFlight
	// maxValueBytes bounds a parameter value once the call's arguments are
	// in it, as the API bounds spec.parameters[].value.
	maxValueBytes = 32768
)

// Parent is the run whose calls make children.
type Parent struct {
	Name      string
	Namespace string
	UID       types.UID
	// Labels are the parent's labels: a child carries them (but the
	// operator's own), so every AgentBudget that selects the parent
	// selects its children too.
	Labels map[string]string
}

// depth is how many parents the parent has.
func (p *Parent) depth() int {
	n, _ := strconv.Atoi(p.Labels[v1alpha1.LabelDepth])
	return max(n, 0)
}

// root is the name of the run at the top of the parent's tree.
func (p *Parent) root() string {
	if r := p.Labels[v1alpha1.LabelRoot]; r != "" {
		return r
	}
	return p.Name
}

// Tool is one agent tool of the parent.
type Tool struct {
	Name string
	// Template is the template as it was read when the run started: every
	// call's child is made from it.
	Template *v1alpha1.AgentRunTemplate
	// Parameters are agent.parameters, their values with $(args.NAME).
	Parameters []v1alpha1.ParameterValue
	// FromArgs takes every template parameter that Parameters does not
	// list from the call's argument of its name (a tool whose schema is
	// derived from the template's parameters, Schema).
	FromArgs bool
	// MaxDepth is the deepest a child of the tool may be.
	MaxDepth int
	// MaxInFlight, when above 0, is how many children the run may have
	// in flight at once when this tool makes one, instead of
	// Config.MaxInFlight.
	MaxInFlight int
}

// Config is how the operator is deployed; it is the same for every run.
type Config struct {
	// Client creates, reads and cancels child runs.
	Client client.Client
	// Reader reads a child that exists already (AlreadyExists) where the
	// cache may not have it yet; nil means Client.
	Reader client.Reader
	// Wakeups is fed by the operator's AgentRun informer with the changes
	// of runs that have a parent: a finished child ends its call as soon
	// as the watch delivers it.
	Wakeups *job.Wakeups
	// PollInterval is the backstop between two reads of a child when no
	// change arrives. Defaults to 5s.
	PollInterval time.Duration
	// MaxInFlight is how many children one run may have in flight at
	// once; 0 means DefaultMaxInFlight.
	MaxInFlight int
	// InFlight counts the children in flight per run; the operator shares
	// one among every run's executor.
	InFlight *InFlight
	// InProcess, when set, runs a child to its end in this process and
	// returns its status, instead of creating it in the cluster
	// (agentrun local, which has none): the same limits, template,
	// parameters, budget and result as a child the operator runs.
	InProcess func(ctx context.Context, child *v1alpha1.AgentRun) (v1alpha1.AgentRunStatus, error)
}

// InFlight counts the children each run has in flight.
type InFlight struct {
	mu sync.Mutex
	n  map[types.UID]int
}

// NewInFlight returns an empty count.
func NewInFlight() *InFlight { return &InFlight{n: map[types.UID]int{}} }

func (f *InFlight) acquire(uid types.UID, most int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[uid] >= most {
		return false
	}
	f.n[uid]++
	return true
}

func (f *InFlight) release(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[uid]--; f.n[uid] <= 0 {
		delete(f.n, uid)
	}
}

// Executor runs one parent's agent tools.
type Executor struct {
	cfg    Config
	parent Parent
	tools  map[string]*Tool
}

// New returns the executor of the parent's agent tools.
func New(cfg Config, parent Parent, tools []Tool) (*Executor, error) {
	if cfg.Client == nil && cfg.InProcess == nil {
		return nil, errors.New("agent tools need a Kubernetes client")
	}
	if cfg.Reader == nil {
		cfg.Reader = cfg.Client
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 5 * time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.InFlight == nil {
		cfg.InFlight = NewInFlight()
	}
	e := &Executor{cfg: cfg, parent: parent, tools: map[string]*Tool{}}
	for i := range tools {
		t := tools[i]
		if t.MaxDepth <= 0 {
			t.MaxDepth = v1alpha1.DefaultMaxDepth
		}
		e.tools[t.Name] = &t
	}
	return e, nil
}

// ChildName is the name of the child a call makes: the parent's name (cut
// to 40 characters) and a digest of its UID and the call id, the same on
// every dispatch of the call.
func ChildName(parent string, uid types.UID, callID string) string {
	sum := sha256.Sum256([]byte(string(uid) + "/" + callID))
	p := parent
	if len(p) > 40 {
		p = strings.TrimRight(p[:40], "-.")
	}
	return p + "-" + hex.EncodeToString(sum[:])[:10]
}

// refused is the result of a call that made no child: the model reads why,
// and nothing is charged but the call.
func refused(format string, a ...any) loop.Result {
	return loop.Result{Failure: &loop.Failure{Kind: loop.FailInvalid, Detail: loop.ClipDetail(fmt.Sprintf(format, a...))}, Child: &loop.Usage{}}
}

// Execute makes (or adopts) the call's child and waits for it to end:
// woken by the child's changes (Config.Wakeups), with a poll as the
// backstop. The wait is bounded by the call's startup grace and the
// child's wall clock; past it the child is cancelled and has the kill
// grace to end. When ctx is cancelled instead (the operator is stopping),
// the child is left running: the next Execute of the same call adopts it.
func (e *Executor) Execute(ctx context.Context, inv loop.Invocation) loop.Result {
	t := e.tools[inv.Tool]
	if t == nil {
		return refused("unknown agent tool %q", inv.Tool)
	}
	depth := e.parent.depth() + 1
	if depth > t.MaxDepth {
		return refused("tool %s made no child run: the child would be at depth %d of its tree of runs, and the tool's maxDepth is %d",
			t.Name, depth, t.MaxDepth)
	}
	b := inv.Child
	if b == nil {
		return refused("tool %s made no child run: no budget was reserved for it", t.Name)
	}
	if b.Turns < 1 || b.Tokens < 1 || b.WallClock < time.Second {
		return refused("tool %s made no child run: this run has too little budget left for one (%d turns, %d tokens, %s of wall clock, $%s, once it keeps room for its next turn; a child needs at least 1 turn, 1 token and 1s, and money when its tool declares a cost)",
			t.Name, b.Turns, b.Tokens, b.WallClock.Round(time.Second), b.Cost)
	}
	params, err := t.values(inv.Arguments)
	if err != nil {
		return refused("tool %s made no child run: %v", t.Name, err)
	}
	most := e.cfg.MaxInFlight
	if t.MaxInFlight > 0 {
		most = t.MaxInFlight
	}
	if !e.cfg.InFlight.acquire(e.parent.UID, most) {
		return refused("tool %s made no child run: this run has %d children in flight, the most it may have at once; call it again once one has ended",
			t.Name, most)
	}
	defer e.cfg.InFlight.release(e.parent.UID)
	spec, err := template.Resolve(t.Template, params)
	if err != nil {
		return refused("tool %s made no child run: %v", t.Name, err)
	}
	setBudget(&spec.Budget, b)
	child := e.child(t, inv, spec, depth)
	if tp := telemetry.TraceParentOf(ctx); tp != "" {
		// The child's run span is a child of this call's span.
		child.Annotations[v1alpha1.AnnotationTraceParent] = tp
	}

	if e.cfg.InProcess != nil {
		st, err := e.cfg.InProcess(ctx, child)
		if err != nil {
			return refused("tool %s's child run %s could not run: %v", t.Name, child.Name, err)
		}
		return e.ended(inv, child.Name, &v1alpha1.AgentRun{Status: st})
	}
	var changed <-chan struct{}
	if e.cfg.Wakeups != nil {
		// Subscribed before the child exists, so that no change is missed.
		ch, done := e.cfg.Wakeups.Subscribe(child.Namespace, child.Name)
		defer done()
		changed = ch
	}
	if res := e.create(ctx, child, inv); res != nil {
		return *res
	}
	return e.wait(ctx, inv, child.Name, changed)
}

// create makes the child, or adopts the one this call made before. It
// returns the call's result when there is no child to wait for.
func (e *Executor) create(ctx context.Context, child *v1alpha1.AgentRun, inv loop.Invocation) *loop.Result {
	err := e.cfg.Client.Create(ctx, child)
	switch {
	case err == nil:
		return nil
	case apierrors.IsAlreadyExists(err):
		got := &v1alpha1.AgentRun{}
		if err := e.cfg.Reader.Get(ctx, client.ObjectKeyFromObject(child), got); err != nil {
			return &loop.Result{Failure: &loop.Failure{Kind: loop.FailUnavailable,
				Detail: loop.ClipDetail(fmt.Sprintf("child run %s exists and could not be read: %v", child.Name, err))}}
		}
		if got.Labels[v1alpha1.LabelParentUID] != string(e.parent.UID) || got.Annotations[v1alpha1.AnnotationParentCall] != child.Annotations[v1alpha1.AnnotationParentCall] {
			r := refused("an AgentRun named %s exists and was not made by call %s of this run; it was left alone, and no child was made", child.Name, inv.CallID)
			return &r
		}
		return nil
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err):
		r := refused("the child run made from AgentRunTemplate %s was refused by the API server: %s", child.Annotations[annotationTemplate], runclient.APIMessage(err))
		return &r
	default:
		// Its creation may have happened: the reservation stays charged.
		return &loop.Result{Failure: &loop.Failure{Kind: loop.FailUnavailable,
			Detail: loop.ClipDetail(fmt.Sprintf("the child run could not be created: %v", err))}}
	}
}

// wait reads the child on each of its changes, and on a timer as the
// backstop, until it ends.
func (e *Executor) wait(ctx context.Context, inv loop.Invocation, name string, changed <-chan struct{}) loop.Result {
	key := client.ObjectKey{Namespace: e.parent.Namespace, Name: name}
	deadline, cancel := context.WithTimeout(ctx, inv.StartupGrace+inv.Timeout)
	defer cancel()
	timer := time.NewTimer(0)
	defer timer.Stop()
	cancelled, missing := false, 0
	for {
		select {
		case <-deadline.Done():
			if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return loop.Result{Failure: &loop.Failure{Kind: loop.FailUnknown,
					Detail: "the wait was cancelled; the child run " + name + " was left running for the next attempt of this call to adopt"}}
			}
			if ctx.Err() != nil {
				if !cancelled {
					stop, end := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
					e.cancelChild(stop, key, fmt.Sprintf("%s/%s (call %s passed its deadline)", e.parent.Namespace, e.parent.Name, inv.CallID))
					end()
				}
				// The kill grace has passed too: what the child used is
				// not known yet, so the whole reservation is charged.
				return loop.Result{Output: e.report(inv, name, &v1alpha1.AgentRun{Status: v1alpha1.AgentRunStatus{Reason: fmt.Sprintf(
					"the child did not end within %s and was cancelled; it had not ended %s later",
					(inv.StartupGrace + inv.Timeout).Round(time.Second), inv.KillGrace.Round(time.Second))}}, outcomeUnfinished),
					ChildRun: name, ChildOutcome: outcomeUnfinished}
			}
			if !cancelled {
				cancelled = true
				e.cancelChild(ctx, key, fmt.Sprintf("%s/%s (call %s passed its deadline)", e.parent.Namespace, e.parent.Name, inv.CallID))
			}
			deadline = ctx // the kill grace: ctx ends at the call's MaxDuration
		case <-timer.C:
		case <-changed:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		run := &v1alpha1.AgentRun{}
		err := e.cfg.Client.Get(ctx, key, run)
		if err == nil && run.Status.Outcome != "" {
			return e.ended(inv, name, run)
		}
		if apierrors.IsNotFound(err) {
			// A cached client may not have seen the new child yet; a
			// child that stays missing was deleted under us.
			if missing++; missing > 5 {
				return loop.Result{Failure: &loop.Failure{Kind: loop.FailUnknown,
					Detail: "the child run " + name + " was deleted before it ended"}}
			}
		} else {
			missing = 0
		}
		timer.Reset(e.cfg.PollInterval)
	}
}

// cancelChild sets spec.cancel on the child, saying who did.
func (e *Executor) cancelChild(ctx context.Context, key client.ObjectKey, by string) {
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	_ = e.cfg.Client.Patch(ctx, run, runclient.CancelPatch(by)) // the run ends at the call's MaxDuration regardless
}

// ended is the result of a call whose child run ended: the report the
// model reads, and what the child used, charged instead of its reservation.
func (e *Executor) ended(inv loop.Invocation, name string, run *v1alpha1.AgentRun) loop.Result {
	u := limits.Usage(run.Status.Usage)
	return loop.Result{Output: e.report(inv, name, run, string(run.Status.Outcome)), ContentType: "application/json", Child: &u,
		ChildRun: name, ChildOutcome: string(run.Status.Outcome)}
}

// outcomeUnfinished is the outcome a call reports for a child that did
// not end in time.
const outcomeUnfinished = "Unfinished"

// annotationTemplate names the template a child was made from.
const annotationTemplate = "agents.agentrun.dev/template"

// child is the AgentRun a call makes.
func (e *Executor) child(t *Tool, inv loop.Invocation, spec *v1alpha1.AgentRunSpec, depth int) *v1alpha1.AgentRun {
	labels := map[string]string{}
	for k, v := range e.parent.Labels {
		if !strings.Contains(k, "agentrun.dev/") {
			labels[k] = v
		}
	}
	if s, ok := e.parent.Labels[v1alpha1.LabelShard]; ok {
		labels[v1alpha1.LabelShard] = s // the same shard drives the tree
	}
	labels[v1alpha1.LabelParentUID] = string(e.parent.UID)
	labels[v1alpha1.LabelDepth] = strconv.Itoa(depth)
	// A name longer than a label value allows is in the owner reference.
	if len(e.parent.Name) <= 63 {
		labels[v1alpha1.LabelParent] = e.parent.Name
	}
	if r := e.parent.root(); len(r) <= 63 {
		labels[v1alpha1.LabelRoot] = r
	}
	return &v1alpha1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ChildName(e.parent.Name, e.parent.UID, inv.CallID),
			Namespace: e.parent.Namespace,
			Labels:    labels,
			Annotations: map[string]string{
				v1alpha1.AnnotationParentCall: inv.CallID + "/" + t.Name,
				annotationTemplate:            t.Template.Name,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "AgentRun", Name: e.parent.Name, UID: e.parent.UID,
				BlockOwnerDeletion: new(true),
			}},
		},
		Spec: *spec,
	}
}

// setBudget makes b's five ceilings the child's; the template's other
// limits (perTool, defaultToolLimit) stay, and every ceiling is hard.
func setBudget(s *v1alpha1.BudgetSpec, b *loop.ChildBudget) {
	s.MaxTurns = int32(b.Turns)
	s.MaxTokens = new(b.Tokens)
	s.MaxWallClock = &metav1.Duration{Duration: b.WallClock.Truncate(time.Second)}
	s.MaxCostUSD = v1alpha1.USD(b.Cost.String())
	s.MaxToolCalls = new(int32(b.ToolCalls))
	s.Soft = nil
}

// argRef is $(args.NAME) in a parameter's value.
var argRef = regexp.MustCompile(`\$\(args\.([A-Za-z_][A-Za-z0-9_-]*)\)`)

// values are the template parameter values of a call: agent.parameters
// with the call's arguments in them, and with FromArgs the arguments named
// after the template's other parameters. A value names an argument the
// call lacks, or grows past the API's bound, is an error naming it.
func (t *Tool) values(raw json.RawMessage) ([]v1alpha1.ParameterValue, error) {
	args := map[string]json.RawMessage{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, fmt.Errorf("the arguments are not a JSON object: %v", err)
		}
	}
	text := func(v json.RawMessage) string {
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
		return string(v)
	}
	var out []v1alpha1.ParameterValue
	listed := map[string]bool{}
	for _, p := range t.Parameters {
		listed[p.Name] = true
		var missing string
		v := argRef.ReplaceAllStringFunc(p.Value, func(m string) string {
			name := argRef.FindStringSubmatch(m)[1]
			a, ok := args[name]
			if !ok {
				if missing == "" {
					missing = name
				}
				return ""
			}
			return text(a)
		})
		if missing != "" {
			return nil, fmt.Errorf("parameter %s takes the argument %q, which the call does not give", p.Name, missing)
		}
		if len(v) > maxValueBytes {
			return nil, fmt.Errorf("parameter %s would be %d bytes with the call's arguments in it, more than %d", p.Name, len(v), maxValueBytes)
		}
		out = append(out, v1alpha1.ParameterValue{Name: p.Name, Value: v})
	}
	if t.FromArgs {
		for _, p := range t.Template.Spec.Parameters {
			a, ok := args[p.Name]
			if listed[p.Name] || !ok {
				continue
			}
			v := text(a)
			if len(v) > maxValueBytes {
				return nil, fmt.Errorf("argument %s is %d bytes, more than %d", p.Name, len(v), maxValueBytes)
			}
			out = append(out, v1alpha1.ParameterValue{Name: p.Name, Value: v})
		}
	}
	return out, nil
}

// Schema is the JSON Schema of an agent tool that gives none: an object
// with a string property for each template parameter that listed does not
// set, required when the parameter has no default.
func Schema(t *v1alpha1.AgentRunTemplate, listed []v1alpha1.ParameterValue) json.RawMessage {
	set := map[string]bool{}
	for _, p := range listed {
		set[p.Name] = true
	}
	props := map[string]any{}
	required := []string{}
	for _, p := range t.Spec.Parameters {
		if set[p.Name] {
			continue
		}
		prop := map[string]any{"type": "string"}
		if p.Description != "" {
			prop["description"] = p.Description
		}
		if len(p.Enum) > 0 {
			prop["enum"] = p.Enum
		}
		if p.Pattern != "" {
			prop["pattern"] = p.Pattern
		}
		props[p.Name] = prop
		if p.Default == nil {
			required = append(required, p.Name)
		}
	}
	s, _ := json.Marshal(map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false})
	return s
}
