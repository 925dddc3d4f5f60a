package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// receiver is a webhook on loopback that fails its first failures posts.
type receiver struct {
	mu       sync.Mutex
	failures int
	got      []Message
	posts    int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.posts++
	if r.posts <= r.failures {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	var m Message
	if err := json.Unmarshal(body, &m); err != nil || req.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	r.got = append(r.got, m)
}

func (r *receiver) messages() ([]Message, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Message(nil), r.got...), r.posts
}

func start(t *testing.T, n *Notifier) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	NewWithT(t).Eventually(cond, 10*time.Second, 5*time.Millisecond).Should(BeTrue(), what)
}

// A post that fails is retried with backoff, and the message arrives whole
// with the link to the console's inbox; each failed attempt is counted.
func TestNotifier_retriesAFailingWebhookThenDelivers(t *testing.T) {
	rcv := &receiver{failures: 2}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	n := New(func(context.Context, string) (Target, error) { return Target{URL: srv.URL + "/hook"}, nil })
	n.Backoff, n.ConsoleURL = time.Millisecond, "http://127.0.0.1:8080"
	start(t, n)
	retried, delivered := testutil.ToFloat64(n.deliveries.WithLabelValues("retried")), testutil.ToFloat64(n.deliveries.WithLabelValues("delivered"))

	n.Notify(Message{Event: EventApprovalRequested, Namespace: "billing", Run: "refund", CallID: "t1-c1", Tool: "issue_refund",
		ArgumentsDigest: "sha256:abc", Text: "AgentRun billing/refund waits for approval of t1-c1"})
	waitFor(t, "the delivery", func() bool { got, _ := rcv.messages(); return len(got) == 1 })
	got, posts := rcv.messages()
	if posts != 3 {
		t.Errorf("posts = %d, want 3 (two refused, one accepted)", posts)
	}
	m := got[0]
	if m.Text == "" || m.Run != "refund" || m.Namespace != "billing" || m.CallID != "t1-c1" || m.Tool != "issue_refund" ||
		m.ArgumentsDigest != "sha256:abc" || m.Inbox != "http://127.0.0.1:8080/inbox?namespace=billing" {
		t.Errorf("message = %+v", m)
	}
	if d := testutil.ToFloat64(n.deliveries.WithLabelValues("retried")) - retried; d != 2 {
		t.Errorf("retried counted %v, want 2", d)
	}
	// The receiver has the message before the notifier has read its
	// answer: the delivery is counted a moment after.
	waitFor(t, "the delivery to be counted", func() bool {
		return testutil.ToFloat64(n.deliveries.WithLabelValues("delivered"))-delivered == 1
	})
}

// A webhook that never accepts is given up after Attempts posts, counted
// as failed; the error logged never carries the URL (a credential).
func TestNotifier_givesUpAfterItsAttemptsAndNeverLogsTheURL(t *testing.T) {
	rcv := &receiver{failures: 1 << 30}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	var mu sync.Mutex
	var logged strings.Builder
	n := New(func(_ context.Context, ns string) (Target, error) {
		if ns == "closed" {
			// A port nobody listens on: the dial fails, and net/http's
			// error names the URL.
			return Target{URL: "http://127.0.0.1:1/secret-token-XYZ"}, nil
		}
		return Target{URL: srv.URL + "/secret-token-XYZ"}, nil
	})
	n.Attempts, n.Backoff = 3, time.Millisecond
	n.Log = funcr.New(func(prefix, args string) { mu.Lock(); logged.WriteString(args + "\n"); mu.Unlock() }, funcr.Options{Verbosity: 1})
	start(t, n)
	failed := testutil.ToFloat64(n.deliveries.WithLabelValues("failed"))

	n.Notify(Message{Event: EventEscalated, Namespace: "a", Run: "r"})
	n.Notify(Message{Event: EventEscalated, Namespace: "closed", Run: "r"})
	waitFor(t, "both messages given up", func() bool { return testutil.ToFloat64(n.deliveries.WithLabelValues("failed"))-failed == 2 })
	if _, posts := rcv.messages(); posts != 3 {
		t.Errorf("posts = %d, want 3 (Attempts)", posts)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logged.String(), "secret-token-XYZ") {
		t.Fatalf("the webhook URL was logged:\n%s", logged.String())
	}
	if !strings.Contains(logged.String(), "503") || !strings.Contains(logged.String(), "giving up") {
		t.Errorf("the log does not say why:\n%s", logged.String())
	}
}

// Notify never blocks: with the worker stuck on a webhook that does not
// answer, a full queue drops messages (counted) and returns at once.
func TestNotifier_notifyNeverBlocks(t *testing.T) {
	stuck := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-stuck }))
	defer srv.Close()
	defer close(stuck)
	n := New(func(context.Context, string) (Target, error) { return Target{URL: srv.URL}, nil })
	n.Timeout = time.Minute
	start(t, n)
	dropped := testutil.ToFloat64(n.deliveries.WithLabelValues("dropped"))
	begin := time.Now()
	// The queue, the posts in flight and the one message Start holds
	// while it waits for a free slot: past those, every message is dropped.
	for range QueueSize + Parallel + 1 + 10 {
		n.Notify(Message{Event: EventApprovalRequested, Namespace: "a", Run: "r"})
	}
	if el := time.Since(begin); el > 2*time.Second {
		t.Fatalf("Notify took %v", el)
	}
	if d := testutil.ToFloat64(n.deliveries.WithLabelValues("dropped")) - dropped; d < 10 {
		t.Errorf("dropped counted %v, want at least 10", d)
	}
	var nilNotifier *Notifier
	nilNotifier.Notify(Message{}) // no notifier configured: nothing happens
}

func TestParseSecretKey(t *testing.T) {
	for in, want := range map[string]SecretKey{
		"":               {},
		"ops/hook":       {Namespace: "ops", Name: "hook", Key: "url"},
		"ops/hook/slack": {Namespace: "ops", Name: "hook", Key: "slack"},
	} {
		if got, err := ParseSecretKey(in); err != nil || got != want {
			t.Errorf("ParseSecretKey(%q) = %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"hook", "/hook", "a/b/c/d", "a//k"} {
		if _, err := ParseSecretKey(bad); err == nil {
			t.Errorf("ParseSecretKey(%q) succeeded", bad)
		}
	}
}

// Finding 8 of issue 42: a run's reason, tool names and model-written text
// reach the chat as written. Escaped as Slack documents (&, <, >), they
// show as the characters they are: no @channel mention, no link shown
// under other words, no entity read as another character.
func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain reason", "plain reason"},
		{"<!channel> refund now", "&lt;!channel&gt; refund now"},
		{"<!here|here> and <@U024BE7LH>", "&lt;!here|here&gt; and &lt;@U024BE7LH&gt;"},
		{"see <https://evil.example/x|the invoice>", "see &lt;https://evil.example/x|the invoice&gt;"},
		{"Q&A: 5 > 3 &lt;b&gt;", "Q&amp;A: 5 &gt; 3 &amp;lt;b&amp;gt;"},
	} {
		if diff := cmp.Diff(tc.want, Escape(tc.in)); diff != "" {
			t.Errorf("Escape(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

// The text posted is escaped; the fields for receivers that render
// messages themselves are as written.
func TestNotifier_postsEscapedText(t *testing.T) {
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	n := New(func(context.Context, string) (Target, error) { return Target{URL: srv.URL}, nil })
	start(t, n)
	reason := "the model says: <!channel> approve at <https://evil.example|the console>"
	n.Notify(Message{Event: EventEscalated, Namespace: "billing", Run: "refund", Reason: reason,
		Text: "AgentRun billing/refund ended Escalated: " + reason})
	waitFor(t, "the delivery", func() bool { got, _ := rcv.messages(); return len(got) == 1 })
	got, _ := rcv.messages()
	want := Message{Event: EventEscalated, Namespace: "billing", Run: "refund", Reason: reason,
		Text: "AgentRun billing/refund ended Escalated: the model says: &lt;!channel&gt; approve at &lt;https://evil.example|the console&gt;"}
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("posted message (-want +got):\n%s", diff)
	}
}

// A message the webhook accepted is not sent again by the rescans that
// still give it because they read its record late (the operator's cache
// shows a run's annotation a moment after the write); once a rescan no
// longer gives it, it is forgotten, so that a record removed later has it
// sent again.
func TestNotifier_anAcceptedMessageIsNotSentAgainBeforeItsRecordIsRead(t *testing.T) {
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	var mu sync.Mutex
	recorded := true // Pending gives m while false: its record not read yet, or removed
	n := New(func(context.Context, string) (Target, error) { return Target{URL: srv.URL}, nil })
	m := Message{ID: "uid-3/Finished", Event: EventFinished, Namespace: "billing", Run: "nightly", Outcome: "Error"}
	n.Pending = func(context.Context) ([]Message, error) {
		mu.Lock()
		defer mu.Unlock()
		if recorded {
			return nil, nil
		}
		return []Message{m}, nil
	}
	n.Rescan = 5 * time.Millisecond
	posts := func() int { _, p := rcv.messages(); return p }
	mu.Lock()
	recorded = false
	mu.Unlock()
	start(t, n)
	g := NewWithT(t)
	g.Eventually(posts, 10*time.Second, 5*time.Millisecond).Should(Equal(1), "the delivery")
	g.Consistently(posts, 200*time.Millisecond, 5*time.Millisecond).Should(Equal(1), "deliveries while the rescans read no record")

	// The record is read back: the message is forgotten.
	mu.Lock()
	recorded = true
	mu.Unlock()
	g.Eventually(func() int { n.mu.Lock(); defer n.mu.Unlock(); return len(n.accepted) }, 10*time.Second, 5*time.Millisecond).Should(Equal(0))
	// A person removes the record: it is sent again.
	mu.Lock()
	recorded = false
	mu.Unlock()
	g.Eventually(posts, 10*time.Second, 5*time.Millisecond).Should(Equal(2), "the delivery after the record was removed")
}
