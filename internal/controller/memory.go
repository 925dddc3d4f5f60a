package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/ownwrite"
	"github.com/agentrun/agentrun/internal/transcript"
)

// memory is everything this process holds for the runs it drives between
// reconciles, behind one lock: each run's kit, what of its transcript is
// saved, the status its saves deferred, our own last status write (so a
// reconcile never acts on a cache that is behind it), the versions the
// cache delivered, and its recovered panics. It is the only such state
// of the AgentRun reconciler; forget is the one way to drop a run.
//
// None of it is needed for correctness after a restart: each part is a
// shortcut past a read of the API server, and a run found without it is
// read from storage.
type memory struct {
	mu sync.Mutex
	// kits holds each run's engine, model and tools, built once.
	kits map[types.UID]*Kit
	// saves is what of each run's transcript is saved in chunks.
	saves map[types.UID]*saved
	// deferred is each run's status as saved when its last saves did not
	// write status (see persist).
	deferred map[types.UID]*deferred
	// writes is our last status write of each run (see freshest).
	writes *ownwrite.Writes[types.UID, *v1alpha1.AgentRun]
	// names maps each run this process holds anything for to its UID, so
	// that a run deleted while we held it is forgotten by name.
	names map[types.NamespacedName]types.UID
	// panics counts each run's recovered panics (see panicked).
	panics map[types.UID]int
	// highs is each run's highest saved status (see rollback.go), as read
	// from its record and raised by our writes since.
	highs map[types.UID]highWater
}

func newMemory() *memory {
	return &memory{
		kits:     map[types.UID]*Kit{},
		saves:    map[types.UID]*saved{},
		deferred: map[types.UID]*deferred{},
		writes:   ownwrite.New[types.UID, *v1alpha1.AgentRun](),
		names:    map[types.NamespacedName]types.UID{},
		panics:   map[types.UID]int{},
		highs:    map[types.UID]highWater{},
	}
}

// saved is what of a run's transcript is in its chunks, as this process
// last wrote or read it.
type saved struct {
	chunks   int
	messages []loop.Message
	// observations are the stored results of the current turn's calls.
	observations map[string]transcript.Observation
}

// kit returns the run's kit, if built.
func (m *memory) kit(uid types.UID) *Kit { return entry(m, m.kits, uid) }

func (m *memory) keepKit(uid types.UID, k *Kit) { keepEntry(m, m.kits, uid, k) }

// saved returns what of the run's transcript this process last saved or
// read, if anything.
func (m *memory) saved(uid types.UID) *saved { return entry(m, m.saves, uid) }

func (m *memory) keepSaved(uid types.UID, sv *saved) { keepEntry(m, m.saves, uid, sv) }

// entry reads a run's entry of one of the memory's maps under its lock.
func entry[V any](m *memory, of map[types.UID]V, uid types.UID) V {
	m.mu.Lock()
	defer m.mu.Unlock()
	return of[uid]
}

// keepEntry sets a run's entry of one of the memory's maps under its lock.
func keepEntry[V any](m *memory, of map[types.UID]V, uid types.UID, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	of[uid] = v
}

// dropSaves forgets the run's saved transcript and deferred status, so
// that the next attempt reads them from the API server.
func (m *memory) dropSaves(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.saves, uid)
	delete(m.deferred, uid)
}

// deferredOver returns the status our saves deferred, if the stored run
// is still the version rv they were newer than; after any other write of
// the run it is dropped, and the saves' chunks are the record.
func (m *memory) deferredOver(uid types.UID, rv string) *deferred {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.deferred[uid]
	if d == nil {
		return nil
	}
	if d.over != rv {
		delete(m.deferred, uid)
		return nil
	}
	return d
}

// keepDeferred records d, or drops the run's deferred status when d is nil
// (it was written).
func (m *memory) keepDeferred(uid types.UID, d *deferred) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d == nil {
		delete(m.deferred, uid)
		return
	}
	m.deferred[uid] = d
}

// freshest returns our own last status write of the run when the cache
// still holds a version that write replaced (ownwrite). The cache may not
// have seen our own writes yet when the next reconcile starts (a model
// that answers in a millisecond wakes the run at once); reading the
// object we wrote instead of the stale copy saves a conflict and a round
// trip per turn.
func (m *memory) freshest(cached *v1alpha1.AgentRun) *v1alpha1.AgentRun {
	return m.writes.Freshest(cached.UID, cached)
}

// caughtUp drops our last write of the run once the cache delivers it, and
// reports whether the delivered version is that write. The watch may
// deliver a write before its patch returns: for a run this process holds,
// the version is then noted, so that remember keeps no copy of it.
func (m *memory) caughtUp(key types.NamespacedName, uid types.UID, rv string) (ours bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, tracked := m.names[key]
	return m.writes.CaughtUp(uid, rv, tracked)
}

// remember records a successful status write that replaced prevRV.
func (m *memory) remember(prevRV string, obj *v1alpha1.AgentRun) {
	m.writes.Wrote(obj.UID, prevRV, obj)
}

// panicked counts a recovered panic of the run and returns how many it had.
func (m *memory) panicked(uid types.UID) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.panics[uid]++
	return m.panics[uid]
}

// runs counts the runs this process holds anything for.
func (m *memory) runs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.names)
}

// track records which UID the run of this name has, and returns the UID
// of an earlier run of the same name whose memory must go.
func (m *memory) track(key types.NamespacedName, uid types.UID) (replaced types.UID, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, had := m.names[key]
	m.names[key] = uid
	return old, had && old != uid
}

// uidOf returns the UID this process knows the run of this name by.
func (m *memory) uidOf(key types.NamespacedName) (types.UID, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	uid, ok := m.names[key]
	return uid, ok
}

// forget drops everything held for the run.
func (m *memory) forget(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.kits, uid)
	delete(m.saves, uid)
	delete(m.deferred, uid)
	m.writes.Forget(uid)
	delete(m.panics, uid)
	delete(m.highs, uid)
	for k, v := range m.names {
		if v == uid {
			delete(m.names, k)
		}
	}
}

// size counts the entries held, over every map: a test's check that
// forget leaves nothing behind.
func (m *memory) size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.kits) + len(m.saves) + len(m.deferred) + m.writes.Len() + len(m.names) + len(m.panics) + len(m.highs)
}

// high returns the run's highest saved status, if this process has read
// or written it.
func (m *memory) high(uid types.UID) (highWater, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.highs[uid]
	return h, ok
}

// keepHigh keeps h as the run's highest save, as read from its record.
func (m *memory) keepHigh(uid types.UID, h highWater) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.highs[uid]; !ok || h.seq > old.seq {
		m.highs[uid] = h
	}
}

// raiseHigh raises the run's highest save to seq (with its usage) when it
// is higher, and returns the result; known is false, and nothing is
// kept, when this process never read the run's record.
func (m *memory) raiseHigh(uid types.UID, seq int64, usage []byte) (h highWater, known bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, known = m.highs[uid]
	if known && seq > h.seq {
		h.seq, h.usage = seq, usage
		m.highs[uid] = h
	}
	return h, known
}

// recorded notes that the run's record holds seq, at version.
func (m *memory) recorded(uid types.UID, seq int64, version string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.highs[uid]; ok {
		h.recorded, h.version = max(h.recorded, seq), version
		m.highs[uid] = h
	}
}

// Kit is what one run needs to be driven: its engine, its model and its
// tools.
type Kit = kit.Kit

// deferred is a run's status as its saves left it when they did not write
// it: status is the whole status as it would have been written (its
// checkpoint is in the last chunk too), over is the resourceVersion of the
// stored run it is newer than, and since is when the first of those saves
// was made.
type deferred struct {
	status *v1alpha1.AgentRunStatus
	over   string
	since  time.Time
}

// highWater is the highest status of a run the operator saved: its number
// and usage, and the number its record holds.
type highWater struct {
	seq      int64
	usage    []byte // the status's usage as JSON; nil when it had none
	recorded int64
	// version is the record's resourceVersion as this process last read
	// or wrote it ("" for none): the next record write is made over it.
	version string
}
