package console

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// refundTemplate takes an invoice (required, with a pattern), an amount
// (with a default) and a ticket (a pattern Go's regexp finds anywhere in
// the value).
func refundTemplate(ns string) *v1alpha1.AgentRunTemplate {
	return &v1alpha1.AgentRunTemplate{ObjectMeta: metav1.ObjectMeta{Name: "refund", Namespace: ns},
		Spec: v1alpha1.AgentRunTemplateSpec{
			Parameters: []v1alpha1.TemplateParameter{
				{Name: "invoice", Required: true, Pattern: `^in_[0-9a-f]+$`, Description: "The invoice to refund, as in_9f21."},
				{Name: "amount", Default: ptr.To("10.00")},
				{Name: "ticket", Default: ptr.To("T-1"), Pattern: `T-[0-9]+`},
			},
			Run: v1alpha1.TemplateRunSpec{AgentSpec: v1alpha1.AgentSpec{
				Goal: "Refund $(params.amount) of invoice $(params.invoice) ($(params.ticket)).",
				Model: v1alpha1.ModelSpec{
					ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
					Script:        []v1alpha1.ScriptStep{{Content: "Refunded."}},
				},
				Budget: v1alpha1.BudgetSpec{MaxTurns: 2},
			}},
		}}
}

// Issue 49, item 1: the templates page lists a template with its
// parameters; its page has a Run form with a box for each parameter (its
// default filled, required marked, its pattern checked by the browser as
// the operator checks it). A value that fails its pattern is refused with
// the operator's reason and no run is made; values that pass make a run
// with them, as the user, and open its page.
func TestConsole_templatesRunFormCreatesARunWithTheTypedParameters(t *testing.T) {
	ns := namespace(t, "console-templates")
	bind(t, "tess", "agentrun-editor", ns)
	create(t, refundTemplate(ns))

	ctx := tab(t)
	srv := consoleFor(t, "tess", ns)
	row := `tr[data-template="` + ns + `/refund"]`
	do(t, ctx, chromedp.Navigate(srv.URL+"/"), click(`nav a[href="/templates"]`), visible(row))
	names := eval[[]string](t, ctx, `[...document.querySelectorAll('`+row+` [data-param-name]')].map(p => p.textContent)`)
	if diff := cmp.Diff([]string{"invoice*", "amount", "ticket"}, names); diff != "" {
		t.Errorf("the templates page lists the parameters (-want +got):\n%s", diff)
	}
	do(t, ctx, click(row+` a`), visible(`[data-run-template]`))

	type box struct {
		Value    string
		Required bool
	}
	boxes := eval[map[string]box](t, ctx, `Object.fromEntries([...document.querySelectorAll("[data-param]")].map(b => [b.dataset.param, {Value: b.value, Required: b.required}]))`)
	want := map[string]box{"invoice": {Required: true}, "amount": {Value: "10.00"}, "ticket": {Value: "T-1"}}
	if diff := cmp.Diff(want, boxes); diff != "" {
		t.Errorf("the Run form's boxes (-want +got):\n%s", diff)
	}
	// The browser checks each value as Go's regexp does: anchored where
	// the pattern is, anywhere in the value where it is not.
	for _, tc := range []struct {
		param, value string
		mismatch     bool
	}{
		{"invoice", "in_9f21", false},
		{"invoice", "INV-1", true},
		{"invoice", "xin_9f21", true},
		{"ticket", "see T-12", false},
		{"ticket", "T-x", true},
	} {
		got := eval[bool](t, ctx, `(b => { b.value = "`+tc.value+`"; return b.validity.patternMismatch })(document.querySelector('[data-param="`+tc.param+`"]'))`)
		if got != tc.mismatch {
			t.Errorf("%s=%q: the browser's patternMismatch is %v, want %v", tc.param, tc.value, got, tc.mismatch)
		}
	}

	// A value the browser would stop is sent anyway: the console refuses
	// it with the operator's reason, and keeps what was typed.
	do(t, ctx, chromedp.SetValue(`[data-param="invoice"]`, "INV-1"), chromedp.SetValue(`[data-param="ticket"]`, "T-7"))
	eval[bool](t, ctx, `document.querySelector("form.run-template").noValidate = true`)
	do(t, ctx, click(`[data-run-template]`), visible(`.result.refused`))
	if message := text(t, ctx, `.result`); !strings.Contains(message, `parameter "invoice" must match the pattern ^in_[0-9a-f]+$, and "INV-1" does not (The invoice to refund, as in_9f21.)`) {
		t.Errorf("the refusal shown is %q, want the operator's reason", message)
	}
	if kept := eval[string](t, ctx, `document.querySelector('[data-param="ticket"]').value`); kept != "T-7" {
		t.Errorf("after the refusal the ticket box holds %q, want what was typed", kept)
	}
	var runs v1alpha1.AgentRunList
	if err := admin.List(context.Background(), &runs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(runs.Items) != 0 {
		t.Fatalf("a refused Run made %d runs", len(runs.Items))
	}

	do(t, ctx, chromedp.SetValue(`[data-param="invoice"]`, "in_9f21"), chromedp.SetValue(`[data-param="amount"]`, "82.40"),
		click(`[data-run-template]`))
	var path string
	NewWithT(t).Eventually(func() string {
		path = eval[string](t, ctx, `location.pathname`)
		return path
	}, 30*time.Second, 100*time.Millisecond).Should(HavePrefix("/runs/" + ns + "/refund-"))
	run := &v1alpha1.AgentRun{}
	run.Namespace, run.Name = ns, strings.TrimPrefix(path, "/runs/"+ns+"/")
	got := get(t, run)
	if got.Spec.TemplateRef == nil || got.Spec.TemplateRef.Name != "refund" || got.Spec.Goal != "" {
		t.Errorf("the run's templateRef is %+v and goal %q, want template refund and the template's goal", got.Spec.TemplateRef, got.Spec.Goal)
	}
	wantParams := []v1alpha1.ParameterValue{{Name: "invoice", Value: "in_9f21"}, {Name: "amount", Value: "82.40"}, {Name: "ticket", Value: "T-7"}}
	if diff := cmp.Diff(wantParams, got.Spec.Parameters); diff != "" {
		t.Errorf("the run's parameters (-want +got):\n%s", diff)
	}
	endsWith(t, run, v1alpha1.OutcomeCompleted)
	do(t, ctx, visible(`[data-goal]`))
	NewWithT(t).Eventually(func() string { return text(t, ctx, `[data-goal]`) }, 30*time.Second, 100*time.Millisecond).
		Should(Equal("Refund 82.40 of invoice in_9f21 (T-7)."))
}

// Issue 49, item 1: a person who may read templates but not create runs
// is refused by the API server, with its reason, on the template's page.
func TestConsole_viewerRunningATemplateSeesTheAPIServersRefusal(t *testing.T) {
	ns := namespace(t, "console-templates-viewer")
	bind(t, "val", "agentrun-viewer", ns)
	create(t, refundTemplate(ns))

	ctx := tab(t)
	srv := consoleFor(t, "val", ns)
	do(t, ctx, chromedp.Navigate(srv.URL+"/templates/"+ns+"/refund"), visible(`[data-run-template]`),
		chromedp.SetValue(`[data-param="invoice"]`, "in_9f21"), click(`[data-run-template]`), visible(`.result.refused`))
	if message := text(t, ctx, `.result`); !strings.Contains(message, `cannot create resource "agentruns"`) {
		t.Errorf("the refusal shown is %q, want the API server's", message)
	}
	var runs v1alpha1.AgentRunList
	if err := admin.List(context.Background(), &runs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(runs.Items) != 0 {
		t.Errorf("a refused Run made %d runs", len(runs.Items))
	}
}

// A template the operator found broken is marked on the templates page,
// and its page says why, in the words kubectl agentrun run --template
// refuses it with.
func TestConsole_templatePageSaysWhyATemplateIsNotReady(t *testing.T) {
	ns := namespace(t, "console-templates-broken")
	bind(t, "val", "agentrun-viewer", ns)
	broken := refundTemplate(ns)
	broken.Name = "broken"
	broken.Spec.Run.Goal = "Refund $(params.customer)."
	create(t, broken)
	NewWithT(t).Eventually(func() []metav1.Condition {
		got := &v1alpha1.AgentRunTemplate{}
		_ = admin.Get(context.Background(), client.ObjectKeyFromObject(broken), got)
		return got.Status.Conditions
	}, time.Minute, 100*time.Millisecond).Should(ContainElement(And(HaveField("Type", "Ready"), HaveField("Status", metav1.ConditionFalse))))

	srv := consoleFor(t, "val", ns)
	resp, body := fetch(t, srv.URL+"/templates?namespace="+ns, "")
	if want := `broken</a> <small class="problem">not ready</small>`; resp.StatusCode != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("the templates page: %d, want it to contain %s\n%s", resp.StatusCode, want, body)
	}
	resp, body = fetch(t, srv.URL+"/templates/"+ns+"/broken", "")
	if want := `template broken is not ready (InvalidTemplate)`; resp.StatusCode != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("the template's page: %d, want it to contain %s\n%s", resp.StatusCode, want, body)
	}
}
