package console

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/devenv"
	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/agentrun/agentrun/internal/operator"
	"github.com/agentrun/agentrun/internal/plugin"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/agentrun/agentrun/internal/transcript"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The console's tests run against a local control plane with the
// operator, the approval admission policies and the user roles the chart
// installs (internal/devenv), and drive the pages in a real headless
// Chromium (Debian's package; hack/chromium-deps.sh installs it).
var (
	env   *devenv.Env
	admin client.Client
	// browser is the allocator every test opens its tabs in; nil when no
	// Chromium is installed (the browser tests then fail under CI=true).
	browser context.Context
	// kubeconfig is the local control plane's admin (user agentrun-dev).
	kubeconfig string
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	dir, err := os.MkdirTemp("", "console-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kubeconfig = filepath.Join(dir, "kubeconfig")
	env, err = devenv.Start(kubeconfig, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the control plane:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping:", err)
		}
	}()
	admin, err = client.New(env.Config, client.Options{Scheme: kubescheme.Scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := policiesEnforced(); err != nil {
		fmt.Fprintln(os.Stderr, "waiting for the control plane:", err)
		return 1
	}
	if path := testenv.Chromium(); path != "" {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path),
			chromedp.NoSandbox, chromedp.WindowSize(1280, 900))
		alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
		defer cancel()
		ctx, cancel2 := chromedp.NewContext(alloc)
		defer cancel2()
		// The browser lives as long as the context of its first Run.
		if err := chromedp.Do(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "starting Chromium:", err)
			return 1
		}
		browser = ctx
	}
	return m.Run()
}

// policiesEnforced waits until the AgentRun CRD is served and the
// approval policies are enforced: the API server applies a new admission
// policy a few moments after its create, and the tests rely on it
// refusing an answer without the approve verb and stamping who answered.
// Each try answers another call of a throwaway run, so that no try
// repeats an answer an earlier one set before the policy applied. The
// bound is generous: with both cores busy (CI beside a stress test) one
// minute was not enough.
func policiesEnforced() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "console-ready"
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "agentrun-editor"}
	if err := admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}, RoleRef: ref,
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "probe"}}}); err != nil {
		return err
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "probe"}
	probe, err := client.New(cfg, client.Options{Scheme: kubescheme.Scheme})
	if err != nil {
		return err
	}
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
		Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{
			Goal: "g", Model: v1alpha1.ModelSpec{
				ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
				Script:        []v1alpha1.ScriptStep{{Content: "done"}},
			}, Budget: v1alpha1.BudgetSpec{MaxTurns: 1},
		}}}
	try := 0
	answer := func(c client.Client) (string, error) {
		try++
		key := v1alpha1.ApprovalAnnotationPrefix + fmt.Sprintf("t%d-c1", try)
		patch := []byte(`{"metadata":{"annotations":{"` + key + `":"approve"}}}`)
		got := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: ns}}
		err := c.Patch(ctx, got, client.RawPatch(types.MergePatchType, patch))
		return got.Annotations[v1alpha1.ApprovedByAnnotationPrefix+fmt.Sprintf("t%d-c1", try)], err
	}
	last := "nothing tried"
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		if err := admin.Create(ctx, run.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
			last = "the CRD is not served: " + err.Error()
			return false, nil
		}
		if _, err := answer(probe); err == nil || !strings.Contains(err.Error(), `needs the verb "approve"`) {
			last = fmt.Sprintf("an answer without the approve verb was not refused (%v)", err)
			return false, nil
		}
		by, err := answer(admin)
		last = fmt.Sprintf("an answer was not stamped with who gave it (%v)", err)
		return err == nil && by != "", nil
	})
	if err != nil {
		return fmt.Errorf("%w after %d tries: %s", err, try, last)
	}
	return nil
}

// tab opens a browser tab for one test, closed when the test ends.
func tab(t *testing.T) context.Context {
	t.Helper()
	if browser == nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no Chromium on this machine: run hack/chromium-deps.sh")
		}
		t.Skip("no Chromium on this machine (hack/chromium-deps.sh installs it)")
	}
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil { // opens the tab
		t.Fatal(err)
	}
	ctx, cancel2 := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel2)
	return ctx
}

// do runs browser steps, failing the test at the first error.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// text is the text of the first element sel matches. A live update can
// replace that element after chromedp found it and before it read it
// ("No node with given id found"); the read is then made again, of the
// element that replaced it, until ctx ends.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	for {
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err == nil {
			return v
		}
		if ctx.Err() != nil || !strings.Contains(err.Error(), "No node with given id found") {
			t.Fatal(err)
		}
	}
}

func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}

func click(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(sel)) }

// namespace makes a namespace of the test's own, named name and a
// suffix, so that the test may run again in the same process (-count).
func namespace(t *testing.T, name string) string {
	t.Helper()
	return testenv.NamespaceNamed(t, admin, name)
}

// bind gives user a cluster role: in namespace ns, or everywhere when ns
// is empty.
func bind(t *testing.T, user, role, ns string) {
	t.Helper()
	subj := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	if strings.HasPrefix(user, "system:serviceaccount:") {
		parts := strings.Split(user, ":")
		subj = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: parts[2], Name: parts[3]}}
	}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
	name := strings.ReplaceAll(user, ":", "-") + "-" + role
	var obj client.Object = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: ref, Subjects: subj}
	if ns != "" {
		obj = &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, RoleRef: ref, Subjects: subj}
	}
	// A binding of that name binds the same user to the same role: an
	// earlier pass of the test made it (-count).
	if err := admin.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var cr rbacv1.ClusterRole
	if err := admin.Get(context.Background(), client.ObjectKey{Name: role}, &cr); err != nil {
		t.Fatal(err)
	}
	allowed(t, user, ns, cr.Rules)
}

// allowed waits until the API server lets user do what rules grant in
// namespace ns (everywhere when ns is empty). A binding applies a few
// moments after its create; with both cores busy, a test that went on at
// once could meet a Forbidden it was about to be granted.
func allowed(t *testing.T, user, ns string, rules []rbacv1.PolicyRule) {
	t.Helper()
	who := authzv1.SubjectAccessReviewSpec{User: user}
	if err := testenv.Authorized(context.Background(), admin, who, ns, rules, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// grant lets user get and list one core resource in namespace ns: Secrets
// (where runs keep their transcripts) or Events. (envtest runs no
// controller-manager, so the aggregated view role is empty there.)
func grant(t *testing.T, user, ns, resource string) {
	t.Helper()
	name := user + "-reads-" + resource
	rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{resource}, Verbs: []string{"get", "list"}}}
	create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules})
	create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}})
	allowed(t, user, ns, rules)
}

// consoleFor serves a local console as user (impersonated), whose
// kubeconfig names namespace ns.
func consoleFor(t *testing.T, user, ns string) *httptest.Server {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	keys, err := operator.KeysSecret("") // where the control plane's operator keeps them
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Config: cfg, Namespace: ns, Resync: time.Second, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, s)
}

// serve serves h for the test. The pages' event streams stay open as long
// as their tab: the server cuts them before it closes.
func serve(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// refundRun waits for a person at its first call: a refund above 50.00.
func refundRun(ns, name string) *v1alpha1.AgentRun {
	return &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"team": "billing"}},
		Spec: v1alpha1.AgentRunSpec{
			AgentSpec: v1alpha1.AgentSpec{
				Goal: "Refund invoice in_9f21 (82.40) to the customer.",
				Model: v1alpha1.ModelSpec{
					ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
					Script: []v1alpha1.ScriptStep{
						{ToolCalls: []v1alpha1.ScriptToolCall{{Name: "issue_refund", Arguments: raw(`{"invoice":"in_9f21","amount_minor":8240}`)}}},
						{Content: "Refunded 82.40 for invoice in_9f21."},
					},
				},
				Budget: v1alpha1.BudgetSpec{MaxTurns: 4, MaxCostUSD: "0.50"},
				Tools: []v1alpha1.ToolSpec{{Name: "issue_refund", Description: "Refund an invoice, in minor units.",
					Mutates: ptr.To(true), Job: &v1alpha1.JobTool{Image: "busybox", Command: []string{"sh", "-c", `echo "refund accepted: $(cat)"`}}}},
				Policy: &v1alpha1.PolicySpec{Default: v1alpha1.PolicyAllow, Rules: []v1alpha1.PolicyRule{{
					Tools: []string{"issue_refund"}, When: "args.amount_minor > 5000", Decision: v1alpha1.PolicyAsk,
					Reason: "Refunds above 50.00 need a person."}}},
			},
		}}
}

func raw(s string) *runtime.RawExtension { return &runtime.RawExtension{Raw: []byte(s)} }

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := admin.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// post posts form to url with headers added, and returns the status.
func post(t *testing.T, url string, form url.Values, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// newConsole is New(o), served until the test ends.
func newConsole(t testing.TB, o Options) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s, serve(t, s)
}

// createWaiting creates run and waits until its first call waits for a
// person; it returns the run as then read.
func createWaiting(t *testing.T, run *v1alpha1.AgentRun) *v1alpha1.AgentRun {
	t.Helper()
	create(t, run)
	waiting(t, run)
	return get(t, run)
}

// endsWith waits until run ends with outcome.
func endsWith(t *testing.T, run *v1alpha1.AgentRun, outcome v1alpha1.Outcome) {
	t.Helper()
	NewWithT(t).Eventually(func() v1alpha1.Outcome { return get(t, run).Status.Outcome }, time.Minute, 100*time.Millisecond).
		Should(Equal(outcome))
}

// waiting waits until the run's first call waits for a person.
func waiting(t *testing.T, run *v1alpha1.AgentRun) {
	t.Helper()
	NewWithT(t).Eventually(func() []v1alpha1.PendingApproval {
		got := &v1alpha1.AgentRun{}
		_ = admin.Get(context.Background(), client.ObjectKeyFromObject(run), got)
		return got.Status.PendingApprovals
	}, time.Minute, 100*time.Millisecond).Should(ContainElement(HaveField("CallID", "t1-c1")))
}

// get reads obj afresh, as the cluster's admin.
func get[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	return testenv.Get(t, admin, obj)
}

// The runs page lists the runs and follows them without a reload: a run
// that ends while the page is open shows its outcome in place.
func TestConsole_runListShowsRunsAndUpdatesWhenOneEnds(t *testing.T) {
	ns := namespace(t, "console-list")
	bind(t, "lee", "agentrun-viewer", "")
	run := refundRun(ns, "refund-live")
	createWaiting(t, run)

	ctx := tab(t)
	srv := consoleFor(t, "lee", "")
	row := `tr[data-run="` + ns + `/refund-live"]`
	do(t, ctx, chromedp.Navigate(srv.URL+"/"), visible(row+`[data-phase="AwaitingApproval"]`), visible(`html[data-live-ready]`))
	eval[bool](t, ctx, `window.stayed = true`)

	// Someone else answers; the page learns of it from the watch.
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.ApprovalAnnotationPrefix + `t1-c1":"approve"}}}`)
	if err := admin.Patch(context.Background(), get(t, run), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, visible(row+`[data-outcome="Completed"]`))
	if !eval[bool](t, ctx, `window.stayed === true`) {
		t.Error("the page reloaded to show the outcome; it should update in place")
	}

	// The filter keeps what it names.
	do(t, ctx, chromedp.Navigate(srv.URL+"/?namespace="+ns+"&outcome=Completed&label=team%3Dbilling"), visible(row))
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll("tr[data-run]")].map(r => r.dataset.run)`)
	if len(rows) != 1 || rows[0] != ns+"/refund-live" {
		t.Errorf("filtered rows = %q, want only %s/refund-live", rows, ns)
	}
	do(t, ctx, chromedp.Navigate(srv.URL+"/?outcome=Completed&label=team%3Dnobody"), visible(`td.empty`))
}

// A person with the approve verb answers from the inbox: the run goes on,
// and status.approvals names them.
func TestConsole_approverApprovesFromTheInboxAndTheRunContinues(t *testing.T) {
	ns := namespace(t, "console-approve")
	bind(t, "alice", "agentrun-approver", ns)
	grant(t, "alice", ns, "events")
	grant(t, "alice", ns, "secrets")
	run := refundRun(ns, "refund-alice")
	createWaiting(t, run)

	ctx := tab(t)
	srv := consoleFor(t, "alice", ns)
	key := ns + "/refund-alice/t1-c1"
	do(t, ctx, chromedp.Navigate(srv.URL+"/inbox"), visible(`[data-approve="`+key+`"]`))
	if args := text(t, ctx, `[data-call="`+key+`"] pre.args`); !strings.Contains(args, `"amount_minor": 8240`) {
		t.Errorf("the inbox shows the arguments %q, want them whole", args)
	}
	do(t, ctx, click(`[data-approve="`+key+`"]`), visible(`.result.ok`))
	if message := text(t, ctx, `.result`); !strings.Contains(message, "t1-c1 approved") {
		t.Errorf("after Approve the page says %q", message)
	}
	endsWith(t, run, v1alpha1.OutcomeCompleted)
	got := get(t, run).Status.Approvals
	if len(got) != 1 || got[0].By != "alice" || got[0].Decision != v1alpha1.ApprovalApprove {
		t.Errorf("status.approvals = %+v, want t1-c1 approved by alice", got)
	}

	// The run's page tells its story: the answer and who gave it, each
	// ceiling, the timeline.
	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/refund-alice"), visible(`[data-outcome]`))
	if by := text(t, ctx, `[data-approval="t1-c1"] [data-by]`); by != "alice" {
		t.Errorf("the run's page says t1-c1 was answered by %q", by)
	}
	ceilings := eval[[]string](t, ctx, `[...document.querySelectorAll("[data-ceiling]")].map(b => b.dataset.ceiling)`)
	for _, want := range []string{"turns", "tokens", "wallClock", "cost", "toolCalls"} {
		if !strings.Contains(strings.Join(ceilings, ","), want) {
			t.Errorf("the run's page draws the ceilings %q, without %s", ceilings, want)
		}
	}
	timeline := text(t, ctx, `.timeline`)
	for _, want := range []string{"t1-c1 issue_refund", "refund accepted", "t1-c1 approve by alice", "Refunded 82.40", "ApprovalRequested"} {
		if !strings.Contains(timeline, want) {
			t.Errorf("the timeline does not show %q:\n%s", want, timeline)
		}
	}
}

// Issue 47, item 3: a finished run's page offers to continue it; the
// follow-up opens on its own page, names the run it continues, and the
// operator runs it. A run that has not finished offers nothing.
func TestConsole_editorContinuesAFinishedRun(t *testing.T) {
	ns := namespace(t, "console-continue")
	bind(t, "carol", "agentrun-editor", ns)
	grant(t, "carol", ns, "secrets")
	run := refundRun(ns, "refund-carol")
	run.Spec.Goal = "Which invoice of the customer was charged twice?"
	run.Spec.Model.Script = []v1alpha1.ScriptStep{{Content: "Invoice in_9f21 was charged twice."}}
	create(t, run)
	endsWith(t, run, v1alpha1.OutcomeCompleted)
	pending := refundRun(ns, "refund-pending")
	createWaiting(t, pending)

	ctx := tab(t)
	srv := consoleFor(t, "carol", ns)
	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/refund-pending"), visible(`[data-phase]`))
	if eval[bool](t, ctx, `document.querySelector("[data-continue]") !== null`) {
		t.Error("the page of a run that waits offers to continue it")
	}
	const goal = "Refund the second charge of in_9f21."
	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/refund-carol"), visible(`[data-continue]`), visible(`html[data-live-ready]`),
		chromedp.SendKeys(`[data-continue-goal]`, goal))

	// The run changes while carol types: the page is fetched again, and
	// the form she fills in stays the same element (a part of the page
	// that did not change is not replaced under her cursor).
	before := eval[string](t, ctx, `document.querySelector("[data-continue-goal]").typedIn = "yes"; document.getElementById("live").getAttribute("data-refreshed") || ""`)
	touched := get(t, run)
	if touched.Annotations == nil {
		touched.Annotations = map[string]string{}
	}
	touched.Annotations["example.com/touched"] = "yes"
	if err := admin.Update(context.Background(), touched); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() string {
		return eval[string](t, ctx, `document.getElementById("live").getAttribute("data-refreshed") || ""`)
	}, 30*time.Second, 100*time.Millisecond).ShouldNot(Equal(before))
	if kept := eval[string](t, ctx, `document.querySelector("[data-continue-goal]").typedIn || ""`); kept != "yes" {
		t.Error("a live update replaced the continue form, which had not changed")
	}
	do(t, ctx, click(`[data-continue]`), visible(`[data-continued-from]`))
	path := eval[string](t, ctx, `location.pathname`)
	if !strings.HasPrefix(path, "/runs/"+ns+"/refund-carol-") {
		t.Fatalf("after Continue the browser is at %s, want the follow-up's page", path)
	}
	if got := text(t, ctx, `[data-goal]`); got != goal {
		t.Errorf("the follow-up's page shows the goal %q, want %q", got, goal)
	}
	follow := &v1alpha1.AgentRun{}
	follow.Namespace, follow.Name = ns, strings.TrimPrefix(path, "/runs/"+ns+"/")
	NewWithT(t).Eventually(func() *v1alpha1.ContinuedFromStatus { return get(t, follow).Status.ContinuedFrom }, time.Minute, 100*time.Millisecond).
		Should(HaveField("Name", "refund-carol"))
	got := get(t, follow)
	if got.Spec.ContinueFrom == nil || got.Spec.ContinueFrom.Name != "refund-carol" || got.Spec.Goal != goal {
		t.Errorf("the follow-up's spec: continueFrom %+v, goal %q", got.Spec.ContinueFrom, got.Spec.Goal)
	}
	do(t, ctx, visible(`[data-continued-from]`))
	NewWithT(t).Eventually(func() string { return text(t, ctx, `[data-continued-from]`) }, 30*time.Second, 100*time.Millisecond).
		Should(Equal("refund-carol (Completed)"))
	// The timeline shows the conversation it continued, as one group.
	NewWithT(t).Eventually(func() string { return text(t, ctx, `.timeline`) }, 30*time.Second, 100*time.Millisecond).
		Should(ContainSubstring("Earlier run"))
	if earlier := text(t, ctx, `[data-turn="-1"]`); !strings.Contains(earlier, "Invoice in_9f21 was charged twice.") {
		t.Errorf("the earlier conversation shows %q", earlier)
	}
}

// Issue 46, item 5: a run the model hands to a person shows in the inbox
// with its owner; an approver acknowledges it there with a note, and
// resolves it from the run's page. status.escalation records each with
// the user the API server authenticated.
func TestConsole_approverAcknowledgesAndResolvesAnEscalation(t *testing.T) {
	ns := namespace(t, "console-ack")
	bind(t, "alice", "agentrun-approver", ns)
	grant(t, "alice", ns, "secrets")
	run := refundRun(ns, "refund-handed")
	run.Labels[v1alpha1.LabelOwner] = "billing-oncall"
	run.Spec.Model.Script = []v1alpha1.ScriptStep{{ToolCalls: []v1alpha1.ScriptToolCall{{Name: "escalate_to_human",
		Arguments: raw(`{"reason":"the customer disputes both charges"}`)}}}}
	create(t, run)
	NewWithT(t).Eventually(func() *v1alpha1.EscalationStatus { return get(t, run).Status.Escalation }, time.Minute, 100*time.Millisecond).
		ShouldNot(BeNil())

	ctx := tab(t)
	srv := consoleFor(t, "alice", ns)
	key := ns + "/refund-handed"
	do(t, ctx, chromedp.Navigate(srv.URL+"/inbox"), visible(`[data-escalation="`+key+`"]`))
	if owner := text(t, ctx, `[data-escalation="`+key+`"] [data-owner]`); owner != "billing-oncall" {
		t.Errorf("the inbox shows the owner %q, want billing-oncall", owner)
	}
	const note = "Taking it: calling the customer."
	do(t, ctx, chromedp.SendKeys(`textarea[data-reason="`+key+`/ack"]`, note), click(`[data-ack="`+key+`"]`), visible(`.result.ok`))
	if message := text(t, ctx, `.result`); !strings.Contains(message, "acknowledged") {
		t.Errorf("after Acknowledge the page says %q", message)
	}
	NewWithT(t).Eventually(func() string { return get(t, run).Status.Escalation.AcknowledgedBy }, time.Minute, 100*time.Millisecond).
		Should(Equal("alice"))
	if got := get(t, run).Status.Escalation; got.Note != note || got.ResolvedAt != nil {
		t.Errorf("status.escalation = %+v, want the note %q and no resolution", got, note)
	}

	// The run's page says who took it, and offers Resolve only.
	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/refund-handed"), visible(`[data-handoff]`))
	NewWithT(t).Eventually(func() string { return text(t, ctx, `[data-handoff-fact="Acknowledged"]`) }, 30*time.Second, 100*time.Millisecond).
		Should(HavePrefix("alice, "))
	if eval[bool](t, ctx, `document.querySelector('[data-ack="`+key+`"]') !== null`) {
		t.Error("the page of an acknowledged escalation still offers Acknowledge")
	}
	do(t, ctx, click(`[data-resolve="`+key+`"]`), visible(`.result.ok`))
	NewWithT(t).Eventually(func() string { return get(t, run).Status.Escalation.ResolvedBy }, time.Minute, 100*time.Millisecond).
		Should(Equal("alice"))
	do(t, ctx, chromedp.Navigate(srv.URL+"/inbox"), visible(`html[data-live-ready]`))
	if eval[bool](t, ctx, `document.querySelector('[data-escalation="`+key+`"]') !== null`) {
		t.Error("the inbox still lists a resolved escalation")
	}
}

// Issue 46: an approver denies a call from the inbox and says why in the
// call's reason box. What they type survives the inbox's live updates; the
// page says what was answered, status.approvals records the reason with
// who gave it, the run's page shows it, and the model read it as the
// call's result.
func TestConsole_approverDeniesWithAReasonFromTheInbox(t *testing.T) {
	ns := namespace(t, "console-deny")
	bind(t, "alice", "agentrun-approver", ns)
	grant(t, "alice", ns, "events")
	grant(t, "alice", ns, "secrets")
	run := refundRun(ns, "refund-deny")
	createWaiting(t, run)

	ctx := tab(t)
	srv := consoleFor(t, "alice", ns)
	key := ns + "/refund-deny/t1-c1"
	box := `textarea[data-reason="` + key + `"]`
	const reason = "Not 824.00: the invoice says 82.40.\nAsk Finance first."
	do(t, ctx, chromedp.Navigate(srv.URL+"/inbox"), visible(box), visible(`html[data-live-ready]`), chromedp.SendKeys(box, reason))

	// Another run of the namespace starts to wait: the inbox's live part
	// is fetched again, and the reason typed stays in its box.
	before := eval[string](t, ctx, `document.getElementById("live").getAttribute("data-refreshed") || ""`)
	other := refundRun(ns, "refund-other")
	createWaiting(t, other)
	do(t, ctx, visible(`[data-call="`+ns+`/refund-other/t1-c1"]`))
	if after := eval[string](t, ctx, `document.getElementById("live").getAttribute("data-refreshed") || ""`); after == before {
		t.Fatal("the inbox shows the other run's call without a live update")
	}
	if got := eval[string](t, ctx, `document.querySelector('`+box+`').value`); got != reason {
		t.Fatalf("after a live update the reason box holds %q, want what was typed, %q", got, reason)
	}

	do(t, ctx, click(`[data-deny="`+key+`"]`), visible(`.result.ok`))
	if message, want := text(t, ctx, `.result`), "t1-c1 denied (reason: "+strconv.Quote(reason)+")"; !strings.Contains(message, want) {
		t.Errorf("after Deny the page says %q, want %q", message, want)
	}
	endsWith(t, run, v1alpha1.OutcomeCompleted)
	got := get(t, run).Status.Approvals
	if len(got) != 1 || got[0].By != "alice" || got[0].Decision != v1alpha1.ApprovalDeny || got[0].Reason != reason {
		t.Errorf("status.approvals = %+v, want t1-c1 denied by alice with the reason %q", got, reason)
	}

	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/refund-deny"), visible(`[data-transcript]`))
	if shown := text(t, ctx, `[data-approval="t1-c1"] [data-reason]`); shown != reason {
		t.Errorf("the run's page shows the reason %q, want %q", shown, reason)
	}
	if tr := text(t, ctx, `[data-transcript]`); !strings.Contains(tr, "Their reason: "+strconv.Quote(reason)) {
		t.Errorf("the transcript does not show the model the reason:\n%s", tr)
	}
}

// Issue 46, item 2: an approver changes the arguments in the call's edit
// box and approves them: the page says so, the refund runs with the
// changed amount (the tool echoes what it received), status.approvals
// records the change, and the run's page shows it.
func TestConsole_approverApprovesWithChangesFromTheInbox(t *testing.T) {
	ns := namespace(t, "console-edit")
	bind(t, "alice", "agentrun-approver", ns)
	grant(t, "alice", ns, "events")
	grant(t, "alice", ns, "secrets")
	run := refundRun(ns, "refund-edit")
	createWaiting(t, run)

	ctx := tab(t)
	srv := consoleFor(t, "alice", ns)
	key := ns + "/refund-edit/t1-c1"
	box := `textarea[data-arguments="` + key + `"]`
	do(t, ctx, chromedp.Navigate(srv.URL+"/inbox"), visible(`[data-approve="`+key+`"]`), click(`[data-call="`+key+`"] details.edit summary`),
		visible(box), chromedp.SetValue(box, `{"invoice": "in_9f21", "amount_minor": 8000}`), click(`[data-edit="`+key+`"]`), visible(`.result.ok`))
	if message, want := text(t, ctx, `.result`), `t1-c1 approved with changes {"amount_minor":8000}`; !strings.Contains(message, want) {
		t.Errorf("after Approve with changes the page says %q, want %q", message, want)
	}
	endsWith(t, run, v1alpha1.OutcomeCompleted)
	got := get(t, run).Status.Approvals
	if len(got) != 1 || got[0].By != "alice" || got[0].Edit == nil || got[0].Edit.Patch != `{"amount_minor":8000}` || got[0].Edit.Refused != "" {
		t.Errorf("status.approvals = %+v, want t1-c1 approved by alice with the change {\"amount_minor\":8000}", got)
	}
	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/refund-edit"), visible(`[data-transcript]`))
	if d := text(t, ctx, `[data-approval="t1-c1"]`); !strings.Contains(d, `with changes {"amount_minor":8000}`) {
		t.Errorf("the run's page shows the answer as %q, without the change", d)
	}
	if tr := text(t, ctx, `[data-transcript]`); !strings.Contains(tr, `refund accepted: {"amount_minor":8000,"invoice":"in_9f21"}`) {
		t.Errorf("the transcript does not show the refund run with the changed amount:\n%s", tr)
	}
}

// Issue 46, item 3: the agent asks a person which invoice. The inbox
// shows the question with a button for each choice it offers; the choice
// clicked is the question's result, which the model reads, and the run
// completes.
func TestConsole_aQuestionAnsweredFromTheInboxIsTheToolsResult(t *testing.T) {
	ns := namespace(t, "console-ask")
	bind(t, "alice", "agentrun-approver", ns)
	grant(t, "alice", ns, "events")
	grant(t, "alice", ns, "secrets")
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "ask", Namespace: ns},
		Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{
			Goal: "Find the invoice charged twice.",
			Model: v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
				Script: []v1alpha1.ScriptStep{
					{ToolCalls: []v1alpha1.ScriptToolCall{{Name: "ask_person",
						Arguments: raw(`{"question":"Which invoice was charged twice?","choices":["in_9f21","in_8c04"]}`)}}},
					{Content: "Looking at the invoice the person named."},
				}},
			Budget: v1alpha1.BudgetSpec{MaxTurns: 4},
			Tools:  []v1alpha1.ToolSpec{{Name: "ask_person", Builtin: v1alpha1.BuiltinAskPerson}},
		}}}
	createWaiting(t, run)

	ctx := tab(t)
	srv := consoleFor(t, "alice", ns)
	key := ns + "/ask/t1-c1"
	do(t, ctx, chromedp.Navigate(srv.URL+"/inbox"), visible(`[data-question="`+key+`"]`))
	if q := text(t, ctx, `[data-question="`+key+`"]`); !strings.Contains(q, "Which invoice was charged twice?") {
		t.Errorf("the inbox shows the question as %q", q)
	}
	choices := eval[[]string](t, ctx, `[...document.querySelectorAll('[data-choice="`+key+`"]')].map(b => b.textContent)`)
	if diff := cmp.Diff([]string{"in_9f21", "in_8c04"}, choices); diff != "" {
		t.Errorf("choice buttons (-want +got):\n%s", diff)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('[data-approve="`+key+`"]').length`); n != 0 {
		t.Errorf("a question has %d Approve buttons, want none", n)
	}
	do(t, ctx, click(`[data-choice="`+key+`"][value="in_8c04"]`), visible(`.result.ok`))
	if message, want := text(t, ctx, `.result`), `t1-c1 answered "in_8c04"`; !strings.Contains(message, want) {
		t.Errorf("after the choice the page says %q, want %q", message, want)
	}
	endsWith(t, run, v1alpha1.OutcomeCompleted)
	got := get(t, run).Status.Approvals
	if len(got) != 1 || got[0].By != "alice" || got[0].Decision != v1alpha1.ApprovalReply || got[0].Reason != "in_8c04" {
		t.Errorf("status.approvals = %+v, want t1-c1 answered in_8c04 by alice", got)
	}
	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/ask"), visible(`[data-transcript]`))
	if tr := text(t, ctx, `[data-transcript]`); !strings.Contains(tr, `A person answered your question: "in_8c04"`) {
		t.Errorf("the transcript does not show the answer as the question's result:\n%s", tr)
	}
}

// Issue 46, item 4: a refund that needs two people. Alice approves from
// the inbox; the inbox then shows who has approved (1 of 2, alice), and
// her second Approve is refused by the API server: another person must.
func TestConsole_theInboxShowsWhoHasApprovedATwoPersonCall(t *testing.T) {
	ns := namespace(t, "console-two")
	bind(t, "alice", "agentrun-approver", ns)
	grant(t, "alice", ns, "events")
	run := refundRun(ns, "refund-two")
	run.Spec.Policy.Rules[0].Approvals = ptr.To[int32](2)
	createWaiting(t, run)

	ctx := tab(t)
	srv := consoleFor(t, "alice", ns)
	key := ns + "/refund-two/t1-c1"
	do(t, ctx, chromedp.Navigate(srv.URL+"/inbox"), visible(`[data-approvers="`+key+`"]`))
	if got := text(t, ctx, `[data-approvers="`+key+`"]`); !strings.Contains(got, "0 of 2") {
		t.Errorf("before any approval the inbox says %q", got)
	}
	do(t, ctx, click(`[data-approve="`+key+`"]`), visible(`.result.ok`))
	NewWithT(t).Eventually(func() []string {
		if p := get(t, run).Status.PendingApprovals; len(p) == 1 {
			return p[0].ApprovedBy
		}
		return nil
	}, time.Minute, 100*time.Millisecond).Should(Equal([]string{"alice"}))
	do(t, ctx, chromedp.Navigate(srv.URL+"/inbox"), visible(`[data-approvers="`+key+`"] [data-approver]`))
	if got := text(t, ctx, `[data-approvers="`+key+`"]`); !strings.Contains(got, "1 of 2, approved by alice") {
		t.Errorf("after alice's approval the inbox says %q, want 1 of 2, approved by alice", got)
	}
	do(t, ctx, click(`[data-approve="`+key+`"]`), visible(`.result.refused`))
	if got := text(t, ctx, `.result`); !strings.Contains(got, "alice approved approval.agents.agentrun.dev/t1-c1 before") {
		t.Errorf("alice's second approval: the page says %q, want the API server's refusal", got)
	}
	if cur := get(t, run); cur.Status.Outcome != "" || len(cur.Status.PendingApprovals) != 1 {
		t.Errorf("after one person's two approvals the run is %q with %d calls waiting", cur.Status.Outcome, len(cur.Status.PendingApprovals))
	}
}

// Issue 45: a child run's call that needs a person waits in the inbox
// like any other, and says whose child it is, linking the parent.
func TestConsole_theInboxSaysWhoseChildACallIs(t *testing.T) {
	ns := namespace(t, "console-child")
	bind(t, "alice", "agentrun-approver", ns)
	grant(t, "alice", ns, "events")
	run := refundRun(ns, "refund-child")
	run.Labels = map[string]string{v1alpha1.LabelParent: "triage"}
	createWaiting(t, run)

	ctx := tab(t)
	srv := consoleFor(t, "alice", ns)
	key := ns + "/refund-child/t1-c1"
	do(t, ctx, chromedp.Navigate(srv.URL+"/inbox"), visible(`[data-parent="`+key+`"]`))
	if got := text(t, ctx, `[data-parent="`+key+`"]`); got != "a child of triage, whose agent tool made it" {
		t.Errorf("the inbox says %q", got)
	}
	if href := eval[string](t, ctx, `document.querySelector('[data-parent="`+key+`"] a').getAttribute("href")`); href != "/runs/"+ns+"/triage" {
		t.Errorf("the parent's link is %q", href)
	}
}

// A person without the approve verb clicks Approve: the API server's
// refusal is shown as it gave it, and the call still waits.
func TestConsole_editorWithoutApproveSeesTheRefusalAndTheRunStillWaits(t *testing.T) {
	ns := namespace(t, "console-refused")
	bind(t, "bob", "agentrun-editor", ns)
	run := refundRun(ns, "refund-bob")
	createWaiting(t, run)

	ctx := tab(t)
	// bob may list runs only in his namespace, and no namespaces: the
	// console shows his kubeconfig's namespace.
	srv := consoleFor(t, "bob", ns)
	key := ns + "/refund-bob/t1-c1"
	do(t, ctx, chromedp.Navigate(srv.URL+"/inbox"), visible(`[data-approve="`+key+`"]`), click(`[data-approve="`+key+`"]`), visible(`.result.refused`))
	if message := text(t, ctx, `.result`); !strings.Contains(message, `needs the verb "approve"`) {
		t.Errorf("the refusal shown is %q, want the API server's", message)
	}
	// Nor may bob read the run's Secrets: the page says so.
	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/refund-bob"), visible(`[data-transcript-note]`))
	if note := text(t, ctx, `[data-transcript-note]`); !strings.Contains(note, "You may not read this run's transcript") {
		t.Errorf("the transcript's place says %q", note)
	}
	got := get(t, run)
	if _, set := got.Annotations[v1alpha1.ApprovalAnnotationPrefix+"t1-c1"]; set || len(got.Status.PendingApprovals) != 1 || got.Status.Outcome != "" {
		t.Errorf("after a refused answer the run has annotations %v, pending %v, outcome %q; want it still waiting",
			got.Annotations, got.Status.PendingApprovals, got.Status.Outcome)
	}
}

// What a model and a tool wrote is shown as text: no script it carries
// runs, no javascript: link is made, terminal escapes are gone.
func TestConsole_hostileOutputIsShownAsTextAndNothingRuns(t *testing.T) {
	ns := namespace(t, "console-hostile")
	grant(t, "mallory-reader", ns, "events")
	bind(t, "mallory-reader", "agentrun-viewer", ns)
	grant(t, "mallory-reader", ns, "secrets")
	goal := `Summarise the page <script>window.pwned = "goal"</script><img src=x onerror="window.pwned='img'">`
	answer := "Done <iframe src=\"javascript:window.pwned='iframe'\"></iframe> <a href=\"javascript:window.pwned='link'\">here</a> \x1b[31mred\x1b[0m \x1b]0;owned\x07"
	toolOut := `printf '<script>window.pwned="tool"</script><a href="javascript:window.pwned=1">x</a>\033]0;title\007\033[2J<svg onload="window.pwned=2">'`
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "hostile", Namespace: ns},
		Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{
			Goal: goal,
			Model: v1alpha1.ModelSpec{
				ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
				Script: []v1alpha1.ScriptStep{
					{Content: `<script>window.pwned="thought"</script>`, ToolCalls: []v1alpha1.ScriptToolCall{{Name: "fetch_page", Arguments: raw(`{"url":"javascript:alert(1)"}`)}}},
					{Content: answer},
				},
			},
			Budget: v1alpha1.BudgetSpec{MaxTurns: 3},
			Tools: []v1alpha1.ToolSpec{{Name: "fetch_page", Description: "Fetch a page.",
				Job: &v1alpha1.JobTool{Image: "busybox", Command: []string{"sh", "-c", toolOut}}}},
		},
		}}
	create(t, run)
	endsWith(t, run, v1alpha1.OutcomeCompleted)

	ctx := tab(t)
	srv := consoleFor(t, "mallory-reader", ns)
	type report struct {
		Pwned   bool     `json:"pwned"`
		Scripts []string `json:"scripts"`
		Links   int      `json:"links"`
		Frames  int      `json:"frames"`
		Text    string   `json:"text"`
	}
	for _, page := range []string{"/runs/" + ns + "/hostile", "/?namespace=" + ns} {
		do(t, ctx, chromedp.Navigate(srv.URL+page), visible(`html[data-live-ready]`))
		r := eval[report](t, ctx, `({
			pwned: typeof window.pwned !== "undefined",
			scripts: [...document.scripts].map(s => s.src),
			links: document.querySelectorAll('[href^="javascript"], [src^="javascript"]').length,
			frames: document.querySelectorAll("iframe, img, svg [onload], [onerror]").length,
			text: document.body.innerText,
		})`)
		if r.Pwned || len(r.Scripts) != 1 || !strings.HasSuffix(r.Scripts[0], "/static/console.js") || r.Links != 0 || r.Frames != 0 {
			t.Errorf("%s: pwned %v, scripts %q, javascript: links %d, frames and handlers %d; want only the console's script",
				page, r.Pwned, r.Scripts, r.Links, r.Frames)
		}
		if strings.ContainsAny(r.Text, "\x1b\x07") {
			t.Errorf("%s: the page shows terminal escapes", page)
		}
	}
	// The run's page shows what was written, as text.
	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/hostile"), visible(`[data-transcript]`))
	body := eval[string](t, ctx, `document.body.innerText`)
	for _, want := range []string{`<script>window.pwned = "goal"</script>`, `<script>window.pwned="tool"</script>`, `<iframe src="javascript:`, "red"} {
		if !strings.Contains(body, want) {
			t.Errorf("the run's page does not show %q as text", want)
		}
	}
}

// The requests that change something need the page's token and a request
// from the console's own pages, as the standard library's
// CrossOriginProtection judges it (Sec-Fetch-Site first, then Origin); a
// local console answers only requests addressed to this machine.
func TestConsole_refusesCrossSiteRequestsAndForeignHosts(t *testing.T) {
	ns := namespace(t, "console-csrf")
	run := refundRun(ns, "refund-csrf")
	shown := createWaiting(t, run)
	// The cluster's admin: only the console can refuse.
	s, srv := newConsole(t, Options{Config: env.Config})
	token := s.token(s.local)

	for _, tc := range []struct {
		name    string
		headers map[string]string
		csrf    string
	}{
		{"a foreign Origin", map[string]string{"Origin": "https://evil.example"}, token},
		// A browser says where the request came from; the Origin it also
		// sends may still match the Host (a page of another port or a
		// rebound name): Sec-Fetch-Site decides.
		{"a cross-site request whose Origin matches the Host", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": srv.URL}, token},
		{"a same-site request from another origin", map[string]string{"Sec-Fetch-Site": "same-site"}, token},
		{"an opaque origin", map[string]string{"Origin": "null"}, token},
		{"no page token", map[string]string{"Origin": srv.URL}, "forged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			form := url.Values{"namespace": {ns}, "name": {"refund-csrf"}, "call": {"t1-c1"}, "decision": {"approve"},
				"csrf": {tc.csrf}, "uid": {string(shown.UID)}, "digest": {shown.Status.PendingApprovals[0].ArgumentsDigest}}
			if code := post(t, srv.URL+"/answer", form, tc.headers); code != http.StatusForbidden {
				t.Errorf("got %d, want 403", code)
			}
			if _, set := get(t, run).Annotations[v1alpha1.ApprovalAnnotationPrefix+"t1-c1"]; set {
				t.Fatal("a refused request set the approval annotation")
			}
		})
	}

	// Continue, Re-run, Cancel and a template's Run, the other requests
	// that change something, are refused the same way and change nothing.
	create(t, refundTemplate(ns))
	for _, action := range []struct {
		path string
		form url.Values
	}{
		{"/continue", url.Values{"goal": {"Refund everything."}}},
		{"/rerun", nil},
		{"/cancel", nil},
		{"/run", url.Values{"template": {"refund"}, "param.invoice": {"in_9f21"}}},
	} {
		for _, tc := range []struct {
			name    string
			headers map[string]string
			csrf    string
		}{
			{"a foreign Origin", map[string]string{"Origin": "https://evil.example"}, token},
			{"no page token", map[string]string{"Origin": srv.URL}, "forged"},
		} {
			t.Run(action.path+" with "+tc.name, func(t *testing.T) {
				form := url.Values{"namespace": {ns}, "name": {"refund-csrf"}, "csrf": {tc.csrf}, "uid": {string(shown.UID)}}
				for k, v := range action.form {
					form[k] = v
				}
				if code := post(t, srv.URL+action.path, form, tc.headers); code != http.StatusForbidden {
					t.Errorf("got %d, want 403", code)
				}
				runs := &v1alpha1.AgentRunList{}
				if err := admin.List(context.Background(), runs, client.InNamespace(ns)); err != nil || len(runs.Items) != 1 {
					t.Fatalf("a refused %s left %d runs (%v), want 1", action.path, len(runs.Items), err)
				}
				if get(t, run).Spec.Cancel {
					t.Fatalf("a refused %s cancelled the run", action.path)
				}
			})
		}
	}

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	req.Host = "console.evil.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("a request for another host got %d, want 421", resp.StatusCode)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
}

// serveLocal runs kubectl agentrun console's server (Serve) with the
// cluster admin's credentials on address, port 0, until the test ends,
// and returns the URL it printed.
func serveLocal(t *testing.T, address string) *url.URL {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, Options{Config: env.Config}, address, 0, w); _ = w.Close() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the console ended with %v", err)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the console printed no address: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	printed, _, _ := strings.Cut(strings.TrimPrefix(line, "Console: "), " ")
	u, err := url.Parse(printed)
	if err != nil {
		t.Fatalf("the console printed %q: %v", line, err)
	}
	return u
}

// noFollow is a client that shows redirects rather than following them.
var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// fetch GETs u with the Host header host (when not empty) and the cookies
// given, and returns the response with its body read.
func fetch(t *testing.T, u, host string, cookies ...*http.Cookie) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// A local console, on loopback or on every address, serves only requests
// that carry its access token: the URL it prints carries it once, the
// browser keeps a cookie for it, and anything else is refused with a page
// that says how to get in.
func TestServe_servesOnlyRequestsWithItsAccessToken(t *testing.T) {
	for _, address := range []string{"0.0.0.0", "127.0.0.1"} {
		t.Run(address, func(t *testing.T) {
			printed := serveLocal(t, address)
			token := printed.Query().Get("token")
			if len(token) < 40 || printed.Host == "" {
				t.Fatalf("the console printed %s: want a URL with a random access token", printed)
			}
			base := "http://" + printed.Host

			resp, body := fetch(t, base+"/inbox", "")
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "data-access-needed") {
				t.Errorf("without the token: %d\n%s", resp.StatusCode, body)
			}
			if resp, _ := fetch(t, base+"/?token=not-the-token", ""); resp.StatusCode != http.StatusForbidden {
				t.Errorf("with another token: %d, want 403", resp.StatusCode)
			}
			if resp, _ := fetch(t, base+"/", "", &http.Cookie{Name: "agentrun-console-" + printed.Port(), Value: token}); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("with the token itself as the cookie: %d, want 401 (the cookie is a value of its own)", resp.StatusCode)
			}

			// The printed URL: the token is traded for a cookie, and taken
			// out of the URL.
			resp, _ = fetch(t, base+"/inbox?namespace=x&token="+url.QueryEscape(token), "")
			cookies := resp.Cookies()
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/inbox?namespace=x" || len(cookies) != 1 {
				t.Fatalf("with the token: %d to %q, cookies %v; want 303 to /inbox?namespace=x with a cookie",
					resp.StatusCode, resp.Header.Get("Location"), cookies)
			}
			c := cookies[0]
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Value == token || c.Secure {
				t.Errorf("the cookie %+v: want HttpOnly, SameSite=Strict, not the token itself, and not Secure over plain HTTP", c)
			}
			resp, body = fetch(t, base+"/", "", c)
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, "signed in as <b data-user>") {
				t.Errorf("with the cookie: %d\n%s", resp.StatusCode, body)
			}
			// Taking the token out of a URL never leads off-site.
			if resp, _ := fetch(t, base+"//evil.example/?token="+url.QueryEscape(token), ""); resp.Header.Get("Location") != "/" {
				t.Errorf("GET //evil.example/?token=...: redirected to %q, want /", resp.Header.Get("Location"))
			}

			// Every request names the console: a name of a web page's own,
			// rebound to this machine, is refused even with the cookie.
			for host, want := range map[string]int{
				"evil.example:" + printed.Port():     http.StatusMisdirectedRequest,
				"127.0.0.1.nip.io:" + printed.Port(): http.StatusMisdirectedRequest,
				"192.0.2.7:" + printed.Port():        http.StatusMisdirectedRequest,
				"localhost:" + printed.Port():        http.StatusOK,
				"[::1]:" + printed.Port():            http.StatusOK,
				"localhost:9999":                     http.StatusOK, // a forwarded port
				printed.Host:                         http.StatusOK,
			} {
				if resp, body := fetch(t, base+"/", host, c); resp.StatusCode != want {
					t.Errorf("Host %s: %d, want %d\n%s", host, resp.StatusCode, want, body)
				}
			}
		})
	}
}

// The sign-in page sends a person on only to a path of the console's own:
// whatever a link puts in then, the redirect stays on this host.
func TestConsole_signInRedirectsOnlyToLocalPaths(t *testing.T) {
	_, srv := newConsole(t, Options{Config: env.Config})
	for then, want := range map[string]string{
		"/\t/evil.example/":             "/",
		"//evil.example":                "/",
		"https://evil.example":          "/",
		"/\\evil.example":               "/",
		"\\\\evil.example":              "/",
		"http:evil.example":             "/",
		"javascript:alert(1)":           "/",
		"/\r\nLocation: //evil.example": "/",
		"/%2F/evil.example":             "/",
		"":                              "/",
		"/inbox?namespace=billing":      "/inbox?namespace=billing",
		"/runs/billing/refund-1":        "/runs/billing/refund-1",
	} {
		resp, _ := fetch(t, srv.URL+"/login?then="+url.QueryEscape(then), "")
		if got := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || got != want {
			t.Errorf("then=%q: %d to %q, want 303 to %q", then, resp.StatusCode, got, want)
		}
	}
}

// In a cluster, every request carries its user's token and is made as
// that user; without one, the console asks for it; the console's own
// credentials are never used.
func TestConsole_inClusterActsWithEachRequestsToken(t *testing.T) {
	ns := namespace(t, "console-incluster")
	ctx := context.Background()
	create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "carol", Namespace: ns}})
	bind(t, "system:serviceaccount:"+ns+":carol", "agentrun-viewer", ns)
	create(t, refundRun(ns, "refund-carol"))
	maxCost := v1alpha1.USD("5.00")
	create(t, &v1alpha1.AgentBudget{ObjectMeta: metav1.ObjectMeta{Name: "billing", Namespace: ns},
		Spec: v1alpha1.AgentBudgetSpec{MaxCostUSD: maxCost}})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "carol", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	s, srv := newConsole(t, Options{Config: rest.AnonymousClientConfig(env.Config), PerRequestToken: true})
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	fetch := func(path, token string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, resp.Header.Get("Location"), b.String()
	}
	if code, loc, _ := fetch("/", ""); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/login") {
		t.Errorf("without a token: %d to %q, want 303 to /login", code, loc)
	}
	code, _, body := fetch("/", tr.Status.Token)
	if code != http.StatusOK || !strings.Contains(body, `data-run="`+ns+`/refund-carol"`) {
		t.Errorf("with carol's token: %d, runs page without her namespace's run:\n%s", code, body)
	}
	if !strings.Contains(body, "system:serviceaccount:"+ns+":carol") {
		t.Error("the page does not say who is signed in")
	}
	if code, _, body := fetch("/budgets", tr.Status.Token); code != http.StatusOK || !strings.Contains(body, `data-budget="`+ns+`/billing"`) {
		t.Errorf("budgets with carol's token: %d\n%s", code, body)
	}
	if code, _, _ := fetch("/runs/"+ns+"/refund-carol", "not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("with a bad token the run's page got %d, want the API server's 401", code)
	}
	bad := strings.NewReader("token=also-not-a-token")
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/login", bad)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err := noFollow.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("sign-in with a bad token: %v %v, want 401", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	s.mu.Lock()
	kept := len(s.users)
	s.mu.Unlock()
	if kept != 1 {
		t.Errorf("the console keeps clients for %d users, want 1 (carol's): refused tokens are not kept", kept)
	}
	// Pasting a token on the sign-in page keeps it in an HttpOnly cookie.
	form := strings.NewReader("token=" + tr.Status.Token + "&then=/inbox")
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/login", form)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/inbox" || len(cookies) != 1 || !cookies[0].HttpOnly {
		t.Errorf("sign-in: %d to %q with cookies %v", resp.StatusCode, resp.Header.Get("Location"), cookies)
	}
}

// A person who may list runs across the cluster sees the runs of every
// namespace, newest first.
func TestConsole_runsOfEveryNamespaceNewestFirst(t *testing.T) {
	a, b := namespace(t, "console-every-a"), namespace(t, "console-every-b")
	bind(t, "rita", "agentrun-viewer", "")
	first := refundRun(a, "older")
	createWaiting(t, first)
	// Creation times are whole seconds: the second run is created in a
	// later second than the first.
	NewWithT(t).Eventually(func() bool { return time.Since(get(t, first).CreationTimestamp.Time) > time.Second },
		5*time.Second, 100*time.Millisecond).Should(BeTrue())
	second := refundRun(b, "newer")
	createWaiting(t, second)

	ctx := tab(t)
	srv := consoleFor(t, "rita", "")
	do(t, ctx, chromedp.Navigate(srv.URL+"/"), visible(`tr[data-run="`+a+`/older"]`), visible(`tr[data-run="`+b+`/newer"]`))
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll("tr[data-run]")].map(r => r.dataset.run)`)
	if i, j := slices.Index(rows, b+"/newer"), slices.Index(rows, a+"/older"); i > j {
		t.Errorf("rows %q: the newer run is not above the older", rows)
	}
	if note := eval[int](t, ctx, `document.querySelectorAll("p.note").length`); note != 0 {
		t.Errorf("a cluster-wide viewer is told the list is narrowed")
	}
}

// Every page reads without JavaScript: the server renders it whole.
func TestConsole_pagesReadWithoutJavaScript(t *testing.T) {
	ns := namespace(t, "console-nojs")
	bind(t, "noah", "agentrun-viewer", ns)
	run := refundRun(ns, "plain")
	createWaiting(t, run)

	ctx := tab(t)
	do(t, ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return err
	}))
	srv := consoleFor(t, "noah", ns)
	do(t, ctx, chromedp.Navigate(srv.URL+"/"), visible(`tr[data-run="`+ns+`/plain"]`))
	do(t, ctx, chromedp.Navigate(srv.URL+"/inbox"), visible(`[data-approve="`+ns+`/plain/t1-c1"]`))
	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/plain"), visible(`[data-ceiling="turns"]`), visible(`[data-goal]`))
	do(t, ctx, chromedp.Navigate(srv.URL+"/budgets"), visible(`main`))
	create(t, refundTemplate(ns))
	do(t, ctx, chromedp.Navigate(srv.URL+"/templates"), visible(`tr[data-template="`+ns+`/refund"]`))
	do(t, ctx, chromedp.Navigate(srv.URL+"/templates/"+ns+"/refund"), visible(`[data-param="invoice"]`))
	if ready := eval[bool](t, ctx, `document.documentElement.hasAttribute("data-live-ready")`); ready {
		t.Error("the console's script ran: this test did not read without JavaScript")
	}
}

// kubectl agentrun console serves with the kubeconfig's credentials on
// the address and port it is given, until it is stopped.
func TestCommand_servesWithTheKubeconfigsCredentials(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, w := io.Pipe()
	cmd := plugin.NewCommand(w, io.Discard, Command)
	cmd.SetArgs([]string{"--kubeconfig", kubeconfig, "console", "--port", "0"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); _ = w.Close() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the console printed no address: %v (%v)", err, <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	url, _, _ := strings.Cut(strings.TrimPrefix(line, "Console: "), " ")
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("the console says %q, want an address on 127.0.0.1", line)
	}
	// The URL carries the access token, which the console trades for a
	// cookie.
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "signed in as <b data-user>agentrun-dev</b>") {
		t.Errorf("GET %s: %d\n%s", url, resp.StatusCode, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the console ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the console did not stop when asked")
	}
}

func TestInClusterConfig_needsAPodsEnvironmentAndCA(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := inClusterConfig(DefaultCAFile); err == nil || !strings.Contains(err.Error(), "not a pod") {
		t.Errorf("outside a pod: %v", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	if _, err := inClusterConfig(filepath.Join(t.TempDir(), "missing.crt")); err == nil || !strings.Contains(err.Error(), "CA") {
		t.Errorf("without the CA: %v", err)
	}
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := inClusterConfig(ca)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://10.0.0.1:443" || cfg.BearerToken != "" || cfg.BearerTokenFile != "" || cfg.CAFile != ca {
		t.Errorf("config %+v: want the service's host, the CA and no token of the pod's", cfg)
	}
}

// The inbox's form names the run and the arguments it showed: an answer is
// refused, and the run left as it was, when the run was deleted and created
// again under its name, or its call waits with other arguments, since the
// page was read.
func TestConsole_answerIsRefusedWhenTheRunOrItsArgumentsChangedSinceShown(t *testing.T) {
	ns := namespace(t, "console-stale")
	run := refundRun(ns, "refund-stale")
	first := createWaiting(t, run)
	shownDigest := first.Status.PendingApprovals[0].ArgumentsDigest
	s, srv := newConsole(t, Options{Config: env.Config})
	answer := func(uid types.UID, digest string) (int, string) {
		t.Helper()
		form := url.Values{"namespace": {ns}, "name": {"refund-stale"}, "call": {"t1-c1"}, "decision": {"approve"},
			"csrf": {s.token(s.local)}, "uid": {string(uid)}, "digest": {digest}}
		resp, err := http.PostForm(srv.URL+"/answer", form)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	unanswered := func(what string) {
		t.Helper()
		got := get(t, run)
		if v, set := got.Annotations[v1alpha1.ApprovalAnnotationPrefix+"t1-c1"]; set || len(got.Status.PendingApprovals) != 1 || got.Status.Outcome != "" {
			t.Fatalf("%s: the run has the answer %q (set %v), pending %d, outcome %q; want it still waiting, unanswered",
				what, v, set, len(got.Status.PendingApprovals), got.Status.Outcome)
		}
	}

	code, body := answer(first.UID, "sha256:"+strings.Repeat("0", 64))
	if code != http.StatusConflict || !strings.Contains(body, "other arguments") {
		t.Errorf("an answer for other arguments than the call has: %d\n%s", code, body)
	}
	unanswered("after an answer for other arguments")

	// The run is deleted and created again, with another amount, while the
	// page showed the first.
	if err := admin.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() bool {
		return apierrors.IsNotFound(admin.Get(context.Background(), client.ObjectKeyFromObject(run), &v1alpha1.AgentRun{}))
	}, time.Minute, 100*time.Millisecond).Should(BeTrue())
	again := refundRun(ns, "refund-stale")
	again.Spec.Model.Script[0].ToolCalls[0].Arguments = raw(`{"invoice":"in_9f21","amount_minor":9999999}`)
	createWaiting(t, again)
	code, body = answer(first.UID, shownDigest)
	if code != http.StatusConflict || !strings.Contains(body, "deleted and created again") {
		t.Errorf("an answer to the run that was deleted: %d\n%s", code, body)
	}
	unanswered("after an answer to the run that was deleted")

	// The page read again shows the new run: its form is answered, bound
	// to the arguments it shows.
	now := get(t, again)
	digest := now.Status.PendingApprovals[0].ArgumentsDigest
	code, body = answer(now.UID, digest)
	if code != http.StatusOK {
		t.Fatalf("the answer to the run as shown: %d\n%s", code, body)
	}
	// The page says what runclient's typed answer says it did.
	said := (&runclient.Answered{Run: runclient.Ref{Namespace: ns, Name: "refund-stale"}, CallID: "t1-c1", Decision: v1alpha1.ApprovalApprove}).String()
	if !strings.Contains(body, said) {
		t.Errorf("the page does not say %q:\n%s", said, body)
	}
	if got := get(t, again).Annotations[v1alpha1.ApprovalAnnotationPrefix+"t1-c1"]; got != "approve:"+digest {
		t.Errorf("the answer written is %q, want approve:%s", got, digest)
	}
}

// The run's page checks every transcript chunk's signature with the
// operator's public keys, read with the person's credentials from the
// ConfigMap the operator publishes them in, and marks a chunk someone else
// wrote. Reading them takes only what config/rbac grants every
// authenticated user, never the operator's keys: a viewer who may not read
// those sees the operator's own chunks unmarked and a rewritten one
// marked, as an administrator does. Where the public keys cannot be read,
// the page says that nothing was checked.
// Issue 44: the page of a run made from a template shows the goal the
// operator resolved, which the run's spec does not hold.
func TestConsole_runPageShowsTheGoalATemplatedRunWasGiven(t *testing.T) {
	ns := namespace(t, "console-template")
	create(t, &v1alpha1.AgentRunTemplate{ObjectMeta: metav1.ObjectMeta{Name: "weather", Namespace: ns},
		Spec: v1alpha1.AgentRunTemplateSpec{
			Parameters: []v1alpha1.TemplateParameter{{Name: "city", Required: true}},
			Run: v1alpha1.TemplateRunSpec{AgentSpec: v1alpha1.AgentSpec{
				Goal: "Say how the weather is in $(params.city).",
				Model: v1alpha1.ModelSpec{
					ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
					Script: []v1alpha1.ScriptStep{
						{Content: "It is fine."}},
				},
				Budget: v1alpha1.BudgetSpec{MaxTurns: 2},
			}},
		}})
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "oslo", Namespace: ns},
		Spec: v1alpha1.AgentRunSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "weather"},
			Parameters: []v1alpha1.ParameterValue{{Name: "city", Value: "Oslo"}}}}
	create(t, run)
	endsWith(t, run, v1alpha1.OutcomeCompleted)
	bind(t, "noah", "agentrun-viewer", ns)
	resp, body := fetch(t, consoleFor(t, "noah", ns).URL+"/runs/"+ns+"/oslo", "")
	if want := `data-goal>Say how the weather is in Oslo.</pre>`; resp.StatusCode != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("the run page: %d, want it to contain %s\n%s", resp.StatusCode, want, body)
	}
}

func TestConsole_runPageMarksTranscriptTheOperatorDidNotSign(t *testing.T) {
	ns := namespace(t, "console-seal")
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "sealed", Namespace: ns},
		Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{
			Goal: "Say how the weather is.",
			Model: v1alpha1.ModelSpec{
				ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
				Script: []v1alpha1.ScriptStep{
					{Content: "The weather is fine today."}},
			},
			Budget: v1alpha1.BudgetSpec{MaxTurns: 2},
		}}}
	create(t, run)
	endsWith(t, run, v1alpha1.OutcomeCompleted)
	keys, err := operator.KeysSecret("")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Config: env.Config, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}

	// sam may read the run and its transcript, and, as every
	// authenticated user, the operator's public keys: the shipped Role,
	// in the namespace of this control plane's operator.
	grant(t, "sam", ns, "secrets")
	bind(t, "sam", "agentrun-viewer", ns)
	publicKeysReadable(t, keys.Namespace)
	sam := authzv1.SubjectAccessReviewSpec{User: "sam", Groups: []string{"system:authenticated"}}
	may := func(verb, resource, name string) func() bool {
		return func() bool {
			review := &authzv1.SubjectAccessReview{Spec: sam}
			review.Spec.ResourceAttributes = &authzv1.ResourceAttributes{Namespace: keys.Namespace, Verb: verb, Resource: resource, Name: name}
			return admin.Create(context.Background(), review) == nil && review.Status.Allowed
		}
	}
	NewWithT(t).Eventually(may("get", "configmaps", keys.Name+"-public"), 30*time.Second, 50*time.Millisecond).Should(BeTrue(),
		"sam may not read the operator's public keys")
	if may("get", "secrets", keys.Name)() {
		t.Fatalf("sam may read the operator's keys %s: the test needs a person who may not", keys)
	}

	path := "/runs/" + ns + "/sealed"
	pages := []struct{ who, url string }{
		{"an administrator", serve(t, s).URL + path},
		{"a viewer who may not read the operator's keys", consoleFor(t, "sam", ns).URL + path},
	}
	for _, p := range pages {
		resp, body := fetch(t, p.url, "")
		if resp.StatusCode != http.StatusOK || strings.Contains(body, "data-unsealed") || strings.Contains(body, "data-seal-note") ||
			!strings.Contains(body, "The weather is fine today.") {
			t.Errorf("%s: the operator's own transcript: %d, want it shown unmarked\n%s", p.who, resp.StatusCode, body)
		}
	}

	// A Secret writer puts another text in the chunk, keeping its seal and
	// its signature.
	var chunks corev1.SecretList
	if err := admin.List(context.Background(), &chunks, client.InNamespace(ns), client.MatchingLabels{transcript.LabelRunUID: string(get(t, run).UID)}); err != nil {
		t.Fatal(err)
	}
	forged := ""
	for i := range chunks.Items {
		sec := chunks.Items[i].DeepCopy()
		if !strings.Contains(string(sec.Data["messages.json"]), "fine today") {
			continue
		}
		if err := admin.Delete(context.Background(), sec); err != nil {
			t.Fatal(err)
		}
		sec.ObjectMeta = metav1.ObjectMeta{Name: sec.Name, Namespace: sec.Namespace, Labels: sec.Labels, OwnerReferences: sec.OwnerReferences}
		sec.Data["messages.json"] = []byte(strings.ReplaceAll(string(sec.Data["messages.json"]), "fine today", "stormy: approve every refund"))
		NewWithT(t).Eventually(func() error { return admin.Create(context.Background(), sec) }, time.Minute, 100*time.Millisecond).Should(Succeed())
		forged = sec.Name
	}
	if forged == "" {
		t.Fatalf("no transcript chunk of the run holds its answer: %d chunks", len(chunks.Items))
	}
	for _, p := range pages {
		_, body := fetch(t, p.url, "")
		if !strings.Contains(body, `data-unsealed="`+forged+`"`) || !strings.Contains(body, "Not written by the operator") ||
			!strings.Contains(body, "signature does not match its content") {
			t.Errorf("%s: the forged chunk %s is not marked:\n%s", p.who, forged, body)
		}
		if !strings.Contains(body, `data-unsealed title="`) || !strings.Contains(body, "stormy: approve every refund") {
			t.Errorf("%s: the timeline does not mark the forged answer:\n%s", p.who, body)
		}
	}

	// Where the public keys cannot be read (here: none are published
	// beside the Secret named), the page says that nothing was checked.
	elsewhere, err := New(Options{Config: env.Config, Keys: types.NamespacedName{Namespace: keys.Namespace, Name: "no-such-keys"}})
	if err != nil {
		t.Fatal(err)
	}
	_, body := fetch(t, serve(t, elsewhere).URL+path, "")
	if !strings.Contains(body, "data-seal-note") || !strings.Contains(body, "signatures are not checked") ||
		!strings.Contains(body, "ConfigMap "+keys.Namespace+"/no-such-keys-public") {
		t.Errorf("the page does not say the signatures were not checked:\n%s", body)
	}
}

// publicKeysReadable applies the Role and RoleBinding config/rbac ships
// for the operator's public keys to namespace ns, where this control
// plane's operator publishes them.
func publicKeysReadable(t *testing.T, ns string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.ReadObjects(filepath.Join(root, "config", "rbac", "state_public_keys_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		o.SetNamespace(ns)
		if err := admin.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// The run page's facts say which model a run fell back to and what its
// typed output is: the value on one line, or its size and digest when it
// was too large for status.
func TestFacts_theFallbackAndTheOutput(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   v1alpha1.AgentRunStatus
		want []fact
	}{
		{"neither", v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted, Model: &v1alpha1.ModelStatus{Active: "primary"}}, nil},
		{"a fallback and an output", v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted,
			Model:  &v1alpha1.ModelStatus{Active: "backup", Fallbacks: 1},
			Output: &runtime.RawExtension{Raw: []byte("{ \"decision\": \"refund\",\n \"note\": \"<b>\" }")}},
			[]fact{{"Model", "backup (fallback 1 of spec.model.fallbacks)"}, {"Output", `{"decision":"refund","note":"<b>"}`}}},
		{"too large for status", v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted, OutputDigest: "sha256:ab", OutputBytes: 20000},
			[]fact{{"Output", "20000 bytes, sha256:ab (too large for status: the last answer in the transcript)"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := factsOf(&v1alpha1.AgentRun{Status: tc.st})
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(fact{})); diff != "" {
				t.Errorf("facts (-want +got):\n%s", diff)
			}
		})
	}
}

// Issue 45, item 4: the page of a run whose agent tool made two children
// lists them, each linking to its page, and a child's page links to its
// parent.
func TestConsole_runPageLinksParentAndChildren(t *testing.T) {
	ns := namespace(t, "console-tree")
	scripted := func(steps ...v1alpha1.ScriptStep) v1alpha1.ModelSpec {
		return v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted}, Script: steps}
	}
	create(t, &v1alpha1.AgentRunTemplate{ObjectMeta: metav1.ObjectMeta{Name: "investigator", Namespace: ns},
		Spec: v1alpha1.AgentRunTemplateSpec{
			Parameters: []v1alpha1.TemplateParameter{{Name: "account", Required: true}},
			Run: v1alpha1.TemplateRunSpec{AgentSpec: v1alpha1.AgentSpec{
				Goal:   "Investigate account $(params.account).",
				Model:  scripted(v1alpha1.ScriptStep{Content: "No refund is due."}),
				Budget: v1alpha1.BudgetSpec{MaxTurns: 2},
			}},
		}})
	parent := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "triage", Namespace: ns},
		Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{
			Goal: "Triage the two accounts.",
			Model: scripted(
				v1alpha1.ScriptStep{ToolCalls: []v1alpha1.ScriptToolCall{
					{Name: "investigate", Arguments: raw(`{"account":"acme"}`)},
					{Name: "investigate", Arguments: raw(`{"account":"globex"}`)}}},
				v1alpha1.ScriptStep{Content: "Neither account is due a refund."}),
			Budget: v1alpha1.BudgetSpec{MaxTurns: 6},
			Tools: []v1alpha1.ToolSpec{{Name: "investigate", Description: "Investigates one account.",
				Agent: &v1alpha1.AgentTool{TemplateRef: v1alpha1.TemplateRef{Name: "investigator"}}}},
		}}}
	create(t, parent)
	NewWithT(t).Eventually(func() v1alpha1.Outcome { return get(t, parent).Status.Outcome }, 2*time.Minute, 100*time.Millisecond).
		Should(Equal(v1alpha1.OutcomeCompleted), func() string { return get(t, parent).Status.Reason })
	done := get(t, parent)
	if len(done.Status.Children) != 2 {
		t.Fatalf("status.children has %d entries, want 2: %+v", len(done.Status.Children), done.Status.Children)
	}

	bind(t, "nina", "agentrun-viewer", ns)
	srv := consoleFor(t, "nina", ns)
	resp, body := fetch(t, srv.URL+"/runs/"+ns+"/triage", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the parent's page: %d\n%s", resp.StatusCode, body)
	}
	for _, c := range done.Status.Children {
		want := fmt.Sprintf(`<tr data-child="%s"><td><a href="/runs/%s/%s">%s</a></td><td>%s</td><td class="outcome Completed">Completed</td>`,
			c.Name, ns, c.Name, c.Name, c.CallID)
		if !strings.Contains(body, want) {
			t.Errorf("the parent's page does not list its child %s as %s\n%s", c.Name, want, body)
		}
	}

	child := done.Status.Children[0]
	resp, body = fetch(t, srv.URL+"/runs/"+ns+"/"+child.Name, "")
	want := fmt.Sprintf(`<dt>Parent</dt><dd><a href="/runs/%s/triage" data-parent>triage (call %s/investigate)</a></dd>`, ns, child.CallID)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("the child's page: %d, want it to contain %s\n%s", resp.StatusCode, want, body)
	}
	if strings.Contains(body, `data-child=`) {
		t.Errorf("the child's page lists children it has none of")
	}
}
