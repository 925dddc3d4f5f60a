package controller

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller/agentevaluation"
	"github.com/agentrun/agentrun/internal/controller/agentschedule"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/testenv"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// operatorUser is the username of the ServiceAccount config/default runs
// the operator as, which the admission policies of config/admission name.
const operatorUser = "system:serviceaccount:agentrun-system:agentrun-controller-manager"

// asOperator is a client that acts as the operator's ServiceAccount, with
// the rights a schedule or an evaluation reconciler uses in ns.
func asOperator(t *testing.T, ns string) client.Client {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "operator-schedules", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"agentruns"}, Verbs: []string{"get", "list", "create", "patch"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"agentschedules"}, Verbs: []string{"get"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"agentschedules/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"agentevaluations"}, Verbs: []string{"get"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"agentevaluations/status"}, Verbs: []string{"patch"}},
	}}
	if err := k8sClient.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "agentrun-system", Name: "agentrun-controller-manager"}
	if err := k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "operator-schedules", Namespace: ns},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}, Subjects: []rbacv1.Subject{sa}}); err != nil {
		t.Fatal(err)
	}
	authorized(t, ns, role.Rules, sa)
	return as(t, operatorUser, "system:serviceaccounts", "system:serviceaccounts:agentrun-system")
}

// Finding 6 of issue 42, first half: a schedule's runs are created by the
// operator, yet the schedule's author may not approve them where a policy
// refuses self-approval. The API server records who created the schedule,
// keeps that record, and the operator gives it to the runs; nobody but the
// operator, and only for a schedule's run, may name another author.
func TestSchedule_runsCarryTheSchedulesAuthor(t *testing.T) {
	ns, p := governedNamespace(t, v1alpha1.AgentRunPolicySpec{Approval: &v1alpha1.PlatformApproval{SelfApproval: v1alpha1.SelfApprovalDeny}})
	bind(t, ns, "agentrun-editor", userSubject("carol"))
	bind(t, ns, "agentrun-approver", userSubject("carol"))
	carol := as(t, "carol")
	ctx := context.Background()

	sched := func(name string, ann map[string]string) *v1alpha1.AgentSchedule {
		return &v1alpha1.AgentSchedule{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.AgentScheduleSpec{Schedule: "* * * * *", TimeZone: ptr.To("UTC"),
				RunTemplate: v1alpha1.ScheduledRun{Metadata: v1alpha1.ScheduledRunMetadata{Annotations: ann},
					TemplateRef: &v1alpha1.TemplateRef{Name: "refund-investigator"}}}}
	}
	err := carol.Create(ctx, sched("forged", map[string]string{v1alpha1.CreatedByAnnotation: "dave"}))
	if err == nil || !strings.Contains(err.Error(), "annotations may not set agents.agentrun.dev/created-by") {
		t.Fatalf("a schedule whose runs name another author was not refused: %v", err)
	}
	s := sched("nightly", map[string]string{"owner": "ops"})
	if err := carol.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), s) })
	if got := get(t, s).Annotations[v1alpha1.CreatedByAnnotation]; got != "carol" {
		t.Fatalf("the schedule's created-by is %q; want carol", got)
	}
	for _, forged := range []any{"dave", nil} {
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.CreatedByAnnotation: forged}}})
		err := carol.Patch(ctx, s.DeepCopy(), client.RawPatch("application/merge-patch+json", body))
		if err == nil || !strings.Contains(err.Error(), "cannot be set to another user, changed or removed") {
			t.Fatalf("setting the schedule's created-by to %v was not refused: %v", forged, err)
		}
	}

	op := asOperator(t, ns)
	due := s.CreationTimestamp.Truncate(time.Minute).Add(time.Minute + time.Second)
	r := agentschedule.NewReconciler(agentschedule.Config{Base: reconcilers.Base{Client: op, APIReader: op, Clock: func() time.Time { return due }}})
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)}); err != nil {
		t.Fatal(err)
	}
	run := onlyRun(t, ns, client.MatchingLabels{v1alpha1.LabelSchedule: s.Name})
	if got := run.Annotations[v1alpha1.CreatedByAnnotation]; got != "carol" {
		t.Fatalf("the scheduled run's created-by is %q; want carol, the schedule's author", got)
	}
	mayNotApproveOwn(t, carol, run, p.Name)

	// Only the operator names another author, and only for a run that a
	// schedule controls; anyone else is recorded as who they are.
	owned := func(c client.Client, name string) (*v1alpha1.AgentRun, error) {
		r := makeRun(ns, name).answer("done").r
		r.Annotations = map[string]string{v1alpha1.CreatedByAnnotation: "dave"}
		r.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "AgentSchedule",
			Name: s.Name, UID: get(t, s).UID, Controller: ptr.To(true)}}
		return r, c.Create(ctx, r, client.DryRunAll)
	}
	if r, err := owned(carol, "carols-forgery"); err != nil || r.Annotations[v1alpha1.CreatedByAnnotation] != "carol" {
		t.Fatalf("carol creating a schedule's run that names dave: created-by %q (%v); want carol", r.Annotations[v1alpha1.CreatedByAnnotation], err)
	}
	loose := makeRun(ns, "operators-own").answer("done").r
	loose.Annotations = map[string]string{v1alpha1.CreatedByAnnotation: "dave"}
	if err := op.Create(ctx, loose, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "cannot be set to another user") {
		t.Fatalf("the operator naming another author of a run no schedule controls was not refused: %v", err)
	}
	if r, err := owned(op, "scheduled"); err != nil || r.Annotations[v1alpha1.CreatedByAnnotation] != "dave" {
		t.Fatalf("the operator creating a schedule's run with its author: created-by %q (%v); want dave", r.Annotations[v1alpha1.CreatedByAnnotation], err)
	}
}

// An evaluation's runs are created by the operator too: the API server
// records who created the evaluation and keeps that record, and the
// operator gives it to the runs, so that a policy refusing self-approval
// refuses the evaluation's author on its runs.
func TestEvaluation_runsCarryTheEvaluationsAuthor(t *testing.T) {
	ns, p := governedNamespace(t, v1alpha1.AgentRunPolicySpec{Approval: &v1alpha1.PlatformApproval{SelfApproval: v1alpha1.SelfApprovalDeny}})
	bind(t, ns, "agentrun-editor", userSubject("carol"))
	bind(t, ns, "agentrun-approver", userSubject("carol"))
	carol := as(t, "carol")
	ctx := context.Background()

	forged := &v1alpha1.AgentEvaluation{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: ns,
		Annotations: map[string]string{v1alpha1.CreatedByAnnotation: "dave"}},
		Spec: v1alpha1.AgentEvaluationSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "refund-investigator"},
			Cases: []v1alpha1.EvaluationCase{{Name: "one"}}}}
	if err := carol.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	if got := get(t, forged).Annotations[v1alpha1.CreatedByAnnotation]; got != "carol" {
		t.Fatalf("an evaluation carol created naming dave: created-by %q; want carol, as the API server records her", got)
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.CreatedByAnnotation: "dave"}}})
	if err := carol.Patch(ctx, forged.DeepCopy(), client.RawPatch("application/merge-patch+json", body)); err == nil ||
		!strings.Contains(err.Error(), "cannot be set to another user, changed or removed") {
		t.Fatalf("changing the evaluation's created-by was not refused: %v", err)
	}

	op := asOperator(t, ns)
	r := agentevaluation.NewReconciler(agentevaluation.Config{Base: reconcilers.Base{Client: op, APIReader: op}})
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(forged)}); err != nil {
		t.Fatal(err)
	}
	run := onlyRun(t, ns, client.MatchingLabels{v1alpha1.LabelEvaluation: forged.Name})
	if got := run.Annotations[v1alpha1.CreatedByAnnotation]; got != "carol" {
		t.Fatalf("the evaluation's run's created-by is %q; want carol, the evaluation's author", got)
	}
	mayNotApproveOwn(t, carol, run, p.Name)

	// carol cannot pass a run off as the evaluation's to name dave.
	loose := makeRun(ns, "carols-forgery").answer("done").r
	loose.Annotations = map[string]string{v1alpha1.CreatedByAnnotation: "dave"}
	loose.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "AgentEvaluation",
		Name: forged.Name, UID: get(t, forged).UID, Controller: ptr.To(true)}}
	if err := carol.Create(ctx, loose, client.DryRunAll); err != nil || loose.Annotations[v1alpha1.CreatedByAnnotation] != "carol" {
		t.Fatalf("carol creating an evaluation's run that names dave: created-by %q (%v); want carol", loose.Annotations[v1alpha1.CreatedByAnnotation], err)
	}
}

// Finding 6 of issue 42, second half: the shipped edit role lets a
// namespace's editor impersonate its ServiceAccounts, and the API server
// then records the ServiceAccount as the run's author, not who
// impersonated it (that is only in its audit log). Where a policy refuses
// self-approval, whoever may act as the ServiceAccount that created a run
// may not answer it; an approver who may not act as it still can.
func TestPlatform_selfApprovalRefusesWhoeverMayActAsTheCreatingServiceAccount(t *testing.T) {
	ns, p := governedNamespace(t, v1alpha1.AgentRunPolicySpec{Approval: &v1alpha1.PlatformApproval{SelfApproval: v1alpha1.SelfApprovalDeny}})
	// What the aggregated edit role holds (the aggregation controller of
	// kube-controller-manager does not run here): the Kubernetes part,
	// which impersonates ServiceAccounts, and the project's two roles.
	for _, role := range []string{"system:aggregate-to-edit", "agentrun-editor", "agentrun-approver"} {
		bind(t, ns, role, userSubject("mallory"))
	}
	bind(t, ns, "agentrun-approver", userSubject("dave"))
	builder := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "builder"}
	bind(t, ns, "agentrun-editor", builder)

	// mallory authenticates as herself and impersonates the ServiceAccount.
	mallory, err := testEnv.AddUser(envtest.User{Name: "mallory"}, restCfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(mallory.Config())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":builder"}
	asBuilder, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	malloryItself, err := client.New(mallory.Config(), client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := makeRun(ns, "built").answer("done").r
	if err := asBuilder.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	if got := get(t, run).Annotations[v1alpha1.CreatedByAnnotation]; got != "system:serviceaccount:"+ns+":builder" {
		t.Fatalf("created-by is %q; want the impersonated ServiceAccount", got)
	}
	answer := func(c client.Client, id string) error {
		return patchAnnotations(ctx, c, run, map[string]any{v1alpha1.ApprovalAnnotationPrefix + id: "approve"}, "kubectl-annotate")
	}
	NewWithT(t).Eventually(func() string {
		if err := answer(malloryItself, "t1-c1"); err != nil {
			return err.Error()
		}
		return ""
	}, 20*time.Second, 50*time.Millisecond).Should(ContainSubstring("mallory may act as the ServiceAccount system:serviceaccount:" + ns +
		":builder (impersonate it or create its tokens), which created built, and so may have created it: it may not answer its approvals (" +
		v1alpha1.ApprovalAnnotationPrefix + "t1-c1): AgentRunPolicy " + p.Name + " says approval.selfApproval: Deny"))
	if err := answer(as(t, "dave"), "t1-c1"); err != nil {
		t.Fatalf("an approver who may not act as the ServiceAccount was refused: %v", err)
	}
}

// onlyRun is the one run of ns that sel matches; the test fails unless
// there is exactly one.
func onlyRun(t *testing.T, ns string, sel client.MatchingLabels) *v1alpha1.AgentRun {
	t.Helper()
	runs := runsMatching(t, ns, sel)
	if len(runs) != 1 {
		t.Fatalf("%d runs; want one", len(runs))
	}
	return &runs[0]
}

// mayNotApproveOwn waits until the API server refuses as (who created
// run) an approval of its first call under the policy named policy,
// whose approval.selfApproval is Deny.
func mayNotApproveOwn(t *testing.T, as client.Client, run *v1alpha1.AgentRun, policy string) {
	t.Helper()
	NewWithT(t).Eventually(func() string {
		err := patchAnnotations(context.Background(), as, run, map[string]any{v1alpha1.ApprovalAnnotationPrefix + "t1-c1": "approve"}, "kubectl-annotate")
		if err != nil {
			return err.Error()
		}
		return ""
	}, 20*time.Second, 50*time.Millisecond).Should(ContainSubstring(run.Annotations[v1alpha1.CreatedByAnnotation] + " created " + run.Name +
		" and may not answer its approvals (" + v1alpha1.ApprovalAnnotationPrefix + "t1-c1): AgentRunPolicy " + policy + " says approval.selfApproval: Deny"))
}
