package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller/controllertest"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func deleteRun(t *testing.T, run *v1alpha1.AgentRun) {
	t.Helper()
	if err := k8sClient.Delete(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() bool {
		err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(run), &v1alpha1.AgentRun{})
		return apierrors.IsNotFound(err)
	}, 10*time.Second, 20*time.Millisecond).Should(BeTrue(), "the run was not deleted")
}

func fluxRun(ns, name, goal string) *runBuilder {
	b := makeRun(ns, name)
	b.r.Spec.Goal = goal
	b.r.Labels = map[string]string{"kustomize.toolkit.fluxcd.io/name": "runs", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}
	return b
}

// Flux with force: true "edits" a run by deleting it and creating it
// again with the new spec. The recreated run is refused with a reason
// (Pending, Stalled; every GitOps reading says failed) and spends nothing,
// until someone allows the re-run.
func TestGitOpsRerun_recreatedWithAnotherSpecIsRefusedUntilAllowed(t *testing.T) {
	script := shippedArgoScript(t)
	exprs := shippedFluxExprs(t)
	ns := namespace(t)
	tb := newTools()
	startManager(t, &kits{tools: tb})
	g := NewWithT(t)
	const wait, tick = 20 * time.Second, 20 * time.Millisecond

	first := fluxRun(ns, "nightly", "Check the nodes.").readTool("get_node").calls("get_node", `{"name":"n1"}`).answer("fine").create(t)
	expectOutcome(t, waitOutcome(t, first, wait), v1alpha1.OutcomeCompleted, "")
	rec := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "agentrun-spec.nightly"}, rec)).To(Succeed())
	g.Expect(rec.Data).To(HaveKeyWithValue("uid", string(first.UID)))
	g.Expect(rec.Data).To(HaveKeyWithValue("specHash", SpecHash(&first.Spec)))
	g.Expect(rec.OwnerReferences).To(BeEmpty(), "the record must outlive the run")

	deleteRun(t, first)
	second := fluxRun(ns, "nightly", "Check the nodes and the disks.").readTool("get_node").calls("get_node", `{"name":"n2"}`).answer("fine").create(t)
	var refused *v1alpha1.AgentRun
	g.Eventually(func() string {
		refused = get(t, second)
		c := apimeta.FindStatusCondition(refused.Status.Conditions, v1alpha1.ConditionSucceeded)
		if c == nil {
			return ""
		}
		return c.Reason
	}, wait, tick).Should(Equal(v1alpha1.ReasonRerunRefused))
	g.Expect(refused.Status.Phase).To(Equal(v1alpha1.PhasePending))
	g.Expect(refused.Status.Outcome).To(BeEmpty())
	g.Expect(refused.Status.Reason).To(ContainSubstring(v1alpha1.AnnotationAllowRerun))
	g.Expect(refused.Status.Reason).To(ContainSubstring(SpecHash(&second.Spec)))
	g.Expect(refused.Status.StartTime).To(BeNil())
	g.Expect(refused.Status.Turn).To(BeZero())
	g.Expect(apimeta.IsStatusConditionTrue(refused.Status.Conditions, v1alpha1.ConditionStalled)).To(BeTrue())
	g.Expect(kstatusOf(t, refused)).To(Equal(status.FailedStatus))
	obj := unstructuredOf(t, refused)
	argo, msg := controllertest.ArgoHealth(t, script, obj)
	g.Expect(argo).To(Equal("Degraded"))
	g.Expect(msg).To(HavePrefix("RerunRefused: "))
	g.Expect(controllertest.FluxHealth(t, exprs, obj)).To(Equal("Failed"))
	g.Expect(tb.counts()).To(Equal(map[string]int{"t1-c1:get_node": 1}), "the refused run executed a tool")
	g.Eventually(func() []string { return eventReasons(t, ns, "nightly") }, wait, tick).Should(ContainElement(v1alpha1.ReasonRerunRefused))

	// Allowed: it runs, and the record now names it.
	g.Expect(k8sClient.Patch(context.Background(), get(t, second), client.RawPatch("application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"`+v1alpha1.AnnotationAllowRerun+`":"true"}}}`)))).To(Succeed())
	done := waitOutcome(t, second, wait)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
	g.Expect(apimeta.IsStatusConditionTrue(done.Status.Conditions, v1alpha1.ConditionStalled)).To(BeFalse())
	g.Expect(tb.counts()).To(Equal(map[string]int{"t1-c1:get_node": 2}))
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "agentrun-spec.nightly"}, rec)).To(Succeed())
	g.Expect(rec.Data).To(HaveKeyWithValue("uid", string(second.UID)))
	g.Expect(rec.Data).To(HaveKeyWithValue("specHash", SpecHash(&second.Spec)))
}

// What the protection leaves alone: a run recreated with the same spec
// (a deliberate delete), a run no GitOps tool applied, and a run that
// opts out; and the annotation alone protects a run.
func TestGitOpsRerun_whatIsNotRefused(t *testing.T) {
	ns := namespace(t)
	startManager(t, &kits{tools: newTools()})
	const wait = 20 * time.Second

	same := fluxRun(ns, "same", "Summarise the alerts.").answer("ok").create(t)
	expectOutcome(t, waitOutcome(t, same, wait), v1alpha1.OutcomeCompleted, "")
	deleteRun(t, same)
	same = fluxRun(ns, "same", "Summarise the alerts.").answer("ok").create(t)
	expectOutcome(t, waitOutcome(t, same, wait), v1alpha1.OutcomeCompleted, "")

	for _, tc := range []struct {
		name    string
		labels  map[string]string
		annots  map[string]string
		refused bool
	}{
		{name: "plain"},
		{name: "opted-out", labels: map[string]string{"kustomize.toolkit.fluxcd.io/name": "runs"}, annots: map[string]string{v1alpha1.AnnotationGitOpsProtect: "false"}},
		{name: "annotated", annots: map[string]string{v1alpha1.AnnotationGitOpsProtect: "true"}, refused: true},
		{name: "argo", annots: map[string]string{"argocd.argoproj.io/tracking-id": "runs:agents.agentrun.dev/AgentRun:" + ns + "/argo"}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mk := func(goal string) *v1alpha1.AgentRun {
				b := makeRun(ns, tc.name).answer("ok")
				b.r.Spec.Goal = goal
				b.r.ObjectMeta = metav1.ObjectMeta{Name: tc.name, Namespace: ns, Labels: tc.labels, Annotations: tc.annots}
				return b.create(t)
			}
			run := mk("First goal.")
			expectOutcome(t, waitOutcome(t, run, wait), v1alpha1.OutcomeCompleted, "")
			deleteRun(t, run)
			run = mk("Second goal.")
			if !tc.refused {
				expectOutcome(t, waitOutcome(t, run, wait), v1alpha1.OutcomeCompleted, "")
				return
			}
			NewWithT(t).Eventually(func() string { return get(t, run).Status.Reason }, wait, 20*time.Millisecond).
				Should(ContainSubstring("refusing to start"))
		})
	}
}

// Issue 27, finding 7: the re-run protection overwrote any ConfigMap
// named after its record (agentrun-spec.<run>), whoever made it. A
// ConfigMap the operator did not make is left alone, and the run waits
// with a reason that names it.
func TestGitOpsRerun_aConfigMapNotOursIsNeverOverwritten(t *testing.T) {
	ns := namespace(t)
	tb := newTools()
	startManager(t, &kits{tools: tb})
	ctx := context.Background()
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "agentrun-spec.nightly", Namespace: ns},
		Data: map[string]string{"settings": "precious"}}
	if err := k8sClient.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	run := fluxRun(ns, "nightly", "Check the nodes.").answer("fine").create(t)
	NewWithT(t).Eventually(func() string {
		c := apimeta.FindStatusCondition(get(t, run).Status.Conditions, v1alpha1.ConditionSucceeded)
		if c == nil || c.Reason != v1alpha1.ReasonRerunRefused {
			return ""
		}
		return c.Message
	}, 20*time.Second, 20*time.Millisecond).Should(ContainSubstring("ConfigMap agentrun-spec.nightly"))
	got := &corev1.ConfigMap{}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(theirs), got); err != nil {
		t.Fatal(err)
	}
	if got.Data["settings"] != "precious" || got.Data["uid"] != "" || got.ResourceVersion != theirs.ResourceVersion {
		t.Fatalf("the ConfigMap was changed: %v", got.Data)
	}
	if cur := get(t, run); cur.Status.Turn != 0 || cur.Status.Outcome != "" {
		t.Fatalf("the run started: turn %d, outcome %q", cur.Status.Turn, cur.Status.Outcome)
	}
}

// Finding 7 of issue 27: the operator's ClusterRole grants ConfigMap
// writes in every namespace (for the re-run records), and RBAC cannot
// narrow that by label. The admission policy agentrun-operator-writes
// does: as the operator's ServiceAccount, only ConfigMaps labelled as
// its records (re-run records, saves records) may be created, changed or
// deleted.
func TestOperatorWrites_onlyItsReRunRecords(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	writer := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "configmap-writer", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update", "delete"}}}}
	if err := k8sClient.Create(ctx, writer); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "operator-configmaps", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmap-writer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "agentrun-system", Name: "agentrun-controller-manager"}}}); err != nil {
		t.Fatal(err)
	}
	op := as(t, "system:serviceaccount:agentrun-system:agentrun-controller-manager", "system:serviceaccounts", "system:serviceaccounts:agentrun-system")
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-settings"}, Data: map[string]string{"mode": "safe"}}
	if err := k8sClient.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "writes only its own records") {
			t.Errorf("%s as the operator: %v; want it refused", what, err)
		}
	}
	NewWithT(t).Eventually(func() error {
		cm := get(t, theirs.DeepCopy())
		cm.Data["mode"] = "unsafe"
		return op.Update(ctx, cm)
	}, 20*time.Second, 100*time.Millisecond).Should(MatchError(ContainSubstring("writes only its own records")))
	refused("deleting a ConfigMap it did not make", op.Delete(ctx, theirs.DeepCopy()))
	refused("creating an unlabelled ConfigMap", op.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "new"}}))

	record := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: recordName("refund"),
		Labels: map[string]string{v1alpha1.LabelSpecRecord: "spec-hash"}}, Data: map[string]string{"uid": "a"}}
	if err := op.Create(ctx, record); err != nil {
		t.Fatalf("creating a re-run record as the operator: %v", err)
	}
	record.Data["uid"] = "b"
	if err := op.Update(ctx, record); err != nil {
		t.Fatalf("updating a re-run record as the operator: %v", err)
	}
	unlabelled := record.DeepCopy()
	unlabelled.Labels = nil
	refused("taking the label off a record", op.Update(ctx, unlabelled))
	if err := op.Delete(ctx, record); err != nil {
		t.Fatalf("deleting a re-run record as the operator: %v", err)
	}
	// The record of a run's highest save (rollback.go) is the operator's
	// too.
	saves := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: SavesRecordName("a"),
		Labels: map[string]string{v1alpha1.LabelSpecRecord: savesRecordLabel}}, Data: map[string]string{savesSequenceKey: "1"}}
	if err := op.Create(ctx, saves); err != nil {
		t.Fatalf("creating a saves record as the operator: %v", err)
	}
	saves.ResourceVersion, saves.Data[savesSequenceKey] = "", "2"
	if err := op.Update(ctx, saves); err != nil {
		t.Fatalf("updating a saves record as the operator, unconditionally: %v", err)
	}
	if got := get(t, theirs.DeepCopy()); got.Data["mode"] != "safe" {
		t.Fatalf("the ConfigMap the operator did not make was changed: %v", got.Data)
	}
}
