package runstatus

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/google/go-cmp/cmp"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestSetFromState_phasesAndConditions(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 8, 14, 10, 0, 0, 0, time.UTC))
	asked := now.Time
	cases := []struct {
		name      string
		state     loop.State
		phase     v1alpha1.Phase
		succeeded metav1.ConditionStatus
		reason    string
		awaiting  metav1.ConditionStatus
		pending   int
	}{
		{"new", loop.State{}, v1alpha1.PhasePending, metav1.ConditionUnknown, v1alpha1.ReasonPending, metav1.ConditionFalse, 0},
		{"working", loop.State{Turn: 2, Phase: loop.PhaseModel}, v1alpha1.PhaseRunning, metav1.ConditionUnknown, v1alpha1.ReasonRunning, metav1.ConditionFalse, 0},
		{"asking", loop.State{Turn: 3, Phase: loop.PhaseApproval, Calls: []loop.Call{{ToolCall: loop.ToolCall{ID: "t3-c1", Name: "refund"},
			Verdict: loop.Ask, State: loop.CallProposed, RequestedAt: &asked}}},
			v1alpha1.PhaseAwaitingApproval, metav1.ConditionUnknown, v1alpha1.ReasonAwaitingApproval, metav1.ConditionTrue, 1},
		{"completed", loop.State{Turn: 4, Phase: loop.PhaseDone, Outcome: loop.Completed, Reason: "done"},
			v1alpha1.PhaseSucceeded, metav1.ConditionTrue, "Completed", metav1.ConditionFalse, 0},
		{"escalated with the ask still open", loop.State{Turn: 3, Phase: loop.PhaseDone, Outcome: loop.Escalated, Reason: "waited",
			Calls: []loop.Call{{ToolCall: loop.ToolCall{ID: "t3-c1"}, Verdict: loop.Ask, State: loop.CallProposed, RequestedAt: &asked}}},
			v1alpha1.PhaseFailed, metav1.ConditionFalse, "Escalated", metav1.ConditionFalse, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &v1alpha1.AgentRunStatus{}
			SetFromState(st, &tc.state, loop.Convergence{}, now)
			s := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSucceeded)
			a := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAwaitingApproval)
			got := []any{st.Phase, s.Status, s.Reason, a.Status, len(st.PendingApprovals), int(st.PendingApprovalCount)}
			want := []any{tc.phase, tc.succeeded, tc.reason, tc.awaiting, tc.pending, tc.pending}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
			if tc.state.Done() != (st.CompletionTime != nil) {
				t.Fatalf("completionTime = %v", st.CompletionTime)
			}
		})
	}
}

func TestRecordApprovals_staleAnswersAreRecordedOnce(t *testing.T) {
	st := &v1alpha1.AgentRunStatus{}
	now := metav1.Now()
	notes := []loop.Note{{Kind: loop.NoteStaleApproval, CallID: "t9-c1"}, {Kind: loop.NoteApproval, CallID: "t1-c1"}}
	answers := map[string]Answer{
		"t9-c1": {ApprovalAnswer: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove}},
		"t1-c1": {ApprovalAnswer: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalStop}, By: "kubectl-agentrun"},
	}
	RecordApprovals(st, notes, answers, now)
	RecordApprovals(st, notes[:1], answers, now)
	if len(st.Approvals) != 2 || !st.Approvals[0].Stale || st.Approvals[1].Decision != "stop" || st.Approvals[1].By != "kubectl-agentrun" {
		t.Fatalf("approvals = %+v", st.Approvals)
	}
	for i := 0; i < 2*MaxApprovalRecords; i++ {
		RecordApprovals(st, []loop.Note{{Kind: loop.NoteApproval, CallID: "x"}}, map[string]Answer{"x": {ApprovalAnswer: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove}}}, now)
	}
	if len(st.Approvals) != MaxApprovalRecords {
		t.Fatalf("%d approvals kept, want the newest %d", len(st.Approvals), MaxApprovalRecords)
	}
}

func TestSummaryConditions_readyOnlyWhenCompletedStalledForOtherOutcomes(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 8, 14, 10, 0, 0, 0, time.UTC))
	cases := []struct {
		name                        string
		state                       loop.State
		ready, reconciling, stalled metav1.ConditionStatus
		reason                      string
	}{
		{"pending", loop.State{}, metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, v1alpha1.ReasonPending},
		{"running", loop.State{Turn: 1, Phase: loop.PhaseModel}, metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, v1alpha1.ReasonRunning},
		{"completed", loop.State{Turn: 1, Phase: loop.PhaseDone, Outcome: loop.Completed}, metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionFalse, "Completed"},
		{"budget", loop.State{Turn: 1, Phase: loop.PhaseDone, Outcome: loop.BudgetExhausted}, metav1.ConditionFalse, metav1.ConditionFalse, metav1.ConditionTrue, "BudgetExhausted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &v1alpha1.AgentRunStatus{}
			SetFromState(st, &tc.state, loop.Convergence{}, now)
			var got []string
			for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionReconciling, v1alpha1.ConditionStalled} {
				c := apimeta.FindStatusCondition(st.Conditions, typ)
				got = append(got, typ+"="+string(c.Status)+"/"+c.Reason)
			}
			want := []string{"Ready=" + string(tc.ready) + "/" + tc.reason, "Reconciling=" + string(tc.reconciling) + "/" + tc.reason,
				"Stalled=" + string(tc.stalled) + "/" + tc.reason}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestSettleFinished_followsTheGenerationAndAddsMissingConditions(t *testing.T) {
	now := metav1.Now()
	run := &v1alpha1.AgentRun{}
	run.Generation = 2
	run.Status.ObservedGeneration = 1
	// A run that ended before Ready, Reconciling and Stalled existed.
	run.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionFalse, Reason: "Escalated", LastTransitionTime: now}}
	if !SettleFinished(run, now) {
		t.Fatal("nothing changed")
	}
	if run.Status.ObservedGeneration != 2 || !apimeta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionStalled) ||
		!apimeta.IsStatusConditionFalse(run.Status.Conditions, v1alpha1.ConditionReady) {
		t.Fatalf("status = %+v", run.Status)
	}
	if SettleFinished(run, now) {
		t.Fatal("a settled run changed again")
	}
}

// The API states how many approvals status keeps; the setter must keep
// exactly that many, no fewer.
func TestMaxApprovalRecords_matchesTheCRDBound(t *testing.T) {
	approvals := testenv.AgentRunSchema(t).Properties["status"].Properties["approvals"]
	if approvals.MaxItems == nil || *approvals.MaxItems != MaxApprovalRecords {
		t.Fatalf("status.approvals maxItems = %v, the setter keeps %d", ptrString(approvals.MaxItems), MaxApprovalRecords)
	}
	if want := fmt.Sprintf("most recent %d are kept", MaxApprovalRecords); !strings.Contains(strings.Join(strings.Fields(approvals.Description), " "), want) {
		t.Fatalf("status.approvals description %q does not say %q", approvals.Description, want)
	}
}

func ptrString(p *int64) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// A save whose status differs only in the run's progress may defer its
// status write; any other change may not. Neither status is changed by
// the comparison.
func TestOnlyProgress(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 8, 14, 10, 0, 0, 0, time.UTC))
	running := func(turn int) *v1alpha1.AgentRunStatus {
		st := &v1alpha1.AgentRunStatus{}
		SetFromState(st, &loop.State{Turn: turn, Usage: loop.Usage{Turns: turn, InputTokens: int64(100 * turn)}}, loop.Convergence{}, now)
		return st
	}
	before := running(2)
	for _, tc := range []struct {
		name  string
		after *v1alpha1.AgentRunStatus
		want  bool
	}{
		{"the next turn, its usage and its condition messages", running(3), true},
		{"a new checkpoint and transcript count", func() *v1alpha1.AgentRunStatus {
			st := running(2)
			st.Transcript = &v1alpha1.TranscriptStatus{Chunks: 4, Messages: 5}
			return st
		}(), true},
		{"the next number and seal", func() *v1alpha1.AgentRunStatus {
			st := running(2)
			st.CheckpointSequence, st.CheckpointSeal = 7, "v1.k1.x"
			return st
		}(), true},
		{"a call waiting for a person", func() *v1alpha1.AgentRunStatus {
			st := &v1alpha1.AgentRunStatus{}
			SetFromState(st, &loop.State{Turn: 3, Phase: loop.PhaseApproval, Calls: []loop.Call{{ToolCall: loop.ToolCall{ID: "t3-c1", Name: "refund"}, Verdict: loop.Ask, State: loop.CallProposed}}}, loop.Convergence{}, now)
			return st
		}(), false},
		{"the end", func() *v1alpha1.AgentRunStatus {
			st := running(2)
			SetFromState(st, &loop.State{Turn: 3, Phase: loop.PhaseDone, Outcome: loop.Completed, Reason: "done"}, loop.Convergence{}, now)
			return st
		}(), false},
		{"a budget the run leases from", func() *v1alpha1.AgentRunStatus {
			st := running(3)
			st.AgentBudgets = []string{"team"}
			return st
		}(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after := tc.after.DeepCopy()
			if got := OnlyProgress(before, tc.after); got != tc.want {
				t.Fatalf("OnlyProgress = %v, want %v", got, tc.want)
			}
			if diff := cmp.Diff(after, tc.after); diff != "" || cmp.Diff(running(2), before) != "" {
				t.Fatalf("the comparison changed a status (-before +after):\n%s", diff)
			}
		})
	}
}

// One list of outcomes: the engine's (loop.Outcomes), the API's enum on
// status.outcome as the CRD states it, and the table of docs/api.md ("The
// eight outcomes") name the same outcomes in the same order. A new outcome
// fails here until every layer has it.
func TestOutcomes_engineAPIAndDocsAgree(t *testing.T) {
	var engine []string
	for _, o := range loop.Outcomes {
		engine = append(engine, string(o))
	}
	schema := testenv.AgentRunSchema(t)
	var enum []string
	for _, v := range schema.Properties["status"].Properties["outcome"].Enum {
		enum = append(enum, strings.Trim(string(v.Raw), `"`))
	}
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## The eight outcomes\n")
	if !ok {
		t.Fatal(`docs/api.md has no "## The eight outcomes"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var documented []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "| ") {
			continue
		}
		name := strings.TrimSpace(cells[1])
		if name != "outcome" && !strings.HasPrefix(name, "---") {
			documented = append(documented, name)
		}
	}
	if diff := cmp.Diff(engine, enum); diff != "" {
		t.Errorf("the engine's outcomes and the CRD's status.outcome enum differ (-engine +CRD):\n%s", diff)
	}
	if diff := cmp.Diff(engine, documented); diff != "" {
		t.Errorf("the engine's outcomes and docs/api.md's outcome table differ (-engine +docs):\n%s", diff)
	}
	if len(engine) != 8 {
		t.Errorf("%d outcomes; the API and its docs promise eight", len(engine))
	}
}

// A run its configuration stops ends Error, told apart by its conditions'
// reason; every other ended run's reason is its outcome.
func TestSetInvalid_endsErrorWithTheConfigurationReason(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	var invalid, failed, running v1alpha1.AgentRunStatus
	SetInvalid(&invalid, "the run cannot start: a condition does not compile", now)
	SetFailed(&failed, v1alpha1.OutcomeError, "the run cannot resume", now)
	if invalid.Outcome != v1alpha1.OutcomeError || invalid.Phase != v1alpha1.PhaseFailed || invalid.CompletionTime == nil {
		t.Fatalf("invalid status = %+v", invalid)
	}
	for _, typ := range []string{v1alpha1.ConditionSucceeded, v1alpha1.ConditionReady, v1alpha1.ConditionStalled} {
		if c := apimeta.FindStatusCondition(invalid.Conditions, typ); c == nil || c.Reason != v1alpha1.ReasonInvalidConfiguration {
			t.Errorf("%s = %+v, want reason InvalidConfiguration", typ, c)
		}
	}
	if c := apimeta.FindStatusCondition(invalid.Conditions, v1alpha1.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Stalled = %+v, want True", c)
	}
	for st, want := range map[*v1alpha1.AgentRunStatus]string{&invalid: v1alpha1.ReasonInvalidConfiguration, &failed: "Error", &running: ""} {
		if got := EndReason(st); got != want {
			t.Errorf("EndReason = %q, want %q", got, want)
		}
	}
}

// status.reserved shows a reservation of any ceiling: one that holds only
// one measure of the usage vector (set here field by field, so that a
// ceiling added to loop.Ceilings is covered without a new case) is not
// dropped as empty.
func TestSetFromState_reservedShowsEveryCeiling(t *testing.T) {
	seen := map[loop.Dimension]bool{}
	ty := reflect.TypeFor[loop.Usage]()
	for i := range ty.NumField() {
		var u loop.Usage
		f := reflect.ValueOf(&u).Elem().Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(1)
		default:
			continue
		}
		var rows []loop.Dimension
		for _, c := range loop.Ceilings() {
			if c.Used(u) != 0 {
				rows, seen[c.Dim] = append(rows, c.Dim), true
			}
		}
		if len(rows) == 0 {
			continue // a measure no ceiling reads (cachedInputTokens)
		}
		st := &v1alpha1.AgentRunStatus{}
		SetFromState(st, &loop.State{Reserved: u}, loop.Convergence{}, metav1.Now())
		if st.Reserved == nil {
			t.Errorf("a reservation of %s alone (%s %v) left status.reserved empty", ty.Field(i).Name, rows, u)
		}
	}
	for _, c := range loop.Ceilings() {
		if !seen[c.Dim] {
			t.Errorf("no field of loop.Usage feeds the %s ceiling", c.Dim)
		}
	}
	st := &v1alpha1.AgentRunStatus{}
	SetFromState(st, &loop.State{Reserved: loop.Usage{PerTool: map[string]int{"t": 1}}}, loop.Convergence{}, metav1.Now())
	if st.Reserved == nil {
		t.Error("a reservation of one tool call's per-tool count alone left status.reserved empty")
	}
}

// Issue 45, item 1: status.output is the validated value of a run that
// Completed; a value too large for status is named by its digest and
// size only, and a run that ended otherwise has no output.
func TestSetFromState_outputOfACompletedRunOnly(t *testing.T) {
	small := &loop.Output{Value: json.RawMessage(`{"decision":"refund"}`), Digest: "sha256:ab", Bytes: 21}
	large := &loop.Output{Digest: "sha256:cd", Bytes: loop.MaxOutputBytes + 1}
	for _, tc := range []struct {
		name    string
		outcome loop.Outcome
		out     *loop.Output
		want    v1alpha1.AgentRunStatus
	}{
		{"completed", loop.Completed, small, v1alpha1.AgentRunStatus{Output: &runtime.RawExtension{Raw: small.Value}, OutputDigest: "sha256:ab", OutputBytes: 21}},
		{"too large for status", loop.Completed, large, v1alpha1.AgentRunStatus{OutputDigest: "sha256:cd", OutputBytes: loop.MaxOutputBytes + 1}},
		{"ended otherwise", loop.Escalated, small, v1alpha1.AgentRunStatus{}},
		{"no typed output", loop.Completed, nil, v1alpha1.AgentRunStatus{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &v1alpha1.AgentRunStatus{}
			SetFromState(st, &loop.State{Phase: loop.PhaseDone, Turn: 1, Outcome: tc.outcome, Reason: "r", Output: tc.out}, loop.Convergence{}, metav1.Now())
			got := v1alpha1.AgentRunStatus{Output: st.Output, OutputDigest: st.OutputDigest, OutputBytes: st.OutputBytes}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("output (-want +got):\n%s", d)
			}
		})
	}
}

// status.model names the model the state calls: model.name, or the
// fallback it moved to; a scripted run names none.
func TestSetModel(t *testing.T) {
	m := &v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "primary"},
		Fallbacks: []v1alpha1.ModelEndpoint{{Provider: v1alpha1.ProviderAnthropic, Name: "backup"}, {Provider: v1alpha1.ProviderOpenAI, Name: "last"}}}
	for _, tc := range []struct {
		name  string
		m     *v1alpha1.ModelSpec
		model int
		want  *v1alpha1.ModelStatus
	}{
		{"the model", m, 0, &v1alpha1.ModelStatus{Active: "primary"}},
		{"the first fallback", m, 1, &v1alpha1.ModelStatus{Active: "backup", Fallbacks: 1}},
		{"the second fallback", m, 2, &v1alpha1.ModelStatus{Active: "last", Fallbacks: 2}},
		{"scripted", &v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted}}, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &v1alpha1.AgentRunStatus{}
			SetModel(st, tc.m, &loop.State{Model: tc.model})
			if diff := cmp.Diff(tc.want, st.Model); diff != "" {
				t.Errorf("status.model (-want +got):\n%s", diff)
			}
		})
	}
}
