// Package transcript keeps a run's conversation out of the AgentRun: in
// immutable, labelled Secrets (chunks) that the AgentRun owns, so they are
// garbage-collected with it. Transcripts hold tool results, arguments and
// model text, which often carry customer data; Secrets keep them away from
// anyone who may only `get` AgentRuns or read ConfigMaps.
//
// Every message and every tool result reaches a chunk before anything
// counts it (write-ahead). A save either ends with a status patch that
// counts its chunks and carries the checkpoint, or, when only the run's
// progress changed, carries the checkpoint in its last chunk instead and
// leaves status to a later write (the run's status then counts fewer
// chunks than are saved). A chunk that carries a checkpoint is saved for
// good, as is one that status counts; any other chunk past them was left
// by an attempt that did not finish, and the next attempt replaces it.
//
// A chunk is named after the run's UID (ChunkName), so its name is valid
// whatever the run's name, and it holds at most MaxChunkBytes of JSON, so
// it always fits a Secret.
//
// Chunks live in the tenant's namespace, where anyone who may create
// Secrets could write one; status.checkpoint may be written by anyone who
// may patch the run's status. So both are sealed (package seal): each chunk
// with its run's UID and its index, the checkpoint in status with the UID
// and the counts beside it. ReadSealed and OpenCheckpoint refuse what the
// operator did not seal (ErrForged), and the operator never resumes from
// it.
//
// A seal is checked only with the operator's keys. So each chunk is also
// signed (seal.Keyring.Sign) over the same UID, index and data, and
// ReadMarked checks that signature with the operator's public keys
// (seal.Verifier): a person who may not hold the keys still sees which
// chunks the operator wrote.
package transcript

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/seal"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Labels and the Secret type of transcript chunks.
const (
	// LabelRunUID holds the run's UID: chunks are found by it.
	LabelRunUID = "agents.agentrun.dev/run-uid"
	// LabelRun holds the run's name when it is a valid label value (63
	// characters at most), for people selecting a run's Secrets by name.
	LabelRun   = "agents.agentrun.dev/run"
	LabelChunk = "agents.agentrun.dev/transcript-chunk"
	SecretType = corev1.SecretType("agents.agentrun.dev/transcript")
	dataKey    = "messages.json"
	// sealKey holds the chunk's seal (sealChunk).
	sealKey = "seal"
	// signatureKey holds the chunk's signature (signChunk).
	signatureKey = "signature"
)

// Purposes of the seals this package makes: a seal made for one never
// opens the other.
const (
	purposeChunk      = "agentrun/transcript-chunk"
	purposeCheckpoint = "agentrun/status-checkpoint"
)

// MaxChunkBytes bounds the JSON one chunk holds, well under the 1 MiB a
// Secret may hold.
const MaxChunkBytes = 768 << 10

// Errors a caller tells apart with errors.Is.
var (
	// ErrLost: state the run's status counts is missing or unreadable
	// (a chunk deleted by hand, say). It will not come back by waiting.
	ErrLost = errors.New("the run's saved transcript is incomplete")
	// ErrRefused: the API server will never accept this write (a Secret of
	// the same name that the run does not own, an invalid object).
	ErrRefused = errors.New("the transcript cannot be saved")
	// ErrStale: the caller's view of the run is older than the chunks
	// already written; read the run again.
	ErrStale = errors.New("the run changed since it was read")
	// ErrForged: a chunk or the checkpoint in status was not written by
	// the operator (its seal is missing or does not match). It is never
	// adopted.
	ErrForged = errors.New("the run's saved state was not written by the operator")
)

// Chunk is what one Secret holds: messages, in order, and the results of
// tool calls whose turn has not ended yet (they become tool messages when
// it does).
type Chunk struct {
	Messages     []loop.Message `json:"messages,omitempty"`
	Observations []Observation  `json:"observations,omitempty"`
	// Checkpoint is the run's state after this chunk, as status.checkpoint
	// would hold it, when the save that wrote the chunk did not write
	// status; it is newer than status.checkpoint.
	Checkpoint json.RawMessage `json:"checkpoint,omitempty"`
}

// Observation is the recorded result of one call of the turn in progress.
type Observation struct {
	CallID  string         `json:"callID"`
	Content string         `json:"content"`
	Status  loop.ObsStatus `json:"status,omitempty"`
}

// ChunkName is the name of the n-th chunk (0-based) of the run with this
// UID. It is a valid Secret name whatever the run is called.
func ChunkName(uid types.UID, n int) string {
	return fmt.Sprintf("agentrun-%s-transcript-%04d", uid, n)
}

func labels(run *v1alpha1.AgentRun, n int) map[string]string {
	l := map[string]string{LabelRunUID: string(run.UID), LabelChunk: strconv.Itoa(n)}
	if len(validation.IsValidLabelValue(run.Name)) == 0 {
		l[LabelRun] = run.Name
	}
	return l
}

// Split packs records into chunks of at most limit bytes of JSON each, in
// order. A single message or observation larger than limit is cut (the cut
// is marked) so that it fits.
func Split(msgs []loop.Message, obs []Observation, limit int) []Chunk {
	var out []Chunk
	cur, size := Chunk{}, 0
	const overhead = 64
	flush := func() {
		if len(cur.Messages)+len(cur.Observations) > 0 {
			out = append(out, cur)
		}
		cur, size = Chunk{}, 0
	}
	// add makes room for one entry: its content is cut when the entry
	// alone would not fit, and a full chunk is flushed first.
	add := func(content *string, measure func() int) {
		n := measure()
		if n+overhead > limit {
			*content = fit(*content, limit-overhead-(n-jsonSize(*content)))
			n = measure()
		}
		if size+n+overhead > limit {
			flush()
		}
		size += n + 1
	}
	for _, m := range msgs {
		add(&m.Content, func() int { return jsonSize(m) })
		cur.Messages = append(cur.Messages, m)
	}
	for _, o := range obs {
		add(&o.Content, func() int { return jsonSize(o) })
		cur.Observations = append(cur.Observations, o)
	}
	flush()
	return out
}

// fit cuts s so that, with the mark of the cut, it takes at most room
// bytes as a JSON string.
func fit(s string, room int) string {
	const mark = "\n[cut at %d of %d bytes to fit the transcript]"
	room -= len(mark) + 24
	size, keep := 2, 0
	for i, r := range s {
		n := 1
		switch {
		case r == utf8.RuneError:
			n = 6
		case r == '"' || r == '\\':
			n = 2
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == 0x2028 || r == 0x2029:
			n = 6
		case r >= 0x80:
			n = utf8.RuneLen(r)
		}
		if size+n > room {
			break
		}
		size += n
		_, w := utf8.DecodeRuneInString(s[i:])
		keep = i + w
	}
	return s[:keep] + fmt.Sprintf(mark, keep, len(s))
}

func jsonSize(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}

// Write creates chunk n of the run. Chunks are immutable. A chunk of that
// name left by an attempt that did not finish (it carries no checkpoint,
// and the run's status, read afresh through r, does not count it) is
// replaced; a saved one is never touched (ErrStale), and a Secret of that
// name that the run does not own is an error (ErrRefused), never replaced.
//
// The chunk is sealed and signed with kr, bound to the run's UID and to n.
func Write(ctx context.Context, c client.Client, r client.Reader, kr *seal.Keyring, run *v1alpha1.AgentRun, n int, ch Chunk) error {
	data, err := json.Marshal(ch)
	if err != nil {
		return err
	}
	if len(data) > MaxChunkBytes+MaxChunkBytes/4 {
		return fmt.Errorf("%w: chunk %d would hold %d bytes", ErrRefused, n, len(data))
	}
	immutable := true
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ChunkName(run.UID, n),
			Namespace: run.Namespace,
			Labels:    labels(run, n),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run,
				v1alpha1.GroupVersion.WithKind("AgentRun"))},
		},
		Type:      SecretType,
		Immutable: &immutable,
		Data: map[string][]byte{dataKey: data, sealKey: []byte(sealChunk(kr, run, n, data)),
			signatureKey: []byte(signChunk(kr, run, n, data))},
	}
	err = c.Create(ctx, sec)
	if apierrors.IsAlreadyExists(err) {
		old := &corev1.Secret{}
		if gerr := r.Get(ctx, client.ObjectKeyFromObject(sec), old); gerr != nil {
			return gerr
		}
		if !owns(run, old) {
			return fmt.Errorf("%w: a Secret named %s already exists and does not belong to this run; it was left alone", ErrRefused, sec.Name)
		}
		if string(old.Data[dataKey]) == string(data) {
			return nil
		}
		saved, serr := savedWithCheckpoint(ctx, r, kr, run, n, old)
		if serr != nil {
			return serr
		}
		if saved {
			return fmt.Errorf("%w: chunk %d is part of a save that ended with a checkpoint", ErrStale, n)
		}
		cur := &v1alpha1.AgentRun{}
		if gerr := r.Get(ctx, client.ObjectKeyFromObject(run), cur); gerr != nil {
			return gerr
		}
		if cur.UID != run.UID || (cur.Status.Transcript != nil && int(cur.Status.Transcript.Chunks) > n) {
			return fmt.Errorf("%w: chunk %d is already counted", ErrStale, n)
		}
		if derr := c.Delete(ctx, old, client.Preconditions{UID: &old.UID}); derr != nil && !apierrors.IsNotFound(derr) {
			return derr
		}
		err = c.Create(ctx, sec)
	}
	if apierrors.IsInvalid(err) || apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsBadRequest(err) {
		return fmt.Errorf("%w: creating %s: %v", ErrRefused, sec.Name, err)
	}
	return err
}

// savedWithCheckpoint reports whether chunk n (old) belongs to a save that
// finished without a status write: it, or one of the chunks after it,
// carries a checkpoint. Only chunks the operator sealed count.
func savedWithCheckpoint(ctx context.Context, r client.Reader, kr *seal.Keyring, run *v1alpha1.AgentRun, n int, old *corev1.Secret) (bool, error) {
	for sec := old; ; n++ {
		if openChunk(kr, run, n, sec) != nil {
			return false, nil
		}
		if ch, err := decodeChunk(sec.Data[dataKey]); err != nil || len(ch.Checkpoint) > 0 {
			return err == nil, nil
		}
		sec = &corev1.Secret{}
		err := r.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: ChunkName(run.UID, n+1)}, sec)
		if apierrors.IsNotFound(err) || (err == nil && !owns(run, sec)) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// owns reports whether the Secret is one of the run's chunks: the run is
// its controller and its label names the run.
func owns(run *v1alpha1.AgentRun, s *corev1.Secret) bool {
	ref := metav1.GetControllerOf(s)
	if ref == nil || ref.UID != run.UID || s.Type != SecretType {
		return false
	}
	return s.Labels[LabelRunUID] == string(run.UID) || s.Labels[LabelRun] == run.Name
}

// ReadChunks returns the run's saved chunks, in order: the n that its
// status counts, then those saved after them, up to the last that carries
// a checkpoint (chunks past it were left by an attempt that did not
// finish). A missing or unreadable counted chunk is an ErrLost error that
// names it. It does not check seals: it is for showing a transcript, not
// for resuming a run (ReadSealed).
func ReadChunks(ctx context.Context, c client.Reader, run *v1alpha1.AgentRun, n int) ([]Chunk, error) {
	return readChunks(ctx, c, nil, run, n, nil)
}

// check is how a reader checks chunk n of a run, as s holds it: nil when
// it is the operator's, else an ErrForged error naming the Secret. A nil
// check checks nothing.
type check func(n int, s *corev1.Secret) error

// sealed checks the chunk's seal with kr.
func sealed(kr *seal.Keyring, run *v1alpha1.AgentRun) check {
	return func(n int, s *corev1.Secret) error {
		return forged(s, openChunk(kr, run, n, s))
	}
}

// signed checks the chunk's signature with v.
func signed(v *seal.Verifier, run *v1alpha1.AgentRun) check {
	return func(n int, s *corev1.Secret) error {
		return forged(s, v.Verify(string(s.Data[signatureKey]), purposeChunk, []byte(run.UID), []byte(strconv.Itoa(n)), s.Data[dataKey]))
	}
}

func forged(s *corev1.Secret, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: transcript chunk Secret %s/%s: %v", ErrForged, s.Namespace, s.Name, err)
}

// ReadSealed is ReadChunks for resuming a run: every chunk it returns was
// sealed with a key of kr for this run and its index. A counted chunk, or
// one after them, that is not is an ErrForged error naming the Secret.
func ReadSealed(ctx context.Context, c client.Reader, kr *seal.Keyring, run *v1alpha1.AgentRun, n int) ([]Chunk, error) {
	return readChunks(ctx, c, sealed(kr, run), run, n, nil)
}

// readChunks reads the chunks, refusing one that chk refuses (none is
// checked when chk is nil). With marks, it refuses none: it adds a Part
// for each chunk it returns instead, naming its Secret and why chk
// refuses it.
func readChunks(ctx context.Context, c client.Reader, chk check, run *v1alpha1.AgentRun, n int, marks *[]Part) ([]Chunk, error) {
	byIndex := map[int]*corev1.Secret{}
	collect := func(sel client.MatchingLabels) error {
		list := &corev1.SecretList{}
		if err := c.List(ctx, list, client.InNamespace(run.Namespace), sel); err != nil {
			return err
		}
		for i := range list.Items {
			s := &list.Items[i]
			if !owns(run, s) {
				continue
			}
			if idx, err := strconv.Atoi(s.Labels[LabelChunk]); err == nil && byIndex[idx] == nil {
				byIndex[idx] = s
			}
		}
		return nil
	}
	if err := collect(client.MatchingLabels{LabelRunUID: string(run.UID)}); err != nil {
		return nil, err
	}
	if len(byIndex) < n && len(validation.IsValidLabelValue(run.Name)) == 0 {
		// Chunks written before they carried the run's UID.
		if err := collect(client.MatchingLabels{LabelRun: run.Name}); err != nil {
			return nil, err
		}
	}
	out := make([]Chunk, 0, n)
	// checked checks chunk i: an error refuses the chunk; with marks, the
	// chunk is marked instead.
	checked := func(i int, s *corev1.Secret) error {
		var why error
		if chk != nil {
			why = chk(i, s)
		}
		if marks == nil {
			return why
		}
		*marks = append(*marks, Part{Source: s.Name, Unsealed: why})
		return nil
	}
	for i := 0; i < n; i++ {
		s := byIndex[i]
		if s == nil {
			return nil, fmt.Errorf("%w: transcript chunk %s (%d of %d) is missing", ErrLost, ChunkName(run.UID, i), i+1, n)
		}
		if err := checked(i, s); err != nil {
			return nil, err
		}
		ch, err := decodeChunk(s.Data[dataKey])
		if err != nil {
			return nil, fmt.Errorf("%w: transcript chunk %s is unreadable: %v", ErrLost, s.Name, err)
		}
		out = append(out, ch)
	}
	saved := len(out)
	for i := n; byIndex[i] != nil; i++ {
		if err := checked(i, byIndex[i]); err != nil {
			return nil, err
		}
		ch, err := decodeChunk(byIndex[i].Data[dataKey])
		if err != nil {
			break // never saved for good: a save reads its chunks back whole
		}
		out = append(out, ch)
		if len(ch.Checkpoint) > 0 {
			saved = len(out)
		}
	}
	if marks != nil {
		*marks = (*marks)[:saved] // in step with out
	}
	return out[:saved], nil
}

// Newest returns the run's newest checkpoint: that of the last of chunks
// (as ReadChunks returned them) when it is past the n that status counts
// and carries one, else status.checkpoint.
func Newest(run *v1alpha1.AgentRun, chunks []Chunk, n int) []byte {
	if len(chunks) > n && len(chunks[len(chunks)-1].Checkpoint) > 0 {
		return chunks[len(chunks)-1].Checkpoint
	}
	if run.Status.Checkpoint == nil {
		return nil
	}
	return run.Status.Checkpoint.Raw
}

// sealChunk seals chunk n's data for the run.
func sealChunk(kr *seal.Keyring, run *v1alpha1.AgentRun, n int, data []byte) string {
	return kr.Seal(purposeChunk, []byte(run.UID), []byte(strconv.Itoa(n)), data)
}

// signChunk signs chunk n's data for the run.
func signChunk(kr *seal.Keyring, run *v1alpha1.AgentRun, n int, data []byte) string {
	return kr.Sign(purposeChunk, []byte(run.UID), []byte(strconv.Itoa(n)), data)
}

// openChunk checks the seal of chunk n of the run, as s holds it.
func openChunk(kr *seal.Keyring, run *v1alpha1.AgentRun, n int, s *corev1.Secret) error {
	return kr.Open(string(s.Data[sealKey]), purposeChunk, []byte(run.UID), []byte(strconv.Itoa(n)), s.Data[dataKey])
}

// ChunkKey is the id of the key that opening the seal of s, one of the
// run's chunks, needs (seal.Keyring.Needs): "" when s is not one of the
// run's chunks or its seal is not the operator's.
func ChunkKey(kr *seal.Keyring, run *v1alpha1.AgentRun, s *corev1.Secret) string {
	n, err := strconv.Atoi(s.Labels[LabelChunk])
	if err != nil || !owns(run, s) {
		return ""
	}
	return kr.Needs(string(s.Data[sealKey]), purposeChunk, []byte(run.UID), []byte(strconv.Itoa(n)), s.Data[dataKey])
}

// CheckpointKey is the id of the key that opening st.checkpointSeal needs
// (seal.Keyring.Needs): "" for a status without one, or with one that is
// not the operator's.
func CheckpointKey(kr *seal.Keyring, uid types.UID, st *v1alpha1.AgentRunStatus) string {
	parts, err := checkpointParts(uid, st)
	if err != nil || parts == nil {
		return ""
	}
	return kr.Needs(st.CheckpointSeal, purposeCheckpoint, parts...)
}

// SealCheckpoint returns the seal of st's checkpoint, transcript counts
// and sequence (status.checkpointSequence, which places the status in the
// run's history) for the run with this UID ("" when st has none of them:
// a run never saved).
// The checkpoint is sealed in its canonical JSON form (loop.Canonical), so
// the API server's re-encoding of status (key order, number spelling) does
// not break the seal.
func SealCheckpoint(kr *seal.Keyring, uid types.UID, st *v1alpha1.AgentRunStatus) (string, error) {
	parts, err := checkpointParts(uid, st)
	if err != nil || parts == nil {
		return "", err
	}
	return kr.Seal(purposeCheckpoint, parts...), nil
}

// OpenCheckpoint checks st.checkpointSeal against st's checkpoint,
// transcript counts and sequence for the run with this UID: an ErrForged
// error that says why when it does not match. A status with neither a
// checkpoint, counts, sequence nor a seal (a run never saved) opens. That
// the sequence is the run's latest is the caller's to check.
func OpenCheckpoint(kr *seal.Keyring, uid types.UID, st *v1alpha1.AgentRunStatus) error {
	parts, err := checkpointParts(uid, st)
	if err != nil {
		return fmt.Errorf("%w: status.checkpoint: %v", ErrForged, err)
	}
	if parts == nil && st.CheckpointSeal == "" {
		return nil
	}
	if err := kr.Open(st.CheckpointSeal, purposeCheckpoint, parts...); err != nil {
		return fmt.Errorf("%w: status.checkpoint and status.transcript: %v", ErrForged, err)
	}
	return nil
}

func checkpointParts(uid types.UID, st *v1alpha1.AgentRunStatus) ([][]byte, error) {
	var raw []byte
	if st.Checkpoint != nil {
		raw = st.Checkpoint.Raw
	}
	var chunks, messages int32
	if t := st.Transcript; t != nil {
		chunks, messages = t.Chunks, t.Messages
	}
	if len(raw) == 0 && chunks == 0 && messages == 0 && st.CheckpointSequence == 0 {
		return nil, nil
	}
	var canon []byte
	if len(raw) > 0 {
		var err error
		if canon, err = loop.Canonical(raw, nil); err != nil {
			return nil, err
		}
	}
	parts := [][]byte{[]byte(uid), canon, []byte(strconv.Itoa(int(chunks))), []byte(strconv.Itoa(int(messages)))}
	if st.CheckpointSequence > 0 {
		// A status sealed before statuses were numbered has no sequence
		// and is sealed without one, so it still opens after an upgrade.
		parts = append(parts, []byte(strconv.FormatInt(st.CheckpointSequence, 10)))
	}
	return parts, nil
}

// decodeChunk reads a chunk; chunks written before observations were kept
// in chunks are a bare list of messages.
func decodeChunk(data []byte) (Chunk, error) {
	var ch Chunk
	if len(data) > 0 && data[0] == '[' {
		err := json.Unmarshal(data, &ch.Messages)
		return ch, err
	}
	err := json.Unmarshal(data, &ch)
	return ch, err
}

// Decode reads a run's checkpoint from its status (the zero state when
// there is none).
func Decode(run *v1alpha1.AgentRun) (*loop.State, error) {
	var raw []byte
	if run.Status.Checkpoint != nil {
		raw = run.Status.Checkpoint.Raw
	}
	return DecodeCheckpoint(raw)
}

// DecodeCheckpoint reads a checkpoint (the zero state when raw is empty).
func DecodeCheckpoint(raw []byte) (*loop.State, error) {
	s := &loop.State{}
	if len(raw) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(raw, s); err != nil {
		return nil, fmt.Errorf("the run's checkpoint is unreadable: %w", err)
	}
	return s, nil
}

// Read returns a run's whole transcript as saved: the messages of its
// chunks, then any still buffered in its checkpoint (runs saved by older
// operators).
func Read(ctx context.Context, c client.Reader, run *v1alpha1.AgentRun) ([]loop.Message, error) {
	return readMessages(ctx, c, reader{}, run)
}

// ReadSealedMessages is Read of the chunks the operator sealed only (kr
// opens their seals): a chunk anyone else wrote is an ErrForged error,
// never read as the run's.
func ReadSealedMessages(ctx context.Context, c client.Reader, kr *seal.Keyring, run *v1alpha1.AgentRun) ([]loop.Message, error) {
	return readMessages(ctx, c, reader{chunk: sealed(kr, run)}, run)
}

func readMessages(ctx context.Context, c client.Reader, rd reader, run *v1alpha1.AgentRun) ([]loop.Message, error) {
	parts, err := readParts(ctx, c, rd, run)
	if err != nil {
		return nil, err
	}
	var msgs []loop.Message
	for _, p := range parts {
		msgs = append(msgs, p.Messages...)
	}
	return msgs, nil
}

// Part is a piece of a run's transcript as ReadMarked shows it: the
// messages of one chunk Secret, or those still in the checkpoint, and
// whether the operator signed them.
type Part struct {
	// Source is where the messages are kept: a chunk Secret's name, or
	// "status.checkpoint".
	Source   string
	Messages []loop.Message
	// Unsealed is nil when the operator's signature of the part verifies,
	// else an ErrForged error saying why it does not (no signature, one
	// made with a key the operator does not publish, or one that does not
	// match the content).
	Unsealed error
}

// ReadMarked is Read for showing a transcript to a person who judges by
// it (an approver, beside a pending call): every chunk's signature is
// checked with v, the operator's public keys, and a part whose signature
// does not verify is returned marked (Part.Unsealed), not refused, so that
// the reader sees both what was written and that the operator did not
// write it. A chunk without a signature is marked: whoever rewrites a
// chunk can leave its signature out. Messages still in status.checkpoint
// (which only operators before chunks wrote there) carry no signature and
// are marked too.
func ReadMarked(ctx context.Context, c client.Reader, v *seal.Verifier, run *v1alpha1.AgentRun) ([]Part, error) {
	return readParts(ctx, c, reader{chunk: signed(v, run), mark: true,
		checkpoint: fmt.Errorf("%w: status.checkpoint holds messages, which carry no signature: the operator keeps them in transcript chunks", ErrForged)}, run)
}

// reader says how readParts checks what it reads: each chunk with chunk
// (nil: none is checked); with mark, a chunk that does not pass is marked
// rather than refused, and the messages still in status.checkpoint are
// marked with checkpoint (nil: not marked).
type reader struct {
	chunk      check
	mark       bool
	checkpoint error
}

// readParts reads the chunks' messages and then those still buffered in
// the newest checkpoint (runs saved by older operators), each chunk a
// Part.
func readParts(ctx context.Context, c client.Reader, rd reader, run *v1alpha1.AgentRun) ([]Part, error) {
	chunks := 0
	if t := run.Status.Transcript; t != nil {
		chunks = int(t.Chunks)
	}
	var parts []Part
	var marks *[]Part
	if rd.mark {
		marks = &parts
	}
	cs, err := readChunks(ctx, c, rd.chunk, run, chunks, marks)
	if err != nil {
		return nil, err
	}
	if !rd.mark {
		parts = make([]Part, len(cs))
	}
	for i, ch := range cs {
		parts[i].Messages = ch.Messages
	}
	if t := run.Status.Transcript; t != nil && len(cs) == chunks {
		// Status counts the messages saved for good; a chunk may hold more.
		keep := int(t.Messages)
		for i := range parts {
			parts[i].Messages = parts[i].Messages[:min(len(parts[i].Messages), keep)]
			keep -= len(parts[i].Messages)
		}
	}
	s, err := DecodeCheckpoint(Newest(run, cs, chunks))
	if err != nil {
		return nil, err
	}
	if len(s.Transcript) > 0 {
		tail := Part{Source: "status.checkpoint", Messages: s.Transcript}
		switch {
		case len(cs) > chunks && len(cs[len(cs)-1].Checkpoint) > 0:
			// The checkpoint came from the last chunk, under its seal
			// and signature.
			if rd.mark {
				tail.Source, tail.Unsealed = parts[len(parts)-1].Source, parts[len(parts)-1].Unsealed
			}
		case rd.mark:
			tail.Unsealed = rd.checkpoint
		}
		parts = append(parts, tail)
	}
	return parts, nil
}
