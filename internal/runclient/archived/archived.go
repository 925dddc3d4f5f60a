// Package archived reads the archive of finished runs for a client (the
// agentrun archive command): it finds the record a name or a UID means,
// and turns records into what kubectl shows of a run: a table, JSON, an
// AgentRun manifest, a transcript. The command is flag wiring around it.
package archived

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/archive"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/safeterm"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// Reader is the part of an archive.Store a client reads records with.
type Reader interface {
	Get(ctx context.Context, uid string) (*archive.Record, error)
	Find(ctx context.Context, namespace, name string) ([]archive.Summary, error)
}

// ParseSince reads a --since: a duration back from now (Go's, plus whole
// days as 7d), or a time.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q: give a duration (24h, 7d) or an RFC 3339 time (2026-05-20T12:00:00Z)", s)
}

// Found is the record a name or a UID means.
type Found struct {
	Record *archive.Record
	// Runs is how many runs of the name the namespace had (Record is the
	// newest); 0 when the record was named by its UID.
	Runs int
}

// Note says which run a name that ran more than once means, so that a
// person knows there are others; "" otherwise.
func (f *Found) Note() string {
	if f.Runs < 2 {
		return ""
	}
	r := f.Record
	return fmt.Sprintf("%s/%s ran %d times; this is the newest (uid %s, finished %s). "+
		"agentrun archive list -n %s -o wide shows the others' UIDs.",
		r.Namespace, r.Name, f.Runs, r.UID, r.FinishedAt.UTC().Format(time.RFC3339), r.Namespace)
}

// Resolve finds the record arg names: a UID, else the newest run of that
// name in the namespace ("default" when empty).
func Resolve(ctx context.Context, s Reader, namespace, arg string) (*Found, error) {
	r, err := s.Get(ctx, arg)
	if !errors.Is(err, archive.ErrNotFound) {
		if err != nil {
			return nil, err
		}
		return &Found{Record: r}, nil
	}
	if namespace == "" {
		namespace = "default"
	}
	runs, err := s.Find(ctx, namespace, arg)
	if err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("no run named %q in namespace %q, and none with that UID, in the archive", arg, namespace)
	}
	r, err = s.Get(ctx, runs[0].UID)
	if err != nil {
		return nil, err
	}
	return &Found{Record: r, Runs: len(runs)}, nil
}

// TranscriptNote says when the record holds less than the run's whole
// sealed transcript, and what was missing or unsealed; "" when it holds it.
func TranscriptNote(r *archive.Record) string {
	switch r.TranscriptState {
	case archive.TranscriptComplete:
		return ""
	case "":
		return fmt.Sprintf("%s/%s was archived before records said whether their transcript was complete and sealed.", r.Namespace, r.Name)
	}
	return fmt.Sprintf("%s/%s was archived without its transcript (%s): %s",
		r.Namespace, r.Name, r.TranscriptState, strings.Join(strings.Fields(r.TranscriptProblem), " "))
}

// PrintList prints runs as kubectl's table printer does: columns three
// spaces apart, <none> for an empty cell kubectl would show so; FINISHED is
// how long before now the run ended. namespaces adds a NAMESPACE column,
// wide the UID, the template, the transcript state and the reason.
func PrintList(w io.Writer, runs []archive.Summary, namespaces, wide bool, now time.Time) {
	tw := tabwriter.NewWriter(safeterm.Writer(w), 6, 4, 3, ' ', 0)
	var head []string
	if namespaces {
		head = append(head, "NAMESPACE")
	}
	head = append(head, "NAME", "PHASE", "OUTCOME", "TURN", "COST", "FINISHED")
	if wide {
		head = append(head, "UID", "TEMPLATE", "TRANSCRIPT", "REASON")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range runs {
		var row []string
		if namespaces {
			row = append(row, r.Namespace)
		}
		row = append(row, r.Name, r.Phase, r.Outcome, strconv.Itoa(int(r.Turns)), r.CostUSD,
			duration.HumanDuration(now.Sub(r.FinishedAt)))
		if wide {
			row = append(row, r.UID, orNone(r.Template), transcriptState(r.TranscriptState), strings.Join(strings.Fields(r.Reason), " "))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
}

// PrintEvaluations writes archived evaluations as a table, newest first:
// with namespaces, a NAMESPACE column; FINISHED is how long ago.
func PrintEvaluations(w io.Writer, evals []archive.Evaluation, namespaces bool, now time.Time) {
	tw := tabwriter.NewWriter(safeterm.Writer(w), 6, 4, 3, ' ', 0)
	head := []string{"NAME", "PHASE", "PASS RATE", "COST", "FINISHED", "UID"}
	if namespaces {
		head = append([]string{"NAMESPACE"}, head...)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, e := range evals {
		row := []string{e.Name, e.Phase, orNone(e.PassRate), orNone(e.CostUSD), duration.HumanDuration(now.Sub(e.FinishedAt)), e.UID}
		if namespaces {
			row = append([]string{e.Namespace}, row...)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
}

// transcriptState is a record's transcript state as the table shows it:
// <unknown> for a record written before the archive recorded it.
func transcriptState(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// Listed is a listed run in JSON: the summary with kubectl's names.
type Listed struct {
	UID        string            `json:"uid"`
	Namespace  string            `json:"namespace"`
	Name       string            `json:"name"`
	Template   string            `json:"template,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	CreatedAt  time.Time         `json:"creationTimestamp"`
	FinishedAt time.Time         `json:"completionTime"`
	Phase      string            `json:"phase,omitempty"`
	Outcome    string            `json:"outcome,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	Turn       int32             `json:"turn"`
	CostUSD    string            `json:"costUSD,omitempty"`
	// Transcript is the record's transcript state (Complete, Incomplete,
	// Unsealed), empty when it was archived before records said.
	Transcript string `json:"transcript,omitempty"`
}

// List is runs as JSON lists them: never null.
func List(runs []archive.Summary) []Listed {
	out := []Listed{}
	for _, r := range runs {
		out = append(out, Listed{UID: r.UID, Namespace: r.Namespace, Name: r.Name, Template: r.Template,
			Labels: r.Labels, CreatedAt: r.CreatedAt.UTC(), FinishedAt: r.FinishedAt.UTC(), Phase: r.Phase,
			Outcome: r.Outcome, Reason: r.Reason, Turn: r.Turns, CostUSD: r.CostUSD, Transcript: r.TranscriptState})
	}
	return out
}

// WriteJSON writes v indented, as kubectl -o json does.
func WriteJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(safeterm.Writer(w), "%s\n", b)
	return err
}

// Run is an AgentRun rebuilt from its record. Spec and status stay the
// JSON that was archived, so that fields this binary does not know (a
// newer operator's) are shown too.
type Run struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       json.RawMessage   `json:"spec,omitempty"`
	Status     json.RawMessage   `json:"status,omitempty"`
}

// Manifest is the run a record keeps, as kubectl get -o yaml would have
// shown it before it was deleted.
func Manifest(r *archive.Record) Run {
	return Run{
		APIVersion: v1alpha1.GroupVersion.String(),
		Kind:       "AgentRun",
		Metadata: metav1.ObjectMeta{
			Name: r.Name, Namespace: r.Namespace, UID: types.UID(r.UID),
			CreationTimestamp: metav1.NewTime(r.CreatedAt.UTC()),
			Labels:            r.Labels, Annotations: r.Annotations,
		},
		Spec: r.Spec, Status: r.Status,
	}
}

// WriteManifest writes the run a record keeps (Manifest) as YAML, or as
// indented JSON.
func WriteManifest(w io.Writer, r *archive.Record, asJSON bool) error {
	b, err := json.Marshal(Manifest(r))
	if err != nil {
		return err
	}
	if asJSON {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		return WriteJSON(w, v)
	}
	y, err := yaml.JSONToYAML(b)
	if err != nil {
		return err
	}
	_, err = safeterm.Writer(w).Write(y)
	return err
}

// AgentRun is the run a record keeps, typed: its name, namespace, UID,
// labels, annotations and creation time, its spec and its status. A
// re-run of an archived run starts from it (runclient.RerunOf).
func AgentRun(r *archive.Record) (*v1alpha1.AgentRun, error) {
	run := &v1alpha1.AgentRun{ObjectMeta: Manifest(r).Metadata}
	if len(r.Spec) > 0 {
		if err := json.Unmarshal(r.Spec, &run.Spec); err != nil {
			return nil, fmt.Errorf("the archived spec of %s/%s: %w", r.Namespace, r.Name, err)
		}
	}
	if len(r.Status) > 0 {
		if err := json.Unmarshal(r.Status, &run.Status); err != nil {
			return nil, fmt.Errorf("the archived status of %s/%s: %w", r.Namespace, r.Name, err)
		}
	}
	return run, nil
}

// Conversation is the run and the messages a record keeps, as the
// transcript printer of a live run takes them.
func Conversation(r *archive.Record) (*v1alpha1.AgentRun, []loop.Message, error) {
	run, err := AgentRun(r)
	if err != nil {
		return nil, nil, err
	}
	var msgs []loop.Message
	if len(r.Transcript) > 0 {
		if err := json.Unmarshal(r.Transcript, &msgs); err != nil {
			return nil, nil, fmt.Errorf("the archived transcript of %s/%s: %w", r.Namespace, r.Name, err)
		}
	}
	return run, msgs, nil
}
