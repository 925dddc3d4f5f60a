package console

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// heartbeat keeps an idle event stream open through proxies.
const heartbeat = 15 * time.Second

// events streams server-sent events to a page: "change" each time an
// object it shows changes (kind=runs: the runs of the namespace or of every
// namespace the user may list; kind=inbox: those of them the inbox shows,
// waiting for a person or escalated, and a run that stops being one;
// kind=run: one run; kind=budgets: the AgentBudgets). The page then
// fetches its live part again. The watches are
// the user's, so a page learns only of what the user may see. Where a watch
// cannot be opened, a "change" is sent every Resync instead.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	u, err := s.userOf(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported here", http.StatusInternalServerError)
		return
	}
	q := r.URL.Query()
	var list client.ObjectList
	var opts []client.ListOption
	var shows func(client.Object) bool // nil: every object
	switch q.Get("kind") {
	case "runs":
		list = &v1alpha1.AgentRunList{}
	case "inbox":
		// Every turn of every run changes it: the inbox hears only of
		// the runs it shows, not of each of those.
		list, shows = &v1alpha1.AgentRunList{}, inInbox
	case "run":
		list = &v1alpha1.AgentRunList{}
		opts = append(opts, client.MatchingFields{"metadata.name": q.Get("name")})
	case "budgets":
		list = &v1alpha1.AgentBudgetList{}
	default:
		http.Error(w, `kind must be runs, inbox, run or budgets`, http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	sc, err := s.scopeOf(ctx, u, q.Get("namespace"), list.DeepCopyObject().(client.ObjectList), client.Limit(1))
	if err != nil {
		s.forget(u, err)
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, "retry: 3000\n\n")
	fl.Flush()

	changes := make(chan string, 64)
	watching := s.watchAll(ctx, u, sc, list, opts, shows, changes)
	resync := time.NewTicker(s.o.Resync)
	defer resync.Stop()
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case key, open := <-changes:
			if !open {
				// Every watch ended (the server closes them now and
				// then): open them again, and let the page catch up.
				changes = make(chan string, 64)
				watching = s.watchAll(ctx, u, sc, list, opts, shows, changes)
				key = ""
			}
			_, err = fmt.Fprintf(w, "event: change\ndata: %s\n\n", key)
		case <-resync.C:
			if watching {
				continue
			}
			changes = make(chan string, 64)
			watching = s.watchAll(ctx, u, sc, list, opts, shows, changes)
			_, err = fmt.Fprint(w, "event: change\ndata: \n\n")
		case <-beat.C:
			_, err = fmt.Fprint(w, ": keep-alive\n\n")
		}
		if err != nil {
			return
		}
		fl.Flush()
	}
}

// watchAll opens one watch per namespace of the scope (one in all) and
// forwards the NAMESPACE/NAME of each changed object to out, which it
// closes when every watch has ended. With shows, only an object the page
// shows, or showed until this change, is forwarded (a watch begins with
// every object as added, so it knows which the page shows). It says
// whether any watch opened; when none did, out is closed at once and left
// unread.
func (s *Server) watchAll(ctx context.Context, u *user, sc scope, list client.ObjectList, opts []client.ListOption,
	shows func(client.Object) bool, out chan<- string) bool {
	var ws []watch.Interface
	open := func(extra ...client.ListOption) {
		w, err := u.c.Watch(ctx, list.DeepCopyObject().(client.ObjectList), append(append([]client.ListOption{}, opts...), extra...)...)
		if err == nil {
			ws = append(ws, w)
		}
	}
	if sc.All {
		open()
	}
	for _, ns := range sc.Namespaces {
		open(client.InNamespace(ns))
	}
	if len(ws) == 0 {
		return false
	}
	done := make(chan struct{}, len(ws))
	for _, w := range ws {
		go func() {
			defer func() { done <- struct{}{} }()
			defer w.Stop()
			shown := map[string]bool{}
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok || ev.Type == watch.Error {
						return
					}
					key := ""
					if o, err := meta.Accessor(ev.Object); err == nil {
						key = o.GetNamespace() + "/" + o.GetName()
					}
					if shows != nil {
						obj, _ := ev.Object.(client.Object)
						now := ev.Type != watch.Deleted && obj != nil && shows(obj)
						if !now && !shown[key] {
							continue
						}
						if now {
							shown[key] = true
						} else {
							delete(shown, key)
						}
					}
					select {
					case out <- key:
					default: // the page is behind: it reads everything anyway
					}
				}
			}
		}()
	}
	go func() {
		for range ws {
			<-done
		}
		close(out)
	}()
	return true
}

// inInbox reports whether the inbox shows the run: a call of it waits
// for a person, or it escalated and no one has resolved it.
func inInbox(obj client.Object) bool {
	run, ok := obj.(*v1alpha1.AgentRun)
	return ok && (waitsForAPerson(run) || escalationOpen(run))
}
