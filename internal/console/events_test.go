package console

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// streamKeys opens a page's event stream at u and returns the keys
// (NAMESPACE/NAME) of its "change" events as they come.
func streamKeys(t *testing.T, u string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	keys := make(chan string, 1024)
	go func() {
		defer func() { _ = resp.Body.Close() }()
		lines := bufio.NewScanner(resp.Body)
		for lines.Scan() {
			if k, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				keys <- k
			}
		}
	}()
	return keys
}

// received gathers what keys has sent so far into seen and reports
// whether key is among it.
func received(keys <-chan string, seen map[string]int, key string) func() bool {
	return func() bool {
		for {
			select {
			case k := <-keys:
				seen[k]++
			default:
				return seen[key] > 0
			}
		}
	}
}

// The inbox's event stream spoke of every change of every run, so each
// turn of any run made every open inbox fetch itself again. It now speaks
// only of the runs the inbox shows, and of a run when it stops being one;
// the runs page's stream still speaks of every run.
func TestConsole_theInboxStreamSpeaksOnlyOfTheRunsItShows(t *testing.T) {
	ns := namespace(t, "console-inbox-stream")
	bind(t, "iris", "agentrun-viewer", ns)
	waits := refundRun(ns, "waits")
	createWaiting(t, waits)
	done := refundRun(ns, "done")
	done.Spec.Model.Script = []v1alpha1.ScriptStep{{Content: "Nothing to refund."}}
	create(t, done)
	NewWithT(t).Eventually(func() v1alpha1.Outcome { return get(t, done).Status.Outcome }, time.Minute, 100*time.Millisecond).
		ShouldNot(BeEmpty())

	srv := consoleFor(t, "iris", ns)
	inbox := streamKeys(t, srv.URL+"/events?kind=inbox&namespace="+ns)
	runs := streamKeys(t, srv.URL+"/events?kind=runs&namespace="+ns)
	inboxSeen, runsSeen := map[string]int{}, map[string]int{}
	NewWithT(t).Eventually(received(inbox, inboxSeen, ns+"/waits"), 20*time.Second, 50*time.Millisecond).Should(BeTrue(),
		"the inbox stream names the run that waits")
	NewWithT(t).Eventually(received(runs, runsSeen, ns+"/done"), 20*time.Second, 50*time.Millisecond).Should(BeTrue(),
		"the runs stream names every run")

	// A change to a run the inbox does not show: the runs page hears of
	// it, the inbox does not.
	before := runsSeen[ns+"/done"]
	if err := admin.Patch(context.Background(), done, client.RawPatch(client.Merge.Type(), []byte(`{"metadata":{"labels":{"touched":"yes"}}}`))); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() int { received(runs, runsSeen, "")(); return runsSeen[ns+"/done"] }, 20*time.Second, 50*time.Millisecond).
		Should(BeNumerically(">", before), "the runs stream names the changed run")
	NewWithT(t).Consistently(received(inbox, inboxSeen, ns+"/done"), time.Second, 50*time.Millisecond).Should(BeFalse(),
		"the inbox stream names a run the inbox does not show")

	// The run that waited ends: the inbox hears of it once more, to drop it.
	shown := inboxSeen[ns+"/waits"]
	if err := admin.Patch(context.Background(), waits, client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"cancel":true}}`))); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() int { received(inbox, inboxSeen, "")(); return inboxSeen[ns+"/waits"] }, time.Minute, 50*time.Millisecond).
		Should(BeNumerically(">", shown), "the inbox stream names the run that stopped waiting")
}
