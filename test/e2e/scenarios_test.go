//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/tools/job"
	"github.com/agentrun/agentrun/internal/tools/job/entrypoint"
)

// The operator was installed from the chart, runs as its own
// ServiceAccount, and is Ready (make e2e waits for it; this checks what it
// waited for).
func TestOperator_installedFromTheChartAndReady(t *testing.T) {
	pods := operatorPods(t)
	if len(pods) == 0 {
		t.Fatalf("no operator pod in %s", operatorNS)
	}
	for _, p := range pods {
		if !ready(&p) {
			t.Errorf("operator pod %s is not Ready", p.Name)
		}
		if p.Spec.ServiceAccountName == "" || p.Spec.ServiceAccountName == "default" {
			t.Errorf("operator pod %s runs as ServiceAccount %q, want its own", p.Name, p.Spec.ServiceAccountName)
		}
	}

	// Its ClusterRole has exactly the generated rules.
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	fullname := release
	if !strings.Contains(release, "agentrun") {
		fullname += "-agentrun"
	}
	var got rbacv1.ClusterRole
	if err := cl.Get(context.Background(), client.ObjectKey{Name: fullname + "-manager"}, &got); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want.Rules, got.Rules); d != "" {
		t.Errorf("ClusterRole %s's rules, against config/rbac/role.yaml (-want +got):\n%s", got.Name, d)
	}
}

// (a) A short result comes back through the termination message: the
// wrapper's summary carries it, and no log is read.
func TestJobTool_resultThroughTerminationMessage(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-term")
	createRun(t, ns, "lookup", `
spec:
  goal: "Find the account of r.okafor@northwind.example."
  model:
    provider: scripted
    script:
    - toolCalls:
      - name: identify_account
        arguments: {email: r.okafor@northwind.example}
    - content: "The account is found."
  budget: {maxTurns: 3}
  tools:
  - name: identify_account
    description: "Echoes its arguments, read from standard input."
    timeout: 60s
    job:
      image: {{.Image}}
      command: [/testtool]
      args: [cat]
`)
	run := waitFinished(t, ns, "lookup", v1alpha1.OutcomeCompleted)

	obs := observation(t, run, "t1-c1")
	if obs.Status != loop.ObsOK {
		t.Fatalf("observation %s: %s, want ok", obs.Status, obs.Content)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(obs.Content), &got); err != nil || got["email"] != "r.okafor@northwind.example" {
		t.Errorf("the model saw %q, want the arguments the tool read on standard input (%v)", obs.Content, err)
	}
	j := onlyJob(t, run, "t1-c1")
	term, sum := toolState(t, &j)
	if term.ExitCode != 0 || sum.OutInLog || strings.TrimSpace(sum.Out) != strings.TrimSpace(obs.Content) {
		t.Errorf("termination message %q (exit %d): want the result in it, not in the log", term.Message, term.ExitCode)
	}
}

// A run made from an AgentRunTemplate with `kubectl agentrun run --wait`:
// the plugin checks the parameter, creates the run and follows it; it
// exits 0 once the run Completed, after the operator resolved the
// template and the tool ran in a real pod.
func TestPlugin_runFromATemplateAndWait(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-tpl")
	tpl := &v1alpha1.AgentRunTemplate{}
	if err := yaml.UnmarshalStrict(render(t, `
metadata:
  name: account-lookup
spec:
  parameters:
  - name: email
    description: "The customer's e-mail address."
    required: true
    pattern: '^[^@ ]+@[^@ ]+$'
  run:
    goal: "Find the account of $(params.email)."
    model:
      provider: scripted
      script:
      - toolCalls:
        - name: identify_account
          arguments: {email: r.okafor@northwind.example}
      - content: "The account is found."
    budget: {maxTurns: 3}
    tools:
    - name: identify_account
      description: "Echoes its arguments, read from standard input."
      timeout: 60s
      job:
        image: {{.Image}}
        command: [/testtool]
        args: [cat]
`, fixture{Image: testtoolImage}), tpl); err != nil {
		t.Fatalf("the test's manifest: %v", err)
	}
	tpl.Namespace = ns
	if err := cl.Create(context.Background(), tpl); err != nil {
		t.Fatalf("creating AgentRunTemplate %s/%s: %v", ns, tpl.Name, err)
	}

	// A value the pattern refuses creates nothing.
	out, code := kubectlAgentrun(t, "run", "account-lookup", "-n", ns, "-p", "email=not an address")
	if code == 0 || !strings.Contains(out, `parameter "email" must match the pattern`) {
		t.Errorf("a refused parameter: exit %d, output:\n%s", code, out)
	}

	out, code = kubectlAgentrun(t, "run", "account-lookup", "-n", ns,
		"-p", "email=r.okafor@northwind.example", "--name", "lookup", "--wait", "--timeout", runTimeout.String())
	if code != 0 {
		t.Fatalf("kubectl agentrun run --wait exited %d:\n%s", code, out)
	}
	if !strings.HasPrefix(out, "agentrun.agents.agentrun.dev/lookup created\n") || !strings.Contains(out, "outcome: Completed\n") {
		t.Errorf("kubectl agentrun run --wait printed:\n%s", out)
	}
	run := waitFinished(t, ns, "lookup", v1alpha1.OutcomeCompleted)
	if run.Status.Template == nil || run.Status.Template.Name != "account-lookup" || run.Status.Template.Digest == "" {
		t.Errorf("status.template = %+v, want account-lookup with the digest of the resolved spec", run.Status.Template)
	}
	if obs := observation(t, run, "t1-c1"); obs.Status != loop.ObsOK {
		t.Errorf("observation %s: %s, want ok", obs.Status, obs.Content)
	}
	runs := &v1alpha1.AgentRunList{}
	if err := cl.List(context.Background(), runs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(runs.Items) != 1 {
		t.Errorf("%d runs in the namespace, want only lookup (the refused one created nothing)", len(runs.Items))
	}
}

// (b) A result over 4 KiB does not fit the termination message: the
// summary says so and the executor reads it from the pod's log.
func TestJobTool_resultOverFourKiBThroughPodLog(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-log")
	createRun(t, ns, "big", `
spec:
  goal: "Read the big report."
  model:
    provider: scripted
    script:
    - toolCalls:
      - name: report
        arguments: {}
    - content: "The report is read."
  budget: {maxTurns: 3}
  tools:
  - name: report
    timeout: 60s
    maxResultBytes: 16384
    job:
      image: {{.Image}}
      command: [/testtool]
      args: [bytes, "5000"]
`)
	run := waitFinished(t, ns, "big", v1alpha1.OutcomeCompleted)

	obs := observation(t, run, "t1-c1")
	if obs.Status != loop.ObsOK || obs.Content != strings.Repeat("x", 5000) {
		t.Errorf("observation %s of %d bytes (%.80q...), want ok and 5000 bytes of x", obs.Status, len(obs.Content), obs.Content)
	}
	j := onlyJob(t, run, "t1-c1")
	_, sum := toolState(t, &j)
	if !sum.OutInLog || sum.Size != 5000 || sum.Out != "" {
		t.Errorf("summary %+v: want outInLog, size 5000, no out", sum)
	}
}

// (c) A tool that ignores SIGTERM is killed at its deadline, from outside
// its process. A timeout is transient; with no retries left the run ends
// ToolFailure, naming the tool, and the timeout is in the transcript.
func TestJobTool_deadlineKillsToolThatIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-deadline")
	createRun(t, ns, "stuck", `
spec:
  goal: "Run the stuck export."
  model:
    provider: scripted
    script:
    - toolCalls:
      - name: export
        arguments: {}
    - content: "The export timed out; I will tell a person."
  budget: {maxTurns: 3}
  tools:
  - name: export
    timeout: 3s
    retry: {maxAttempts: 1}
    job:
      image: {{.Image}}
      command: [/testtool]
      args: [ignore-sigterm, echo, started, sleep, "300"]
`)
	run := waitFinished(t, ns, "stuck", v1alpha1.OutcomeToolFailure)
	if !strings.Contains(run.Status.Reason, "export") {
		t.Errorf("reason %q does not name the tool", run.Status.Reason)
	}

	obs := observation(t, run, "t1-c1")
	if obs.Status != loop.ObsFailed || !strings.Contains(obs.Content, "did not finish before its deadline") {
		t.Errorf("observation %s: %q, want a timeout", obs.Status, obs.Content)
	}
	j := onlyJob(t, run, "t1-c1")
	term, sum := toolState(t, &j)
	if !sum.TimedOut {
		t.Errorf("summary %+v: want timedOut", sum)
	}
	// Stopped at 3 s, killed 5 s later at most: far from the 300 s it asked for.
	limit := 3*time.Second + entrypoint.DefaultKillGrace + 5*time.Second
	if ran := term.FinishedAt.Sub(term.StartedAt.Time); ran > limit {
		t.Errorf("the tool's container ran %s, want at most %s", ran, limit)
	}
}

// (d) A non-zero exit is a failed call whose observation carries the exit
// code and the end of standard error.
func TestJobTool_nonZeroExitShowsCodeAndStderr(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-exit")
	createRun(t, ns, "locked", `
spec:
  goal: "Close the ledger."
  model:
    provider: scripted
    script:
    - toolCalls:
      - name: close_ledger
        arguments: {}
    - content: "The ledger is locked; a person must close it."
  budget: {maxTurns: 3}
  tools:
  - name: close_ledger
    timeout: 60s
    job:
      image: {{.Image}}
      command: [/testtool]
      args: [echo, partial, stderr, "step 1 ok", stderr, "boom: the ledger is locked", exit, "3"]
`)
	run := waitFinished(t, ns, "locked", v1alpha1.OutcomeCompleted)

	obs := observation(t, run, "t1-c1")
	if obs.Status != loop.ObsFailed || !strings.Contains(obs.Content, "exit code 3") || !strings.Contains(obs.Content, "boom: the ledger is locked") {
		t.Errorf("observation %s: %q, want exit code 3 and the end of stderr", obs.Status, obs.Content)
	}
	j := onlyJob(t, run, "t1-c1")
	_, sum := toolState(t, &j)
	if sum.Exit != 3 {
		t.Errorf("summary %+v: want exit 3", sum)
	}
}

// (e) An irreversible mutation waits for a person: no Job exists until
// `kubectl annotate` approves the call, and then it runs.
func TestApproval_jobRunsOnlyAfterKubectlAnnotate(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-approve")
	createRun(t, ns, "refund", `
spec:
  goal: "Refund invoice in_9f21 (82.40)."
  model:
    provider: scripted
    script:
    - toolCalls:
      - name: issue_refund
        arguments: {invoice: in_9f21, amount_minor: 8240}
    - content: "Refunded 82.40."
  budget: {maxTurns: 3}
  tools:
  - name: issue_refund
    mutates: true
    reversible: false
    timeout: 60s
    job:
      image: {{.Image}}
      command: [/testtool]
      args: [echo, refunded]
`)
	run := waitRun(t, ns, "refund", "waiting for approval", runTimeout, func(r *v1alpha1.AgentRun) bool {
		return r.Status.Phase == v1alpha1.PhaseAwaitingApproval && len(r.Status.PendingApprovals) == 1
	})
	if p := run.Status.PendingApprovals[0]; p.CallID != "t1-c1" || p.Tool != "issue_refund" {
		t.Fatalf("pending approval %+v, want t1-c1 issue_refund", p)
	}
	// Nothing of the batch runs while it waits.
	NewWithT(t).Consistently(func() []batchv1.Job { return jobsOf(t, run, "") }).
		WithTimeout(3*time.Second).WithPolling(500*time.Millisecond).Should(BeEmpty(), "Jobs before the approval")

	rec := recordJobs(t, ns)
	approved := time.Now().Truncate(time.Second)
	kubectl(t, "-n", ns, "annotate", "agentrun", "refund", v1alpha1.ApprovalAnnotationPrefix+"t1-c1=approve")
	run = waitFinished(t, ns, "refund", v1alpha1.OutcomeCompleted)

	if a := run.Status.Approvals; len(a) != 1 || a[0].CallID != "t1-c1" || a[0].Decision != v1alpha1.ApprovalApprove {
		t.Errorf("status.approvals %+v, want t1-c1 approved", a)
	}
	// The mutating call's Job is deleted once status holds its result; the
	// watch saw it.
	seen, evs := rec.seen()
	if len(seen) != 1 {
		t.Fatalf("%d Jobs seen, want 1; events: %v", len(seen), evs)
	}
	if j := seen[0]; j.CreationTimestamp.Time.Before(approved) {
		t.Errorf("the Job was created at %s, before the approval at %s", j.CreationTimestamp, approved)
	}
	if obs := observation(t, run, "t1-c1"); obs.Status != loop.ObsOK || strings.TrimSpace(obs.Content) != "refunded" {
		t.Errorf("observation %s: %q, want ok: refunded", obs.Status, obs.Content)
	}
}

// (f) The operator's pod is deleted while a tool's Job runs: the new
// operator adopts that Job (one Job, one pod, for the call), reads its
// result and completes the run. Not parallel: it restarts the operator.
func TestOperatorRestart_adoptsTheRunningJob(t *testing.T) {
	ns := newNamespace(t, "e2e-restart")

	// Every Job event in the namespace, from before the run exists.
	rec := recordJobs(t, ns)

	createRun(t, ns, "slow", `
spec:
  goal: "Run the slow reconciliation."
  model:
    provider: scripted
    script:
    - toolCalls:
      - name: reconcile_ledger
        arguments: {month: "2025-08"}
    - content: "The ledger is reconciled."
  budget: {maxTurns: 3}
  tools:
  - name: reconcile_ledger
    mutates: true
    reversible: true
    timeout: 120s
    job:
      image: {{.Image}}
      command: [/testtool]
      args: [echo, started, sleep, 20s, echo, finished]
`)
	run := waitRun(t, ns, "slow", "dispatching its tool", runTimeout, func(r *v1alpha1.AgentRun) bool { return r.UID != "" })

	// Wait until the tool's container runs.
	var running batchv1.Job
	NewWithT(t).Eventually(func(g Gomega) {
		jobs := jobsOf(t, run, "t1-c1")
		g.Expect(jobs).To(HaveLen(1))
		running = jobs[0]
		pods := podsOf(t, &running)
		g.Expect(pods).To(HaveLen(1))
		var st *corev1.ContainerState
		for _, s := range pods[0].Status.ContainerStatuses {
			if s.Name == job.ToolContainer {
				st = &s.State
			}
		}
		g.Expect(st).NotTo(BeNil())
		g.Expect(st.Running).NotTo(BeNil(), "the tool container's state: %+v", st)
	}).WithTimeout(runTimeout).WithPolling(poll).Should(Succeed(), "the tool's container running")

	old := operatorPods(t)
	if len(old) != 1 {
		t.Fatalf("%d operator pods, want 1", len(old))
	}
	// A metrics scrape in flight (as Prometheus may have one) holds the
	// old operator in its graceful shutdown for a while: whatever its
	// in-flight work does when the shutdown cancels it, it has time to do.
	if conn := scrapeInFlight(t, &old[0]); conn != nil {
		defer conn.Close()
	}
	deleted := time.Now()
	if err := cl.Delete(context.Background(), &old[0]); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func(g Gomega) {
		pods := operatorPods(t)
		g.Expect(pods).To(HaveLen(1))
		g.Expect(pods[0].Name).NotTo(Equal(old[0].Name))
		g.Expect(ready(&pods[0])).To(BeTrue(), "new operator pod %s Ready", pods[0].Name)
	}).WithTimeout(2*time.Minute).WithPolling(poll).Should(Succeed(), "a new operator pod, Ready")
	t.Logf("a new operator was Ready %s after the old pod was deleted", time.Since(deleted).Round(100*time.Millisecond))

	run = waitFinished(t, ns, "slow", v1alpha1.OutcomeCompleted)

	// A mutating call's Job is deleted once status holds its result, so
	// the record is the watch: one Job, the one that was running.
	seen, evs := rec.seen()
	jobs := jobsOf(t, run, "t1-c1")
	if len(seen) != 1 || seen[0].UID != running.UID || len(jobs) > 1 || (len(jobs) == 1 && jobs[0].UID != running.UID) {
		t.Fatalf("after the restart: %d Jobs for t1-c1 (want at most the one with uid %s); Job uids seen in the namespace: %d; events: %v",
			len(jobs), running.UID, len(seen), evs)
	}
	if len(jobs) == 1 {
		if pods := podsOf(t, &jobs[0]); len(pods) != 1 {
			t.Errorf("the call's Job has %d pods, want 1 (the tool ran once)", len(pods))
		}
	}
	obs := observation(t, run, "t1-c1")
	if obs.Status != loop.ObsOK || !strings.Contains(obs.Content, "finished") {
		t.Errorf("observation %s: %q, want the tool's own result (started, finished)", obs.Status, obs.Content)
	}
}

// (g) Tool pods meet the restricted profile: in a namespace that enforces
// it (and does: a privileged pod is refused), a run whose two reads run as
// two Jobs at once completes, and no pod of theirs was refused.
func TestPodSecurity_toolPodsAdmittedUnderRestricted(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-restricted")

	// The namespace really enforces "restricted".
	bad := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "privileged", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: testtoolImage,
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}},
	}
	err := cl.Create(context.Background(), bad, client.DryRunAll)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
		t.Fatalf("a privileged pod in %s: %v, want it refused by PodSecurity", ns, err)
	}

	createRun(t, ns, "reads", `
spec:
  goal: "Read both reports."
  model:
    provider: scripted
    script:
    - toolCalls:
      - name: read_report
        arguments: {report: a}
      - name: read_report
        arguments: {report: b}
    - content: "Both reports are read."
  budget: {maxTurns: 3}
  tools:
  - name: read_report
    timeout: 60s
    job:
      image: {{.Image}}
      command: [/testtool]
      args: [cat]
      env:
      - {name: REPORT_FORMAT, value: json}
      resources:
        requests: {cpu: 10m, memory: 16Mi}
        limits: {cpu: 200m, memory: 64Mi}
`)
	run := waitFinished(t, ns, "reads", v1alpha1.OutcomeCompleted)

	for _, id := range []string{"t1-c1", "t1-c2"} {
		j := onlyJob(t, run, id)
		if j.Status.Succeeded != 1 {
			t.Errorf("Job %s: %d succeeded, want 1", j.Name, j.Status.Succeeded)
		}
		if obs := observation(t, run, id); obs.Status != loop.ObsOK {
			t.Errorf("%s: observation %s: %q", id, obs.Status, obs.Content)
		}
	}
	var events corev1.EventList
	if err := cl.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == "FailedCreate" {
			t.Errorf("%s %s: %s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

// (h) Tools act as the run's ServiceAccount and read only what it may: the
// builtin list tool reads ConfigMaps (allowed) and is refused Pods (403),
// and so is a job tool that uses the account's token itself.
func TestServiceAccount_toolsReadOnlyWhatTheAccountMay(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-rbac")
	apply(t, ns, `
apiVersion: v1
kind: ServiceAccount
metadata:
  name: config-reader
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: config-reader
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: config-reader
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: config-reader}
subjects:
- {kind: ServiceAccount, name: config-reader, namespace: {{.Namespace}}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: checkout-settings
data:
  retries: "3"
`)
	createRun(t, ns, "reader", `
spec:
  goal: "What retry setting does checkout use, and which pods run?"
  serviceAccountName: config-reader
  model:
    provider: scripted
    script:
    - toolCalls:
      - name: list_objects
        arguments: {apiVersion: v1, kind: ConfigMap}
      - name: list_objects
        arguments: {apiVersion: v1, kind: Pod}
    - toolCalls:
      - name: api_probe
        arguments: {}
    - content: "checkout retries 3 times; pods cannot be listed with this account."
  budget: {maxTurns: 4}
  tools:
  - name: list_objects
    builtin: kubernetes.list
  - name: api_probe
    timeout: 60s
    job:
      image: {{.Image}}
      command: [/testtool]
      args: [api, /api/v1/namespaces/{{.Namespace}}/configmaps/checkout-settings, api, /api/v1/namespaces/{{.Namespace}}/pods]
      automountServiceAccountToken: true
`)
	run := waitFinished(t, ns, "reader", v1alpha1.OutcomeCompleted)

	obs := observations(t, run)
	if o := obs["t1-c1"]; o.Status != loop.ObsOK || !strings.Contains(o.Content, "checkout-settings") {
		t.Errorf("listing ConfigMaps: %s: %q, want ok with checkout-settings", o.Status, o.Content)
	}
	if o := obs["t1-c2"]; o.Status != loop.ObsFailed || !strings.Contains(o.Content, "403") {
		t.Errorf("listing Pods: %s: %q, want a 403 observation", o.Status, o.Content)
	}
	o := obs["t2-c1"]
	if o.Status != loop.ObsOK {
		t.Fatalf("the job tool: %s: %q", o.Status, o.Content)
	}
	parts := strings.Split(o.Content, "status=")
	if len(parts) != 3 || !strings.HasPrefix(parts[1], "200") || !strings.HasPrefix(parts[2], "403") {
		t.Errorf("the job tool with the account's token: %q, want status=200 for the ConfigMap, then status=403 for pods", o.Content)
	}
	j := onlyJob(t, run, "t2-c1")
	if j.Spec.Template.Spec.ServiceAccountName != "config-reader" {
		t.Errorf("the tool's pod runs as %q, want config-reader", j.Spec.Template.Spec.ServiceAccountName)
	}
}

// scrapeInFlight opens a connection to the pod's metrics port (over TLS
// when it is https-metrics, the chart's default) and sends half a request,
// which the server waits for until its shutdown times out: the request
// never completes, so it is never authenticated either. It returns nil,
// and logs why, when the port cannot be reached (the pod's network is not
// reachable from where the test runs).
func scrapeInFlight(t *testing.T, p *corev1.Pod) net.Conn {
	t.Helper()
	var port int32
	secure := false
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == "http-metrics" || cp.Name == "https-metrics" {
				port, secure = cp.ContainerPort, cp.Name == "https-metrics"
			}
		}
	}
	if port == 0 || p.Status.PodIP == "" {
		t.Logf("no metrics port on %s: the operator's shutdown is not held", p.Name)
		return nil
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(p.Status.PodIP, fmt.Sprint(port)), 3*time.Second)
	if err != nil {
		t.Logf("cannot reach %s's metrics port (%v): the operator's shutdown is not held", p.Name, err)
		return nil
	}
	if secure {
		tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) // the operator's self-signed certificate
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			conn.Close()
			t.Logf("TLS handshake with %s's metrics port: %v", p.Name, err)
			return nil
		}
		_ = tc.SetDeadline(time.Time{})
		conn = tc
	}
	if _, err := conn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: e2e\r\n")); err != nil {
		conn.Close()
		t.Logf("writing to %s's metrics port: %v", p.Name, err)
		return nil
	}
	return conn
}

// jobRecorder watches a namespace's Jobs: every Job seen, in order, and
// the events other than modifications.
type jobRecorder struct {
	mu     sync.Mutex
	jobs   []batchv1.Job
	uids   map[types.UID]bool
	events []string
}

// recordJobs starts a jobRecorder for ns; it stops with the test.
func recordJobs(t *testing.T, ns string) *jobRecorder {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	w, err := cl.Watch(ctx, &batchv1.JobList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	r := &jobRecorder{uids: map[types.UID]bool{}}
	go func() {
		for ev := range w.ResultChan() {
			j, ok := ev.Object.(*batchv1.Job)
			if !ok {
				continue
			}
			r.mu.Lock()
			if !r.uids[j.UID] {
				r.uids[j.UID] = true
				r.jobs = append(r.jobs, *j)
			}
			if ev.Type != watch.Modified {
				r.events = append(r.events, string(ev.Type)+" "+j.Name+" "+string(j.UID))
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// seen returns the Jobs seen so far (each once) and the events.
func (r *jobRecorder) seen() ([]batchv1.Job, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]batchv1.Job(nil), r.jobs...), append([]string(nil), r.events...)
}

// (i) A job tool reads a Secret and lands on a labelled node: the kubelet
// reads the value for the pod (the Job holds only a reference), the run's
// ServiceAccount may get the Secret, the pod carries the manifest's
// nodeSelector and runs on the node that has the label, and the tool
// sees TRACEPARENT in the run's trace. The value is in no Job, no status
// and no event.
func TestJobTool_readsASecretAndLandsOnALabelledNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t, "e2e-pod")

	// The e2e cluster has one node; a label only this test uses, so that
	// tests running in parallel do not meet it.
	var nodes corev1.NodeList
	if err := cl.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) == 0 {
		t.Fatal("the cluster has no nodes")
	}
	node := nodes.Items[0].Name
	labelKey := "e2e.agentrun.dev/tool-pool-" + ns
	setLabel := func(value *string) error {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]*string{labelKey: value}}})
		return cl.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, patch))
	}
	if err := setLabel(ptr.To("tools")); err != nil {
		t.Fatalf("labelling node %s: %v", node, err)
	}
	t.Cleanup(func() { _ = setLabel(nil) })

	const secretValue = "tok-5f1c9e3a-e2e"
	apply(t, ns, `
apiVersion: v1
kind: Secret
metadata:
  name: billing-token
stringData:
  token: `+secretValue+`
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: token-reader
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: token-reader
rules:
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [billing-token]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: token-reader
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: token-reader}
subjects:
- {kind: ServiceAccount, name: token-reader, namespace: {{.Namespace}}}
`)
	createRun(t, ns, "placed", `
spec:
  goal: "Print the tool's environment."
  serviceAccountName: token-reader
  model:
    provider: scripted
    script:
    - toolCalls:
      - name: show_env
        arguments: {}
    - content: "Done."
  budget: {maxTurns: 3}
  tools:
  - name: show_env
    timeout: 60s
    job:
      image: {{.Image}}
      command: [/testtool]
      args: [env]
      env:
      - name: BILLING_TOKEN
        valueFrom: {secretKeyRef: {name: billing-token, key: token}}
      pod:
        nodeSelector: {`+labelKey+`: tools}
        labels: {team: billing}
`)
	run := waitFinished(t, ns, "placed", v1alpha1.OutcomeCompleted)

	obs := observation(t, run, "t1-c1")
	if obs.Status != loop.ObsOK || !strings.Contains(obs.Content, "BILLING_TOKEN="+secretValue) {
		t.Errorf("the tool's environment: %s: %q, want BILLING_TOKEN with the Secret's value", obs.Status, obs.Content)
	}
	if run.Status.TraceParent != "" {
		// 00-<trace id>-<span id>-<flags>: the tool's parent is in the run's trace.
		traceID := strings.Split(run.Status.TraceParent, "-")[1]
		if !strings.Contains(obs.Content, "TRACEPARENT=00-"+traceID+"-") {
			t.Errorf("the tool's environment has no TRACEPARENT in the run's trace %s: %q", traceID, obs.Content)
		}
	}

	j := onlyJob(t, run, "t1-c1")
	if got := j.Spec.Template.Spec.NodeSelector[labelKey]; got != "tools" {
		t.Errorf("the pod template's nodeSelector %v, want %s=tools", j.Spec.Template.Spec.NodeSelector, labelKey)
	}
	if j.Spec.Template.Labels["team"] != "billing" {
		t.Errorf("the pod template's labels %v lack team=billing", j.Spec.Template.Labels)
	}
	pods := podsOf(t, &j)
	if len(pods) != 1 || pods[0].Spec.NodeName != node {
		t.Errorf("the tool's pods %d, want one on node %s", len(pods), node)
	}

	// The value is in none of what the operator writes.
	jobJSON, _ := json.Marshal(j)
	statusJSON, _ := json.Marshal(run.Status)
	var events corev1.EventList
	if err := cl.List(ctx, &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	eventsJSON, _ := json.Marshal(events.Items)
	for what, b := range map[string][]byte{"the Job": jobJSON, "the run's status": statusJSON, "the namespace's events": eventsJSON} {
		if strings.Contains(string(b), secretValue) {
			t.Errorf("the Secret's value is in %s", what)
		}
	}
}
