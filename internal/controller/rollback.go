package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/seal"
	"github.com/agentrun/agentrun/internal/transcript"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Rollback detection. A seal (package seal) binds a status to its run and
// its content, not to a point in the run's history: whoever may write
// agentruns/status could write back an earlier status the operator sealed,
// and the operator would resume from it, apply an approval again, run an
// approved call a second time and count less usage than was spent.
//
// So every status the operator writes carries a number one higher than
// the status it writes over (status.checkpointSequence), sealed with the
// checkpoint, and the operator keeps the highest number the API server
// confirmed, with the usage that status held, where a status writer
// cannot reach it and an operator restart does not lose it: a ConfigMap
// the run owns, agentrun-<uid>-saves, written after each status write and
// sealed like the chunks (its seal binds the run's UID, the number and the
// usage). A process reads it once per run (memory keeps it after), before
// it resumes anything. A status whose number is below it was written back
// from an earlier point: the run ends Error, naming both numbers, with the
// recorded usage, and nothing of it is dispatched.
//
// What "saved" means: a number counts once the status patch that carries
// it returned success. A patch refused on a conflict, or that failed,
// raises nothing, so the re-read status (still the last one saved) is not
// taken for a rollback. An operator told to stop still hears the answer
// to a status write it sent, and writes the record after it (answered).
// The record follows the status write: when it cannot be written (or the
// operator dies between the two writes) it lags, and the next status
// write brings it up to date. Each record write is made over the record
// as this process last saw it, so that a late one (from an operator that
// lost the run to another) never lowers it (writeRecord). A record that is
// missing counts as 0 (a run saved before numbering, or whose first record
// write did not happen); one whose seal does not open ends the run Error,
// as a forged chunk does.
//
// The record is in the run's namespace, where whoever may write ConfigMaps
// could delete it or put back an earlier copy: together with status write
// rights that still rolls a run back. Status write alone does not.

// Keys of a run's saves record.
const (
	savesSequenceKey = "sequence"
	savesUsageKey    = "usage.json"
	savesSealKey     = "seal"
	purposeSaves     = "agentrun/saves-record"
	// savesRecordLabel is the record's agents.agentrun.dev/record label,
	// which the admission policy agentrun-operator-writes admits.
	savesRecordLabel = "saves"
)

// SavesRecordName is the name of the ConfigMap that records the highest
// status the operator saved for the run with this UID.
func SavesRecordName(uid types.UID) string { return fmt.Sprintf("agentrun-%s-saves", uid) }

// highest returns what this process knows of the run's highest save,
// reading the record when memory holds nothing (a restart, a run this
// process forgot when it ended).
func (r *AgentRunReconciler) highest(ctx context.Context, run *v1alpha1.AgentRun) (highWater, error) {
	if h, ok := r.mem.high(run.UID); ok {
		return h, nil
	}
	h, err := r.readRecord(ctx, run)
	if err != nil {
		return highWater{}, err
	}
	r.mem.keepHigh(run.UID, h)
	return h, nil
}

// readRecord reads the run's saves record: the zero highWater when there
// is none. A record whose seal does not open is an error wrapping
// transcript.ErrForged, with the highWater's version still set.
func (r *AgentRunReconciler) readRecord(ctx context.Context, run *v1alpha1.AgentRun) (highWater, error) {
	cm := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: SavesRecordName(run.UID)}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return highWater{}, nil
	case err != nil:
		return highWater{}, fmt.Errorf("reading the record of the run's saves: %w", err)
	}
	seq, perr := strconv.ParseInt(cm.Data[savesSequenceKey], 10, 64)
	usage := []byte(cm.Data[savesUsageKey])
	if oerr := r.Keys.Open(cm.Data[savesSealKey], purposeSaves, savesParts(run.UID, cm.Data[savesSequenceKey], usage)...); oerr != nil || perr != nil {
		if oerr == nil {
			oerr = fmt.Errorf("%w: its sequence is not a number", seal.ErrInvalid)
		}
		return highWater{version: cm.ResourceVersion}, fmt.Errorf("%w: ConfigMap %s/%s: %v", transcript.ErrForged, cm.Namespace, cm.Name, oerr)
	}
	h := highWater{seq: seq, recorded: seq, version: cm.ResourceVersion}
	if len(usage) > 0 {
		h.usage = usage
	}
	return h, nil
}

// rolledBack reports, with the run's highest save already read into
// memory, whether st was written back from before it: the reason to end
// the run with, or "".
func rolledBack(st *v1alpha1.AgentRunStatus, h highWater) string {
	if st.CheckpointSequence >= h.seq {
		return ""
	}
	return fmt.Sprintf("the run cannot resume: status.checkpoint was written back to save %d after save %d had been made: "+
		"someone other than the operator wrote an earlier status of the run (agentruns/status); it is not resumed, "+
		"so no call runs again, and the usage is the one save %d recorded", st.CheckpointSequence, h.seq, h.seq)
}

// restoreUsage puts back the usage of the highest save into st (status
// written back from an earlier point counts less than was spent).
func restoreUsage(st *v1alpha1.AgentRunStatus, h highWater) {
	if len(h.usage) == 0 {
		return
	}
	var u v1alpha1.UsageStatus
	if err := json.Unmarshal(h.usage, &u); err == nil {
		st.Usage = &u
	}
}

// nextSequence is the number of a status written over base: one higher
// than base's and than any this process saw saved.
func (r *AgentRunReconciler) nextSequence(uid types.UID, base *v1alpha1.AgentRunStatus) int64 {
	h, _ := r.mem.high(uid)
	return max(base.CheckpointSequence, h.seq) + 1
}

// savedStatus raises the run's high-water mark to the status of run, which
// the API server just accepted, and brings the record up to date. A
// record write that fails is logged: the record lags until the next
// status write.
func (r *AgentRunReconciler) savedStatus(ctx context.Context, run *v1alpha1.AgentRun) {
	st := &run.Status
	var usage []byte
	if st.Usage != nil {
		usage, _ = json.Marshal(st.Usage)
	}
	h, known := r.mem.raiseHigh(run.UID, st.CheckpointSequence, usage)
	if !known || h.recorded >= h.seq {
		// The record was never read in this process (a run that ended
		// before loadState read it: nothing resumes it), or it is current.
		return
	}
	seq := strconv.FormatInt(h.seq, 10)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: SavesRecordName(run.UID), Namespace: run.Namespace,
			Labels: map[string]string{transcript.LabelRunUID: string(run.UID), v1alpha1.LabelSpecRecord: savesRecordLabel},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run,
				v1alpha1.GroupVersion.WithKind("AgentRun"))}},
		Data: map[string]string{savesSequenceKey: seq, savesUsageKey: string(h.usage),
			savesSealKey: r.Keys.Seal(purposeSaves, savesParts(run.UID, seq, h.usage)...)},
	}
	// The record belongs with the status write just made: an operator
	// that is stopping still writes it (a crash between the two leaves it
	// one save behind).
	ctx, cancel := answered(ctx)
	defer cancel()
	held, version, err := r.writeRecord(ctx, run, cm, h)
	if err != nil {
		ctrl.LoggerFrom(ctx).V(2).Info("Could not record the run's latest save; the next save does", "error", err.Error())
		return
	}
	r.mem.recorded(run.UID, held, version)
}

// writeRecord writes cm, the record of save h.seq, over the record as this
// process last read or wrote it (h.version), or creates it, and returns
// the save the record now holds and its version. Only the operator writes
// the record, and always upward; but a write from an operator that lost
// the run (a stopped leader's, landing after its successor's) would lower
// it. So when the record changed since, it is read again, and written
// only while it holds a lower save: otherwise what it holds is returned,
// and nothing is written. A record whose seal does not open is written
// over.
func (r *AgentRunReconciler) writeRecord(ctx context.Context, run *v1alpha1.AgentRun, cm *corev1.ConfigMap, h highWater) (int64, string, error) {
	cm.ResourceVersion = h.version
	var err error
	for range 3 {
		if cm.ResourceVersion == "" {
			err = r.Create(ctx, cm)
		} else {
			err = r.Update(ctx, cm)
		}
		if err == nil {
			return h.seq, cm.ResourceVersion, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) {
			return 0, "", err
		}
		cur, rerr := r.readRecord(ctx, run)
		switch {
		case errors.Is(rerr, transcript.ErrForged):
		case rerr != nil:
			return 0, "", rerr
		case cur.seq >= h.seq:
			return cur.seq, cur.version, nil
		}
		cm.ResourceVersion = cur.version
	}
	return 0, "", err
}

// savesParts is what a saves record's seal covers.
func savesParts(uid types.UID, seq string, usage []byte) [][]byte {
	return [][]byte{[]byte(uid), []byte(seq), usage}
}

// writeGrace is how long a write of a run's saves, once sent, may still
// take after the operator is told to stop.
const writeGrace = 10 * time.Second

// answered returns the context of a write whose answer this process must
// hear: one the API server may have taken while the operator was told to
// stop. A status write taken but never heard of would leave the saves
// record a save behind for good when it ended the run (above). It
// ends writeGrace after ctx does.
func answered(ctx context.Context) (context.Context, context.CancelFunc) {
	g, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(writeGrace, cancel) })
	return g, func() { stop(); cancel() }
}
