package plugin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kubeevent"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/agentrun/agentrun/internal/safeterm"
	"github.com/agentrun/agentrun/internal/transcript"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultResync is how often watch reads the run and its events even when
// the API server's watches report nothing, and how soon it reopens a watch
// the server closed or refused.
const DefaultResync = 5 * time.Second

// DefaultFinishWait is how long watch waits, once the run has ended, for
// the Event that records its outcome.
const DefaultFinishWait = 2 * time.Second

// WatchOptions says which run to follow and how.
type WatchOptions struct {
	Run Ref
	// Command starts the answer commands printed for pending approvals:
	// "kubectl agentrun" (the default), or "kubectl agentrun -n billing"
	// when the namespace was given on the command line.
	Command string
	// Resync bounds the time between two reads of the run and its events,
	// whatever the watches report. Zero means DefaultResync.
	Resync time.Duration
	// FinishWait bounds the wait, once the run has ended, for the Event
	// that records its outcome: the operator records it after the status
	// write that ended the run, so it can come after the outcome. Zero
	// means DefaultFinishWait.
	FinishWait time.Duration
}

// Watch follows a run until it ends and prints its progress to w: the
// transcript so far and each new message, the Events about the run
// (events.k8s.io/v1, matched by the run's uid), phase changes, each answer
// recorded, and each call that waits for a person with the commands that
// answer it. When status.outcome is set it prints the outcome and reason
// and returns the run as it ended.
//
// It watches the run and its Events and also reads both every Resync, so it
// still makes progress where watches are refused or dropped. It returns an
// error when ctx ends first, or when the run is deleted; the run returned
// with the error is the last one seen (nil if none was).
func Watch(ctx context.Context, c client.WithWatch, o WatchOptions, w io.Writer) (*v1alpha1.AgentRun, error) {
	if o.Command == "" {
		o.Command = "kubectl agentrun"
	}
	w = safeterm.Writer(w) // what models and tools said must not drive the terminal
	if o.Resync <= 0 {
		o.Resync = DefaultResync
	}
	if o.FinishWait <= 0 {
		o.FinishWait = DefaultFinishWait
	}
	run, err := getRun(ctx, c, o.Run)
	if err != nil {
		return nil, err
	}
	f := &follower{
		c: c, o: o, w: w, uid: run.UID, last: run,
		asked: map[string]bool{}, answered: map[string]bool{},
		events: map[types.UID]int32{}, warned: map[string]bool{}, reasons: map[string]bool{},
	}
	defer f.stopWatches()

	f.goal = printGoal(w, run)
	done, err := f.resync(ctx)
	ticker := time.NewTicker(o.Resync)
	defer ticker.Stop()
	for !done && err == nil {
		f.openWatches(ctx)
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-ticker.C:
			f.runRefused, f.eventsRefused = false, false
			done, err = f.resync(ctx)
		case e, ok := <-resultChan(f.runWatch):
			done, err = f.onRunEvent(ctx, e, ok)
		case e, ok := <-resultChan(f.eventWatch):
			f.onEventEvent(e, ok)
		}
	}
	if err != nil {
		return f.last, err
	}
	f.awaitFinish(ctx)
	printOutcome(w, f.last)
	return f.last, nil
}

// follower remembers what has been printed so that every observation, from
// a watch or a resync, prints only what is new.
type follower struct {
	c   client.WithWatch
	o   WatchOptions
	w   io.Writer
	uid types.UID

	last  *v1alpha1.AgentRun
	rv    string
	phase v1alpha1.Phase
	// goal: the goal was printed (a run made from a template has it once
	// the operator resolved the template).
	goal bool
	// seen is the newest resourceVersion observed: an older version (a
	// watch event queued before a resync read a newer one) is skipped, and
	// a reopened watch starts from it, so that no version in between is
	// lost. expired: the server no longer has the versions after seen; the
	// next watch starts from the current state.
	seen    string
	expired bool

	// printed is the number of transcript messages printed; readChunks and
	// readTail identify the transcript last read, to skip re-reading it.
	printed    int
	readChunks int32
	readTail   []byte
	haveRead   bool

	asked    map[string]bool     // call ids whose approval request was printed
	answered map[string]bool     // callID/decision of answers printed
	events   map[types.UID]int32 // events printed, with the series count printed
	warned   map[string]bool
	// reasons of the events printed: the operator records a run's end
	// with its outcome as the reason.
	reasons map[string]bool

	runWatch, eventWatch      watch.Interface
	runRefused, eventsRefused bool
}

func resultChan(w watch.Interface) <-chan watch.Event {
	if w == nil {
		return nil // blocks for ever in a select
	}
	return w.ResultChan()
}

// openWatches (re)opens the watches that are not running. A watch the
// server refused is tried again at the next resync.
func (f *follower) openWatches(ctx context.Context) {
	ns := client.InNamespace(f.o.Run.Namespace)
	if f.runWatch == nil && !f.runRefused {
		opts := []client.ListOption{ns, client.MatchingFields{"metadata.name": f.o.Run.Name}}
		if f.seen != "" && !f.expired {
			opts = append(opts, fromVersion(f.seen))
		}
		wi, err := f.c.Watch(ctx, &v1alpha1.AgentRunList{}, opts...)
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			f.lostVersions()
			wi, err = f.c.Watch(ctx, &v1alpha1.AgentRunList{}, opts[:2]...)
		}
		f.runWatch, f.runRefused = wi, err != nil
	}
	if f.eventWatch == nil && !f.eventsRefused {
		wi, err := f.c.Watch(ctx, &eventsv1.EventList{}, ns, client.MatchingFields{"regarding.uid": string(f.uid)})
		f.eventWatch, f.eventsRefused = wi, err != nil
	}
}

func (f *follower) stopWatches() {
	if f.runWatch != nil {
		f.runWatch.Stop()
	}
	if f.eventWatch != nil {
		f.eventWatch.Stop()
	}
}

func (f *follower) onRunEvent(ctx context.Context, e watch.Event, ok bool) (bool, error) {
	if !ok {
		f.runWatch = nil // closed by the server: reopened next round
		return false, nil
	}
	switch e.Type {
	case watch.Added, watch.Modified:
		if run, isRun := e.Object.(*v1alpha1.AgentRun); isRun {
			return f.showUpdate(ctx, run)
		}
	case watch.Deleted:
		return false, fmt.Errorf("%s was deleted before it ended", f.o.Run)
	case watch.Error:
		if err := apierrors.FromObject(e.Object); apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			f.lostVersions()
		}
		f.runWatch.Stop()
		f.runWatch = nil
	}
	return false, nil
}

// lostVersions: the versions after the last one seen are gone from the
// server (compacted); the next watch starts from the current state, and
// the user is told that steps may be missing.
func (f *follower) lostVersions() {
	f.expired = true
	f.warn("the API server no longer has every change to the run since the last one seen: some steps may be missing")
}

// fromVersion starts a watch after a resourceVersion.
type fromVersion string

func (v fromVersion) ApplyToList(o *client.ListOptions) {
	if o.Raw == nil {
		o.Raw = &metav1.ListOptions{}
	}
	o.Raw.ResourceVersion = string(v)
}

func (f *follower) onEventEvent(e watch.Event, ok bool) {
	if !ok {
		f.eventWatch = nil
		return
	}
	switch e.Type {
	case watch.Added, watch.Modified:
		if ev, isEvent := e.Object.(*eventsv1.Event); isEvent {
			f.printEvent(ev)
		}
	case watch.Error:
		f.eventWatch.Stop()
		f.eventWatch = nil
	}
}

// awaitFinish prints the Events recorded up to the one that records the
// run's outcome, which the operator records after the status write that
// ended the run: it reads them again, and waits for that one (from the
// event watch, or reading again every quarter second) up to FinishWait.
// Where events cannot be read, it does not wait.
func (f *follower) awaitFinish(ctx context.Context) {
	if !f.listEvents(ctx) {
		return
	}
	deadline := time.NewTimer(f.o.FinishWait)
	defer deadline.Stop()
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	for !f.reasons[string(f.last.Status.Outcome)] {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case e, ok := <-resultChan(f.eventWatch):
			f.onEventEvent(e, ok)
		case <-poll.C:
			if !f.listEvents(ctx) {
				return
			}
		}
	}
}

// resync reads the run and its events.
func (f *follower) resync(ctx context.Context) (bool, error) {
	run := &v1alpha1.AgentRun{}
	if err := f.c.Get(ctx, f.o.Run.Key(), run); err != nil {
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("%s was deleted before it ended", f.o.Run)
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		f.warn(fmt.Sprintf("reading %s: %v", f.o.Run, err))
		return false, nil // the next resync tries again
	}
	f.listEvents(ctx)
	return f.showUpdate(ctx, run)
}

// listEvents prints the run's events not printed yet, and reports
// whether it could read them.
func (f *follower) listEvents(ctx context.Context) bool {
	list := &eventsv1.EventList{}
	err := f.c.List(ctx, list, client.InNamespace(f.o.Run.Namespace),
		client.MatchingFields{"regarding.uid": string(f.uid)})
	if err != nil {
		if ctx.Err() == nil {
			f.warn(fmt.Sprintf("listing the events of %s: %v", f.o.Run, err))
		}
		return false
	}
	sort.SliceStable(list.Items, func(i, j int) bool {
		return kubeevent.LastSeenV1(&list.Items[i]).Before(kubeevent.LastSeenV1(&list.Items[j]))
	})
	for i := range list.Items {
		f.printEvent(&list.Items[i])
	}
	return true
}

func (f *follower) printEvent(e *eventsv1.Event) {
	if e.Regarding.UID != f.uid {
		return
	}
	count := int32(1)
	if e.Series != nil && e.Series.Count > 1 {
		count = e.Series.Count
	} else if e.DeprecatedCount > 1 {
		count = e.DeprecatedCount
	}
	if f.events[e.UID] >= count {
		return
	}
	f.events[e.UID] = count
	times := ""
	if count > 1 {
		times = fmt.Sprintf(" (x%d)", count)
	}
	printf(f.w, "event: %s %s: %s%s\n", e.Type, e.Reason, indent(e.Note), times)
	f.reasons[e.Reason] = true
}

// showUpdate prints what is new in this version of the run and reports whether
// it has ended.
func (f *follower) showUpdate(ctx context.Context, run *v1alpha1.AgentRun) (bool, error) {
	if run.UID != f.uid {
		return false, fmt.Errorf("%s was deleted and created anew; watch it again", f.o.Run)
	}
	if c, err := resourceversion.CompareResourceVersion(run.ResourceVersion, f.seen); err == nil && c < 0 {
		return f.last.Status.Outcome != "", nil // older than what was printed
	}
	if run.ResourceVersion == f.rv {
		return run.Status.Outcome != "", nil
	}
	f.rv, f.last, f.seen, f.expired = run.ResourceVersion, run, run.ResourceVersion, false

	if g := run.Goal(); !f.goal && g != "" {
		f.goal = true
		printf(f.w, "goal: %s\n", indent(g))
	}
	f.printTranscript(ctx, run)
	for _, a := range run.Status.Approvals {
		key := a.CallID + "/" + string(a.Decision)
		if f.answered[key] {
			continue
		}
		f.answered[key] = true
		if a.Stale {
			printf(f.w, "ignored: %s %s%s%s (the call was not waiting)\n", a.CallID, a.Decision, by(a.By), runclient.Because(a.Reason))
		} else {
			printf(f.w, "answered: %s %s%s%s\n", a.CallID, a.Decision, by(a.By), runclient.Because(a.Reason))
		}
	}
	if run.Status.Phase != f.phase && run.Status.Phase != "" {
		f.phase = run.Status.Phase
		printf(f.w, "phase: %s\n", f.phase)
	}
	for _, p := range run.Status.PendingApprovals {
		if f.asked[p.CallID] || run.Status.Outcome != "" {
			continue
		}
		f.asked[p.CallID] = true
		f.printPending(p)
	}
	return run.Status.Outcome != "", nil
}

func (f *follower) printPending(p v1alpha1.PendingApproval) {
	if p.Question != "" {
		// The agent asks: the question, its choices, and how to answer.
		printf(f.w, "question: %s %s %q", p.CallID, p.Tool, p.Question)
		if len(p.Choices) > 0 {
			printf(f.w, " (choices: %q)", p.Choices)
		}
		printf(f.w, "\n  %-8s %s answer %s %s \"...\"\n", "answer:", f.o.Command, f.o.Run.Name, p.CallID)
		return
	}
	why := p.Reason
	if p.Rule != "" {
		why = p.Rule + ": " + why
	}
	printf(f.w, "approval needed: %s %s %s", p.CallID, p.Tool, p.Arguments)
	if why != "" {
		printf(f.w, " (%s)", why)
	}
	printf(f.w, "\n")
	for _, d := range []string{"approve", "deny", "stop"} {
		printf(f.w, "  %-8s %s %s %s %s\n", d+":", f.o.Command, d, f.o.Run.Name, p.CallID)
	}
}

// printTranscript prints the messages after those already printed. The
// transcript only grows (the operator moves messages from the checkpoint to
// a chunk in the same status write that counts the chunk), so its length
// is a safe bookmark.
func (f *follower) printTranscript(ctx context.Context, run *v1alpha1.AgentRun) {
	var chunks int32
	if run.Status.Transcript != nil {
		chunks = run.Status.Transcript.Chunks
	}
	var tail []byte
	if run.Status.Checkpoint != nil {
		tail = run.Status.Checkpoint.Raw
	}
	if f.haveRead && chunks == f.readChunks && bytes.Equal(tail, f.readTail) {
		return
	}
	msgs, err := transcript.Read(ctx, f.c, run)
	if err != nil {
		// A chunk being replaced, or a checkpoint from another version:
		// say so once, and read again at the next change or resync.
		f.warn(fmt.Sprintf("reading the transcript: %v", err))
		f.rv = ""
		return
	}
	f.haveRead, f.readChunks, f.readTail = true, chunks, tail
	if len(msgs) < f.printed {
		f.printed = len(msgs)
	}
	for _, m := range msgs[f.printed:] {
		printf(f.w, "%s", FormatMessage(m))
	}
	f.printed = len(msgs)
}

func (f *follower) warn(msg string) {
	if f.warned[msg] {
		return
	}
	f.warned[msg] = true
	printf(f.w, "warning: %s\n", msg)
}
