package controller

import "github.com/agentrun/agentrun/api/v1alpha1"

// stored is a run as last saved, as the reconcile found it: the object the
// API server holds (the base of every status patch), and laid over it the
// status of our saves that the server does not hold yet. That status is
// the one saves which did not write status left in memory (deferred), or
// the one loadState read back from chunks saved after the stored status.
// A save's counts (its spend, its transitions) are judged against the run
// as last saved, and a status patch is computed against the server's.
type stored struct {
	obj  *v1alpha1.AgentRun // as the API server holds it
	last *v1alpha1.AgentRun // obj, or obj with our saves' status laid over it
	// deferred is the status our saves hold back, over which version of
	// obj, and since when. Unlike last, it follows this reconcile's save:
	// persist replaces it when it holds status back again, and drops it
	// when it writes status.
	deferred *deferred
}

// storedOf is obj, as read from the API server, and d, the status our
// saves deferred over that version of it (nil if none).
func storedOf(obj *v1alpha1.AgentRun, d *deferred) stored {
	s := stored{obj: obj, last: obj, deferred: d}
	if d != nil {
		s.last = withStatus(obj, d.status)
	}
	return s
}

// server is the run as the API server holds it: the base of status
// patches, and what tells whether a status differs from the one stored.
func (s stored) server() *v1alpha1.AgentRun { return s.obj }

// run is the run as last saved (read-only): server, or server with the
// status of our later saves.
func (s stored) run() *v1alpha1.AgentRun { return s.last }

// lay makes st, the status of saves read back from chunks, the status of
// the run as last saved.
func (s *stored) lay(st *v1alpha1.AgentRunStatus) { s.last = withStatus(s.obj, st) }

// withStatus is run with st for its status, sharing everything else: a
// read-only view of the run as a save left it.
func withStatus(run *v1alpha1.AgentRun, st *v1alpha1.AgentRunStatus) *v1alpha1.AgentRun {
	v := *run
	v.Status = *st.DeepCopy()
	return &v
}
