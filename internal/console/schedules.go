package console

import (
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/agentrun/agentrun/internal/schedtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxScheduleRuns bounds the runs a schedule's page lists.
const maxScheduleRuns = 20

// scheduleView is one AgentSchedule as the console shows it.
type scheduleView struct {
	Namespace, Name string
	UID             types.UID
	Schedule        string
	TimeZone        string
	Suspended       bool
	LastSchedule    string
	LastSuccessful  string
	Active          int32
	// Next is the next time the cron expression gives (none while the
	// schedule is suspended); Problem why there is none when the
	// expression or its zone cannot be read.
	Next, Problem string
}

// scheduleViewOf reads a schedule's facts; its next run time is the cron
// expression's next time after now, in spec.timeZone (UTC without one:
// the operator runs by its own zone, UTC in its container), read as the
// schedule controller reads it (schedtime.Of).
func scheduleViewOf(s *v1alpha1.AgentSchedule, now time.Time) scheduleView {
	v := scheduleView{Namespace: s.Namespace, Name: s.Name, UID: s.UID, Schedule: oneLine(s.Spec.Schedule),
		Suspended: s.Spec.Suspend != nil && *s.Spec.Suspend, Active: s.Status.ActiveCount, TimeZone: "UTC"}
	if s.Spec.TimeZone != nil {
		v.TimeZone = oneLine(*s.Spec.TimeZone)
	}
	if t := s.Status.LastScheduleTime; t != nil {
		v.LastSchedule = stamp(t.Time)
	}
	if t := s.Status.LastSuccessfulTime; t != nil {
		v.LastSuccessful = stamp(t.Time)
	}
	sched, loc, err := schedtime.Of(s, time.UTC)
	switch {
	case err != nil:
		v.Problem = oneLine(err.Error())
	case !v.Suspended:
		if next := sched.Next(now.In(loc)); !next.IsZero() {
			v.Next = next.Format(time.RFC3339)
		}
	}
	return v
}

// schedules lists the AgentSchedules the user may list, each linking to
// its page.
func (s *Server) schedules(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	now := time.Now()
	return listPage(r, s, u, r.URL.Query().Get("namespace"), view{Title: "Schedules", Page: "schedules"},
		func() *v1alpha1.AgentScheduleList { return &v1alpha1.AgentScheduleList{} },
		func(l *v1alpha1.AgentScheduleList) []v1alpha1.AgentSchedule { return l.Items },
		func(sc *v1alpha1.AgentSchedule) scheduleView { return scheduleViewOf(sc, now) })
}

// scheduleRun is one run a schedule started.
type scheduleRun struct {
	Name, Phase, Outcome, Created string
}

type scheduleData struct {
	Schedule scheduleView
	Runs     []scheduleRun
	// More: the schedule has more runs than the page lists.
	More bool
	// RunsLink is the runs page, filtered to the schedule's runs.
	RunsLink string
	Result   *result
}

// schedule shows one AgentSchedule: its facts, its last runs (those
// labelled with it, newest first), and the Suspend or Resume button.
func (s *Server) schedule(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	return s.schedulePage(r, u, r.PathValue("namespace"), r.PathValue("name"), nil)
}

func (s *Server) schedulePage(r *http.Request, u *user, ns, name string, res *result) (view, error) {
	v := view{Title: name, Page: "schedule"}
	sc := &v1alpha1.AgentSchedule{}
	if err := u.c.Get(r.Context(), types.NamespacedName{Namespace: ns, Name: name}, sc); err != nil {
		return v, err
	}
	var runs v1alpha1.AgentRunList
	if err := u.c.List(r.Context(), &runs, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelSchedule: name}); err != nil {
		return v, err
	}
	items := runs.Items
	sort.Slice(items, func(i, j int) bool {
		if a, b := items[i].CreationTimestamp, items[j].CreationTimestamp; !a.Equal(&b) {
			return b.Before(&a)
		}
		return items[i].Name > items[j].Name
	})
	d := &scheduleData{Schedule: scheduleViewOf(sc, time.Now()), Result: res, More: len(items) > maxScheduleRuns,
		RunsLink: "/?" + url.Values{"namespace": {ns}, "label": {v1alpha1.LabelSchedule + "=" + name}}.Encode()}
	for _, run := range items[:min(len(items), maxScheduleRuns)] {
		d.Runs = append(d.Runs, scheduleRun{Name: run.Name, Phase: string(run.Status.Phase),
			Outcome: string(run.Status.Outcome), Created: stamp(run.CreationTimestamp.Time)})
	}
	v.Data = d
	return v, nil
}

// suspendSchedule sets spec.suspend of the schedule the form showed, as
// the user, bound to its UID (runclient.SuspendSchedule), and shows its
// page again with what that did, or the refusal as the API server gave it.
func (s *Server) suspendSchedule(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	suspend := r.PostFormValue("suspend") == "true"
	verb := "resume"
	if suspend {
		verb = "suspend"
	}
	if !s.checkToken(r, u) {
		return view{Title: "Refused", Page: "error", Status: http.StatusForbidden,
			Data: "This form is out of date or did not come from this console: reload the page and " + verb + " again."}, nil
	}
	ns, name := r.PostFormValue("namespace"), r.PostFormValue("name")
	uid := types.UID(r.PostFormValue("uid"))
	if uid == "" {
		return view{Title: "Refused", Page: "error", Status: http.StatusBadRequest,
			Data: "This form does not say which schedule it showed: reload the page and " + verb + " again."}, nil
	}
	done, err := runclient.SuspendSchedule(r.Context(), u.c, runclient.SuspendOptions{Namespace: ns, Name: name, Suspend: suspend, UID: uid})
	res, status := answerResult(done, err)
	v, verr := s.schedulePage(r, u, ns, name, res)
	v.Status = status
	return v, verr
}
