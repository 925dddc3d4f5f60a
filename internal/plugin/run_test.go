package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// makeTemplate creates the template the run tests use: a required ticket
// with a pattern, a tone with an enum and a default, and a free note.
func makeTemplate(t *testing.T, ns, name string) *v1alpha1.AgentRunTemplate {
	t.Helper()
	tpl := &v1alpha1.AgentRunTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.AgentRunTemplateSpec{
			Parameters: []v1alpha1.TemplateParameter{
				{Name: "ticket", Description: "The support ticket to investigate, such as T-1042.", Required: true, Pattern: `^T-[0-9]+$`},
				{Name: "tone", Description: "How the answer to the customer sounds.", Default: ptr.To("friendly"), Enum: []string{"friendly", "formal"}},
				{Name: "note"},
			},
			Run: v1alpha1.TemplateRunSpec{
				AgentSpec: v1alpha1.AgentSpec{
					Goal:   "Investigate the refund asked for in ticket $(params.ticket). $(params.note)",
					Model:  v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted}, Script: []v1alpha1.ScriptStep{{Content: "x"}}},
					Budget: v1alpha1.BudgetSpec{MaxTurns: 3},
				},
			},
		},
	}
	if err := k8sClient.Create(context.Background(), tpl); err != nil {
		t.Fatal(err)
	}
	return tpl
}

func listRuns(t *testing.T, ns string) []v1alpha1.AgentRun {
	t.Helper()
	list := &v1alpha1.AgentRunList{}
	if err := k8sClient.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func TestRunTemplate_createsARunNamingTheTemplateAndItsParameters(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	makeTemplate(t, ns, "refund-investigator")

	var out bytes.Buffer
	run, err := RunTemplate(ctx, k8sClient, RunOptions{
		Namespace: ns, Template: "refund-investigator",
		// A value keeps every '=' and ',' after the first '='.
		Params: []string{"ticket=T-1042", "note=see a=b, c=d"},
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(run.Name, "refund-investigator-") || len(run.Name) != len("refund-investigator-")+5 {
		t.Errorf("name %q, want refund-investigator- and five generated characters", run.Name)
	}
	if diff := cmp.Diff("agentrun.agents.agentrun.dev/"+run.Name+" created\n", out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	got := get(t, run)
	if got.Spec.TemplateRef == nil || got.Spec.TemplateRef.Name != "refund-investigator" {
		t.Errorf("templateRef = %+v, want refund-investigator", got.Spec.TemplateRef)
	}
	want := []v1alpha1.ParameterValue{{Name: "ticket", Value: "T-1042"}, {Name: "note", Value: "see a=b, c=d"}}
	if diff := cmp.Diff(want, got.Spec.Parameters); diff != "" {
		t.Errorf("parameters (-want +got):\n%s", diff)
	}
	if got.Spec.Goal != "" || got.Spec.Model.Provider != "" {
		t.Errorf("the run spells out what the template decides: goal %q, provider %q", got.Spec.Goal, got.Spec.Model.Provider)
	}
	if !managedBy(got, FieldManager, "f:spec", "f:templateRef") {
		t.Errorf("spec.templateRef is not managed by %s", FieldManager)
	}

	// --name names it; a taken name says so.
	out.Reset()
	o := RunOptions{Namespace: ns, Template: "refund-investigator", Params: []string{"ticket=T-7"}, Name: "refund-t-7"}
	if _, err := RunTemplate(ctx, k8sClient, o, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "agentrun.agents.agentrun.dev/refund-t-7 created\n" {
		t.Errorf("output %q", out.String())
	}
	_, err = RunTemplate(ctx, k8sClient, o, &out)
	wantErr := fmt.Sprintf(`agentrun "refund-t-7" already exists in namespace %q: choose another --name, or leave it out for a generated one`, ns)
	if err == nil || err.Error() != wantErr {
		t.Errorf("second run of the same name: err = %v, want %q", err, wantErr)
	}
}

func TestRunTemplate_refusesBadParametersBeforeCreatingAnything(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	makeTemplate(t, ns, "refund-investigator")
	bare := &v1alpha1.AgentRunTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bare"},
		Spec: v1alpha1.AgentRunTemplateSpec{Run: v1alpha1.TemplateRunSpec{
			AgentSpec: v1alpha1.AgentSpec{
				Goal:   "Say hello.",
				Model:  v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted}, Script: []v1alpha1.ScriptStep{{Content: "hello"}}},
				Budget: v1alpha1.BudgetSpec{MaxTurns: 1},
			},
		}},
	}
	if err := k8sClient.Create(ctx, bare); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		template string
		params   []string
		want     string
	}{
		{"unknown parameter", "refund-investigator", []string{"ticket=T-1", "priority=high"},
			`parameter "priority" is not declared by AgentRunTemplate refund-investigator (it declares: note, ticket, tone)`},
		{"a template without parameters", "bare", []string{"x=1"},
			`parameter "x" is not declared by AgentRunTemplate bare (it declares: none)`},
		{"required parameter left out", "refund-investigator", []string{"tone=formal"},
			"parameter \"ticket\" is required by AgentRunTemplate refund-investigator and was not given (The support ticket to investigate, such as T-1042.)\nset it with -p ticket=VALUE"},
		{"not in the enum", "refund-investigator", []string{"ticket=T-1", "tone=rude"},
			`parameter "tone" must be one of friendly, formal, not "rude" (How the answer to the customer sounds.)`},
		{"pattern not matched", "refund-investigator", []string{"ticket=1042"},
			`parameter "ticket" must match the pattern ^T-[0-9]+$, and "1042" does not (The support ticket to investigate, such as T-1042.)`},
		{"no '='", "refund-investigator", []string{"ticket"}, `-p "ticket": write -p NAME=VALUE`},
		{"no name", "refund-investigator", []string{"=T-1"}, `-p "=T-1": write -p NAME=VALUE`},
		{"given twice", "refund-investigator", []string{"ticket=T-1", "ticket=T-2"}, "-p ticket is given more than once"},
		{"no such template", "refund", []string{"ticket=T-1"},
			fmt.Sprintf("agentruntemplate \"refund\" not found in namespace %q: `kubectl get agentruntemplates -n %s` lists the templates there", ns, ns)},
	} {
		_, err := RunTemplate(ctx, k8sClient, RunOptions{Namespace: ns, Template: tc.template, Params: tc.params}, &bytes.Buffer{})
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: err = %v\nwant %s", tc.name, err, tc.want)
		}
	}
	if runs := listRuns(t, ns); len(runs) != 0 {
		t.Errorf("refused runs were created: %d runs", len(runs))
	}
}

func TestRunTemplate_refusesATemplateTheOperatorFoundInvalid(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tpl := makeTemplate(t, ns, "t")
	o := RunOptions{Namespace: ns, Template: "t", Params: []string{"ticket=T-1"}}
	setReady := func(status metav1.ConditionStatus, generation int64) {
		t.Helper()
		base := tpl.DeepCopy()
		meta.SetStatusCondition(&tpl.Status.Conditions, metav1.Condition{
			Type: "Ready", Status: status, Reason: "InvalidTemplate", ObservedGeneration: generation,
			Message: "$(params.nope) names no declared parameter",
		})
		if err := k8sClient.Status().Patch(ctx, tpl, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
	}

	// False for an older generation: the operator has not checked this
	// one yet, so the run is made.
	setReady(metav1.ConditionFalse, tpl.Generation-1)
	if _, err := RunTemplate(ctx, k8sClient, o, &bytes.Buffer{}); err != nil {
		t.Errorf("a template checked only at an older generation: %v", err)
	}
	setReady(metav1.ConditionFalse, tpl.Generation)
	_, err := RunTemplate(ctx, k8sClient, o, &bytes.Buffer{})
	want := "template t is not ready (InvalidTemplate): $(params.nope) names no declared parameter"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
	if n := len(listRuns(t, ns)); n != 1 {
		t.Errorf("%d runs, want only the first", n)
	}
}

func TestGenerateName_leavesRoomForTheRandomSuffix(t *testing.T) {
	for base, want := range map[string]string{
		"refund":                        "refund-",
		strings.Repeat("a", 57):         strings.Repeat("a", 57) + "-",
		strings.Repeat("a", 300):        strings.Repeat("a", 57) + "-",
		strings.Repeat("a", 55) + "-.b": strings.Repeat("a", 55) + "-",
	} {
		if got := runclient.GenerateName(base); got != want {
			t.Errorf("runclient.GenerateName(%d characters) = %q, want %q", len(base), got, want)
		}
	}
}

func TestRerun_copiesTheSpecAndLabelsItAsARerun(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}
	if err := k8sClient.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	b := makeRun(ns, "explain-double-charge")
	b.run.Spec.TTLSecondsAfterFinished = ptr.To[int32](600)
	b.run.Spec.Instructions = "You are a billing assistant."
	b.run.Labels = map[string]string{
		"team":                                  "billing",
		v1alpha1.LabelShard:                     "blue",
		v1alpha1.LabelSchedule:                  "nightly",
		v1alpha1.LabelRerunOf:                   "an-older-one",
		"argocd.argoproj.io/instance":           "billing-agents",
		"kustomize.toolkit.fluxcd.io/name":      "agents",
		"kustomize.toolkit.fluxcd.io/namespace": "flux-system",
	}
	b.run.Annotations = map[string]string{
		"demo.agentrun.dev/expected-outcome":               "Completed",
		"argocd.argoproj.io/tracking-id":                   "billing-agents:agents.agentrun.dev/AgentRun:" + ns + "/explain-double-charge",
		"argocd.argoproj.io/sync-options":                  "Replace=true",
		"kubectl.kubernetes.io/last-applied-configuration": `{"kind":"AgentRun"}`,
		v1alpha1.ApprovalAnnotationPrefix + "t1-c1":        "approve",
		v1alpha1.ApprovedByAnnotationPrefix + "t1-c1":      "alice",
		v1alpha1.CreatedByAnnotation:                       "alice",
		v1alpha1.AttributedOutcomeAnnotation:               "Completed",
		v1alpha1.AnnotationAllowRerun:                      "true",
		v1alpha1.AnnotationGitOpsProtect:                   "true",
	}
	b.run.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.UID}}
	old := b.create(t)
	if err := Cancel(ctx, k8sClient, Ref{Namespace: ns, Name: old.Name}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	setStatus(t, old, func(s *v1alpha1.AgentRunStatus) {
		s.Phase = v1alpha1.PhaseFailed
		s.Outcome, s.Reason = v1alpha1.OutcomeApprovalDenied, "cancelled"
	})
	old = get(t, old)

	var out bytes.Buffer
	run, err := Rerun(ctx, k8sClient, RerunOptions{Run: Ref{Namespace: ns, Name: old.Name}}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(run.Name, "explain-double-charge-") || run.Name == old.Name {
		t.Errorf("name %q, want explain-double-charge- and generated characters", run.Name)
	}
	if diff := cmp.Diff("agentrun.agents.agentrun.dev/"+run.Name+" created\n", out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	got := get(t, run)
	wantSpec := old.Spec
	wantSpec.Cancel = false
	if diff := cmp.Diff(wantSpec, got.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if got.Spec.TTLSecondsAfterFinished == nil || *got.Spec.TTLSecondsAfterFinished != 600 {
		t.Errorf("ttlSecondsAfterFinished not kept: %v", got.Spec.TTLSecondsAfterFinished)
	}
	wantLabels := map[string]string{"team": "billing", v1alpha1.LabelShard: "blue", v1alpha1.LabelRerunOf: "explain-double-charge"}
	if diff := cmp.Diff(wantLabels, got.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	wantAnnotations := map[string]string{"demo.agentrun.dev/expected-outcome": "Completed"}
	if diff := cmp.Diff(wantAnnotations, got.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if len(got.OwnerReferences) != 0 {
		t.Errorf("owner references copied: %+v", got.OwnerReferences)
	}
	if got.Status.Outcome != "" {
		t.Errorf("the re-run starts with the old status: %+v", got.Status)
	}

	// The re-runs of a run are found by the label.
	list := &v1alpha1.AgentRunList{}
	if err := k8sClient.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelRerunOf: old.Name}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != run.Name {
		t.Errorf("-l %s=%s lists %d runs, want %s", v1alpha1.LabelRerunOf, old.Name, len(list.Items), run.Name)
	}
}

func TestRerun_ofARunMadeFromATemplateKeepsTemplateAndParameters(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	makeTemplate(t, ns, "refund-investigator")
	old, err := RunTemplate(ctx, k8sClient, RunOptions{
		Namespace: ns, Template: "refund-investigator", Name: "refund-t-1042",
		Params: []string{"ticket=T-1042", "tone=formal"},
	}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	run, err := Rerun(ctx, k8sClient, RerunOptions{Run: Ref{Namespace: ns, Name: old.Name}, Name: "refund-t-1042-again"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "agentrun.agents.agentrun.dev/refund-t-1042-again created\n" {
		t.Errorf("output %q", out.String())
	}
	got := get(t, run)
	if diff := cmp.Diff(get(t, old).Spec, got.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if got.Spec.TemplateRef == nil || len(got.Spec.Parameters) != 2 || got.Spec.Goal != "" {
		t.Errorf("the re-run does not name the template and parameters alone: %+v", got.Spec)
	}
}

func TestRerun_ofALongNameCutsTheLabelAndKeepsTheNameInAnAnnotation(t *testing.T) {
	ns := newNamespace(t)
	long := strings.Repeat("a", 60) + "-b-" + strings.Repeat("c", 10)
	makeRun(ns, long).create(t)
	run, err := Rerun(context.Background(), k8sClient, RerunOptions{Run: Ref{Namespace: ns, Name: long}}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	got := get(t, run)
	if v := got.Labels[v1alpha1.LabelRerunOf]; v != strings.Repeat("a", 60)+"-b" {
		t.Errorf("label = %q, want the name's first 63 characters without the trailing '-'", v)
	}
	if v := got.Annotations[v1alpha1.LabelRerunOf]; v != long {
		t.Errorf("annotation = %q, want the whole name", v)
	}
	if !strings.HasPrefix(got.Name, strings.Repeat("a", 57)+"-") || len(got.Name) != 63 {
		t.Errorf("name %q, want the name's first 57 characters, '-' and five generated ones", got.Name)
	}
}

func TestRerun_namesAMissingRun(t *testing.T) {
	ns := newNamespace(t)
	_, err := Rerun(context.Background(), k8sClient, RerunOptions{Run: Ref{Namespace: ns, Name: "nope"}}, &bytes.Buffer{})
	want := fmt.Sprintf(`agentrun "nope" not found in namespace %q`, ns)
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

// TestMain_runAndRerunWait runs the commands as kubectl would, with --wait:
// each prints the new run's name, follows it, and exits 0 only when it
// ends Completed.
func TestMain_runAndRerunWait(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	makeTemplate(t, ns, "refund-investigator")
	kubectl := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	// finish ends the one run that has no outcome yet, as the operator
	// would, once it exists.
	finish := func(outcome v1alpha1.Outcome, reason string) {
		var run *v1alpha1.AgentRun
		g.Eventually(func() *v1alpha1.AgentRun {
			for _, r := range listRuns(t, ns) {
				if r.Status.Outcome == "" {
					run = &r
				}
			}
			return run
		}, 15*time.Second, 20*time.Millisecond).ShouldNot(BeNil())
		setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
			// The goal the operator resolved from the template.
			s.Template = &v1alpha1.TemplateStatus{Name: "refund-investigator", Goal: "Refund T-1042?"}
			s.Phase = v1alpha1.PhaseSucceeded
			if outcome != v1alpha1.OutcomeCompleted {
				s.Phase = v1alpha1.PhaseFailed
			}
			s.Outcome, s.Reason = outcome, reason
		})
	}
	type result struct {
		code     int
		out, err string
	}
	start := func(args ...string) chan result {
		done := make(chan result, 1)
		go func() {
			code, out, errOut := kubectl(args...)
			done <- result{code, out, errOut}
		}()
		return done
	}
	wait := func(done chan result) result {
		t.Helper()
		select {
		case r := <-done:
			return r
		case <-time.After(30 * time.Second):
			t.Fatal("the command did not end with the run")
		}
		return result{}
	}

	done := start("run", "refund-investigator", "-p", "ticket=T-1042", "-p", "tone=formal", "--name", "refund-t-1042", "--wait", "--timeout", "30s")
	finish(v1alpha1.OutcomeCompleted, "The model gave a final answer.")
	r := wait(done)
	want := `agentrun.agents.agentrun.dev/refund-t-1042 created
template: refund-investigator ticket="T-1042" tone="formal"
goal: Refund T-1042?
phase: Succeeded
outcome: Completed
reason: The model gave a final answer.
`
	if r.code != 0 || r.err != "" {
		t.Errorf("run --wait of a run that completes = %d, stderr %q; want 0", r.code, r.err)
	}
	if diff := cmp.Diff(want, r.out); diff != "" {
		t.Errorf("run --wait output (-want +got):\n%s", diff)
	}

	done = start("rerun", "refund-t-1042", "--wait")
	finish(v1alpha1.OutcomeBudgetExhausted, "turns: 3 of 3 used")
	r = wait(done)
	if r.code != 1 || r.err != "" {
		t.Errorf("rerun --wait of a run that ends BudgetExhausted = %d, stderr %q; want 1", r.code, r.err)
	}
	if !strings.HasPrefix(r.out, "agentrun.agents.agentrun.dev/refund-t-1042-") || !strings.HasSuffix(r.out, "outcome: BudgetExhausted\nreason: turns: 3 of 3 used\n") {
		t.Errorf("rerun --wait output:\n%s", r.out)
	}

	for _, tc := range []struct {
		args       []string
		code       int
		out, inErr string
	}{
		{[]string{"rerun", "refund-t-1042", "--name", "again"}, 0, "agentrun.agents.agentrun.dev/again created\n", ""},
		{[]string{"run", "refund-investigator"}, 1, "", "error: parameter \"ticket\" is required by AgentRunTemplate refund-investigator and was not given (The support ticket"},
		{[]string{"run", "refund-investigator", "-p", "ticket=T-1", "--timeout", "1m"}, 1, "", "error: --timeout applies only with --wait\n"},
		{[]string{"run"}, 1, "", "error: missing TEMPLATE: usage: kubectl agentrun run TEMPLATE [-p NAME=VALUE ...]\n"},
		{[]string{"rerun"}, 1, "", "error: missing NAME: usage: kubectl agentrun rerun NAME\n"},
	} {
		code, out, errOut := kubectl(tc.args...)
		if code != tc.code || out != tc.out || !strings.Contains(errOut, tc.inErr) || (tc.inErr == "" && errOut != "") {
			t.Errorf("kubectl agentrun %s = %d, stdout %q, stderr %q; want %d, %q, stderr with %q",
				strings.Join(tc.args, " "), code, out, errOut, tc.code, tc.out, tc.inErr)
		}
	}
}

// Issue 45, item 1: run --wait -o json prints only the ended run on
// stdout, as kubectl get -o json does, so that a pipeline step reads its
// status.output; the name and the progress go to stderr.
func TestMain_runWaitJSONPrintsTheEndedRunWithItsOutput(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	makeTemplate(t, ns, "refund-investigator")
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := Main([]string{"--kubeconfig", kubeconfig, "-n", ns, "run", "refund-investigator", "-p", "ticket=T-7",
			"--name", "typed", "--wait", "--timeout", "30s", "-o", "json"}, &out, &errOut)
		done <- result{code, out.String(), errOut.String()}
	}()
	var run *v1alpha1.AgentRun
	g.Eventually(func() *v1alpha1.AgentRun {
		for _, r := range listRuns(t, ns) {
			run = &r
		}
		return run
	}, 15*time.Second, 20*time.Millisecond).ShouldNot(BeNil())
	setStatus(t, run, func(s *v1alpha1.AgentRunStatus) {
		s.Phase, s.Outcome, s.Reason = v1alpha1.PhaseSucceeded, v1alpha1.OutcomeCompleted, "the model gave a final answer on turn 2"
		s.Output = &runtime.RawExtension{Raw: []byte(`{"decision":"refund","note":"<b>dup</b>"}`)}
		s.OutputDigest, s.OutputBytes = "sha256:0f", 41
	})
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not end with the run")
	}
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.err)
	}
	var got struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name          string `json:"name"`
			ManagedFields []any  `json:"managedFields"`
		} `json:"metadata"`
		Status struct {
			Outcome      string         `json:"outcome"`
			Output       map[string]any `json:"output"`
			OutputDigest string         `json:"outputDigest"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(r.out), &got); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, r.out)
	}
	if got.APIVersion != v1alpha1.GroupVersion.String() || got.Kind != "AgentRun" || got.Metadata.Name != "typed" || got.Metadata.ManagedFields != nil {
		t.Errorf("printed %s %s %s (managedFields %v): want the AgentRun typed, as kubectl prints it", got.APIVersion, got.Kind, got.Metadata.Name, got.Metadata.ManagedFields)
	}
	if d := cmp.Diff(map[string]any{"decision": "refund", "note": "<b>dup</b>"}, got.Status.Output); d != "" || got.Status.Outcome != "Completed" || got.Status.OutputDigest != "sha256:0f" {
		t.Errorf("status.output (-want +got):\n%s\noutcome %q digest %q", d, got.Status.Outcome, got.Status.OutputDigest)
	}
	if strings.Contains(r.out, "<b>") {
		t.Errorf("markup is printed unescaped:\n%s", r.out)
	}
	if !strings.Contains(r.err, "agentrun.agents.agentrun.dev/typed created") || !strings.Contains(r.err, "outcome: Completed") {
		t.Errorf("stderr %q: want the name and the progress", r.err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "refund-investigator", "-p", "ticket=T-1", "-o", "json"}, "error: -o json applies only with --wait"},
		{[]string{"run", "refund-investigator", "-p", "ticket=T-1", "--wait", "-o", "yaml"}, `error: -o "yaml": the only output format is json`},
	} {
		var out, errOut bytes.Buffer
		if code := Main(append([]string{"--kubeconfig", kubeconfig, "-n", ns}, tc.args...), &out, &errOut); code != 1 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v = %d, stderr %q; want 1 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}
