package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/plugin"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/agentrun/agentrun/internal/runclient/archived"
	"github.com/agentrun/agentrun/internal/safeterm"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// Archive is the part of the archive of finished runs the console reads
// (an *archive.Postgres opened with archive.Open, which changes nothing
// in the database: a role that may only SELECT is enough).
type Archive interface {
	archived.Reader
	List(ctx context.Context, f archive.Filter) ([]archive.Summary, error)
}

// archiveLimit bounds the records a search shows.
const archiveLimit = 100

// allowedTo asks the API server, as the person, whether they may verb
// agentruns in namespace ns (every namespace when ns is ""): a
// SelfSubjectAccessReview, which needs no right of its own and which the
// API server answers for whoever the credentials are. The archive is read
// with the console's database role, so this is what keeps a person from
// reading the records of runs they could not have read in the cluster.
// why is the API server's reason when it says no.
func allowedTo(ctx context.Context, u *user, verb, ns string) (ok bool, why string, err error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Group: v1alpha1.GroupVersion.Group, Resource: "agentruns", Verb: verb, Namespace: ns,
		}}}
	if err := u.c.Create(ctx, review); err != nil {
		return false, "", err
	}
	why = review.Status.Reason
	if e := review.Status.EvaluationError; e != "" {
		why = strings.TrimSpace(why + " " + e)
	}
	return review.Status.Allowed, why, nil
}

// refusedArchive is what a person who may not verb agentruns in ns reads
// instead of its archived records.
func refusedArchive(verb, ns, why string) string {
	where := "namespace " + ns
	if ns == "" {
		where = "every namespace"
	}
	msg := fmt.Sprintf("You may not %s AgentRuns in %s, so the console shows you no archived record of them: "+
		"the archive keeps what the runs were, and you see it only where you could see the runs.", verb, where)
	if why = oneLine(why); why != "" {
		msg += " (The API server: " + why + ")"
	}
	return msg
}

// archiveRow is one archived run in a search's results.
type archiveRow struct {
	UID, Namespace, Name, Template    string
	Phase, Outcome, Reason, Cost      string
	Turns                             int32
	Finished, FinishedAgo, Transcript string
}

// archiveSearch is the archive page's search, from its query.
type archiveSearch struct {
	Namespace, Name, Label, Outcome, Since string
}

type archiveData struct {
	Search archiveSearch
	// Configured: the console reads an archive.
	Configured bool
	Rows       []archiveRow
	// Problem is why the search shows nothing: a refusal, or a filter
	// that cannot be read.
	Problem string
	Note    string
	Limit   int
	// Outcomes are the outcomes a run can end with, for the filter.
	Outcomes []string
}

// archiveList searches the archive: the records of runs that ended, newest
// first, by namespace, name, label selector, outcome and how recently
// they finished, as `agentrun archive list` searches it. The person must
// be allowed to list AgentRuns in the namespace searched; across every
// namespace, the records of the namespaces where they may not are left
// out.
func (s *Server) archiveList(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	q := r.URL.Query()
	f := archiveSearch{Namespace: strings.TrimSpace(q.Get("namespace")), Name: strings.TrimSpace(q.Get("name")),
		Label: strings.TrimSpace(q.Get("label")), Outcome: q.Get("outcome"), Since: strings.TrimSpace(q.Get("since"))}
	d := &archiveData{Search: f, Configured: s.o.Archive != nil, Limit: archiveLimit, Outcomes: outcomeNames()}
	v := view{Title: "Archive", Page: "archive", Data: d}
	if s.o.Archive == nil {
		return v, nil
	}
	filter := archive.Filter{Namespace: f.Namespace, Selector: f.Label, Outcome: f.Outcome, Limit: archiveLimit}
	if f.Since != "" {
		since, err := archived.ParseSince(f.Since, time.Now())
		if err != nil {
			v.Status, d.Problem = http.StatusBadRequest, strings.Replace(err.Error(), "--since", "Finished since", 1)
			return v, nil
		}
		filter.Since = since
	}
	sel, err := labels.Parse(f.Label)
	if err != nil {
		v.Status, d.Problem = http.StatusBadRequest, "Label: "+oneLine(err.Error())
		return v, nil
	}
	if f.Name != "" && f.Namespace == "" {
		v.Status, d.Problem = http.StatusBadRequest, "A name is looked up in a namespace: give the namespace too."
		return v, nil
	}
	everywhere, why, err := allowedTo(r.Context(), u, "list", f.Namespace)
	if err != nil {
		return v, err
	}
	if !everywhere && f.Namespace != "" {
		v.Status, d.Problem = http.StatusForbidden, refusedArchive("list", f.Namespace, why)
		return v, nil
	}
	var found []archive.Summary
	if f.Name != "" {
		found, err = s.o.Archive.Find(r.Context(), f.Namespace, f.Name)
		found = slices.DeleteFunc(found, func(x archive.Summary) bool {
			return (f.Outcome != "" && x.Outcome != f.Outcome) || x.FinishedAt.Before(filter.Since) || !sel.Matches(labels.Set(x.Labels))
		})
		found = found[:min(len(found), archiveLimit)]
	} else {
		found, err = s.o.Archive.List(r.Context(), filter)
	}
	if err != nil {
		return v, fmt.Errorf("reading the archive: %w", err)
	}
	if !everywhere {
		// Only the namespaces where the person may list runs, each asked
		// about once.
		may := map[string]bool{}
		left := 0
		var askErr error
		found = slices.DeleteFunc(found, func(x archive.Summary) bool {
			ok, seen := may[x.Namespace]
			if !seen && askErr == nil {
				ok, _, askErr = allowedTo(r.Context(), u, "list", x.Namespace)
				may[x.Namespace] = ok
			}
			if !ok {
				left++
			}
			return !ok
		})
		if askErr != nil {
			return v, askErr
		}
		if left > 0 {
			d.Note = "The records of runs in namespaces where you may not list AgentRuns are left out."
		}
	}
	now := time.Now()
	for _, x := range found {
		d.Rows = append(d.Rows, archiveRow{UID: x.UID, Namespace: x.Namespace, Name: x.Name, Template: x.Template,
			Phase: x.Phase, Outcome: x.Outcome, Reason: oneLine(x.Reason), Cost: dollars(v1alpha1.USD(x.CostUSD)), Turns: x.Turns,
			Finished: stamp(x.FinishedAt), FinishedAgo: duration.HumanDuration(now.Sub(x.FinishedAt)), Transcript: x.TranscriptState})
	}
	if len(found) >= archiveLimit {
		d.Note = strings.TrimSpace(d.Note + fmt.Sprintf(" The newest %d records are shown: narrow the search to see older ones.", archiveLimit))
	}
	return v, nil
}

// archivedRecord is one archived run as its page shows it.
type archivedRecord struct {
	UID, Namespace, Name, Template string
	Created, Finished              string
	Phase, Outcome, Reason         string
	// Manifest is the run as archived (kubectl get -o yaml, before it
	// was deleted).
	Manifest string
	// Transcript is its messages as `agentrun archive transcript` prints
	// them; TranscriptNote why the record holds less than the whole sealed
	// transcript.
	Transcript, TranscriptNote string
	Result                     *result
}

// archiveRecord shows one archived run, by its UID: its facts, the run as
// archived and its transcript, with a Re-run button. The person must be
// allowed to get AgentRuns in the run's namespace; otherwise the page says
// so and shows nothing of the record.
func (s *Server) archiveRecord(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	return s.archiveRecordPage(r, u, r.PathValue("uid"), nil, 0)
}

func (s *Server) archiveRecordPage(r *http.Request, u *user, uid string, res *result, status int) (view, error) {
	v := view{Title: "Archived run", Page: "archived", Status: status}
	rec, refused, err := s.readRecord(r.Context(), u, uid)
	if err != nil || refused != nil {
		if refused != nil {
			return *refused, nil
		}
		return v, err
	}
	run, err := archived.AgentRun(rec)
	if err != nil {
		return v, err
	}
	v.Title = rec.Name
	d := &archivedRecord{UID: rec.UID, Namespace: rec.Namespace, Name: rec.Name, Template: rec.Template,
		Created: stamp(rec.CreatedAt), Finished: stamp(rec.FinishedAt), Phase: string(run.Status.Phase),
		Outcome: rec.Outcome, Reason: safeterm.Clean(rec.Reason), TranscriptNote: oneLine(archived.TranscriptNote(rec)), Result: res}
	if raw, err := json.Marshal(archived.Manifest(rec)); err == nil {
		if y, err := yaml.JSONToYAML(raw); err == nil {
			d.Manifest = safeterm.Clean(string(y))
		}
	}
	if _, msgs, err := archived.Conversation(rec); err != nil {
		d.TranscriptNote = oneLine(err.Error())
	} else {
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString(plugin.FormatMessage(m))
		}
		d.Transcript = safeterm.Clean(b.String())
	}
	v.Data = d
	return v, nil
}

// readRecord reads the record of uid once the person may get AgentRuns in
// its namespace; refused is the page they see otherwise.
func (s *Server) readRecord(ctx context.Context, u *user, uid string) (*archive.Record, *view, error) {
	if s.o.Archive == nil {
		return nil, &view{Title: "Archive", Page: "archive", Status: http.StatusNotFound, Data: &archiveData{}}, nil
	}
	rec, err := s.o.Archive.Get(ctx, uid)
	if errors.Is(err, archive.ErrNotFound) {
		return nil, &view{Title: "Not in the archive", Page: "error", Status: http.StatusNotFound,
			Data: "The archive holds no run with UID " + oneLine(uid) + "."}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the archive: %w", err)
	}
	ok, why, err := allowedTo(ctx, u, "get", rec.Namespace)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, &view{Title: "Refused", Page: "error", Status: http.StatusForbidden, Data: refusedArchive("get", rec.Namespace, why)}, nil
	}
	return rec, nil, nil
}

// rerunArchived creates a new run from the spec of the archived run the
// form showed, as the person, as Re-run does for a run in the cluster
// (runclient.RerunOf: the same labels kept, agents.agentrun.dev/rerun-of
// set), and opens its page. The person must be allowed to get AgentRuns
// in its namespace to read the record, and the API server decides whether
// they may create the run; its refusal is shown on the record's page.
func (s *Server) rerunArchived(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	if !s.checkToken(r, u) {
		return view{Title: "Refused", Page: "error", Status: http.StatusForbidden,
			Data: "This form is out of date or did not come from this console: reload the page and re-run again."}, nil
	}
	uid := r.PostFormValue("uid")
	rec, refused, err := s.readRecord(r.Context(), u, uid)
	if err != nil || refused != nil {
		if refused != nil {
			return *refused, nil
		}
		return view{}, err
	}
	old, err := archived.AgentRun(rec)
	if err != nil {
		return view{}, err
	}
	run, err := runclient.RerunOf(r.Context(), u.c, old, "")
	if err == nil {
		http.Redirect(w, r, runPage(run.Namespace, run.Name), http.StatusSeeOther)
		return view{}, nil
	}
	res, status := answerResult(nil, err)
	return s.archiveRecordPage(r, u, uid, res, status)
}
