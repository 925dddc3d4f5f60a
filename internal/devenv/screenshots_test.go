package devenv

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/console"
	"github.com/agentrun/agentrun/internal/operator"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// consoleOverTheDemo opens the console on the demo's control plane, after
// every sample has ended, and checks that each page shows the samples as
// they ran: the runs with their outcomes and costs, a run's real token
// usage, a call waiting in the inbox, the template, the schedule and the
// evaluation. With CONSOLE_SCREENSHOTS naming a directory (make
// console-screenshots) it saves each page there for docs/console.md, so
// the pictures in the docs are of the samples, with their figures, in the
// default namespace.
func consoleOverTheDemo(ctx context.Context, t *testing.T, env *Env, c client.Client) {
	t.Helper()
	chrome := testenv.Chromium()
	if chrome == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no Chromium on this machine: run hack/chromium-deps.sh")
		}
		t.Log("no Chromium on this machine (hack/chromium-deps.sh installs it): the console over the demo is not checked")
		return
	}
	g := NewWithT(t)

	// The demo answers every call that waits for a person; for the inbox,
	// sample 02 runs once more and nobody answers.
	asked := &v1alpha1.AgentRun{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "refund-with-approval"}, asked); err != nil {
		t.Fatal(err)
	}
	waiting := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "refund-with-approval-2", Labels: asked.Labels},
		Spec: asked.Spec}
	if err := c.Create(ctx, waiting); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func() v1alpha1.Phase {
		_ = c.Get(ctx, client.ObjectKeyFromObject(waiting), waiting)
		return waiting.Status.Phase
	}, time.Minute, 100*time.Millisecond).Should(Equal(v1alpha1.PhaseAwaitingApproval))

	keys, err := operator.KeysSecret("")
	if err != nil {
		t.Fatal(err)
	}
	s, err := console.New(console.Options{Config: env.Config, Namespace: "default", Keys: keys, Resync: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome),
		chromedp.NoSandbox, chromedp.WindowSize(1280, 900))
	alloc, cancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancel)
	tab, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil { // starts the browser
		t.Fatal(err)
	}
	tab, cancel = context.WithTimeout(tab, 3*time.Minute)
	t.Cleanup(cancel)

	shots := os.Getenv("CONSOLE_SCREENSHOTS")
	page := func(path, ready, shot string) string {
		t.Helper()
		if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+path), chromedp.WaitVisible(chromedp.CSS(ready))); err != nil {
			t.Fatalf("%s: waiting for %s: %v", path, ready, err)
		}
		text, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS("main")))
		if err != nil {
			t.Fatal(err)
		}
		if shots != "" {
			png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(shots, shot), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return text
	}

	done := &v1alpha1.AgentRun{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "explain-double-charge"}, done); err != nil {
		t.Fatal(err)
	}
	text := page("/?namespace=default", `tr[data-run="default/explain-double-charge"][data-outcome="Completed"]`, "runs.png")
	for _, want := range []string{"refund-with-approval-2", "refund-t-1042", "refund-investigator"} {
		if !strings.Contains(text, want) {
			t.Errorf("the runs page does not show %q", want)
		}
	}

	// The run page shows the usage the run recorded: real figures from the
	// scripted model, not zeros.
	us := done.Status.Usage
	if us == nil || us.InputTokens == 0 || us.OutputTokens == 0 {
		t.Fatalf("explain-double-charge recorded usage %+v: want tokens in and out", us)
	}
	text = page("/runs/default/explain-double-charge", `section.facts`, "run.png")
	for _, want := range []string{"Input tokens" + strconv.FormatInt(us.InputTokens, 10), "Output tokens" + strconv.FormatInt(us.OutputTokens, 10)} {
		if !strings.Contains(strings.ReplaceAll(text, "\n", ""), want) {
			t.Errorf("the run page does not show %q:\n%s", want, text)
		}
	}

	text = page("/inbox?namespace=default", `article.call`, "inbox.png")
	if !strings.Contains(text, "refund-with-approval-2") {
		t.Errorf("the inbox does not show the waiting call of refund-with-approval-2:\n%s", text)
	}
	page("/templates/default/refund-investigator", `section[data-template="default/refund-investigator"]`, "template.png")
	page("/schedules/default/refund-sweep", `section[data-schedule="default/refund-sweep"]`, "schedule.png")
	text = page("/evaluations/default/refund-check", `main`, "evaluation.png")
	if !strings.Contains(text, "Passed") {
		t.Errorf("the evaluation page does not show refund-check Passed:\n%s", text)
	}

	// The platform's policy of examples/platform, which governs the
	// namespaces labelled as tenants (not default, so no sample changes).
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "platform", "agentrunpolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	policy := &v1alpha1.AgentRunPolicy{}
	if err := yaml.UnmarshalStrict(raw, policy); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	text = page("/policies", `article[data-policy="`+policy.Name+`"]`, "policies.png")
	if !strings.Contains(text, "Every change is reviewed.") {
		t.Errorf("the policies page does not show the policy's rules:\n%s", text)
	}
}
