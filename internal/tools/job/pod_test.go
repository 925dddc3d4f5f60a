package job

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/telemetry"
)

// placedTool reads a token from a Secret and asks for a node, a taint, a
// runtime class and its own labels.
func placedTool() Tool {
	t := refundTool()
	t.Env = append(t.Env, corev1.EnvVar{Name: "BILLING_TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "billing"}, Key: "token"}}})
	t.Pod = Pod{
		NodeSelector:     map[string]string{"pool": "tools"},
		Tolerations:      []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tools", Effect: corev1.TaintEffectNoSchedule}},
		Labels:           map[string]string{"team": "billing"},
		Annotations:      map[string]string{"owner": "billing@example.com"},
		RuntimeClassName: ptr.To("gvisor"),
	}
	return t
}

func TestJobSpec_placesThePodAndReadsSecretsByReference(t *testing.T) {
	f := newFixture(t)
	ex, err := New(Config{Client: k8sClient, OperatorImage: operatorImage}, f.run, []Tool{placedTool()})
	if err != nil {
		t.Fatal(err)
	}
	inv := invocation("t1-c1")
	// The API server, with Pod Security "restricted" in the namespace,
	// takes the Job.
	if err := ex.Start(context.Background(), inv); err != nil {
		t.Fatal(err)
	}
	j := f.job(inv)
	ps := j.Spec.Template.Spec
	checks := []struct {
		name      string
		got, want any
	}{
		{"nodeSelector", ps.NodeSelector, map[string]string{"pool": "tools"}},
		{"tolerations", ps.Tolerations, placedTool().Pod.Tolerations},
		{"runtimeClassName", ps.RuntimeClassName, ptr.To("gvisor")},
		{"pod label", j.Spec.Template.Labels["team"], "billing"},
		{"pod annotation", j.Spec.Template.Annotations["owner"], "billing@example.com"},
		{"job label", j.Labels["team"], ""}, // the pod's, not the Job's
		{"run-uid label", j.Spec.Template.Labels[LabelRunUID], string(f.run.Owner.UID)},
		{"service account", ps.ServiceAccountName, "billing-agent"},
		{"secret env", ps.Containers[0].Env[3], corev1.EnvVar{Name: "BILLING_TOKEN", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "billing"}, Key: "token"}}}},
	}
	for _, c := range checks {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	if agg := policy.AggregateCheckResults(eval.EvaluatePod(lv, &j.Spec.Template.ObjectMeta, &ps)); !agg.Allowed {
		t.Errorf("the placed pod fails %s: %s: %s", lv, agg.ForbiddenReason(), agg.ForbiddenDetail())
	}
	for _, c := range append(ps.InitContainers, ps.Containers...) {
		sc := c.SecurityContext
		if !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s lost its restricted security context: %+v", c.Name, sc)
		}
	}
}

// The executor's labels and annotations, by which it adopts Jobs and its
// NetworkPolicy selects pods, win over a tool's even when New's check was
// skipped.
func TestBuildJob_toolPodCannotOverrideTheOperatorsLabels(t *testing.T) {
	f := newFixture(t)
	tool := placedTool()
	tool.Pod.Labels = map[string]string{LabelRunUID: "forged", LabelTool: "other", LabelManagedBy: "me"}
	tool.Pod.Annotations = map[string]string{AnnotationCallID: "t9-c9"}
	j := f.ex.buildJob(&tool, invocation("t1-c1"), "")
	l, a := j.Spec.Template.Labels, j.Spec.Template.Annotations
	if l[LabelRunUID] != string(f.run.Owner.UID) || l[LabelTool] != "issue_refund" || l[LabelManagedBy] != "agentrun" {
		t.Errorf("the tool's pod labels overrode the executor's: %v", l)
	}
	if a[AnnotationCallID] != "t1-c1" {
		t.Errorf("the tool's pod annotations overrode the executor's: %v", a)
	}

	// And New refuses them, saying why.
	for _, p := range []Pod{
		{Labels: map[string]string{LabelRunUID: "forged"}},
		{Labels: map[string]string{LabelManagedBy: "me"}},
		{Annotations: map[string]string{AnnotationSeal: "x"}},
		{Annotations: map[string]string{"container.apparmor.security.beta.kubernetes.io/tool": "unconfined"}},
	} {
		tool := refundTool()
		tool.Pod = p
		_, err := New(Config{Client: k8sClient, OperatorImage: operatorImage}, f.run, []Tool{tool})
		if err == nil || !strings.Contains(err.Error(), "pod.") {
			t.Errorf("New with pod %+v = %v, want a refusal naming the field", p, err)
		}
	}
}

// An env var may only be a literal or a Secret's key; the operator never
// holds the Secret's value, so the Job cannot carry it.
func TestNew_refusesEnvFromAnythingButASecretKey(t *testing.T) {
	f := newFixture(t)
	tool := refundTool()
	tool.Env = []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}
	if _, err := New(Config{Client: k8sClient, OperatorImage: operatorImage}, f.run, []Tool{tool}); err == nil ||
		!strings.Contains(err.Error(), "only a Secret's key") {
		t.Errorf("New with a fieldRef env = %v, want a refusal", err)
	}
}

// The seal covers which Secret a variable is read from: a Job that reads
// another Secret is not the one the operator made.
func TestJobSeal_coversTheSecretsAJobReads(t *testing.T) {
	f := newFixture(t)
	tool := placedTool()
	a := f.ex.buildJob(&tool, invocation("t1-c1"), "")
	b := a.DeepCopy()
	b.Spec.Template.Spec.Containers[0].Env[3].ValueFrom.SecretKeyRef.Name = "someone-elses"
	pa, pb := jobSealParts(a), jobSealParts(b)
	if bytes.Equal(pa[len(pa)-1], pb[len(pb)-1]) {
		t.Error("Jobs that read different Secrets have the same seal parts")
	}
}

// A tool's own spans join the run's trace: TRACEPARENT is the tool call
// span's, in the run's trace.
func TestStart_givesTheToolTheCallsTraceParent(t *testing.T) {
	f := newFixture(t)
	rec := tracetest.NewSpanRecorder()
	tp := telemetry.NewProvider(sdktrace.WithSpanProcessor(rec))
	run := telemetry.StartRun(tp, "")
	inv := invocation("t1-c1")
	tool := refundTool()
	tool.Env = append(tool.Env, corev1.EnvVar{Name: EnvTraceParent, Value: "00-forged-forged-01"})
	ex, err := New(Config{Client: k8sClient, OperatorImage: operatorImage}, f.run, []Tool{tool})
	if err != nil {
		t.Fatal(err)
	}
	ctx, done := run.Observer("", "").ToolCall(run.Context(context.Background()), inv)
	err = ex.Start(ctx, inv)
	done(loop.Result{CallID: inv.CallID})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range f.job(inv).Spec.Template.Spec.Containers[0].Env {
		if v.Name == EnvTraceParent {
			got = append(got, v.Value)
		}
	}
	if len(got) != 1 {
		t.Fatalf("TRACEPARENT set %d times (%q), want once, the operator's", len(got), got)
	}
	sc, err := telemetry.ParseTraceParent(got[0])
	if err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "execute_tool issue_refund" {
		t.Fatalf("spans %v, want the one tool call span", spans)
	}
	call := spans[0].SpanContext()
	if sc.TraceID().String() != run.TraceID() {
		t.Errorf("TRACEPARENT trace id %s, want the run's %s", sc.TraceID(), run.TraceID())
	}
	if sc.SpanID() != call.SpanID() {
		t.Errorf("TRACEPARENT parent span %s, want the tool call span %s", sc.SpanID(), call.SpanID())
	}

	// Without a trace the tool gets none, and keeps its own.
	j := ex.buildJob(ex.tools["issue_refund"], invocation("t1-c2"), traceParent(context.Background()))
	raw, _ := json.Marshal(j.Spec.Template.Spec.Containers[0].Env)
	if !strings.Contains(string(raw), "00-forged-forged-01") {
		t.Errorf("with no trace, the tool's own TRACEPARENT was dropped: %s", raw)
	}
}
