package console

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Issue 49, item 4: the timeline shows every call's verdict, the rule that
// decided it, its duration and its result's size, read from the run's
// transcript: the operator records no event for an allowed call at the
// default event verbosity, and this viewer may not read Events at all.
func TestConsole_timelineShowsEveryCallsRecordWithoutEvents(t *testing.T) {
	ns := namespace(t, "console-call-records")
	bind(t, "rio", "agentrun-viewer", ns)
	grant(t, "rio", ns, "secrets") // the transcript, not the Events
	const body = `{"invoice":"in_9f21","charges":2}`
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(api.Close)
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "lookup", Namespace: ns},
		Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{
			Goal: "Find how often invoice in_9f21 was charged.",
			Model: v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
				Script: []v1alpha1.ScriptStep{
					{ToolCalls: []v1alpha1.ScriptToolCall{{Name: "get_invoice", Arguments: raw(`{}`)}}},
					{Content: "It was charged twice."},
				}},
			Budget: v1alpha1.BudgetSpec{MaxTurns: 3},
			Tools:  []v1alpha1.ToolSpec{{Name: "get_invoice", HTTP: &v1alpha1.HTTPTool{URL: api.URL + "/invoices/in_9f21"}}},
		}}}
	create(t, run)
	endsWith(t, run, v1alpha1.OutcomeCompleted)

	ctx := tab(t)
	srv := consoleFor(t, "rio", ns)
	result := `[data-turn="1"] li.k-result`
	do(t, ctx, chromedp.Navigate(srv.URL+"/runs/"+ns+"/lookup"), visible(result+` [data-record]`))
	got := text(t, ctx, result+` [data-record]`)
	if want := regexp.MustCompile(`^allow by policy\.default, [0-9.]+m?s, 33 bytes$`); !want.MatchString(got) {
		t.Errorf("the call's record in the timeline is %q, want it to match %s", got, want)
	}
}
