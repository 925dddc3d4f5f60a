package controller

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/notify"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hook is a notification webhook on loopback that refuses its first
// failures posts and records the messages it accepts.
type hook struct {
	mu       sync.Mutex
	failures int
	posts    int
	got      []notify.Message
	hang     chan struct{} // when set, every post waits on it
	arrived  atomic.Int32  // posts that reached the handler
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.arrived.Add(1)
	if h.hang != nil {
		select {
		case <-h.hang:
		case <-r.Context().Done():
		}
		return
	}
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.posts++
	if h.posts <= h.failures {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	var m notify.Message
	_ = json.Unmarshal(body, &m)
	h.got = append(h.got, m)
}

func (h *hook) messages() []notify.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]notify.Message(nil), h.got...)
}

func webhookSecret(t *testing.T, ns, name, key, url string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: map[string]string{key: url}}
	if err := k8sClient.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// Issue 32, item 3: a call that starts waiting is a Normal event
// ApprovalRequested and a message to the webhook (the operator's, or the
// namespace's own), retried when the webhook fails; a run that ends
// Escalated is a message too; and a webhook that never answers holds up
// no run. The webhook URL is in no event.
func TestNotifications_approvalRequestedAndEscalatedAreAnnounced(t *testing.T) {
	ops, team, quiet := namespace(t), namespace(t), namespace(t)
	main := &hook{failures: 2}
	mainSrv := httptest.NewServer(main)
	defer mainSrv.Close()
	hung := &hook{hang: make(chan struct{})}
	hungSrv := httptest.NewServer(hung)
	defer hungSrv.Close()
	defer close(hung.hang)
	webhookSecret(t, ops, "agentrun-webhook", "url", mainSrv.URL+"/services/T0/B0/secret-token")
	webhookSecret(t, team, notify.NamespaceSecret, notify.NamespaceKey, hungSrv.URL+"/never-answers")

	tb := newTools()
	startWith(t, &kits{tools: tb}, managerSetup{config: func(c *Config) {
		res := &notify.SecretResolver{Reader: c.APIReader, Default: notify.SecretKey{Namespace: ops, Name: "agentrun-webhook", Key: "url"},
			Namespaced: true, Client: &http.Client{}, TenantClient: &http.Client{}}
		n := notify.New(res.Resolve)
		n.Backoff, n.Timeout, n.ConsoleURL = 10*time.Millisecond, 30*time.Second, "http://127.0.0.1:8080"
		c.Notifier = n
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() { _ = n.Start(ctx) }()
	}})

	// The operator's webhook, which fails twice before it accepts.
	run := refundRun(quiet, "refund").answer("Refunded.").create(t)
	pending := waitPending(t, run, 1).Status.PendingApprovals[0]
	g := NewWithT(t)
	g.Eventually(main.messages, 20*time.Second, 20*time.Millisecond).Should(HaveLen(1), "the message after its retries")
	m := main.messages()[0]
	if m.Event != notify.EventApprovalRequested || m.Namespace != quiet || m.Run != "refund" || m.CallID != "t1-c1" ||
		m.Tool != "issue_refund" || m.ArgumentsDigest != pending.ArgumentsDigest || m.ArgumentsDigest == "" ||
		m.Inbox != "http://127.0.0.1:8080/inbox?namespace="+quiet || !strings.Contains(m.Text, "t1-c1") {
		t.Errorf("message = %+v", m)
	}
	g.Eventually(func() []string {
		return eventNotes(t, quiet, "AgentRun", "refund", corev1.EventTypeNormal, v1alpha1.ReasonApprovalRequested)
	}, 10*time.Second, 50*time.Millisecond).Should(ConsistOf(And(ContainSubstring("t1-c1"), ContainSubstring("issue_refund"),
		ContainSubstring(pending.ArgumentsDigest), Not(ContainSubstring("secret-token")))))

	// The namespace's own webhook never answers: the run goes on all the same.
	slow := refundRun(team, "refund").answer("Refunded.").create(t)
	waitPending(t, slow, 1)
	g.Eventually(hung.arrived.Load, 10*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 1), "the post that hangs")
	annotate(t, slow, "t1-c1", "approve")
	expectOutcome(t, waitOutcome(t, slow, 20*time.Second), v1alpha1.OutcomeCompleted, "final answer")
	if main.arrived.Load() > 3 {
		t.Errorf("the operator's webhook got %d posts; the namespace's own should have had the team's", main.arrived.Load())
	}
	g.Eventually(func() []string {
		return eventReasons(t, team, "refund")
	}, 10*time.Second, 50*time.Millisecond).Should(ContainElement(v1alpha1.ReasonApprovalRequested))

	// A run that ends Escalated is announced, while the namespace's
	// hung webhook still holds its post.
	esc := makeRun(quiet, "timeout").writeTool("drop_table", false).calls("drop_table", `{}`).
		with(func(s *v1alpha1.AgentRunSpec) { s.ApprovalTimeout = &metav1.Duration{Duration: time.Second} }).create(t)
	expectOutcome(t, waitOutcome(t, esc, 20*time.Second), v1alpha1.OutcomeEscalated, "approvalTimeout")
	g.Eventually(func() []string {
		var out []string
		for _, m := range main.messages() {
			out = append(out, m.Event+" "+m.Run+" "+m.CallID)
		}
		return out
	}, 10*time.Second, 20*time.Millisecond).Should(ContainElement(notify.EventEscalated+" timeout "), "the Escalated message")
	annotate(t, run, "t1-c1", "approve")
	expectOutcome(t, waitOutcome(t, run, 20*time.Second), v1alpha1.OutcomeCompleted, "final answer")
}
