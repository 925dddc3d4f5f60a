// Package transcript keeps a run's conversation out of the AgentRun: in
// immutable, labelled Secrets (chunks) that the AgentRun owns, so they are
// garbage-collected with it. Transcripts hold tool results and arguments,
// which often carry customer data; Secrets keep them out of roles that may
// read ConfigMaps.
//
// A chunk holds several turns: the operator buffers the newest messages in
// the run's checkpoint and flushes them as one chunk when the buffer grows
// past a small bound or the run ends, so a turn costs few API writes.
package transcript

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Labels and the Secret type of transcript chunks.
const (
	LabelRun   = "agents.agentrun.dev/run"
	LabelChunk = "agents.agentrun.dev/transcript-chunk"
	SecretType = corev1.SecretType("agents.agentrun.dev/transcript")
	dataKey    = "messages.json"
)

// ChunkName is the name of a run's n-th chunk (0-based).
func ChunkName(runName string, n int) string {
	if len(runName) > 200 {
		runName = runName[:200]
	}
	return fmt.Sprintf("%s-transcript-%04d", runName, n)
}

// Write creates chunk n holding msgs. Chunks are immutable. A chunk left by
// an attempt whose status write then failed is not yet counted by the run,
// so it is replaced.
func Write(ctx context.Context, c client.Client, r client.Reader, run *v1alpha1.AgentRun, n int, msgs []loop.Message) error {
	data, err := json.Marshal(msgs)
	if err != nil {
		return err
	}
	immutable := true
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ChunkName(run.Name, n),
			Namespace: run.Namespace,
			Labels:    map[string]string{LabelRun: run.Name, LabelChunk: strconv.Itoa(n)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run,
				v1alpha1.GroupVersion.WithKind("AgentRun"))},
		},
		Type:      SecretType,
		Immutable: &immutable,
		Data:      map[string][]byte{dataKey: data},
	}
	err = c.Create(ctx, sec)
	if apierrors.IsAlreadyExists(err) {
		old := &corev1.Secret{}
		if gerr := r.Get(ctx, client.ObjectKeyFromObject(sec), old); gerr != nil {
			return gerr
		}
		if string(old.Data[dataKey]) == string(data) {
			return nil
		}
		if derr := c.Delete(ctx, old, client.Preconditions{UID: &old.UID}); derr != nil && !apierrors.IsNotFound(derr) {
			return derr
		}
		err = c.Create(ctx, sec)
	}
	return err
}

// ReadChunks returns the messages of the run's first n chunks, in order.
func ReadChunks(ctx context.Context, c client.Reader, run *v1alpha1.AgentRun, n int) ([]loop.Message, error) {
	var out []loop.Message
	if n == 0 {
		return out, nil
	}
	list := &corev1.SecretList{}
	if err := c.List(ctx, list, client.InNamespace(run.Namespace), client.MatchingLabels{LabelRun: run.Name}); err != nil {
		return nil, err
	}
	byIndex := map[int]*corev1.Secret{}
	for i := range list.Items {
		s := &list.Items[i]
		if s.Type != SecretType || !ownedBy(s, run) {
			continue
		}
		idx, err := strconv.Atoi(s.Labels[LabelChunk])
		if err == nil {
			byIndex[idx] = s
		}
	}
	idxs := make([]int, 0, len(byIndex))
	for i := range byIndex {
		idxs = append(idxs, i)
	}
	sort.Ints(idxs)
	for i := 0; i < n; i++ {
		s := byIndex[i]
		if s == nil {
			return nil, fmt.Errorf("transcript chunk %s is missing", ChunkName(run.Name, i))
		}
		var msgs []loop.Message
		if err := json.Unmarshal(s.Data[dataKey], &msgs); err != nil {
			return nil, fmt.Errorf("transcript chunk %s: %w", s.Name, err)
		}
		out = append(out, msgs...)
	}
	return out, nil
}

func ownedBy(s *corev1.Secret, run *v1alpha1.AgentRun) bool {
	for _, o := range s.OwnerReferences {
		if o.UID == run.UID {
			return true
		}
	}
	return false
}

// Decode reads a run's checkpoint (the zero state when there is none).
func Decode(run *v1alpha1.AgentRun) (*loop.State, error) {
	s := &loop.State{}
	if run.Status.Checkpoint == nil || len(run.Status.Checkpoint.Raw) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(run.Status.Checkpoint.Raw, s); err != nil {
		return nil, fmt.Errorf("status.checkpoint is unreadable: %w", err)
	}
	return s, nil
}

// Read returns a run's whole transcript: the flushed chunks, then the
// messages still buffered in its checkpoint.
func Read(ctx context.Context, c client.Reader, run *v1alpha1.AgentRun) ([]loop.Message, error) {
	chunks := 0
	if t := run.Status.Transcript; t != nil {
		chunks = int(t.Chunks)
	}
	msgs, err := ReadChunks(ctx, c, run, chunks)
	if err != nil {
		return nil, err
	}
	s, err := Decode(run)
	if err != nil {
		return nil, err
	}
	return append(msgs, s.Transcript...), nil
}
